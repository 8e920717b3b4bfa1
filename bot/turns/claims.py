"""An approved call's ledger claim that waits, while its card is valid, to be acknowledged.

With ``OPSLOOP_REDIS_MIN_REPLICAS`` a write's ledger claim counts only once replicas
confirm it, and one they did not confirm is withdrawn at once (``RedisLedger.begin``
raises ``ClaimWithdrawn``): the call did not start. The approved decision still stands
(DESIGN, "Approvals"), so instead of letting the run die — which left the claim for a
takeover to report as "outcome unknown" — the run waits here and claims again, and the
call runs once, as soon as a claim is acknowledged.

The wait is bounded and leaves the job's other rules in force:

- it lasts until the card's validity ends (the approval's ``expires_at``); then the core
  is told ``NotClaimed`` and the call's result says it was not run and why, so the job
  ends saying so rather than acting on an approval past its card;
- a Stop ends it the same way (the loop then ends the job as stopped);
- a lost lease or a draining process hands the job over (``HandedOver``): nothing was
  started, and whoever resumes it claims again;
- it claims again only once enough replicas have the master's stream past the refusal
  (``replicas_caught_up``: ROLE, no write), so a long outage costs no claim and no audit
  entry per try; until then it looks again after a short, growing pause.

One per run (``Turns``): it knows the run's cancel token and lease. It implements the
core's ``Ledger`` port over the process's ``RedisLedger``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass

from bot.agent.cancel import CancelToken
from bot.agent.ports import LedgerEntry
from bot.errors import HandedOver, NotClaimed, StoreError
from bot.store.approvals import Approvals
from bot.store.ledger import ClaimWithdrawn, RedisLedger, split_key

log = logging.getLogger(__name__)

PAUSES_S = (0.2, 0.5, 1.0, 2.0)  # between looks at the replicas; the last one repeats
NOT_CONFIRMED = (
    "Redis did not confirm its ledger claim on enough replicas (OPSLOOP_REDIS_MIN_REPLICAS) "
    "before the approval's card expired; the call did not start and nothing was changed"
)


@dataclass(eq=False)
class PatientLedger:
    """The core's ``Ledger`` for one run: ``RedisLedger`` whose refused claims wait for
    the replicas (see the module docstring)."""

    ledger: RedisLedger
    approvals: Approvals
    _: KW_ONLY
    cancel: CancelToken
    # Whether the run must give the job up now (its lease lost, or the process draining).
    hand_over: Callable[[], bool]
    now: Callable[[], float] = time.time
    pauses_s: tuple[float, ...] = PAUSES_S

    async def begin(self, key: str, tool: str, args_hash: str) -> LedgerEntry | None:
        valid_until: float | None = None
        while True:
            try:
                return await self.ledger.begin(key, tool, args_hash)
            except ClaimWithdrawn as refused:
                if valid_until is None:
                    valid_until = await self._valid_until(key)
                log.warning("%s: %s; waiting for replicas while the card is valid", key, refused)
            self._still_waiting(valid_until)
            await self._replicas_back(key, valid_until)

    async def finish(self, key: str, output: str) -> None:
        await self.ledger.finish(key, output)

    async def _valid_until(self, key: str) -> float:
        """When the call's card expires (now, for a call without one: no wait)."""
        job_id, call_id = split_key(key)
        approval = await self.approvals.get(job_id, call_id)
        return approval.expires_at if approval is not None else self.now()

    async def _replicas_back(self, key: str, valid_until: float) -> None:
        """Until enough replicas have the master's stream from now on (then a claim may
        be confirmed); ``NotClaimed`` or ``HandedOver`` when the wait must end."""
        since: int | None = None
        tries = 0
        while True:
            try:
                if since is None:
                    since = await self.ledger.stream_offset(key)
                if await self.ledger.replicas_caught_up(key, since=since):
                    return
            except StoreError:  # a failover under way: look again after the pause
                log.info("%s: the replicas could not be read", key, exc_info=True)
            self._still_waiting(valid_until)
            pause = self.pauses_s[min(tries, len(self.pauses_s) - 1)]
            tries += 1
            await self._pause(min(pause, max(valid_until - self.now(), 0.0)))

    def _still_waiting(self, valid_until: float) -> None:
        if self.cancel.cancelled:
            raise NotClaimed(f"{self.cancel.reason} while waiting for the replicas")
        if self.hand_over():
            raise HandedOver("the run gave up the job while its write waited for replicas")
        if self.now() >= valid_until:
            raise NotClaimed(NOT_CONFIRMED)

    async def _pause(self, seconds: float) -> None:
        """Sleep ``seconds``, or less if the run is stopped meanwhile."""
        stopped = asyncio.Event()
        unsubscribe = self.cancel.subscribe(stopped.set)
        try:
            async with asyncio.timeout(seconds):
                await stopped.wait()
        except TimeoutError:
            pass
        finally:
            unsubscribe()

"""``PatientLedger``: an approved call whose ledger claim no replica confirmed waits — while
its card is valid, the job not stopped and its lease held — and claims again once the
replicas caught up; the call then runs once. Past the card's validity, or stopped, it is
``NotClaimed`` (the core's result: not run, and why); a lost lease hands the job over.

The ledger and the approvals are stand-ins here (the real ones, on a real master and a
frozen replica, are in ``tests/store/test_unreplicated_claims.py`` and end to end in
``tests/e2e/test_unreplicated_claim.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

import pytest

from bot.agent.cancel import CancelToken
from bot.agent.ports import LedgerEntry
from bot.errors import HandedOver, NotClaimed
from bot.store.approvals import Approvals
from bot.store.ledger import ClaimWithdrawn, RedisLedger
from bot.turns.claims import NOT_CONFIRMED, PatientLedger

KEY = "C1:1700000000.000100:j1:call_1"
EXPIRES_AT = 1_000.0


@dataclass
class Ledger:
    """Refuses the first ``refusals`` claims; the replicas catch up after ``lagging`` looks."""

    refusals: int
    lagging: int = 0
    claims: int = 0
    looks: int = 0
    finished: list[str] = field(default_factory=list)
    on_look: Callable[[int], None] = lambda looks: None  # what happens meanwhile

    async def begin(self, key: str, tool: str, args_hash: str) -> LedgerEntry | None:
        self.claims += 1
        if self.claims <= self.refusals:
            raise ClaimWithdrawn("ledger begin: 0 of 1 replicas confirmed; withdrawn")
        return None

    async def finish(self, key: str, output: str) -> None:
        self.finished.append(output)

    async def stream_offset(self, key: str) -> int:
        return 100

    async def replicas_caught_up(self, key: str, *, since: int) -> bool:
        self.looks += 1
        self.on_look(self.looks)
        return self.looks > self.lagging


@dataclass
class Card:
    expires_at: float


class CardStore:
    async def get(self, job_id: str, call_id: str) -> Card | None:
        return Card(EXPIRES_AT) if (job_id, call_id) == (KEY.rsplit(":", 1)[0], "call_1") else None


@dataclass
class Clock:
    at: float = 900.0

    def __call__(self) -> float:
        return self.at


def patient(
    ledger: Ledger,
    clock: Clock,
    *,
    cancel: CancelToken | None = None,
    hand_over: bool = False,
) -> PatientLedger:
    return PatientLedger(
        cast(RedisLedger, ledger),
        cast(Approvals, CardStore()),
        cancel=cancel or CancelToken(),
        hand_over=lambda: hand_over,
        now=clock,
        pauses_s=(0.001,),
    )


async def test_a_refused_claim_is_claimed_again_once_the_replicas_caught_up() -> None:
    ledger = Ledger(refusals=2, lagging=3)
    claims = patient(ledger, Clock())

    assert await claims.begin(KEY, "restart_service", "h") is None  # claimed: the call runs

    assert ledger.claims == 3
    assert ledger.looks == 5  # no claim while the replicas lag (no audit entry per look)


async def test_past_the_cards_validity_the_call_is_not_claimed() -> None:
    ledger, clock = Ledger(refusals=99, lagging=10**9), Clock()
    ledger.on_look = lambda looks: setattr(clock, "at", EXPIRES_AT) if looks == 3 else None
    claims = patient(ledger, clock)

    with pytest.raises(NotClaimed, match="did not start") as refused:
        await claims.begin(KEY, "restart_service", "h")
    assert str(refused.value) == NOT_CONFIRMED
    assert ledger.claims == 1


async def test_a_stop_ends_the_wait_with_the_call_not_run() -> None:
    ledger, token = Ledger(refusals=99, lagging=10**9), CancelToken()
    ledger.on_look = lambda looks: token.cancel("stopped by <@U1>") if looks == 2 else None
    claims = patient(ledger, Clock(), cancel=token)

    with pytest.raises(NotClaimed, match="stopped by <@U1>"):
        await claims.begin(KEY, "restart_service", "h")
    assert ledger.looks == 2


async def test_a_lost_lease_hands_the_job_over() -> None:
    claims = patient(Ledger(refusals=1, lagging=10**9), Clock(), hand_over=True)
    with pytest.raises(HandedOver):
        await claims.begin(KEY, "restart_service", "h")


async def test_a_claim_confirmed_at_once_waits_for_nothing() -> None:
    ledger = Ledger(refusals=0)
    claims = patient(ledger, Clock())
    assert await claims.begin(KEY, "restart_service", "h") is None
    await claims.finish(KEY, "restarted")
    assert (ledger.claims, ledger.looks, ledger.finished) == (1, 0, ["restarted"])

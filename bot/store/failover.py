"""Riding out a moment without Redis: bounded retries of what is safe to send twice.

A master failover (Sentinel or Cluster), a Redis restart or a dropped connection makes
commands fail for a moment. What is safe to retry is retried here, with a short backoff,
for at most ``RETRY_BUDGET_S`` — well inside Slack's 3 s for the acknowledgements:

- reads;
- the receipt of a message (idempotent by its ts: a second run finds it received);
- a decision (a second run finds the record decided; ``Approvals.decide`` knows its own
  decision again by its ``now``, so the retry of a decision whose reply was lost is still
  the won one);
- the ledger's ``started`` (a second run finds the entry it wrote, byte for byte, and
  takes it as its own claim) and ``done`` (the same entry written twice);
- for up to ``RUN_RETRY_BUDGET_S`` (a running job holds its lease meanwhile): a job's
  step (``JobSession.checkpoint``) and its ending (``Jobs.finish``), whose scripts know
  their own write again (the record they write is unique to them), and the inject
  fetch (the retry reads the consumer's pending entries first). Without these a
  failover left the job for takeover from the step before, which could answer twice.

Everything else fails at once as before: a run whose step still cannot be written is
left for takeover exactly as after a crash (its lease runs out; any process resumes it
from its last saved state), and an acknowledgement still refused after the budget is a
503 that Slack redelivers, or a click told to try again. ``NotReplicated`` (too few
replicas) is retried too: during a failover the new master's replicas reattach — except
where the write stands regardless: a decision still refused after the budget is
reported as made but not confirmed, and a ledger claim is withdrawn at its first refusal
(``bot.store.ledger``; the run waits for the replicas in ``bot.turns.claims``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from bot.store.connection import StoreUnavailable

log = logging.getLogger(__name__)

T = TypeVar("T")

RETRY_BUDGET_S = 1.5  # no attempt starts later than this after the first
# A running job's writes, across a killed master's failover (its lease lives 15 s).
RUN_RETRY_BUDGET_S = 5.0
BACKOFF_S = (0.05, 0.1, 0.2, 0.4, 0.8)


async def retried(
    what: str,
    attempt: Callable[[], Awaitable[T]],
    *,
    budget_s: float = RETRY_BUDGET_S,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """``attempt()``, again after a short backoff while it raises ``StoreUnavailable``
    and the budget lasts; the last failure is raised."""
    started = clock()
    tries = 0
    while True:
        try:
            return await attempt()
        except StoreUnavailable:
            delay = BACKOFF_S[min(tries, len(BACKOFF_S) - 1)]
            tries += 1
            if clock() - started + delay > budget_s:
                raise
            log.info("%s: Redis unavailable, retrying in %.2f s (try %d)", what, delay, tries)
            await asyncio.sleep(delay)

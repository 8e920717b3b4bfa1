"""``OPSLOOP_REDIS_MIN_REPLICAS``: a write an acknowledgement rests on waits for replicas.

A real master with a real replica (``redis-server --replicaof``). With the replica
answering, receipts, decisions and ledger entries go through; with it frozen (SIGSTOP:
connected, but acknowledging nothing), a receipt raises ``NotReplicated`` after the wait,
so the caller refuses its acknowledgement; a ledger claim is withdrawn and refused
(``ClaimWithdrawn``: the call did not start); a decision, which did decide the card, is
returned as won but not replicated (``tests/store/test_unreplicated_claims.py`` has the
rest); and a repeated delivery, once the replica is back, is acknowledged only after the
first delivery's write is replicated.
"""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from bot.emulator.redis_replica import ManagedReplica
from bot.store.approvals import ApprovalRecord, Approvals
from bot.store.connection import StoreUnavailable
from bot.store.jobs import JobLimits
from bot.store.keys import Keys, Thread
from bot.store.ledger import ClaimWithdrawn, RedisLedger
from bot.store.receipt import Receipts
from bot.store.replicas import NotReplicated, Replication
from tests.store.approval_kit import pending_approval
from tests.store.replica_kit import client, master, replica

LIMITS = JobLimits(max_iterations=5, deadline_s=60, token_budget=10_000)
__all__ = ["client", "master", "replica"]  # fixtures, used by name

NOW = 1_700_000_000.0
HASH = "c" * 64
WAIT = Replication(min_replicas=1)  # the default 1 s: a busy machine's replica answers in it


def pending(thread: Thread) -> ApprovalRecord:
    return pending_approval(thread, args_hash=HASH, requested_at=NOW)


async def test_with_the_replica_answering_every_acknowledged_write_goes_through(
    client: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    receipts = Receipts(client, keys, replication=WAIT)
    approvals = Approvals(client, keys, replication=WAIT)
    ledger = RedisLedger(client, keys, replication=WAIT)

    got = await receipts.receive(
        thread, ts="1700000001.000100", user="U1", text="hi", limits=LIMITS
    )
    await approvals.create(pending(thread))
    decided = await approvals.decide(
        thread.job_id(1), "call_1", outcome="approved", by="U0APPROV1", args_hash=HASH, now=NOW
    )
    begun = await ledger.begin(f"{thread.job_id(1)}:call_1", "restart_service", HASH)
    await ledger.finish(f"{thread.job_id(1)}:call_1", "restarted")

    assert got.outcome == "created"
    assert decided is not None and decided.won
    assert begun is None


async def test_with_the_replica_frozen_nothing_is_acknowledged(
    client: aioredis.Redis, replica: ManagedReplica, keys: Keys, thread: Thread
) -> None:
    receipts = Receipts(client, keys, replication=WAIT)
    approvals = Approvals(client, keys, replication=WAIT)
    ledger = RedisLedger(client, keys, replication=WAIT)
    await approvals.create(pending(thread))

    replica.freeze()
    try:
        with pytest.raises(NotReplicated, match="0 of 1 replicas"):
            await receipts.receive(
                thread, ts="1700000001.000100", user="U1", text="hi", limits=LIMITS
            )
        decided = await approvals.decide(
            thread.job_id(1),
            "call_1",
            outcome="approved",
            by="U0APPROV1",
            args_hash=HASH,
            now=NOW,
        )
        with pytest.raises(ClaimWithdrawn):
            await ledger.begin(f"{thread.job_id(1)}:call_1", "restart_service", HASH)
    finally:
        replica.thaw()
    # The decision was made all the same: reported as such, not as "nothing changed".
    assert decided is not None and decided.won and not decided.replicated
    # A refusal is a StoreUnavailable: the ack path answers 503, a click "try again".
    assert issubclass(NotReplicated, StoreUnavailable)


async def test_a_repeated_delivery_is_acknowledged_only_once_the_first_write_is_replicated(
    client: aioredis.Redis, replica: ManagedReplica, keys: Keys, thread: Thread
) -> None:
    """Slack's retry of a refused receipt finds it written (a duplicate, which writes
    nothing itself): its acknowledgement must still wait for the first write's replica."""
    receipts = Receipts(client, keys, replication=WAIT)
    approvals = Approvals(client, keys, replication=WAIT)
    await approvals.create(pending(thread))
    replica.freeze()
    try:
        with pytest.raises(NotReplicated):
            await receipts.receive(
                thread, ts="1700000001.000100", user="U1", text="hi", limits=LIMITS
            )
        with pytest.raises(NotReplicated):  # still frozen: the duplicate is not acknowledged
            await receipts.receive(
                thread, ts="1700000001.000100", user="U1", text="hi", limits=LIMITS
            )
        first = await approvals.decide(
            thread.job_id(1),
            "call_1",
            outcome="approved",
            by="U0APPROV1",
            args_hash=HASH,
            now=NOW,
        )
        second = await approvals.decide(  # the second click finds it decided: not yet confirmed
            thread.job_id(1),
            "call_1",
            outcome="approved",
            by="U0APPROV1",
            args_hash=HASH,
            now=NOW,
        )
    finally:
        replica.thaw()
    assert first is not None and first.won and not first.replicated
    assert second is not None and not second.replicated
    await replica.linked()  # Slack retries after a second or more

    again = await receipts.receive(
        thread, ts="1700000001.000100", user="U1", text="hi", limits=LIMITS
    )
    clicked = await approvals.decide(  # the same decision's call, once more
        thread.job_id(1), "call_1", outcome="approved", by="U0APPROV1", args_hash=HASH, now=NOW
    )
    other = await approvals.decide(
        thread.job_id(1), "call_1", outcome="denied", by="U0OTHER11", args_hash=HASH, now=NOW + 9
    )
    assert again.outcome == "duplicate"
    assert clicked is not None and clicked.won and clicked.record.status == "approved"
    assert clicked.replicated
    assert other is not None and not other.won


async def test_without_min_replicas_nothing_waits(
    client: aioredis.Redis, replica: ManagedReplica, keys: Keys, thread: Thread
) -> None:
    receipts = Receipts(client, keys)
    replica.freeze()
    try:
        got = await receipts.receive(
            thread, ts="1700000001.000100", user="U1", text="hi", limits=LIMITS
        )
    finally:
        replica.thaw()
    assert got.outcome == "created"

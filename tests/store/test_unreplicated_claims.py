"""A write whose acknowledgement replicas refused (``OPSLOOP_REDIS_MIN_REPLICAS``) on a
real master with a real replica frozen by SIGSTOP (connected, confirming nothing):

- a ledger claim (``started``) that no replica confirmed is withdrawn in one script —
  recorded as not started, with its audit entry — so no later run reads it as "started,
  outcome unknown"; the next claim, once the replica is back, is a claim like the first;
- a decision whose replica did not confirm it still decided the card: ``decide`` says so
  (won, not yet replicated) instead of raising as if nothing had changed, and so does
  the decider's own second click;
- ``replicas_caught_up`` (no writes) says when the replicas have the master's stream
  again, which is when a withdrawn claim is worth trying again.
"""

from __future__ import annotations

import json

import pytest
import redis.asyncio as aioredis

from bot.emulator.redis_replica import ManagedReplica
from bot.store.approvals import Approvals
from bot.store.keys import Keys, Thread
from bot.store.ledger import ClaimWithdrawn, RedisLedger
from bot.store.replicas import NotReplicated, Replication, replicas_caught_up
from tests.store.approval_kit import pending_approval
from tests.store.replica_kit import client, master, replica

__all__ = ["client", "master", "replica"]  # fixtures, used by name

NOW = 1_700_000_000.0
HASH = "d" * 64
WAIT = Replication(min_replicas=1)


def key_of(thread: Thread) -> str:
    return f"{thread.job_id(1)}:call_1"


async def outbox(client: aioredis.Redis, keys: Keys, thread: Thread) -> list[dict[str, object]]:
    raw = await client.lrange(keys.audit_outbox(thread.tag), 0, -1)
    return [json.loads(str(r)) for r in raw]


async def test_an_unreplicated_claim_is_withdrawn_not_left_started(
    client: aioredis.Redis, replica: ManagedReplica, keys: Keys, thread: Thread
) -> None:
    ledger = RedisLedger(client, keys, replication=WAIT)
    replica.freeze()
    try:
        with pytest.raises(ClaimWithdrawn, match="did not start") as refused:
            await ledger.begin(key_of(thread), "restart_service", HASH)
    finally:
        replica.thaw()
    assert isinstance(refused.value, NotReplicated)  # still a refused acknowledgement
    entries = await ledger.entries(thread.job_id(1))
    assert entries[key_of(thread)].state == "withdrawn"  # never "started"


async def test_a_withdrawn_claim_is_claimed_again_once_the_replica_is_back(
    client: aioredis.Redis, replica: ManagedReplica, keys: Keys, thread: Thread
) -> None:
    ledger = RedisLedger(client, keys, replication=WAIT)
    replica.freeze()
    try:
        with pytest.raises(ClaimWithdrawn):
            await ledger.begin(key_of(thread), "restart_service", HASH)
    finally:
        replica.thaw()
    await replica.linked()

    again = await RedisLedger(client, keys, replication=WAIT, now=lambda: NOW + 5).begin(
        key_of(thread), "restart_service", HASH
    )
    await ledger.finish(key_of(thread), "restarted")

    assert again is None  # a claim of its own: the call runs, never "outcome unknown"
    staged = await outbox(client, keys, thread)
    kinds = [e["kind"] for e in staged]
    assert kinds == ["write_started", "write_withdrawn", "write_started", "write_finished"]
    assert len({e["id"] for e in staged}) == 4  # the second claim is not deduped away
    assert (await ledger.entries(thread.job_id(1)))[key_of(thread)].state == "done"


async def test_a_found_entry_is_never_withdrawn(
    client: aioredis.Redis, replica: ManagedReplica, keys: Keys, thread: Thread
) -> None:
    """Only the claim this call wrote is withdrawn: an entry found done (or started by an
    earlier run) stays, and its WAIT's refusal is the plain ``NotReplicated``."""
    ledger = RedisLedger(client, keys, replication=WAIT)
    assert await ledger.begin(key_of(thread), "restart_service", HASH) is None
    await ledger.finish(key_of(thread), "restarted")
    replica.freeze()
    try:
        with pytest.raises(NotReplicated) as refused:
            await ledger.begin(key_of(thread), "restart_service", HASH)
    finally:
        replica.thaw()
    assert not isinstance(refused.value, ClaimWithdrawn)
    assert (await ledger.entries(thread.job_id(1)))[key_of(thread)].state == "done"


async def test_an_unreplicated_decision_is_reported_as_made(
    client: aioredis.Redis, replica: ManagedReplica, keys: Keys, thread: Thread
) -> None:
    approvals = Approvals(client, keys, replication=WAIT)
    await approvals.create(pending_approval(thread, args_hash=HASH, requested_at=NOW))
    replica.freeze()
    try:
        first = await approvals.decide(
            thread.job_id(1), "call_1", outcome="approved", by="U0APPROV1", args_hash=HASH, now=NOW
        )
        again = await approvals.decide(  # the decider clicks once more, still frozen
            thread.job_id(1),
            "call_1",
            outcome="approved",
            by="U0APPROV1",
            args_hash=HASH,
            now=NOW + 3,
        )
        with pytest.raises(NotReplicated):  # someone else's click changed nothing
            await approvals.decide(
                thread.job_id(1),
                "call_1",
                outcome="denied",
                by="U0OTHER11",
                args_hash=HASH,
                now=NOW + 4,
            )
    finally:
        replica.thaw()

    assert first is not None and first.won and not first.replicated
    assert first.record.status == "approved" and first.record.decided_by == "U0APPROV1"
    assert again is not None and not again.replicated
    assert again.record.status == "approved" and again.record.decided_by == "U0APPROV1"
    await replica.linked()
    confirmed = await approvals.decide(
        thread.job_id(1), "call_1", outcome="approved", by="U0APPROV1", args_hash=HASH, now=NOW
    )
    assert confirmed is not None and confirmed.won and confirmed.replicated


async def test_the_replicas_are_caught_up_only_once_they_confirm_the_stream(
    client: aioredis.Redis, replica: ManagedReplica, keys: Keys, thread: Thread
) -> None:
    probe = f"{keys.ledger(thread.job_id(1))}"
    assert await replicas_caught_up(client, WAIT, probe, since=0)
    replica.freeze()
    try:
        await client.set("opsloop:test:moved", "1")  # the stream moves on without it
        role = await client.role()
        assert not await replicas_caught_up(client, WAIT, probe, since=int(role[1]))
    finally:
        replica.thaw()
    await replica.linked()
    assert await replicas_caught_up(client, WAIT, probe, since=int(role[1]))

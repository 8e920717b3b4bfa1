"""What is safe to send twice is retried across a moment without Redis (``bot.store.failover``).

A real redis-server killed and started again within the retry budget: the receipt of a
message, a decision and the ledger's claim go through as if nothing happened; the retry
of an operation whose reply was lost finds its own write and takes it as its own (a
decision stays won, a claim stays claimed, so no "outcome unknown" for a write that never
ran); past the budget the failure is raised as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from bot.agent import RunState, UserMessage
from bot.emulator.redis_server import ManagedRedis
from bot.store.approvals import ApprovalRecord, Approvals
from bot.store.connection import StoreConflict, StoreUnavailable, connect
from bot.store.failover import retried
from bot.store.history import RedisHistory
from bot.store.inject import InjectReader
from bot.store.jobs import JobLimits, Jobs, JobStatus
from bot.store.keys import Keys, Thread
from bot.store.lease import Leases
from bot.store.ledger import RedisLedger
from bot.store.receipt import Receipts
from bot.store.session import JobSession
from tests.store.approval_kit import pending_approval

LIMITS = JobLimits(max_iterations=5, deadline_s=60, token_budget=10_000)
NOW = 1_700_000_000.0
HASH = "d" * 64


@pytest.fixture
async def client(fresh_server: ManagedRedis) -> AsyncIterator[aioredis.Redis]:
    redis = connect(fresh_server.url, socket_timeout_s=0.5, connect_timeout_s=0.5)
    yield redis
    await redis.aclose()


def pending(thread: Thread) -> ApprovalRecord:
    return pending_approval(thread, args_hash=HASH, requested_at=NOW)


async def back_after(server: ManagedRedis, delay_s: float) -> None:
    await asyncio.sleep(delay_s)
    await asyncio.to_thread(server.start)


async def test_acknowledged_writes_ride_out_a_restart_within_the_budget(
    fresh_server: ManagedRedis, client: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    receipts = Receipts(client, keys)
    approvals = Approvals(client, keys)
    ledger = RedisLedger(client, keys)
    await approvals.create(pending(thread))

    fresh_server.kill()
    restart = asyncio.create_task(back_after(fresh_server, 0.3))
    got = await receipts.receive(
        thread, ts="1700000001.000100", user="U1", text="hi", limits=LIMITS
    )
    await restart

    fresh_server.kill()
    restart = asyncio.create_task(back_after(fresh_server, 0.3))
    decided = await approvals.decide(
        thread.job_id(1), "call_1", outcome="approved", by="U0APPROV1", args_hash=HASH, now=NOW
    )
    await restart

    fresh_server.kill()
    restart = asyncio.create_task(back_after(fresh_server, 0.3))
    claimed = await ledger.begin(f"{thread.job_id(1)}:call_1", "restart_service", HASH)
    await restart

    assert got.outcome == "created"
    assert decided is not None and decided.won
    assert claimed is None  # claimed: the tool may run


async def test_a_retry_whose_first_reply_was_lost_finds_its_own_write(
    client: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    """The first attempt was executed and its reply lost: the second finds what it wrote."""
    approvals = Approvals(client, keys)
    ledger = RedisLedger(client, keys, now=lambda: NOW + 1)
    await approvals.create(pending(thread))
    first = await approvals.decide(
        thread.job_id(1), "call_1", outcome="approved", by="U0APPROV1", args_hash=HASH, now=NOW
    )
    again = await approvals.decide(  # the same call, sent again
        thread.job_id(1), "call_1", outcome="approved", by="U0APPROV1", args_hash=HASH, now=NOW
    )
    later = await approvals.decide(  # a new click by the same person: not this decision
        thread.job_id(1), "call_1", outcome="approved", by="U0APPROV1", args_hash=HASH, now=NOW + 5
    )
    key = f"{thread.job_id(1)}:call_1"
    claim = await ledger.begin(key, "restart_service", HASH)
    claim_again = await ledger.begin(key, "restart_service", HASH)  # same claim, same moment
    crashed = await RedisLedger(client, keys, now=lambda: NOW + 60).begin(
        key, "restart_service", HASH
    )  # a later run: the claim is someone else's, the write's outcome unknown

    assert first is not None and first.won
    assert again is not None and again.won
    assert later is not None and not later.won
    assert claim is None and claim_again is None
    assert crashed is not None and crashed.state == "started"


async def test_past_the_budget_the_failure_is_raised(
    fresh_server: ManagedRedis, client: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    receipts = Receipts(client, keys)
    fresh_server.kill()
    with pytest.raises(StoreUnavailable):
        await receipts.receive(thread, ts="1700000001.000100", user="U1", text="hi", limits=LIMITS)


async def test_only_store_unavailability_is_retried() -> None:
    calls = 0

    async def refused() -> None:
        nonlocal calls
        calls += 1
        raise ValueError("not a store failure")

    with pytest.raises(ValueError):
        await retried("x", refused)
    assert calls == 1


async def test_an_ending_rides_out_a_restart_and_a_retry_finds_its_own_write(
    fresh_server: ManagedRedis, client: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    """A job's ending is retried across a failover: were it not, the job would be resumed
    from its last checkpoint and answer a second time (its answer already shown). A retry
    whose first reply was lost finds its own ending: written once, trace entries too."""
    jobs = Jobs(client, keys, now=lambda: NOW)
    job = await jobs.save(
        await jobs.create(thread, requester="U1", limits=LIMITS), JobStatus.RUNNING, fence=1
    )
    fresh_server.kill()
    restart = asyncio.create_task(back_after(fresh_server, 0.3))
    done = await jobs.finish(
        job, JobStatus.COMPLETED, fence=1, inject_seen=0, trace=['{"kind": "end"}'], output="ok"
    )
    await restart
    assert done is not None and done.status is JobStatus.COMPLETED

    again = await jobs.finish(  # the very same ending, sent again
        job, JobStatus.COMPLETED, fence=1, inject_seen=0, trace=['{"kind": "end"}'], output="ok"
    )
    assert again == done
    assert await client.lrange(keys.trace(job.id), 0, -1) == ['{"kind": "end"}']
    with pytest.raises(StoreConflict):  # another ending is not this one
        await jobs.finish(job, JobStatus.FAILED, fence=1, inject_seen=0, error="boom")


async def test_a_step_rides_out_a_restart_and_its_retry_appends_nothing_twice(
    fresh_server: ManagedRedis, client: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    """A checkpoint is retried across a failover: were it not, the job would be left for
    takeover from the step before, whose model call (an answer already shown) would run
    again. Its script knows its own step, so a retry whose reply was lost appends once."""
    jobs = Jobs(client, keys)
    job = await jobs.create(thread, requester="U1", limits=LIMITS)
    lease = await Leases(client, keys).acquire(thread)
    assert lease is not None
    running = await jobs.save(job, JobStatus.RUNNING, fence=lease.fence)
    history = RedisHistory(client, keys, thread)
    await history.history()
    session = JobSession(client, keys, running, lease, history, now=lambda: NOW)

    history.append(UserMessage(content="step one"))
    fresh_server.kill()
    restart = asyncio.create_task(back_after(fresh_server, 0.3))
    await session.checkpoint(RunState(iterations=1))
    await restart
    assert await client.llen(keys.history(thread)) == 1

    history.append(UserMessage(content="step two"))
    step = session._step(RunState(iterations=2))  # the script's call, sent twice
    assert session._settle(step, await session._write(step)) is None
    assert await session._write(step) == 1  # the retry finds its own step
    assert await client.llen(keys.history(thread)) == 2
    stored = await jobs.get(job.id)
    assert stored is not None and stored.progress.iterations == 2


async def test_a_fetch_rides_out_a_restart_and_the_reply_is_taken_in_once(
    fresh_server: ManagedRedis, client: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    receipts = Receipts(client, keys)
    assert await receipts.append(thread, ts="1700000001.000100", text="also db-07", author="U1")
    reader = InjectReader(client, keys, thread, consumer="proc-a", seen_ids=frozenset)

    fresh_server.kill()
    restart = asyncio.create_task(back_after(fresh_server, 0.3))
    got = await reader.fetch()
    await restart

    assert [i.text for i in got] == ["also db-07"]
    await reader.ack(got)
    assert await reader.fetch() == []

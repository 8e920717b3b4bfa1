"""The per-thread lease: exclusive, fenced, renewed while held."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from bot.emulator.redis_server import ManagedRedis
from bot.store.connection import StoreConflict, connect
from bot.store.jobs import JobLimits, Jobs, JobStatus
from bot.store.keys import Keys, Thread
from bot.store.lease import LeaseKeeper, Leases, TakenJob


async def test_only_one_holder_and_fences_grow(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    leases = Leases(redis, keys)
    first = await leases.acquire(thread)
    assert first is not None and first.fence == 1
    assert await leases.acquire(thread) is None
    assert await leases.holder(thread) == first.value
    assert await leases.release(first)
    second = await leases.acquire(thread)
    assert second is not None and second.fence == 2
    assert not await leases.release(first)  # not the holder any more
    assert not await leases.renew(first)
    assert await leases.renew(second)


async def test_two_processes_race_and_exactly_one_wins(
    server: ManagedRedis, redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    clients = [connect(server.url) for _ in range(8)]
    try:
        got = await asyncio.gather(*(Leases(c, keys).acquire(thread) for c in clients))
    finally:
        for c in clients:
            await c.aclose()
    winners = [lease for lease in got if lease is not None]
    assert len(winners) == 1


async def test_a_stale_owner_cannot_overwrite_the_new_owners_state(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    leases = Leases(redis, keys, ttl_ms=50_000)
    jobs = Jobs(redis, keys)
    limits = JobLimits(max_iterations=5, deadline_s=60, token_budget=1000)
    job = await jobs.create(thread, requester="U1", limits=limits)
    old = await leases.acquire(thread)
    assert old is not None
    running = await jobs.save(job, JobStatus.RUNNING, fence=old.fence)
    await redis.delete(keys.lease(thread))  # the old owner stalled; its lease expired
    new = await leases.acquire(thread)
    assert new is not None and new.fence > old.fence
    taken = await jobs.save(running, fence=new.fence, output="new owner")
    with pytest.raises(StoreConflict, match="fence"):
        await jobs.save(running, fence=old.fence, output="stale owner")
    assert await jobs.get(job.id) == taken


async def test_the_keeper_notices_a_lost_lease(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    leases = Leases(redis, keys)
    lease = await leases.acquire(thread)
    assert lease is not None
    async with LeaseKeeper(leases, lease, every_s=0) as keeper:
        assert not keeper.lost.is_set()
        await redis.delete(keys.lease(thread))
        await asyncio.wait_for(keeper.lost.wait(), timeout=5)  # guards a hang only


async def test_the_keeper_renews_and_releases(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    leases = Leases(redis, keys, ttl_ms=60_000)
    lease = await leases.acquire(thread)
    assert lease is not None
    await redis.pexpire(keys.lease(thread), 1_000)
    async with LeaseKeeper(leases, lease, every_s=0):
        for _ in range(1000):
            if await redis.pttl(keys.lease(thread)) > 1_000:
                break
        assert await redis.pttl(keys.lease(thread)) > 1_000  # renewed to the full TTL
    assert await leases.holder(thread) is None  # released on exit


async def test_acquire_job_takes_the_lease_of_a_runnable_job_only(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    jobs = Jobs(redis, keys)
    leases = Leases(redis, keys)
    limits = JobLimits(max_iterations=5, deadline_s=60, token_budget=1000)
    job = await jobs.create(thread, requester="U1", limits=limits)
    assert await leases.acquire_job(f"{thread.channel}:{thread.thread_ts}:j9") == (
        TakenJob(None, None)
    )

    taken = await leases.acquire_job(job.id)
    assert taken.record == job and taken.lease is not None and taken.lease.fence == 1
    assert taken.cancel_by is None and taken.history == [] and taken.history_view is None
    assert await leases.holder(thread) == taken.lease.value
    assert await leases.acquire_job(job.id) == TakenJob(None, None)  # someone holds it

    running = await jobs.save(job, JobStatus.RUNNING, fence=taken.lease.fence)
    await jobs.request_cancel(job.id, "U2")
    await redis.rpush(keys.history(thread), '{"role":"user","content":"hi"}')
    await leases.release(taken.lease)
    again = await leases.acquire_job(job.id)
    assert again.lease is not None and again.lease.fence == 2
    assert again.cancel_by == "U2" and again.history == ['{"role":"user","content":"hi"}']
    await leases.release(again.lease)

    paused = await jobs.save(running, JobStatus.AWAITING_APPROVAL, fence=2)
    undecided = await leases.acquire_job(job.id)
    assert undecided.record == paused and undecided.lease is None
    assert await leases.holder(thread) is None
    decided = await leases.acquire_job(job.id, decided=True)
    assert decided.lease is not None and decided.lease.fence == 3
    await leases.release(decided.lease)

    await jobs.save(paused, JobStatus.CANCELLED, fence=3)
    final = await leases.acquire_job(job.id, decided=True)
    assert final.record is not None and final.record.status is JobStatus.CANCELLED
    assert final.lease is None and await leases.holder(thread) is None


async def test_acquire_job_retried_by_its_owner_finds_its_own_lease(
    redis: aioredis.Redis, keys: Keys, thread: Thread, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A retry after a lost reply (``bot.store.failover``) gets the lease it took."""
    jobs = Jobs(redis, keys)
    leases = Leases(redis, keys)
    limits = JobLimits(max_iterations=5, deadline_s=60, token_budget=1000)
    job = await jobs.create(thread, requester="U1", limits=limits)
    monkeypatch.setattr("bot.store.lease.new_owner", lambda: "same-owner")
    first = await leases.acquire_job(job.id)
    retry = await leases.acquire_job(job.id)
    assert first.lease is not None and retry.lease == first.lease
    assert retry.record == job

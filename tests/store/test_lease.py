"""The per-thread lease: exclusive, fenced, renewed while held."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from bot.emulator.redis_server import ManagedRedis
from bot.store.connection import StoreConflict, connect
from bot.store.jobs import JobLimits, Jobs, JobStatus
from bot.store.keys import Keys, Thread
from bot.store.lease import LeaseKeeper, Leases


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

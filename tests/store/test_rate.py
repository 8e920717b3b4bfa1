"""Each person's rate of new jobs (``bot.store.quota.JobRate``), and the ack path's one
script that checks it with the daily caps (``JobAdmission``), on a real Redis."""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis

from bot.agent.ports import SpendHold
from bot.emulator.redis_server import ManagedRedis
from bot.store.connection import connect
from bot.store.keys import Keys
from bot.store.quota import (
    Admitted,
    CapReached,
    DailyCaps,
    JobAdmission,
    JobRate,
    RateLimited,
    jobs_key,
)

T0 = 1_764_590_400.0  # 2026-12-01 12:00 UTC


class Clock:
    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


async def test_the_window_slides_instead_of_resetting_on_the_hour(
    redis: aioredis.Redis, keys: Keys
) -> None:
    clock = Clock(T0 + 59 * 60)  # 12:59: a fixed hour bucket would let 2× through at 13:00
    rate = JobRate(redis, keys, per_hour=3, now=clock)
    for _ in range(3):
        assert await rate.admit("U1") is None
        clock.t += 10
    clock.t = T0 + 60 * 60 + 1  # 13:00:01, a new clock hour
    retry = await rate.admit("U1")
    assert retry == T0 + 59 * 60 + 3600  # when the first of the three is an hour old
    clock.t = retry
    assert await rate.admit("U1") is None
    assert await rate.count("U1") == 3


async def test_retry_after_names_the_oldest_start_still_in_the_window(
    redis: aioredis.Redis, keys: Keys
) -> None:
    clock = Clock()
    rate = JobRate(redis, keys, per_hour=2, now=clock)
    assert await rate.admit("U1") is None
    clock.t += 600
    assert await rate.admit("U1") is None
    clock.t += 600
    assert await rate.admit("U1") == T0 + 3600
    assert await rate.peek("U1") == T0 + 3600
    clock.t = T0 + 3600
    assert await rate.peek("U1") is None  # peek counts nothing
    assert await rate.admit("U1") is None
    assert await rate.admit("U1") == T0 + 600 + 3600


async def test_the_same_message_counts_once_and_people_are_apart(
    redis: aioredis.Redis, keys: Keys
) -> None:
    rate = JobRate(redis, keys, per_hour=2, now=Clock())
    for _ in range(5):  # Slack's retries of one message
        assert await rate.admit("U1", key="C1:1.1") is None
    assert await rate.count("U1") == 1
    assert await rate.admit("U1", key="C1:1.2") is None
    assert await rate.admit("U1", key="C1:1.3") is not None
    assert await rate.admit("U1", key="C1:1.1") is None  # already counted: still admitted
    assert await rate.admit("U2", key="C1:1.4") is None


async def test_memory_is_bounded_by_the_rate(redis: aioredis.Redis, keys: Keys) -> None:
    clock = Clock()
    rate = JobRate(redis, keys, per_hour=5, now=clock)
    for i in range(50):
        clock.t += 1
        await rate.admit("U1", key=f"m{i}")
    assert await redis.zcard(jobs_key(keys, "U1")) == 5
    assert 0 < await redis.ttl(jobs_key(keys, "U1")) <= 3600 + 60


async def test_concurrent_starts_by_one_person_never_pass_the_rate(
    server: ManagedRedis, redis: aioredis.Redis, keys: Keys
) -> None:
    clock = Clock()
    other = connect(server.url)
    try:
        rates = [JobRate(client, keys, per_hour=7, now=clock) for client in (redis, other)]
        results = await asyncio.gather(
            *(r.admit("U1", key=f"m{i}-{n}") for i in range(20) for n, r in enumerate(rates))
        )
    finally:
        await other.aclose()
    assert sum(r is None for r in results) == 7


async def test_zero_is_no_rate(redis: aioredis.Redis, keys: Keys) -> None:
    rate = JobRate(redis, keys, per_hour=0, now=Clock())
    for _ in range(100):
        assert await rate.admit("U1") is None
    assert not await redis.exists(jobs_key(keys, "U1"))


async def test_admission_counts_only_what_it_admits(redis: aioredis.Redis, keys: Keys) -> None:
    clock = Clock()
    caps = DailyCaps(redis, keys, tokens=1_000, cost_usd=None, now=clock)
    rate = JobRate(redis, keys, per_hour=2, now=clock)
    gate = JobAdmission(redis, keys, caps=caps, rate=rate, now=clock)
    assert await gate.admit("U1", key="C1:1.1") == Admitted()
    assert await gate.admit("U1", key="C1:1.1") == Admitted()  # a retry: counted once
    assert await gate.admit("U1", key="C1:1.2") == Admitted()
    limited = await gate.admit("U1", key="C1:1.3")
    assert limited == RateLimited(retry_at=T0 + 3600, jobs=2, per_hour=2, first=True)
    again = await gate.admit("U1", key="C1:1.3")
    assert isinstance(again, RateLimited) and not again.first  # told once
    assert await gate.admit("U2", key="C1:1.4") == Admitted()
    hold = await caps.reserve(1_000, None)
    assert isinstance(hold, SpendHold)
    reached = await gate.admit("U3", key="C1:1.5")
    assert isinstance(reached, CapReached) and reached.first
    assert reached.status.tokens_used == 1_000 and reached.status.reached
    assert await rate.count("U3") == 0  # a refused job is not counted
    assert await gate.admit("U1", key="C1:1.1") == Admitted()  # admitted before: a retry
    await caps.raise_for_day("U0", only_if_reached=True)
    assert await gate.admit("U3", key="C1:1.5") == Admitted()  # refused before, room now
    assert await rate.count("U3") == 1


async def test_admission_with_nothing_configured_asks_nothing(
    redis: aioredis.Redis, keys: Keys
) -> None:
    gate = JobAdmission(redis, keys, caps=None, rate=JobRate(redis, keys, per_hour=0))
    assert not gate.active
    assert await gate.admit("U1", key="C1:1.1") == Admitted()
    assert await redis.dbsize() == 0

"""The workspace's daily caps (``bot.store.quota.DailyCaps``) on a real Redis: reserve and
settle across processes, the UTC day, the raise and its audit entry in one script."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime

import pytest
import redis.asyncio as aioredis

from bot.agent.ports import WORKSPACE_CAP, SpendHold, SpendRefused
from bot.emulator.redis_server import ManagedRedis
from bot.errors import StoreError
from bot.store.connection import StoreUnavailable, connect
from bot.store.keys import QUOTA_TAG, Keys
from bot.store.quota import DAY_TTL_S, DailyCaps, NotReached, Raised, utc_day


class Clock:
    def __init__(self, at: str = "2026-12-01T12:00:00") -> None:
        self.t = datetime.fromisoformat(at).replace(tzinfo=UTC).timestamp()

    def __call__(self) -> float:
        return self.t


def caps(
    redis: aioredis.Redis,
    keys: Keys,
    clock: Clock,
    *,
    tokens: int | None = 1_000,
    cost_usd: float | None = None,
) -> DailyCaps:
    return DailyCaps(redis, keys, tokens=tokens, cost_usd=cost_usd, now=clock)


async def test_reserve_charges_and_refuses_past_the_cap(redis: aioredis.Redis, keys: Keys) -> None:
    clock = Clock()
    cap = caps(redis, keys, clock)
    hold = await cap.reserve(600, None)
    assert hold == SpendHold(tokens=600, token="2026-12-01")
    refused = await cap.reserve(401, None)
    assert isinstance(refused, SpendRefused)
    assert WORKSPACE_CAP in refused.detail
    assert "600 of 1,000 tokens used today (UTC)" in refused.detail
    assert "401 more" in refused.detail
    assert "Continue raises it for the day" in refused.detail
    assert isinstance(await cap.reserve(400, None), SpendHold)  # exactly the room left
    status = await cap.status()
    assert (status.tokens_used, status.tokens_cap, status.reached) == (1_000, 1_000, True)


async def test_a_refused_reservation_marks_the_day_reached(
    redis: aioredis.Redis, keys: Keys
) -> None:
    cap = caps(redis, keys, Clock())
    await cap.reserve(100, None)
    assert not (await cap.status()).reached
    assert isinstance(await cap.reserve(950, None), SpendRefused)
    status = await cap.status()
    assert status.tokens_used == 100  # nothing charged for the refused call
    assert status.refused and status.reached


async def test_concurrent_reservations_from_two_clients_never_pass_the_cap(
    server: ManagedRedis, redis: aioredis.Redis, keys: Keys
) -> None:
    clock = Clock()
    other = connect(server.url)
    try:
        first = caps(redis, keys, clock, tokens=10_000)
        second = caps(other, keys, clock, tokens=10_000)
        results = await asyncio.gather(
            *(c.reserve(70, None) for _ in range(100) for c in (first, second))
        )
    finally:
        await other.aclose()
    held = [r for r in results if isinstance(r, SpendHold)]
    assert len(held) == 10_000 // 70  # 142 holds fit; the other 58 were refused
    assert (await first.status()).tokens_used == 142 * 70


async def test_settle_adjusts_by_actual_minus_reserved_never_below_zero(
    redis: aioredis.Redis, keys: Keys
) -> None:
    cap = caps(redis, keys, Clock())
    hold = await cap.reserve(500, None)
    assert isinstance(hold, SpendHold)
    await cap.settle(hold, 120, None)
    assert (await cap.status()).tokens_used == 120
    more = await cap.reserve(800, None)  # fits now that the hold was put right
    assert isinstance(more, SpendHold)
    await cap.settle(more, 900, None)  # used more than reserved: charged
    assert (await cap.status()).tokens_used == 1_020
    await redis.hset(cap.day_key("2026-12-01"), "tokens", 10)
    await cap.settle(SpendHold(tokens=500, token="2026-12-01"), 0, None)
    assert (await cap.status()).tokens_used == 0


async def test_a_hold_settles_in_its_own_day_after_midnight(
    redis: aioredis.Redis, keys: Keys
) -> None:
    clock = Clock("2026-12-01T23:59:59")
    cap = caps(redis, keys, clock)
    hold = await cap.reserve(900, None)
    assert isinstance(hold, SpendHold) and hold.token == "2026-12-01"
    assert isinstance(await cap.reserve(200, None), SpendRefused)
    clock.t += 2  # 00:00:01 UTC: a new day, its own counters
    assert utc_day(clock.t) == "2026-12-02"
    status = await cap.status()
    assert (status.day, status.tokens_used, status.reached) == ("2026-12-02", 0, False)
    assert isinstance(await cap.reserve(200, None), SpendHold)
    await cap.settle(hold, 100, None)  # yesterday's hold: yesterday's counters
    assert (await cap.status()).tokens_used == 200
    yesterday = await redis.hget(cap.day_key("2026-12-01"), "tokens")
    assert yesterday == "100"
    ttl = await redis.ttl(cap.day_key("2026-12-02"))
    assert 0 < ttl <= DAY_TTL_S


async def test_a_settle_for_an_expired_day_creates_nothing(
    redis: aioredis.Redis, keys: Keys
) -> None:
    cap = caps(redis, keys, Clock())
    await cap.settle(SpendHold(tokens=10, token="2026-11-20"), 50, None)
    assert not await redis.exists(cap.day_key("2026-11-20"))


async def test_the_cost_cap_counts_dollars_and_unpriced_calls_count_tokens_only(
    redis: aioredis.Redis, keys: Keys
) -> None:
    cap = caps(redis, keys, Clock(), tokens=None, cost_usd=1.0)
    hold = await cap.reserve(1_000, 0.6)
    assert isinstance(hold, SpendHold) and hold.cost_usd == 0.6
    refused = await cap.reserve(1_000, 0.5)
    assert isinstance(refused, SpendRefused)
    assert WORKSPACE_CAP in refused.detail and "$0.6000 of $1.00 spent" in refused.detail
    unpriced = await cap.reserve(5_000, None)  # room left: its tokens only
    assert isinstance(unpriced, SpendHold) and unpriced.cost_usd is None
    await cap.settle(hold, 800, 0.55)
    status = await cap.status()
    assert status.tokens_used == 5_800
    assert status.cost_used_usd == pytest.approx(0.55)
    assert status.tokens_cap is None and status.cost_cap_usd == 1.0
    await cap.settle(unpriced, 4_000, None)  # unknown cost: nothing in dollars
    assert (await cap.status()).cost_used_usd == pytest.approx(0.55)
    assert isinstance(await cap.reserve(10, 0.45), SpendHold)  # $1.00 exactly
    refused = await cap.reserve(10, None)  # the dollar cap is reached: even unpriced
    assert isinstance(refused, SpendRefused) and "$1.00 of $1.00 spent" in refused.detail


async def test_both_caps_must_fit(redis: aioredis.Redis, keys: Keys) -> None:
    cap = caps(redis, keys, Clock(), tokens=1_000, cost_usd=1.0)
    assert isinstance(await cap.reserve(900, 0.1), SpendHold)
    assert isinstance(await cap.reserve(200, 0.1), SpendRefused)  # tokens over
    assert isinstance(await cap.reserve(50, 0.95), SpendRefused)  # dollars over
    status = await cap.status()
    assert (status.tokens_used, status.cost_used_micro) == (900, 100_000)
    assert "900 of 1,000 tokens and $0.1000 of $1.00" == status.figures()


async def test_raise_for_day_adds_the_base_cap_once_more_and_clears_reached(
    redis: aioredis.Redis, keys: Keys
) -> None:
    clock = Clock()
    cap = caps(redis, keys, clock, tokens=1_000, cost_usd=2.0)
    await cap.reserve(900, 0.5)
    assert isinstance(await cap.reserve(200, None), SpendRefused)
    raised = await cap.raise_for_day("U0APPROVER", only_if_reached=True)
    assert isinstance(raised, Raised)
    status = raised.status
    assert (status.tokens_cap, status.cost_cap_usd) == (2_000, 4.0)
    assert (status.raised_tokens, status.raised_cost_usd, status.raises) == (1_000, 2.0, 1)
    assert not status.reached and status.raised_by == "U0APPROVER"
    assert isinstance(await cap.reserve(200, None), SpendHold)
    again = await cap.raise_for_day("U0OTHER", only_if_reached=True)  # no longer reached
    assert isinstance(again, NotReached) and again.status.tokens_cap == 2_000
    clock.t += 24 * 3600  # the raise was for that day only
    assert (await cap.status()).tokens_cap == 1_000


async def test_concurrent_raises_of_a_reached_day_raise_once(
    server: ManagedRedis, redis: aioredis.Redis, keys: Keys
) -> None:
    clock = Clock()
    other = connect(server.url)
    try:
        one, two = caps(redis, keys, clock), caps(other, keys, clock)
        await one.reserve(1_000, None)
        results = await asyncio.gather(
            *(c.raise_for_day(f"U{i}", only_if_reached=True) for i in range(5) for c in (one, two))
        )
    finally:
        await other.aclose()
    assert sum(isinstance(r, Raised) for r in results) == 1
    assert (await one.status()).tokens_cap == 2_000


async def test_raise_for_day_stages_its_audit_entry_in_the_same_script(
    redis: aioredis.Redis, keys: Keys
) -> None:
    cap = caps(redis, keys, Clock())
    outbox = keys.audit_outbox(QUOTA_TAG)
    entry = json.dumps({"id": "daily_cap_raised:2026-12-01:1", "kind": "daily_cap_raised"})
    raised = await cap.raise_for_day("U1", audit_outbox=outbox, audit_json=entry)
    assert isinstance(raised, Raised)
    assert await redis.lrange(outbox, 0, -1) == [entry]
    assert 0 < await redis.ttl(outbox) <= 30 * 24 * 3600
    assert await redis.zscore(keys.audit_pending_of(QUOTA_TAG), QUOTA_TAG) is not None
    with pytest.raises(ValueError):
        await cap.raise_for_day("U1", audit_outbox=keys.audit_outbox("{C1:1.2}"), audit_json="{}")


async def test_a_refused_raise_writes_neither_the_raise_nor_its_audit_entry(
    redis: aioredis.Redis, keys: Keys
) -> None:
    cap = caps(redis, keys, Clock())
    outbox = keys.audit_outbox(QUOTA_TAG)
    await redis.set(outbox, "not a list")  # the outbox's write would fail: nothing is written
    with pytest.raises(StoreError):
        await cap.raise_for_day("U1", audit_outbox=outbox, audit_json='{"id": "x"}')
    assert not await redis.exists(cap.day_key("2026-12-01"))
    assert await redis.get(outbox) == "not a list"
    await redis.delete(outbox)
    await redis.set(cap.day_key("2026-12-01"), "corrupt")  # and the other way round
    with pytest.raises(StoreError):
        await cap.raise_for_day("U1", audit_outbox=outbox, audit_json='{"id": "x"}')
    assert not await redis.exists(outbox)


async def test_with_redis_down_a_raise_writes_nothing_and_raises(
    fresh_server: ManagedRedis,
) -> None:
    keys = Keys("t:")
    clock = Clock()
    client = connect(fresh_server.url, socket_timeout_s=0.5, connect_timeout_s=0.5)
    try:
        cap = caps(client, keys, clock)
        outbox = keys.audit_outbox(QUOTA_TAG)
        fresh_server.kill()
        with pytest.raises(StoreUnavailable):
            await cap.raise_for_day("U1", audit_outbox=outbox, audit_json='{"id": "x"}')
        with pytest.raises(StoreUnavailable):
            await cap.reserve(10, None)
        fresh_server.restart()
        assert not await client.exists(cap.day_key("2026-12-01"), outbox)
        assert isinstance(await cap.reserve(10, None), SpendHold)
    finally:
        await client.aclose()


def test_a_cap_needs_tokens_or_dollars(keys: Keys) -> None:
    with pytest.raises(ValueError):
        DailyCaps(None, keys, tokens=None, cost_usd=None)  # type: ignore[arg-type]

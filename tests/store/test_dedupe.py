"""Slack deliveries are handled once: retries (same ``event_id``) and the
``app_mention`` + ``message`` twins of one post (same ``channel`` + ``ts``) are dropped,
and the keys that remember them live at least an hour."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from bot.emulator.redis_server import ManagedRedis
from bot.store.connection import StoreUnavailable, connect
from bot.store.dedupe import Dedupe
from bot.store.keys import Keys

CHANNEL = "C123"
TS = "1700000000.000100"


@pytest.fixture
def dedupe(redis: aioredis.Redis, keys: Keys) -> Dedupe:
    return Dedupe(redis, keys)


async def test_an_event_is_first_once(dedupe: Dedupe) -> None:
    assert await dedupe.first_event("Ev1") is True
    assert await dedupe.first_event("Ev1") is False  # Slack's retry
    assert await dedupe.first_event("Ev2") is True


async def test_a_message_is_first_once(dedupe: Dedupe) -> None:
    assert await dedupe.first_message(CHANNEL, TS) is True
    assert await dedupe.first_message(CHANNEL, TS) is False
    assert await dedupe.first_message(CHANNEL, "1700000000.000200") is True
    assert await dedupe.first_message("C999", TS) is True


async def test_dedupe_keys_live_at_least_an_hour(
    dedupe: Dedupe, redis: aioredis.Redis, keys: Keys
) -> None:
    await dedupe.first_event("Ev1")
    await dedupe.first_message(CHANNEL, TS)
    await dedupe.first_delivery("Ev2", CHANNEL, "1700000000.000200")

    for key in (
        keys.event("Ev1"),
        keys.message(CHANNEL, TS),
        keys.event("Ev2"),
        keys.message(CHANNEL, "1700000000.000200"),
    ):
        assert await redis.ttl(key) >= 3600, key


async def test_the_message_twin_is_not_first(dedupe: Dedupe) -> None:
    # One post that @-mentions the bot: app_mention, then message, different event ids.
    assert await dedupe.first_delivery("EvMention", CHANNEL, TS) is True
    assert await dedupe.first_delivery("EvMessage", CHANNEL, TS) is False


async def test_a_retry_is_not_first(dedupe: Dedupe) -> None:
    assert await dedupe.first_delivery("EvMention", CHANNEL, TS) is True
    assert await dedupe.first_delivery("EvMention", CHANNEL, TS) is False
    # The twin, and then Slack's retry of the twin.
    assert await dedupe.first_delivery("EvMessage", CHANNEL, TS) is False
    assert await dedupe.first_delivery("EvMessage", CHANNEL, TS) is False


async def test_a_retry_of_an_event_seen_by_first_event_is_not_first(dedupe: Dedupe) -> None:
    assert await dedupe.first_event("Ev1") is True
    assert await dedupe.first_delivery("Ev1", CHANNEL, TS) is False


async def test_first_delivery_records_both_ids(dedupe: Dedupe) -> None:
    assert await dedupe.first_delivery("Ev1", CHANNEL, TS) is True
    assert await dedupe.first_event("Ev1") is False
    assert await dedupe.first_message(CHANNEL, TS) is False


async def test_other_messages_are_each_first(dedupe: Dedupe) -> None:
    assert await dedupe.first_delivery("Ev1", CHANNEL, TS) is True
    assert await dedupe.first_delivery("Ev2", CHANNEL, "1700000000.000200") is True
    assert await dedupe.first_delivery("Ev3", "C999", TS) is True


async def test_concurrent_twins_have_exactly_one_first(dedupe: Dedupe) -> None:
    outcomes = await asyncio.gather(
        *(dedupe.first_delivery(f"Ev{i}", CHANNEL, TS) for i in range(20))
    )
    assert outcomes.count(True) == 1


async def test_two_processes_share_the_dedupe(redis: aioredis.Redis, keys: Keys) -> None:
    one, other = Dedupe(redis, keys), Dedupe(redis, keys)
    assert await one.first_delivery("EvMention", CHANNEL, TS) is True
    assert await other.first_delivery("EvMessage", CHANNEL, TS) is False


@pytest.fixture
async def dead(fresh_server: ManagedRedis, keys: Keys) -> AsyncIterator[Dedupe]:
    client = connect(fresh_server.url)
    fresh_server.kill()
    yield Dedupe(client, keys)
    await client.aclose()


async def test_redis_down_raises_store_unavailable(dead: Dedupe) -> None:
    with pytest.raises(StoreUnavailable):
        await dead.first_event("Ev1")
    with pytest.raises(StoreUnavailable):
        await dead.first_message(CHANNEL, TS)
    with pytest.raises(StoreUnavailable):
        await dead.first_delivery("Ev1", CHANNEL, TS)

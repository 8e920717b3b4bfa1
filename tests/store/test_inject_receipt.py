"""Receiving a thread reply into the inject stream (what the Slack listener does before it
acks Slack): idempotent by Slack message ts, order-preserving, author optional, kept as
long as the conversation, and delivered even if it arrived before any job read."""

from __future__ import annotations

import redis.asyncio as aioredis

from bot.store.inject import GROUP, InjectReader
from bot.store.keys import HISTORY_TTL_S, Keys, Thread
from bot.store.receipt import Receipts


def consumer(redis: aioredis.Redis, keys: Keys, thread: Thread, name: str = "p1") -> InjectReader:
    return InjectReader(redis, keys, thread, consumer=name, seen_ids=set)


async def test_the_same_message_received_twice_is_one_entry(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    receipts = Receipts(redis, keys)

    first = await receipts.append(thread, ts="1700000001.000100", text="it is nginx", author="U1")
    again = await receipts.append(thread, ts="1700000001.000100", text="it is nginx", author="U1")

    assert (first, again) == (True, False)
    assert await redis.xlen(keys.inject(thread)) == 1
    assert await receipts.count(thread) == 1
    [(stream_id, _)] = await redis.xrange(keys.inject(thread))
    assert await redis.hgetall(keys.inject_seen(thread)) == {"1700000001.000100": stream_id}


async def test_seq_counts_receipts_and_starts_at_zero(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    receipts = Receipts(redis, keys)
    assert await receipts.count(thread) == 0
    for n in range(3):
        await receipts.append(thread, ts=f"1700000001.00010{n}", text=f"reply {n}", author=None)
    assert await receipts.count(thread) == 3


async def test_replies_received_before_any_reader_are_delivered(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    receipts = Receipts(redis, keys)
    await receipts.append(thread, ts="1700000001.000100", text="first", author="U1")
    await receipts.append(thread, ts="1700000002.000100", text="second", author="U2")

    got = await consumer(redis, keys, thread).fetch()

    assert [i.text for i in got] == ["first", "second"]


async def test_entries_in_a_stream_without_the_group_are_delivered(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    # A stream that exists without the consumer group (written before the group was
    # made, or the group was lost): receipt creates it at id 0, so nothing is skipped.
    await redis.xadd(keys.inject(thread), {"ts": "1700000000.000900", "text": "early"})
    receipts = Receipts(redis, keys)
    await receipts.append(thread, ts="1700000001.000100", text="later", author=None)

    got = await consumer(redis, keys, thread).fetch()

    assert [i.text for i in got] == ["early", "later"]
    groups = await redis.xinfo_groups(keys.inject(thread))
    assert [g["name"] for g in groups] == [GROUP]


async def test_order_of_receipt_is_kept(redis: aioredis.Redis, keys: Keys, thread: Thread) -> None:
    receipts = Receipts(redis, keys)
    stamps = [f"17000000{n:02d}.000100" for n in (5, 1, 9, 3, 7)]  # not sorted by ts
    for ts in stamps:
        await receipts.append(thread, ts=ts, text=f"text of {ts}", author=None)

    got = await consumer(redis, keys, thread).fetch()

    assert [i.id for i in got] == stamps


async def test_the_author_is_optional(redis: aioredis.Redis, keys: Keys, thread: Thread) -> None:
    receipts = Receipts(redis, keys)
    await receipts.append(thread, ts="1700000001.000100", text="with", author="U0123ABC")
    await receipts.append(thread, ts="1700000002.000100", text="without", author=None)

    with_author, without = await consumer(redis, keys, thread).fetch()

    assert (with_author.author, with_author.text) == ("U0123ABC", "with")
    assert (without.author, without.text) == (None, "without")
    [_, (_, fields)] = await redis.xrange(keys.inject(thread))
    assert "author" not in fields


async def test_keys_live_as_long_as_the_conversation(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    receipts = Receipts(redis, keys)
    await receipts.append(thread, ts="1700000001.000100", text="hello", author=None)

    for key in (keys.inject(thread), keys.inject_seen(thread), keys.inject_seq(thread)):
        ttl = await redis.ttl(key)
        assert HISTORY_TTL_S - 60 < ttl <= HISTORY_TTL_S, key


async def test_keys_share_the_threads_hash_tag(keys: Keys, thread: Thread) -> None:
    names = (keys.inject(thread), keys.inject_seen(thread), keys.inject_seq(thread))
    assert all(thread.tag in name for name in names)


async def test_threads_do_not_share_a_stream(redis: aioredis.Redis, keys: Keys) -> None:
    one, other = Thread("C1", "1700000000.000100"), Thread("C1", "1700000000.000200")
    await Receipts(redis, keys).append(one, ts="1700000001.000100", text="a", author=None)

    assert await consumer(redis, keys, other).fetch() == []
    assert [i.text for i in await consumer(redis, keys, one).fetch()] == ["a"]

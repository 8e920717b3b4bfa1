"""Retention of past incidents: a record older than the retention leaves every index
(a few with each add, the rest by ``prune``), its key carries the TTL, and a record whose
key expired first is skipped."""

from __future__ import annotations

import redis.asyncio as aioredis

from bot.store.incidents import PRUNE_PER_ADD, Incidents
from bot.store.keys import Keys

from .incident_kit import DAY, T0, everyone, record

RETENTION = 10 * DAY


async def test_an_old_record_leaves_search_and_every_index(
    redis: aioredis.Redis, keys: Keys
) -> None:
    store = Incidents(redis, keys)
    old = record("zookeeper session expired", alertname="ZkDown", at=T0, n=1)
    await store.add(old, retention_s=RETENTION, now=T0)
    assert len(await store.search("zookeeper", visible=everyone)) == 1

    later = T0 + 11 * DAY
    fresh = record("checkout slow", at=later, n=2)
    await store.add(fresh, retention_s=RETENTION, now=later)  # prunes the old one

    assert await store.search("zookeeper", visible=everyone) == []
    assert await store.by_alert("ZkDown", visible=everyone) == []
    assert await store.get(old.id) is None
    assert await store.count() == 1
    assert await redis.exists(keys.incidents("t:zookeeper")) == 0  # postings compacted
    assert await redis.exists(keys.incidents("a:ZkDown")) == 0
    assert await redis.zrange(keys.incidents("time"), 0, -1) == ["1"]
    assert await redis.hkeys(keys.incidents("ids")) == [fresh.id]
    assert await redis.hget(keys.incidents("meta"), "lo") == "1"
    assert await redis.zscore(keys.incidents("terms"), "zookeeper") is None


async def test_prune_removes_what_adds_left(redis: aioredis.Redis, keys: Keys) -> None:
    store = Incidents(redis, keys, retention_s=RETENTION)
    for n in range(30):
        await store.add(
            record(f"batch job {n} failed", at=T0 + n, n=n), retention_s=RETENTION, now=T0 + n
        )
    later = T0 + 20 * DAY
    await store.add(record("checkout slow", at=later, n=99), retention_s=RETENTION, now=later)
    assert await store.count() == 31 - PRUNE_PER_ADD

    assert await store.prune(later) == 30 - PRUNE_PER_ADD
    assert await store.prune(later) == 0
    assert await store.count() == 1
    assert await store.search("batch job failed", visible=everyone) == []
    assert await redis.exists(keys.incidents("t:batch")) == 0
    meta = await redis.hgetall(keys.incidents("meta"))
    assert meta["n"] == "1" and meta["lo"] == "30"
    [hit] = await store.search("checkout", visible=everyone)
    assert hit.record.request == "checkout slow"


async def test_the_record_key_lives_as_long_as_the_retention(
    redis: aioredis.Redis, keys: Keys
) -> None:
    store = Incidents(redis, keys)
    one = record(at=T0)
    await store.add(one, retention_s=90, now=T0 + 30)  # started 30 s ago: 60 s left
    ttl = await redis.pttl(keys.incidents("r:0"))
    assert 59_000 < ttl <= 60_000

    too_old = record(at=T0)
    await store.add(too_old, retention_s=90, now=T0 + 120)  # not stored; prunes the first
    assert await store.get(too_old.id) is None
    assert await store.get(one.id) is None
    assert await store.count() == 0


async def test_a_record_whose_key_expired_is_skipped(redis: aioredis.Redis, keys: Keys) -> None:
    store = Incidents(redis, keys)
    gone = record("elasticsearch cluster red", alertname="EsRed", at=T0, n=1)
    kept = record("elasticsearch cluster red again", alertname="EsRed", at=T0 + 60, n=2)
    for one in (gone, kept):
        await store.add(one, retention_s=RETENTION, now=T0 + 60)
    await redis.delete(keys.incidents("r:0"))  # as its TTL would, before any prune

    assert [h.record for h in await store.search("elasticsearch red", visible=everyone)] == [kept]
    assert await store.by_alert("EsRed", visible=everyone) == [kept]
    assert await store.get(gone.id) is None

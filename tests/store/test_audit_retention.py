"""Retention by age only: entries chained before ``now - retention_days`` leave, the
anchor keeps where the kept chain starts, and ``verify`` still passes; any number of
entries within the window stays."""

from __future__ import annotations

import redis.asyncio as aioredis

from bot.store.audit import AuditLog
from bot.store.keys import Keys

from .audit_kit import T0, TAG, Clock, entry, stage, stream

DAY = 86_400.0


async def test_many_entries_within_the_window_are_never_trimmed(
    redis: aioredis.Redis, keys: Keys
) -> None:
    clock = Clock()
    log = AuditLog(redis, keys, retention_days=400, now=clock)
    await stage(redis, log, TAG, *(entry(n) for n in range(1, 2_001)))
    assert len(await log.publish(TAG, limit=2_000)) == 2_000

    clock.t = T0 + 399 * DAY
    assert await log.trim() == 0
    assert await redis.xlen(keys.audit_log()) == 2_000
    assert await redis.get(keys.audit_anchor()) is None
    report = await log.verify()
    assert report.ok and report.checked == 2_000 and report.start == "genesis"


async def test_old_entries_leave_and_the_chain_still_verifies_from_the_anchor(
    redis: aioredis.Redis, keys: Keys
) -> None:
    clock = Clock()
    log = AuditLog(redis, keys, retention_days=5, now=clock)
    hashes = []
    for day in range(10):  # one entry a day, chained the day it happened
        clock.t = T0 + day * DAY
        chained = await log.append(entry(day + 1, at=clock.t))
        assert chained is not None
        hashes.append(chained.hash)

    clock.t = T0 + 9.5 * DAY  # keeps what was chained from day 4.5 on
    assert await log.trim() == 5
    assert await redis.xlen(keys.audit_log()) == 5
    assert await redis.get(keys.audit_anchor()) == f"5:{hashes[4]}"
    assert await redis.zcard(keys.audit_ids()) == 5  # the dedupe ids age out too

    report = await log.verify()
    assert (report.ok, report.checked, report.start, report.start_seq) == (True, 5, "anchor", 6)
    assert report.describe() == (
        "ok: 5 entries, chain from the retention anchor (entries before seq 6 removed) to seq 10"
    )
    assert await log.trim() == 0  # nothing more is old enough

    clock.t += DAY
    assert await log.append(entry(11, at=clock.t)) is not None
    assert (await log.verify()).ok


async def test_a_trimmer_with_a_slower_clock_never_moves_the_anchor_back(
    redis: aioredis.Redis, keys: Keys
) -> None:
    clock = Clock()
    log = AuditLog(redis, keys, retention_days=5, now=clock)
    for day in range(10):
        clock.t = T0 + day * DAY
        await log.append(entry(day + 1, at=clock.t))
    clock.t = T0 + 9.5 * DAY
    behind = AuditLog(redis, keys, retention_days=5, now=Clock(T0 + 7.5 * DAY))
    script = behind._trim

    async def overtaken(**kwargs: object) -> object:
        # ``behind`` found its last entry to remove (day 2); before its script runs, a
        # trimmer with a later clock removes more and anchors further on.
        assert await log.trim() == 5
        return await script(**kwargs)  # type: ignore[arg-type]

    behind._trim = overtaken  # type: ignore[assignment]
    assert await behind.trim() == 0
    assert str(await redis.get(keys.audit_anchor())).startswith("5:")
    report = await log.verify()
    assert report.ok and report.start_seq == 6


async def test_trimming_everything_still_verifies(redis: aioredis.Redis, keys: Keys) -> None:
    clock = Clock()
    log = AuditLog(redis, keys, retention_days=1, now=clock)
    await stage(redis, log, TAG, entry(1), entry(2))
    await log.publish(TAG)
    clock.t += 3 * DAY
    assert await log.trim() == 2
    assert await stream(redis, keys) == []
    report = await log.verify()
    assert report.ok and report.checked == 0 and report.start_seq == 3
    assert await log.append(entry(3, at=clock.t)) is not None  # the chain goes on
    report = await log.verify()
    assert report.ok and report.checked == 1 and report.head_seq == 3


async def test_an_unreadable_last_entry_to_go_anchors_on_the_first_kept(
    redis: aioredis.Redis, keys: Keys
) -> None:
    clock = Clock()
    log = AuditLog(redis, keys, retention_days=5, now=clock)
    for day in range(10):
        clock.t = T0 + day * DAY
        await log.append(entry(day + 1, at=clock.t))
    entries = await stream(redis, keys)
    await redis.delete(keys.audit_log())
    for i, (sid, raw) in enumerate(entries, start=1):
        await redis.xadd(keys.audit_log(), {"e": "garbage" if i == 5 else raw}, id=sid)
    assert (await log.verify()).broken is not None

    clock.t = T0 + 9.5 * DAY
    assert await log.trim() == 5  # the damage ages out with the rest

    assert str(await redis.get(keys.audit_anchor())).startswith("5:")
    assert (await log.verify()).ok

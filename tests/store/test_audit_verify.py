"""``AuditLog.verify`` walks the kept chain and names the first link that does not
hold: an entry edited in place (hash mismatch), an edit that recomputed its hash (the
next entry's prev), an entry deleted (prev mismatch), the newest entry deleted (the
head), an entry that is not JSON; and it passes on an intact chain, empty or not."""

from __future__ import annotations

import json
from collections.abc import Callable

import redis.asyncio as aioredis

from bot.store.audit import AuditLog, entry_hash
from bot.store.keys import Keys

from .audit_kit import TAG, Clock, entry, stage, stream


async def chained_log(redis: aioredis.Redis, keys: Keys, n: int = 5) -> AuditLog:
    log = AuditLog(redis, keys, now=Clock())
    await stage(redis, log, TAG, *(entry(i) for i in range(1, n + 1)))
    assert len(await log.publish(TAG, limit=n)) == n
    return log


async def rewrite(redis: aioredis.Redis, keys: Keys, seq: int, change: Callable[[str], str]) -> str:
    """Rebuild the stream (XADD cannot edit) with entry ``seq``'s JSON changed, keeping
    every stream id; returns that entry's stream id."""
    entries = await stream(redis, keys)
    await redis.delete(keys.audit_log())
    for i, (sid, raw) in enumerate(entries, start=1):
        await redis.xadd(keys.audit_log(), {"e": change(raw) if i == seq else raw}, id=sid)
    return entries[seq - 1][0]


def edited(raw: str) -> str:
    body = json.loads(raw)
    body["outcome"] = "error"  # as if the write had failed
    return json.dumps(body)


async def test_an_intact_chain_verifies_from_genesis(redis: aioredis.Redis, keys: Keys) -> None:
    log = await chained_log(redis, keys)
    report = await log.verify()
    assert (report.ok, report.checked, report.start, report.start_seq, report.head_seq) == (
        True,
        5,
        "genesis",
        1,
        5,
    )
    assert report.describe() == "ok: 5 entries, chain from genesis to seq 5"


async def test_an_empty_log_verifies(redis: aioredis.Redis, keys: Keys) -> None:
    report = await AuditLog(redis, keys).verify()
    assert report.ok and report.checked == 0 and report.head_seq is None
    assert report.describe() == "ok: 0 entries, chain from genesis"


async def test_an_edited_entry_is_the_first_broken_link(redis: aioredis.Redis, keys: Keys) -> None:
    log = await chained_log(redis, keys)
    stream_id = await rewrite(redis, keys, 3, edited)

    report = await log.verify()

    assert not report.ok and report.checked == 2
    assert report.broken is not None
    assert (report.broken.seq, report.broken.problem) == (3, "hash mismatch")
    assert report.broken.stream_id == stream_id
    assert report.broken.entry_id == entry(3).id
    assert report.describe().startswith(
        f"broken at seq 3 (stream id {stream_id}, entry {entry(3).id}): hash mismatch"
    )


async def test_an_edit_that_recomputed_its_hash_breaks_the_next_link(
    redis: aioredis.Redis, keys: Keys
) -> None:
    log = await chained_log(redis, keys)

    def forged(raw: str) -> str:
        body = json.loads(edited(raw))
        body["hash"] = entry_hash(body)
        return json.dumps(body)

    await rewrite(redis, keys, 3, forged)
    report = await log.verify()
    assert report.broken is not None
    assert (report.broken.seq, report.broken.problem) == (4, "prev mismatch")


async def test_a_deleted_entry_breaks_the_link_after_it(redis: aioredis.Redis, keys: Keys) -> None:
    log = await chained_log(redis, keys)
    entries = await stream(redis, keys)
    await redis.xdel(keys.audit_log(), entries[2][0])  # seq 3

    report = await log.verify()

    assert report.broken is not None
    assert (report.broken.seq, report.broken.problem) == (4, "prev mismatch")
    assert report.broken.stream_id == entries[3][0]
    assert "expected 3" in report.broken.detail


async def test_the_newest_entry_deleted_is_found_by_the_head(
    redis: aioredis.Redis, keys: Keys
) -> None:
    log = await chained_log(redis, keys)
    entries = await stream(redis, keys)
    await redis.xdel(keys.audit_log(), entries[-1][0])

    report = await log.verify()

    assert report.broken is not None
    assert (report.broken.seq, report.broken.problem) == (5, "head mismatch")
    assert "ends at seq 4" in report.broken.detail


async def test_an_unparseable_entry_is_reported(redis: aioredis.Redis, keys: Keys) -> None:
    log = await chained_log(redis, keys)
    stream_id = await rewrite(redis, keys, 2, lambda raw: raw[:40])
    report = await log.verify()
    assert report.broken is not None
    assert (report.broken.problem, report.broken.stream_id) == ("unparseable", stream_id)
    assert "expected seq 2" in report.broken.detail
    # reading the log still shows it, as an unreadable entry
    kinds = [e.kind async for e in log.entries()]
    assert kinds == [
        "write_finished",
        "corrupt",
        "write_finished",
        "write_finished",
        "write_finished",
    ]


async def test_a_long_chain_is_verified_page_by_page(redis: aioredis.Redis, keys: Keys) -> None:
    log = await chained_log(redis, keys, n=1_203)  # more than two pages of PAGE entries
    report = await log.verify()
    assert report.ok and report.checked == 1_203
    await rewrite(redis, keys, 1_100, edited)
    broken = (await log.verify()).broken
    assert broken is not None and broken.seq == 1_100

"""Reading the audit log back: oldest first, by time (an entry chained late still falls
in its window), by person, tool, channel and job, and the stored JSON exactly."""

from __future__ import annotations

import json

import redis.asyncio as aioredis

from bot.store.audit import AuditLog
from bot.store.keys import Keys

from .audit_kit import T0, TAG, Clock, entry, stage, stream

OTHER_JOB = "C0OPS:1780000500.000200:j2"


async def filled(redis: aioredis.Redis, keys: Keys) -> tuple[AuditLog, Clock]:
    clock = Clock()
    log = AuditLog(redis, keys, now=clock)
    for n in range(1, 7):
        clock.t = T0 + n * 600  # each chained as it happens, ten minutes apart
        one = entry(n, at=clock.t)
        if n % 2 == 0:
            one = one.model_copy(
                update={"actor": "cli:alice", "tool": "k8s_scale", "channel": "C0OPS"}
            )
        if n == 6:
            one = one.model_copy(update={"job_id": OTHER_JOB})
        await log.append(one)
    return log, clock


async def ids(log: AuditLog, **filters: object) -> list[int]:
    return [int(e.id.rsplit("_", 1)[1]) async for e in log.entries(**filters)]  # type: ignore[arg-type]


async def test_entries_filter_by_time_person_tool_channel_job(
    redis: aioredis.Redis, keys: Keys
) -> None:
    log, _ = await filled(redis, keys)
    assert await ids(log) == [1, 2, 3, 4, 5, 6]
    assert await ids(log, since=T0 + 1_800) == [3, 4, 5, 6]
    assert await ids(log, until=T0 + 1_800) == [1, 2, 3]
    assert await ids(log, since=T0 + 1_000, until=T0 + 2_500) == [2, 3, 4]
    assert await ids(log, user="cli:alice") == [2, 4, 6]
    assert await ids(log, user="<@U0APPROVER>") == [1, 3, 5]
    assert await ids(log, tool="k8s_scale", channel="C0OPS") == [2, 4, 6]
    assert await ids(log, channel="C0INC", tool="k8s_scale") == []
    assert await ids(log, job=OTHER_JOB) == [6]
    assert await ids(log, user="cli:alice", limit=2) == [2, 4]


async def test_an_entry_chained_hours_late_is_in_its_own_window(
    redis: aioredis.Redis, keys: Keys
) -> None:
    log, clock = await filled(redis, keys)
    clock.t = T0 + 5 * 3600  # a dead writer's outbox, drained hours after its fact
    await stage(redis, log, TAG, entry(9, at=T0 + 700))
    clock.t += 10
    await log.drain()
    assert await ids(log, since=T0 + 650, until=T0 + 800) == [9]
    assert await ids(log, until=T0 + 800) == [1, 9]  # chain order: it was chained last


async def test_matching_gives_the_stored_json_exactly(redis: aioredis.Redis, keys: Keys) -> None:
    log, _ = await filled(redis, keys)
    stored = [s async for s in log.matching(job=OTHER_JOB)]
    [(stream_id, raw)] = [(sid, raw) for sid, raw in await stream(redis, keys) if OTHER_JOB in raw]
    assert [(s.stream_id, s.raw) for s in stored] == [(stream_id, raw)]
    assert json.loads(raw)["seq"] == 6


async def test_reading_pages_through_a_long_log(redis: aioredis.Redis, keys: Keys) -> None:
    clock = Clock()
    log = AuditLog(redis, keys, now=clock)
    await stage(redis, log, TAG, *(entry(n) for n in range(1, 1_301)))
    await log.publish(TAG, limit=2_000)
    seqs = [e.seq async for e in log.entries()]
    assert seqs == list(range(1, 1_301))

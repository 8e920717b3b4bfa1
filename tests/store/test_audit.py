"""The audit log's chaining: staged entries enter one hash chain in order, exactly once,
however many publishers race on an outbox or die half-way; a pending hint is dropped
only when nothing can be left behind it; the scanner's drain picks up what a dead
writer left, after the grace."""

from __future__ import annotations

import asyncio
import json

import pytest
import redis.asyncio as aioredis

from bot.emulator.redis_server import ManagedRedis
from bot.store.audit import (
    ACTOR_BOT,
    GENESIS,
    SETTLE_S,
    AuditEntry,
    AuditLog,
    entry_hash,
    tag_of_job,
)
from bot.store.connection import StoreUnavailable, connect
from bot.store.keys import Keys

from .audit_kit import JOB, OTHER_TAG, T0, TAG, Clock, entry, stage, stream


async def test_entries_chain_in_order_each_hashing_the_one_before(
    redis: aioredis.Redis, keys: Keys
) -> None:
    log = AuditLog(redis, keys, now=Clock())
    staged = [entry(1), entry(2), entry(3)]
    await stage(redis, log, TAG, *staged)

    chained = await log.publish(TAG)

    assert [e.id for e in chained] == [e.id for e in staged]
    assert [e.seq for e in chained] == [1, 2, 3]
    assert [e.prev for e in chained] == [GENESIS, chained[0].hash, chained[1].hash]
    stored = [json.loads(raw) for _, raw in await stream(redis, keys)]
    assert [s["id"] for s in stored] == [e.id for e in staged]
    for body, one in zip(stored, chained, strict=True):
        assert body["hash"] == entry_hash(body) == one.hash
        without = {k: v for k, v in body.items() if k not in ("seq", "prev", "hash")}
        assert without == one.model_dump(
            mode="json", exclude_none=True, exclude={"seq", "prev", "hash"}
        )
    assert await redis.get(keys.audit_head()) == f"3:{chained[2].hash}"
    assert await redis.llen(log.outbox_key(TAG)) == 0
    assert await redis.zcard(keys.audit_ids()) == 3
    assert (await log.verify()).ok


async def test_outboxes_of_two_threads_share_one_chain(redis: aioredis.Redis, keys: Keys) -> None:
    log = AuditLog(redis, keys, now=Clock())
    await stage(redis, log, TAG, entry(1))
    await stage(redis, log, OTHER_TAG, entry(2, job_id="C0OPS:1780000500.000200:j1"))
    first = await log.publish(OTHER_TAG)
    second = await log.publish(TAG)
    assert [e.seq for e in first + second] == [1, 2]
    assert second[0].prev == first[0].hash


async def test_a_second_publish_and_a_restaged_entry_chain_nothing(
    redis: aioredis.Redis, keys: Keys
) -> None:
    log = AuditLog(redis, keys, now=Clock())
    await stage(redis, log, TAG, entry(1))
    assert len(await log.publish(TAG)) == 1
    assert await log.publish(TAG) == []
    await stage(redis, log, TAG, entry(1))  # a writer retrying the same fact
    assert await log.publish(TAG) == []
    assert len(await stream(redis, keys)) == 1
    assert await redis.llen(log.outbox_key(TAG)) == 0  # the duplicate left the outbox


async def test_two_publishers_racing_on_one_outbox_chain_each_entry_once(
    server: ManagedRedis, redis: aioredis.Redis, keys: Keys
) -> None:
    staged = [entry(n) for n in range(1, 41)]
    writer = AuditLog(redis, keys, now=Clock())
    await stage(redis, writer, TAG, *staged)
    a, b = connect(server.url), connect(server.url)
    try:
        one, two = AuditLog(a, keys, now=Clock()), AuditLog(b, keys, now=Clock())
        first, second = await asyncio.gather(one.publish(TAG), two.publish(TAG))
    finally:
        await a.aclose()
        await b.aclose()

    won = sorted(e.id for e in first + second)
    assert won == sorted(e.id for e in staged)  # each chained once, by one of them
    stored = [json.loads(raw) for _, raw in await stream(redis, keys)]
    assert [s["id"] for s in stored] == [e.id for e in staged]  # in the outbox's order
    assert [s["seq"] for s in stored] == list(range(1, 41))
    assert await redis.llen(writer.outbox_key(TAG)) == 0
    report = await writer.verify()
    assert report.ok and report.checked == 40


async def test_a_publisher_overtaken_between_chaining_and_popping_drops_nothing(
    redis: aioredis.Redis, keys: Keys
) -> None:
    """Publisher A chains the first entry; before it pops it, B publishes the whole
    outbox (finding that entry chained). A's pop then finds another first element, so it
    pops nothing, reads the outbox again and finds it empty."""
    writer = AuditLog(redis, keys, now=Clock())
    await stage(redis, writer, TAG, entry(1), entry(2), entry(3))
    a, b = AuditLog(redis, keys, now=Clock()), AuditLog(redis, keys, now=Clock())
    pop = a._pop
    by_b: list[AuditEntry] = []

    async def overtaken(**kwargs: object) -> object:
        if not by_b:
            by_b.extend(await b.publish(TAG))
            await stage(redis, writer, TAG, entry(4), hint=False)  # staged meanwhile
        return await pop(**kwargs)  # type: ignore[arg-type]

    a._pop = overtaken  # type: ignore[assignment]
    by_a = await a.publish(TAG)

    assert [e.id for e in by_a] == [entry(1).id, entry(4).id]
    assert [e.id for e in by_b] == [entry(2).id, entry(3).id]
    assert [json.loads(raw)["seq"] for _, raw in await stream(redis, keys)] == [1, 2, 3, 4]
    assert await redis.llen(a.outbox_key(TAG)) == 0
    assert (await a.verify()).ok


async def test_an_entry_chained_but_never_popped_is_not_chained_again(
    redis: aioredis.Redis, keys: Keys
) -> None:
    """A publisher that dies between chaining an entry and popping it from the outbox:
    the next publisher finds the id chained, pops it and goes on with the rest."""
    log = AuditLog(redis, keys, now=Clock())
    await stage(redis, log, TAG, entry(1), entry(2))
    crashed = AuditLog(redis, keys, now=Clock())
    assert await crashed.append(entry(1)) is not None  # chained; still in the outbox

    chained = await log.publish(TAG)

    assert [e.id for e in chained] == [entry(2).id]
    assert [json.loads(raw)["id"] for _, raw in await stream(redis, keys)] == [
        entry(1).id,
        entry(2).id,
    ]
    assert await redis.llen(log.outbox_key(TAG)) == 0
    assert (await log.verify()).ok


async def test_a_stale_cached_head_is_corrected_by_the_script(
    redis: aioredis.Redis, keys: Keys
) -> None:
    one, two = AuditLog(redis, keys, now=Clock()), AuditLog(redis, keys, now=Clock())
    await one.append(entry(1))
    await two.append(entry(2))
    await one.append(entry(3))  # its cached head is seq 1: the script says it moved
    assert [json.loads(raw)["seq"] for _, raw in await stream(redis, keys)] == [1, 2, 3]
    assert (await one.verify()).ok


async def test_process_facts_are_appended_directly_once(redis: aioredis.Redis, keys: Keys) -> None:
    log = AuditLog(redis, keys, now=Clock())
    started = AuditEntry(
        id="process_started:host-1:4242:1780000000.0",
        kind="process_started",
        at=1_780_000_000.0,
        actor=ACTOR_BOT,
        detail={"tools_yml_sha256": "cd" * 32, "approvers": ["U0APPROVER"]},
    )
    chained = await log.append(started)
    assert chained is not None and chained.seq == 1 and chained.detail == started.detail
    assert await log.append(started) is None
    assert len(await stream(redis, keys)) == 1


async def test_a_fresh_hint_is_kept_and_an_old_one_dropped_when_the_outbox_is_empty(
    redis: aioredis.Redis, keys: Keys
) -> None:
    clock = Clock()
    log = AuditLog(redis, keys, now=clock)
    await stage(redis, log, TAG, entry(1))
    await log.publish(TAG)
    # Its writer may still sit between another hint and its fact: kept for now.
    assert await redis.zscore(keys.audit_pending_of(TAG), TAG) == clock.t
    clock.t += SETTLE_S + 1
    assert await log.publish(TAG) == []
    assert await redis.zscore(keys.audit_pending_of(TAG), TAG) is None


async def test_a_hint_written_after_the_publisher_read_it_is_kept(
    redis: aioredis.Redis, keys: Keys
) -> None:
    clock = Clock()
    log = AuditLog(redis, keys, now=clock)
    await stage(redis, log, TAG, entry(1))
    clock.t += SETTLE_S + 1
    writer = AuditLog(redis, keys, now=clock)
    drop = log._drop

    async def writer_stages_first(**kwargs: object) -> object:
        # Between the publisher's empty read of the outbox and its hint drop, a writer
        # adds its hint and stages an entry (and dies before publishing it).
        clock.t += 0.5
        await stage(redis, writer, TAG, entry(2))
        return await drop(**kwargs)  # type: ignore[arg-type]

    log._drop = writer_stages_first  # type: ignore[assignment]
    assert [e.id for e in await log.publish(TAG)] == [entry(1).id]

    assert await redis.zscore(keys.audit_pending_of(TAG), TAG) == clock.t  # the writer's
    clock.t += 10
    log._drop = drop
    assert [e.id for e in await log.drain()] == [entry(2).id]


async def test_drain_chains_a_dead_writers_outbox_only_after_the_grace(
    redis: aioredis.Redis, keys: Keys
) -> None:
    clock = Clock()
    log = AuditLog(redis, keys, now=clock)
    await stage(redis, log, TAG, entry(1), entry(2))  # and the writer died
    await stage(redis, log, OTHER_TAG, entry(3))

    clock.t += 4
    assert await log.drain(older_than_s=5) == []
    assert await redis.llen(log.outbox_key(TAG)) == 2

    clock.t += 2
    chained = await log.drain(older_than_s=5)
    assert sorted(e.id for e in chained) == sorted(entry(n).id for n in (1, 2, 3))
    assert await redis.zcard(keys.audit_pending_of(TAG)) == 0
    assert await log.drain(older_than_s=5) == []


async def test_publish_takes_at_most_its_limit_and_keeps_the_hint(
    redis: aioredis.Redis, keys: Keys
) -> None:
    clock = Clock()
    log = AuditLog(redis, keys, now=clock)
    await stage(redis, log, TAG, *(entry(n) for n in range(1, 8)))
    clock.t += 60
    assert len(await log.publish(TAG, limit=5)) == 5
    assert await redis.llen(log.outbox_key(TAG)) == 2
    assert await redis.zscore(keys.audit_pending_of(TAG), TAG) is not None
    assert len(await log.drain()) == 2


async def test_an_unreadable_outbox_element_is_kept_as_corrupt_and_blocks_nothing(
    redis: aioredis.Redis, keys: Keys, caplog: pytest.LogCaptureFixture
) -> None:
    log = AuditLog(redis, keys, now=Clock())
    await redis.rpush(log.outbox_key(TAG), "{not json", json.dumps({"id": "x"}))
    await stage(redis, log, TAG, entry(1))

    chained = await log.publish(TAG)

    assert [e.kind for e in chained] == ["corrupt", "corrupt", "write_finished"]
    assert chained[0].detail["raw"] == "{not json"
    assert chained[0].detail["outbox"] == TAG
    assert "JSONDecodeError" in chained[0].detail["error"]
    assert "ValidationError" in chained[1].detail["error"]
    assert await redis.llen(log.outbox_key(TAG)) == 0
    assert "unreadable entry kept as corrupt" in caplog.text
    assert (await log.verify()).ok


async def test_a_newer_writers_fields_are_chained_verified_and_shown(
    redis: aioredis.Redis, keys: Keys
) -> None:
    log = AuditLog(redis, keys, now=Clock())
    newer = {**json.loads(entry(1).model_dump_json(exclude_none=True)), "risk": {"score": 7}}
    await redis.rpush(log.outbox_key(TAG), json.dumps(newer))
    [chained] = await log.publish(TAG)
    assert chained.model_extra == {"risk": {"score": 7}}
    assert json.loads((await stream(redis, keys))[0][1])["risk"] == {"score": 7}
    assert (await log.verify()).ok


def test_a_jobs_outbox_is_under_its_threads_tag() -> None:
    assert tag_of_job(JOB) == TAG
    assert Keys("p:").audit_outbox(tag_of_job(JOB)) == "p:{C0INC:1780000000.000100}:audit:outbox"


async def test_hint_in_queues_the_hint_in_the_callers_pipeline(
    redis: aioredis.Redis, keys: Keys
) -> None:
    log = AuditLog(redis, keys, now=Clock(123.5))
    async with redis.pipeline(transaction=True) as pipe:
        log.hint_in(pipe, TAG)
        await pipe.execute()
    assert await redis.zscore(keys.audit_pending_of(TAG), TAG) == 123.5


async def test_redis_down_is_store_unavailable(fresh_server: ManagedRedis, keys: Keys) -> None:
    client = connect(fresh_server.url, socket_timeout_s=0.5, connect_timeout_s=0.5)
    log = AuditLog(client, keys, now=Clock())
    fresh_server.kill()
    try:
        with pytest.raises(StoreUnavailable):
            await log.publish(TAG)
        with pytest.raises(StoreUnavailable):
            await log.verify()
    finally:
        await client.aclose()


async def test_a_process_whose_clock_is_behind_still_chains_after_the_stream(
    redis: aioredis.Redis, keys: Keys
) -> None:
    ahead, behind = AuditLog(redis, keys, now=Clock(T0 + 3600)), AuditLog(redis, keys, now=Clock())
    await ahead.append(entry(1))
    await behind.append(entry(2))  # its clock names a stream id before the newest one
    [(first, _), (second, _)] = await stream(redis, keys)
    assert first == f"{int((T0 + 3600) * 1000)}-0"
    assert second > first
    assert (await behind.verify()).ok

"""The workspace-wide indexes sharded into buckets: written to the thread's bucket, read
across all of them, and the unbucketed keys of earlier versions moved in.

Runs on every topology of the store suite (``OPSLOOP_TEST_REDIS``): on a cluster the
buckets live on different masters, and every read here crosses them.
"""

from __future__ import annotations

import redis.asyncio as aioredis

from bot.emulator.redis_topology import key_slot
from bot.store.approvals import ApprovalRecord, Approvals, index_member
from bot.store.audit import AuditLog
from bot.store.buckets import count_buckets, move_unbucketed
from bot.store.jobs import JobLimits, Jobs
from bot.store.keys import (
    BUCKETS,
    INDEX_BUCKETS,
    UNBUCKETED,
    Keys,
    Thread,
    bucket_of,
    job_bucket,
)
from bot.store.recent import RecentJobs
from tests.store.approval_kit import pending_approval

from .audit_kit import Clock, entry, stage

LIMITS = JobLimits(max_iterations=5, deadline_s=60, token_budget=10_000)
NOW = 1_780_000_000.0


def threads(n: int) -> list[Thread]:
    return [Thread(f"C{i % 5}", f"17800{i:05d}.000100") for i in range(n)]


def approval(thread: Thread, *, requested_at: float = NOW) -> ApprovalRecord:
    return pending_approval(
        thread,
        args_hash="a" * 64,
        requested_at=requested_at,
        ttl_s=60,
        arguments={"host": "web-03"},
        reason="wedged",
        requester="U0CAROL3",
    )


def test_bucket_keys_carry_their_own_hash_tags_and_spread_over_the_slot_ranges() -> None:
    keys = Keys("opsloop:")
    assert keys.active_jobs(7) == "opsloop:{ix7}:index:active"
    slots = [key_slot(keys.active_jobs(b)) for b in BUCKETS]
    thirds = [sum(1 for s in slots if lo <= s < hi) for lo, hi in ((0, 5461), (5461, 10923))]
    assert thirds + [INDEX_BUCKETS - sum(thirds)] == [6, 5, 5]  # a 3-master cluster's ranges
    # an index's buckets and the thread's own keys never share a script: different tags
    assert len({keys.active_jobs(b) for b in BUCKETS}) == INDEX_BUCKETS
    owners = {bucket_of(t.tag) for t in threads(200)}
    assert owners == set(BUCKETS)


async def test_jobs_land_in_their_threads_bucket_and_due_reads_every_bucket_in_order(
    redis: aioredis.Redis, keys: Keys
) -> None:
    now = [NOW]
    jobs = Jobs(redis, keys, now=lambda: now[0])
    created = []
    for i, thread in enumerate(threads(40)):
        now[0] = NOW + i
        created.append((await jobs.create(thread, requester="U1", limits=LIMITS)).id)

    for job_id in created:
        assert await redis.zscore(keys.active_jobs(job_bucket(job_id)), job_id) is not None
    filled = [b for b in BUCKETS if await redis.zcard(keys.active_jobs(b))]
    assert len(filled) >= 8  # no one bucket (one shard) holds the index
    assert await count_buckets(redis, "t", keys.active_jobs) == 40

    # the earliest due first, whatever bucket it is in; ``limit`` across all of them
    assert await jobs.due(NOW + 100, limit=40) == created
    assert await jobs.due(NOW + 100, limit=7) == created[:7]
    assert await jobs.due(NOW + 9.5, limit=100) == created[:10]

    await jobs.index_many({created[0]: NOW + 500, created[1]: NOW + 400})
    assert (await jobs.due(NOW + 100, limit=40))[-1] == created[-1]
    assert await jobs.due(NOW + 450, limit=100) == [*created[2:], created[1]]


async def test_approval_indexes_are_read_and_taken_across_buckets(
    redis: aioredis.Redis, keys: Keys
) -> None:
    approvals = Approvals(redis, keys)
    made = []
    for i, thread in enumerate(threads(24)):
        record = approval(thread, requested_at=NOW + i)
        await approvals.create(record, remind_at=record.requested_at + 10)
        made.append((record.job_id, record.call_id))
    assert len({job_bucket(j) for j, _ in made}) >= 8

    assert await approvals.due(NOW + 65.5) == made[:6]  # expiries NOW + 60 + i
    reminded = await approvals.take_reminders(NOW + 40)
    assert sorted(reminded) == sorted(made)  # every bucket's, each once
    assert await approvals.take_reminders(NOW + 40) == []


async def test_the_audit_drain_finds_hints_in_every_bucket(
    redis: aioredis.Redis, keys: Keys
) -> None:
    clock = Clock(NOW)
    log = AuditLog(redis, keys, now=clock)
    tags = [t.tag for t in threads(12)]
    for n, tag in enumerate(tags):
        await stage(redis, log, tag, entry(n, id=f"e{n}"))
    assert len({bucket_of(tag) for tag in tags}) >= 6
    clock.t += 10
    chained = await log.drain(older_than_s=5)
    assert sorted(e.id for e in chained) == sorted(f"e{n}" for n in range(12))
    assert await count_buckets(redis, "t", keys.audit_pending) == 0


async def test_the_newest_jobs_merge_every_bucket_newest_first(
    redis: aioredis.Redis, keys: Keys
) -> None:
    recent = RecentJobs(redis, keys)
    ids = [t.job_id(1) for t in threads(30)]
    for i, job_id in enumerate(ids):
        await recent.add(job_id, requester="U1" if i % 2 else "U2", at=NOW + i)

    assert await recent.newest(limit=5) == ids[::-1][:5]
    assert await recent.newest() == ids[::-1]
    assert await recent.newest("U1") == ids[1::2][::-1]
    assert len({job_bucket(j) for j in ids}) >= 8


async def test_unbucketed_indexes_of_an_earlier_version_are_moved_into_their_buckets(
    redis: aioredis.Redis, keys: Keys
) -> None:
    thread_a, thread_b = threads(2)
    job_a, job_b = thread_a.job_id(1), thread_b.job_id(2)
    member = index_member(job_a, "call_1")
    old = {
        "active": {job_a: NOW, job_b: NOW + 1, "not-a-job": NOW},
        "recent": {job_a: NOW},
        "approvals": {member: NOW + 60},
        "approval-reminders": {member: NOW + 10},
        "card-edits": {member: NOW + 5},
        "audit-outbox": {thread_b.tag: NOW + 2},
    }
    assert set(old) == set(UNBUCKETED)
    for name, entries in old.items():
        await redis.zadd(keys.unbucketed(name), entries)

    moved = await move_unbucketed(redis, keys)

    assert moved == 7  # "not-a-job" names no thread: dropped
    for name in UNBUCKETED:
        assert not await redis.exists(keys.unbucketed(name))
    a, b = job_bucket(job_a), job_bucket(job_b)
    assert await redis.zscore(keys.active_jobs(a), job_a) == NOW
    assert await redis.zscore(keys.active_jobs(b), job_b) == NOW + 1
    assert await redis.zscore(keys.recent_jobs(a), job_a) == NOW
    assert await redis.ttl(keys.recent_jobs(a)) > 0
    assert await redis.zscore(keys.approval_expiries(a), member) == NOW + 60
    assert await redis.zscore(keys.approval_reminders(a), member) == NOW + 10
    assert await redis.zscore(keys.card_edits(a), member) == NOW + 5
    assert await redis.zscore(keys.audit_pending_of(thread_b.tag), thread_b.tag) == NOW + 2
    assert await Jobs(redis, keys).due(NOW + 5) == [job_a, job_b]

    assert await move_unbucketed(redis, keys) == 0  # nothing left: a pass costs one EXISTS


async def test_a_stop_sets_the_flag_even_when_nobody_listens(
    redis: aioredis.Redis, keys: Keys
) -> None:
    """The signal is best effort (SPUBLISH to the bucket's channel); the flag is the record."""
    jobs = Jobs(redis, keys)
    job = await jobs.create(threads(1)[0], requester="U1", limits=LIMITS)
    await jobs.request_cancel(job.id, "U2")
    assert await jobs.cancel_requested(job.id) == "U2"

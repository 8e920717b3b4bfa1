"""The ack path's one-round-trip receipt: duplicates, twins, replies, live jobs."""

from __future__ import annotations

import redis.asyncio as aioredis

from bot.store.jobs import JobLimits, Jobs, JobStatus
from bot.store.keys import Keys, Thread
from bot.store.receipt import Receipt, Receipts

LIMITS = JobLimits(max_iterations=5, deadline_s=60, token_budget=1000)
TS = "1700000000.000100"


async def receive(
    redis: aioredis.Redis,
    keys: Keys,
    thread: Thread,
    ts: str = TS,
    *,
    user: str = "U1",
    text: str = "look",
    needs_conversation: bool = False,
) -> Receipt:
    return await Receipts(redis, keys).receive(
        thread, ts=ts, user=user, text=text, limits=LIMITS, needs_conversation=needs_conversation
    )


async def test_a_mention_creates_a_queued_job_and_persists_the_message(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    receipt = await receive(redis, keys, thread)

    assert receipt.outcome == "created" and receipt.needs_run
    assert receipt.job_id == thread.job_id(1)
    stored = await Jobs(redis, keys).get(receipt.job_id)
    assert stored is not None and stored.status is JobStatus.QUEUED
    assert stored.requester == "U1" and stored.request_ts == TS and stored.limits == LIMITS
    assert receipt.record == stored
    assert await Receipts(redis, keys).count(thread) == 1
    current = await Jobs(redis, keys).current(thread)
    assert current is not None and current.id == receipt.job_id


async def test_a_second_delivery_of_the_same_message_changes_nothing(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    first = await receive(redis, keys, thread)
    again = await receive(redis, keys, thread, text="look (retry)")

    assert again.outcome == "duplicate" and again.job_id == first.job_id
    assert again.status is JobStatus.QUEUED and again.needs_run  # never answered: reschedule
    assert await Receipts(redis, keys).count(thread) == 1
    assert await redis.get(keys.jobs_counter(thread)) == "1"


async def test_a_duplicate_of_a_message_whose_job_runs_is_not_rescheduled(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    first = await receive(redis, keys, thread)
    jobs = Jobs(redis, keys)
    assert first.record is not None
    await jobs.save(first.record, JobStatus.RUNNING, fence=1)

    again = await receive(redis, keys, thread)
    assert again.outcome == "duplicate" and again.status is JobStatus.RUNNING
    assert not again.needs_run


async def test_a_message_while_a_job_is_live_joins_it(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    first = await receive(redis, keys, thread)
    reply = await receive(redis, keys, thread, ts="1700000000.000200", needs_conversation=True)

    assert reply.outcome == "joined" and reply.job_id == first.job_id and not reply.needs_run
    assert reply.record is None
    assert await Receipts(redis, keys).count(thread) == 2


async def test_a_reply_in_a_thread_without_a_conversation_is_ignored(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    receipt = await receive(redis, keys, thread, needs_conversation=True)

    assert receipt.outcome == "ignored" and receipt.job_id is None and not receipt.needs_run
    assert await redis.keys("*") == []  # nothing written


async def test_a_reply_after_the_job_ended_starts_a_new_job(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    first = await receive(redis, keys, thread)
    assert first.record is not None
    jobs = Jobs(redis, keys)
    running = await jobs.save(first.record, JobStatus.RUNNING, fence=1)
    await jobs.save(running, JobStatus.COMPLETED, fence=1)
    await redis.rpush(keys.history(thread), "{}")  # the thread holds a conversation

    reply = await receive(
        redis, keys, thread, ts="1700000000.000300", user="U2", needs_conversation=True
    )
    assert reply.outcome == "created" and reply.job_id == thread.job_id(2)
    assert reply.record is not None and reply.record.requester == "U2"

"""An ended job's answer and ending are owed to its thread until shown: a process that
could not show them (it died, or Slack refused past its patience) leaves them for the
scanner of any process, which delivers them once, under the thread's lease."""

from __future__ import annotations

import time

import redis.asyncio as aioredis

from bot.agent.testing import ScriptedModel, text
from bot.store.jobs import JobRecord, JobStatus
from bot.store.keys import Keys, Thread, job_bucket
from bot.store.lease import Leases
from bot.turns.scanner import MAX_DELIVERIES, Scanner

from .notifier import Notes, QuietSink
from .test_approvals_stop_continue import make_turns, start


class Undelivered(QuietSink):
    delivered = False  # Slack never took the answer (or the process died showing it)


class UndeliveredNotes(Notes):
    async def open_progress(self, record: JobRecord, *, taken_over: bool = False) -> QuietSink:
        return Undelivered()


async def no_expiry(approval: object) -> None:
    raise AssertionError("no card here")


def scanner(turns: object, shown: list[str], *, answer: bool = True) -> Scanner:
    async def on_ending(record: JobRecord) -> bool:
        shown.append(f"{record.id}: {record.output}")
        return answer

    return Scanner(turns, schedule=lambda _: None, on_expired=no_expiry, on_ending=on_ending)  # type: ignore[arg-type]


async def test_a_shown_ending_is_settled_by_its_own_process(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    turns, _ = make_turns(redis, keys, ScriptedModel([text("all good")]))
    job_id = await start(turns, thread)
    await turns.runner.run_job(job_id)

    assert await turns.stores.jobs.owed(job_id) is None
    assert await redis.zscore(keys.active_jobs(job_bucket(job_id)), job_id) is None
    shown: list[str] = []
    await scanner(turns, shown).scan()
    assert shown == []


async def test_an_ending_its_process_never_showed_is_delivered_once_by_a_scan(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    turns, _ = make_turns(redis, keys, ScriptedModel([text("all good")]), notes=UndeliveredNotes())
    job_id = await start(turns, thread)
    await turns.runner.run_job(job_id)
    record = await turns.stores.jobs.get(job_id)
    assert record is not None and record.status is JobStatus.COMPLETED
    assert await turns.stores.jobs.owed(job_id) == 0

    shown: list[str] = []
    await scanner(turns, shown).scan()
    assert shown == [f"{job_id}: all good"]
    assert await turns.stores.jobs.owed(job_id) is None
    await scanner(turns, shown).scan()
    assert shown == [f"{job_id}: all good"]  # once


async def test_no_delivery_while_the_threads_lease_is_held(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    """Its own process may still be showing it (waiting out Slack's rate limits)."""
    turns, _ = make_turns(redis, keys, ScriptedModel([text("all good")]), notes=UndeliveredNotes())
    job_id = await start(turns, thread)
    await turns.runner.run_job(job_id)
    other = Leases(redis, keys)
    held = await other.acquire(thread, owner="still-showing-it")
    assert held is not None

    shown: list[str] = []
    await scanner(turns, shown).scan()
    assert shown == [] and await turns.stores.jobs.owed(job_id) == 0
    # its next look is timed to the lease's expiry: here the lease goes early
    assert await redis.zscore(keys.active_jobs(job_bucket(job_id)), job_id) > time.time() + 10
    await other.release(held)
    await redis.zadd(keys.active_jobs(job_bucket(job_id)), {job_id: 0})
    await scanner(turns, shown).scan()
    assert shown == [f"{job_id}: all good"]


async def test_a_delivery_slack_keeps_refusing_is_given_up_after_a_few_tries(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    turns, _ = make_turns(redis, keys, ScriptedModel([text("all good")]), notes=UndeliveredNotes())
    job_id = await start(turns, thread)
    await turns.runner.run_job(job_id)
    index = keys.active_jobs(job_bucket(job_id))

    shown: list[str] = []
    for _ in range(MAX_DELIVERIES + 2):
        await redis.zadd(index, {job_id: 0})  # due now (a refused try waits 30 s)
        await scanner(turns, shown, answer=False).scan()
    assert len(shown) == MAX_DELIVERIES
    assert await turns.stores.jobs.owed(job_id) is None
    assert await redis.zscore(index, job_id) is None

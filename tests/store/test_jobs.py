"""Job state: atomic, validated status changes fenced against stale writers."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from bot.agent import RunState, Usage
from bot.store.connection import StoreConflict
from bot.store.jobs import JobLimits, JobRecord, Jobs, JobStatus, LimitRaise, check_transition
from bot.store.keys import Keys, Thread, job_bucket

LIMITS = JobLimits(max_iterations=20, deadline_s=3600, token_budget=200_000)


def jobs_at(redis: aioredis.Redis, keys: Keys, now: float = 1000.0) -> Jobs:
    return Jobs(redis, keys, now=lambda: now)


async def new_job(jobs: Jobs, thread: Thread) -> JobRecord:
    return await jobs.create(thread, requester="U1", limits=LIMITS, request_ts="1700000000.000100")


async def test_create_numbers_jobs_per_thread(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    jobs = jobs_at(redis, keys)
    first = await new_job(jobs, thread)
    second = await new_job(jobs, thread)
    assert (first.id, second.id) == (thread.job_id(1), thread.job_id(2))
    assert first.status is JobStatus.QUEUED and first.requester == "U1"
    assert await jobs.get(first.id) == first
    assert await jobs.current(thread) == second
    assert await jobs.due(now=2000.0) == [first.id, second.id]
    assert keys.job(first.id).startswith(f"test:{thread.tag}:")  # one cluster slot


async def test_progress_round_trips(redis: aioredis.Redis, keys: Keys, thread: Thread) -> None:
    jobs = jobs_at(redis, keys)
    job = await new_job(jobs, thread)
    running = await jobs.save(job, JobStatus.RUNNING, fence=1)
    progress = RunState(iterations=3, usage=Usage(prompt_tokens=10), active_time_s=12.5)
    saved = await jobs.save(running, fence=1, progress=progress)
    assert (await jobs.get(job.id)) == saved
    assert saved.progress.iterations == 3 and saved.fence == 1


@pytest.mark.parametrize(
    ("old", "new", "via"),
    [
        (JobStatus.COMPLETED, JobStatus.RUNNING, None),
        (JobStatus.FAILED, JobStatus.RUNNING, "raise"),
        (JobStatus.AWAITING_APPROVAL, JobStatus.RUNNING, None),
        (JobStatus.LIMIT_TOKENS, JobStatus.RUNNING, None),
        (JobStatus.RUNNING, JobStatus.QUEUED, None),
        (JobStatus.CANCELLED, JobStatus.CANCELLED, None),
    ],
)
def test_forbidden_transitions(old: JobStatus, new: JobStatus, via: str | None) -> None:
    with pytest.raises(StoreConflict, match="not allowed"):
        check_transition(old, new, via)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("old", "new", "via"),
    [
        (JobStatus.QUEUED, JobStatus.RUNNING, None),
        (JobStatus.RUNNING, JobStatus.AWAITING_APPROVAL, None),
        (JobStatus.AWAITING_APPROVAL, JobStatus.RUNNING, "decision"),
        (JobStatus.LIMIT_ITERATIONS, JobStatus.RUNNING, "raise"),
        (JobStatus.RUNNING, JobStatus.LOOP, None),
        (JobStatus.AWAITING_APPROVAL, JobStatus.CANCELLED, None),
    ],
)
def test_allowed_transitions(old: JobStatus, new: JobStatus, via: str | None) -> None:
    check_transition(old, new, via)  # type: ignore[arg-type]


async def test_a_finished_job_cannot_be_resumed(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    jobs = jobs_at(redis, keys)
    job = await jobs.save(await new_job(jobs, thread), JobStatus.RUNNING, fence=1)
    done = await jobs.save(job, JobStatus.COMPLETED, fence=1)
    with pytest.raises(StoreConflict):
        await jobs.save(done, JobStatus.RUNNING, fence=2, via="decision")
    assert (await jobs.get(job.id)).status is JobStatus.COMPLETED  # type: ignore[union-attr]
    assert await jobs.due(now=2000.0) == []  # no longer indexed


async def test_a_limit_stop_resumes_only_through_a_recorded_raise(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    jobs = jobs_at(redis, keys)
    job = await jobs.save(await new_job(jobs, thread), JobStatus.RUNNING, fence=1)
    stopped = await jobs.save(job, JobStatus.LIMIT_ITERATIONS, fence=1)
    raised = LimitRaise(limit="iterations", amount=20, by="U2", at=1000.0)
    resumed = await jobs.save(
        stopped,
        JobStatus.RUNNING,
        fence=2,
        via="raise",
        raises=[raised],
        limits=LIMITS.model_copy(update={"max_iterations": 40}),
    )
    stored = await jobs.get(job.id)
    assert stored == resumed
    assert stored.status is JobStatus.RUNNING and stored.raises == [raised]  # type: ignore[union-attr]


async def test_a_write_from_a_stale_read_is_refused(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    jobs = jobs_at(redis, keys)
    job = await new_job(jobs, thread)
    await jobs.save(job, JobStatus.RUNNING, fence=1)
    with pytest.raises(StoreConflict, match="status:running"):
        await jobs.save(job, JobStatus.CANCELLED, fence=1)  # read as queued, now running


async def test_an_older_fence_cannot_overwrite_newer_state(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    jobs = jobs_at(redis, keys)
    job = await jobs.save(await new_job(jobs, thread), JobStatus.RUNNING, fence=1)
    newer = await jobs.save(job, fence=2, progress=RunState(iterations=5))
    with pytest.raises(StoreConflict, match="fence:2"):
        await jobs.save(job, fence=1, progress=RunState(iterations=1))
    assert await jobs.get(job.id) == newer


async def test_finish_is_refused_when_a_reply_arrived_after_the_last_read(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    jobs = jobs_at(redis, keys)
    job = await jobs.save(await new_job(jobs, thread), JobStatus.RUNNING, fence=1)
    await redis.set(keys.inject_seq(thread), 3)  # three replies received in all
    assert await jobs.finish(job, JobStatus.COMPLETED, fence=1, inject_seen=2) is None
    assert (await jobs.get(job.id)).status is JobStatus.RUNNING  # type: ignore[union-attr]
    done = await jobs.finish(job, JobStatus.COMPLETED, fence=1, inject_seen=3, output="ok")
    assert done is not None and done.output == "ok"
    assert (await jobs.get(job.id)) == done


async def test_an_ended_job_owes_its_thread_its_ending_until_delivered(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    """``finish`` leaves the job in the scanner's index with its ending owed (a process
    that dies before Slack shows it leaves it for another); ``delivered`` settles both."""
    jobs = jobs_at(redis, keys)
    job = await jobs.save(await new_job(jobs, thread), JobStatus.RUNNING, fence=1)
    index = keys.active_jobs(job_bucket(job.id))
    await redis.set(keys.inject_seq(thread), 1)
    assert await jobs.finish(job, JobStatus.COMPLETED, fence=1, inject_seen=0) is None
    assert await jobs.owed(job.id) is None  # not ended: nothing owed yet

    await jobs.finish(job, JobStatus.COMPLETED, fence=1, inject_seen=1, output="ok")
    assert await jobs.owed(job.id) == 0
    assert await redis.zscore(index, job.id) is not None  # the scanner still looks at it
    assert [await jobs.delivery_attempt(job.id) for _ in range(2)] == [1, 2]
    assert await jobs.owed(job.id) == 2

    await jobs.delivered(job.id)
    assert await jobs.owed(job.id) is None
    assert await redis.zscore(index, job.id) is None
    assert await jobs.delivery_attempt(job.id) is None  # settled: no try recreates it
    assert await jobs.owed(job.id) is None

"""A job's step made durable in one atomic, fenced round trip; resuming after a crash."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest
import redis.asyncio as aioredis

from bot.agent import AgentConfig, Limits, RunState, StopReason, UserMessage, run
from bot.agent.testing import ScriptedModel, call, calls, text
from bot.store.connection import StoreConflict
from bot.store.history import RedisHistory
from bot.store.jobs import JobLimits, JobRecord, Jobs, JobStatus
from bot.store.keys import Keys, Thread
from bot.store.lease import Leases
from bot.store.session import JobSession
from bot.store.trace import TraceRecorder
from tests.agent.conftest import echo_tool, make_config

LIMITS = JobLimits(max_iterations=4, deadline_s=600, token_budget=100_000)
LIMITS_4 = Limits(max_iterations=4)


async def start(redis: aioredis.Redis, keys: Keys, thread: Thread) -> tuple[Jobs, JobRecord]:
    jobs = Jobs(redis, keys)
    job = await jobs.create(thread, requester="U1", limits=LIMITS)
    return jobs, job


async def session_for(
    redis: aioredis.Redis, keys: Keys, jobs: Jobs, job: JobRecord, traces: list[str]
) -> JobSession:
    lease = await Leases(redis, keys).acquire(job.thread)
    assert lease is not None
    running = await jobs.save(job, JobStatus.RUNNING, fence=lease.fence)
    history = RedisHistory(redis, keys, job.thread)
    await history.history()
    recorder = TraceRecorder(job.id)
    recorder.put_back(traces)
    return JobSession(redis, keys, running, lease, history, trace=recorder)


async def test_checkpoint_writes_history_state_and_trace_together(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    jobs, job = await start(redis, keys, thread)
    session = await session_for(redis, keys, jobs, job, ['{"kind":"tool"}'])
    session.history.append(UserMessage(content="hello"))
    await session.checkpoint(RunState(iterations=2))

    stored = await jobs.get(job.id)
    assert stored is not None and stored.progress.iterations == 2
    assert stored.status is JobStatus.RUNNING and stored.fence == session.lease.fence
    assert await redis.lrange(keys.history(thread), 0, -1) != []
    assert await redis.lrange(keys.trace(job.id), 0, -1) == ['{"kind":"tool"}']


async def test_a_process_that_lost_its_lease_writes_nothing(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    jobs, job = await start(redis, keys, thread)
    stale = await session_for(redis, keys, jobs, job, [])
    await redis.delete(keys.lease(thread))  # its lease expired...
    newer = await Leases(redis, keys).acquire(thread)  # ...and another process took over
    assert newer is not None
    await jobs.save(stale.record, fence=newer.fence, output="taken over")

    stale.history.append(UserMessage(content="from the stale owner"))
    with pytest.raises(StoreConflict, match="fence"):
        await stale.checkpoint(RunState(iterations=9))
    assert await redis.llen(keys.history(thread)) == 0
    stored = await jobs.get(job.id)
    assert stored is not None and stored.output == "taken over"


async def test_a_crashed_run_resumes_with_its_remaining_budget(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    """Process A runs two steps and dies in the third model call; process B loads the
    job's saved progress and history and finishes with what is left of the budget."""
    jobs, job = await start(redis, keys, thread)
    first = await session_for(redis, keys, jobs, job, [])
    first.history.append(UserMessage(content="check the fleet"))
    await first.history.flush()
    stuck = asyncio.Event()

    async def dies(_: object) -> None:
        stuck.set()
        await asyncio.Event().wait()  # never answers: the process "crashes" here

    model_a = ScriptedModel(
        [calls(call("check", "c1", host="web-1")), calls(call("check", "c2", host="web-2")), dies]
    )
    config_a = replace(
        make_config(model_a, tools=[echo_tool()], limits=LIMITS_4),
        memory=first.history,
        on_checkpoint=first.checkpoint,
        job_id=job.id,
    )
    task = asyncio.create_task(run(config_a))
    await stuck.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await redis.delete(keys.lease(thread))  # the lease expires after the crash

    saved = await jobs.get(job.id)
    assert saved is not None and saved.progress.iterations == 2
    second = await session_for_resume(redis, keys, saved)
    model_b = ScriptedModel([calls(call("check", "c3", host="web-3")), text("done")])
    config_b: AgentConfig = replace(
        make_config(model_b, tools=[echo_tool()], limits=LIMITS_4),
        memory=second.history,
        on_checkpoint=second.checkpoint,
        job_id=job.id,
    )
    result = await run(config_b, saved.progress)

    # 2 iterations were used before the crash: with a limit of 4, two more responses.
    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert result.iterations == 4 and result.output == "done"
    history = await RedisHistory(redis, keys, thread).history()
    results = [m.content for m in history if m.role == "tool"]
    assert results == ["ok web-1", "ok web-2", "ok web-3"]


async def session_for_resume(redis: aioredis.Redis, keys: Keys, saved: JobRecord) -> JobSession:
    lease = await Leases(redis, keys).acquire(saved.thread)
    assert lease is not None and lease.fence > saved.fence
    history = RedisHistory(redis, keys, saved.thread)
    await history.history()
    return JobSession(redis, keys, saved, lease, history)

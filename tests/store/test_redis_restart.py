"""Redis restarted mid-job: what was acknowledged survives (appendfsync always), and
the run ends with a clear error instead of hanging or losing steps."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bot.agent import CallContext, FunctionTool, UserMessage, run
from bot.agent.testing import ScriptedModel, call, calls
from bot.emulator.redis_server import ManagedRedis
from bot.store.connection import StoreUnavailable, connect, durability
from bot.store.history import RedisHistory
from bot.store.jobs import JobLimits, Jobs, JobStatus
from bot.store.keys import Keys, Thread
from bot.store.lease import Leases
from bot.store.session import JobSession
from tests.agent.conftest import HostArgs, make_config

LIMITS = JobLimits(max_iterations=10, deadline_s=600, token_budget=100_000)


async def test_the_managed_server_reports_every_write_durability(
    fresh_server: ManagedRedis,
) -> None:
    client = connect(fresh_server.url)
    try:
        setting = await durability(client)
    finally:
        await client.aclose()
    assert setting is not None and setting.every_write
    assert "every acknowledged write" in setting.describe()


async def test_a_restart_mid_job_keeps_acknowledged_steps_and_abandons_the_run(
    fresh_server: ManagedRedis, thread: Thread
) -> None:
    keys = Keys("t:")
    client = connect(fresh_server.url)
    try:
        jobs = Jobs(client, keys)
        job = await jobs.create(thread, requester="U1", limits=LIMITS)
        lease = await Leases(client, keys).acquire(thread)
        assert lease is not None
        job = await jobs.save(job, JobStatus.RUNNING, fence=lease.fence)
        history = RedisHistory(client, keys, thread)
        await history.history()
        history.append(UserMessage(content="check web-1 then web-2"))
        session = JobSession(client, keys, job, lease, history)

        calls_seen: list[str] = []

        async def check(args: HostArgs, ctx: CallContext) -> str:
            calls_seen.append(args.host)
            if args.host == "web-2":
                fresh_server.kill()  # Redis crashes while the second step runs
            return f"ok {args.host}"

        tool = FunctionTool(name="check", description="check", args_model=HostArgs, fn=check)
        model = ScriptedModel(
            [calls(call("check", "c1", host="web-1")), calls(call("check", "c2", host="web-2"))]
        )
        config = replace(
            make_config(model, tools=[tool]),
            memory=history,
            on_checkpoint=session.checkpoint,
            job_id=job.id,
        )
        with pytest.raises(StoreUnavailable, match="redis unavailable"):
            await run(config)  # abandoned, to be resumed: not ended as failed
        assert calls_seen == ["web-1", "web-2"]

        fresh_server.start()  # same data directory, AOF replayed
        stored = await jobs.get(job.id)
        # Step 1 was acked, and so was the second response, saved before its tool ran:
        # a resumed run runs c2 without asking the model again.
        assert stored is not None and stored.progress.iterations == 2
        pending = stored.progress.pending
        assert pending is not None and [c.id for c in pending.remaining] == ["c2"]
        again = await RedisHistory(client, keys, thread).history()
        assert [m.role for m in again] == ["user", "assistant", "tool", "assistant"]
        assert again[2].content == "ok web-1"
    finally:
        await client.aclose()


async def test_redis_down_raises_a_typed_error(fresh_server: ManagedRedis, thread: Thread) -> None:
    keys = Keys("t:")
    client = connect(fresh_server.url)
    fresh_server.kill()
    try:
        jobs = Jobs(client, keys)
        with pytest.raises(StoreUnavailable, match="redis unavailable during job create"):
            await jobs.create(thread, requester="U1", limits=LIMITS)
    finally:
        await client.aclose()

"""The Redis store's share of a loop iteration, and the memory of paused jobs.

Against a local redis-server it starts itself (AOF, appendfsync always, as the tests and
the dev mode run it):

1. The hot path: the agent core runs K = 10 iterations of an instant in-process model
   with the store wired in (the save before the tools run; the save after them in one
   MULTI with the next iteration's inject check). Redis round trips are counted at the
   client connection; reported per iteration with wall and CPU time, next to the same
   run on in-memory state.
2. 10,000 jobs paused for approval (job record with its pending batch, plus the approval
   record): bytes of Redis memory per job.

    python benchmarks/store.py [--runs 20] [--paused 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.connection import Connection, ConnectionPool

from bot.agent import (
    AgentConfig,
    AssistantMessage,
    InMemoryHistory,
    RunState,
    StopReason,
    ToolCall,
    UserMessage,
    run,
)
from bot.agent.state import PendingApproval, PendingBatch
from bot.emulator.redis_server import ManagedRedis
from bot.store.approvals import ApprovalRecord, Approvals
from bot.store.history import RedisHistory
from bot.store.inject import InjectReader
from bot.store.jobs import JobLimits, Jobs, JobStatus
from bot.store.keys import Keys, Thread
from bot.store.lease import Leases
from bot.store.session import JobSession
from bot.store.trace import TraceRecorder

sys.path.insert(0, str(Path(__file__).resolve().parent))
from core_loop import TOOL, InstantModel  # noqa: E402  (a sibling benchmark module)

K = 10
LIMITS = JobLimits(max_iterations=50, deadline_s=3600, token_budget=1_000_000)


class CountingConnection(Connection):
    """Counts round trips: one per packed send (a pipeline or script is one)."""

    sent = 0

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        CountingConnection.sent += 1
        await super().send_packed_command(command, check_health)


def counting_client(url: str) -> aioredis.Redis:
    pool = ConnectionPool.from_url(
        url, decode_responses=True, socket_timeout=2.0, connection_class=CountingConnection
    )
    return aioredis.Redis(connection_pool=pool)


def instant_model() -> Any:
    return InstantModel()


async def one_job(client: aioredis.Redis, keys: Keys, n: int) -> tuple[int, int]:
    """One job of K tool iterations on the store; returns (round trips, iterations)."""
    thread = Thread("CBENCH", f"{1700000000 + n}.000100")
    jobs = Jobs(client, keys)
    record = await jobs.create(thread, requester="U1", limits=LIMITS)
    lease = await Leases(client, keys).acquire(thread)
    assert lease is not None
    record = await jobs.save(record, JobStatus.RUNNING, fence=lease.fence)
    history = RedisHistory(client, keys, thread)
    await history.history()
    history.append(UserMessage(content="check the fleet"))
    trace = TraceRecorder(record.id)
    session = JobSession(client, keys, record, lease, history, trace=trace)
    inject = InjectReader(client, keys, thread, consumer="bench", seen_ids=history.source_ids)
    config = AgentConfig(
        job_id=record.id,
        client=instant_model(),
        memory=history,
        system_prompt="You are an SRE assistant.",
        tools=[TOOL],
        inject=inject,
        on_event=trace,
        on_checkpoint=session.checkpoint,
        on_checkpoint_and_fetch=lambda state: session.checkpoint_and_fetch(state, inject),
    )
    before = CountingConnection.sent
    result = await run(config)
    trips = CountingConnection.sent - before
    assert result.stop_reason is StopReason.COMPLETED, result.error
    return trips, result.iterations


async def hot_path(url: str, runs: int) -> None:
    client = counting_client(url)
    keys = Keys("bench:")
    await client.flushall()
    await one_job(client, keys, 0)  # warm-up (script loading)
    trips: list[float] = []
    wall: list[float] = []
    cpu: list[float] = []
    for n in range(1, runs + 1):
        w0, c0 = time.perf_counter(), time.process_time()
        count, iterations = await one_job(client, keys, n)
        wall.append((time.perf_counter() - w0) * 1000 / iterations)
        cpu.append((time.process_time() - c0) * 1000 / iterations)
        trips.append(count / iterations)

    async def in_memory() -> None:
        memory = InMemoryHistory()
        memory.append(UserMessage(content="check the fleet"))
        config = AgentConfig(
            job_id="mem",
            client=instant_model(),
            memory=memory,
            system_prompt="You are an SRE assistant.",
            tools=[TOOL],
        )
        await run(config)

    mem_cpu: list[float] = []
    for _ in range(runs):
        c0 = time.process_time()
        await in_memory()
        mem_cpu.append((time.process_time() - c0) * 1000 / (K + 1))
    await client.aclose()
    print(f"hot path: the agent core on the Redis store, K={K} tool iterations + answer")
    print(f"{'what':<46} {'per iteration':>14}")
    print(f"{'Redis round trips (no injects)':<46} {statistics.median(trips):>14.2f}")
    print(f"{'wall ms, store + loop':<46} {statistics.median(wall):>14.3f}")
    print(f"{'CPU ms, store + loop':<46} {statistics.median(cpu):>14.3f}")
    print(f"{'CPU ms, same loop on in-memory state':<46} {statistics.median(mem_cpu):>14.3f}")


async def paused_jobs(url: str, count: int) -> None:
    client = aioredis.Redis.from_url(url, decode_responses=True)
    keys = Keys("paused:")
    await client.flushall()
    await client.config_set("appendfsync", "no")  # setup speed only; memory is the figure
    base = int((await client.info("memory"))["used_memory"])
    jobs = Jobs(client, keys)
    approvals = Approvals(client, keys)
    call = ToolCall(
        id="call_1",
        name="supervisor_restart",
        arguments=json.dumps({"name": "web"}),
    )
    message = AssistantMessage(
        content="Restarting web clears the stuck workers.", tool_calls=(call,)
    )
    approval = PendingApproval(
        call_id="call_1",
        tool="supervisor_restart",
        args_hash="a" * 64,
        arguments={"name": "web"},
    )
    progress = RunState(
        iterations=3,
        model_calls=3,
        tool_executions=2,
        loop_window=["b" * 64, "c" * 64],
        tools_used=["host_cpu", "host_tail_log"],
        pending=PendingBatch(message=message, remaining=[call], approval=approval),
    )
    for i in range(count):
        thread = Thread("CPAUSE", f"{1700000000 + i}.000100")
        record = await jobs.create(thread, requester="U0123ABC", limits=LIMITS)
        record = await jobs.save(record, JobStatus.RUNNING, fence=1)
        await jobs.save(record, JobStatus.AWAITING_APPROVAL, fence=1, progress=progress)
        await approvals.create(
            ApprovalRecord(
                job_id=record.id,
                call_id="call_1",
                tool="supervisor_restart",
                category="mutating",
                args_hash="a" * 64,
                arguments={"name": "web"},
                reason=message.content,
                dry_run_output=None,
                requester="U0123ABC",
                channel=thread.channel,
                thread_ts=thread.thread_ts,
                requested_at=1.0,
                expires_at=3601.0,
                card_ts="1700000000.000200",
                status="pending",
                decided_by=None,
                decided_at=None,
            )
        )
    used = int((await client.info("memory"))["used_memory"]) - base
    await client.aclose()
    print(f"\n{count} jobs paused for approval: {used / count:,.0f} bytes of Redis memory each")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--paused", type=int, default=10_000)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = ManagedRedis(Path(tmp)).start()
        try:
            asyncio.run(hot_path(server.url, opts.runs))
            asyncio.run(paused_jobs(server.url, opts.paused))
        finally:
            server.stop()


if __name__ == "__main__":
    main()

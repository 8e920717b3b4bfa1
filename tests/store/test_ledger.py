"""The mutating-call ledger on Redis, alone and under the agent core.

A write is recorded ``started`` before it runs and ``done`` after; a key found
``started`` again means a crash mid-write, so the core reports "outcome unknown" and
never runs the write a second time.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import replace

import pytest
import redis.asyncio as aioredis
from pydantic import BaseModel

from bot.agent import (
    AgentConfig,
    Approved,
    CallContext,
    ConfirmRequest,
    Decision,
    FunctionTool,
    InMemoryHistory,
    StopReason,
    ToolMessage,
    UserMessage,
    run,
)
from bot.agent.calls import args_hash
from bot.agent.ports import LedgerEntry
from bot.agent.testing import FakeClock, ScriptedModel, call, calls, text
from bot.agent.tools import canonical_json
from bot.emulator.redis_server import ManagedRedis
from bot.store.connection import StoreUnavailable, connect
from bot.store.keys import Keys, Thread
from bot.store.ledger import LEDGER_TTL_S, MAX_OUTPUT_BYTES, RedisLedger, split_key

APPROVER = "U0123ABC"
ARGS = {"host": "web-03", "service": "nginx"}
HASH = "d" * 64
T0 = 1_700_000_000.0


@pytest.fixture
def ledger(redis: aioredis.Redis, keys: Keys) -> RedisLedger:
    ticks = itertools.count()
    return RedisLedger(redis, keys, now=lambda: T0 + next(ticks))


def key_of(thread: Thread, call_id: str = "call_1", job: int = 1) -> str:
    return f"{thread.job_id(job)}:{call_id}"


def test_a_key_splits_after_the_job_id() -> None:
    assert split_key("C123:1700000000.000100:j3:call_1") == ("C123:1700000000.000100:j3", "call_1")
    # A provider's call id may hold a colon; the job id never holds more than two.
    assert split_key("C123:1700000000.000100:j3:ns:42") == ("C123:1700000000.000100:j3", "ns:42")
    with pytest.raises(ValueError):
        split_key("job-1:call_1")


async def test_begin_records_started(
    ledger: RedisLedger, redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    key = key_of(thread)

    assert await ledger.begin(key, "restart_service", HASH) is None

    [(stored_key, entry)] = (await ledger.entries(thread.job_id(1))).items()
    assert stored_key == key
    assert (entry.state, entry.tool, entry.args_hash) == ("started", "restart_service", HASH)
    assert entry.started_at == T0 and entry.output is None
    ttl = await redis.ttl(keys.ledger(thread.job_id(1)))
    assert LEDGER_TTL_S - 5 <= ttl <= LEDGER_TTL_S


async def test_a_second_begin_finds_the_write_started(ledger: RedisLedger, thread: Thread) -> None:
    """The process died between ``begin`` and ``finish``: the outcome is unknown."""
    key = key_of(thread)
    await ledger.begin(key, "restart_service", HASH)

    again = await ledger.begin(key, "restart_service", HASH)

    assert again == LedgerEntry(state="started")


async def test_after_finish_begin_returns_the_recorded_output(
    ledger: RedisLedger, thread: Thread
) -> None:
    key = key_of(thread)
    await ledger.begin(key, "restart_service", HASH)
    await ledger.finish(key, "restarted nginx on web-03")

    again = await ledger.begin(key, "restart_service", HASH)

    assert again == LedgerEntry(state="done", output="restarted nginx on web-03")
    entry = (await ledger.entries(thread.job_id(1)))[key]
    assert (entry.tool, entry.args_hash, entry.started_at) == ("restart_service", HASH, T0)
    assert entry.finished_at is not None and entry.finished_at > T0


async def test_keys_of_one_job_are_kept_apart(ledger: RedisLedger, thread: Thread) -> None:
    first, second, other_job = key_of(thread), key_of(thread, "call_2"), key_of(thread, job=2)
    await ledger.begin(first, "restart_service", HASH)
    await ledger.finish(first, "one")

    assert await ledger.begin(second, "restart_service", HASH) is None
    assert await ledger.begin(other_job, "restart_service", HASH) is None
    assert set(await ledger.entries(thread.job_id(1))) == {first, second}
    assert set(await ledger.entries(thread.job_id(2))) == {other_job}


async def test_a_reused_call_id_for_another_call_is_not_given_its_result(
    ledger: RedisLedger, thread: Thread
) -> None:
    key = key_of(thread)
    await ledger.begin(key, "restart_service", HASH)
    await ledger.finish(key, "restarted nginx on web-03")

    other = await ledger.begin(key, "restart_service", "e" * 64)

    assert other == LedgerEntry(state="started")  # reported as unknown, never run blindly


async def test_a_long_output_is_kept_bounded_with_a_note(
    ledger: RedisLedger, thread: Thread
) -> None:
    key = key_of(thread)
    await ledger.begin(key, "restart_service", HASH)
    big = "é" * MAX_OUTPUT_BYTES  # two bytes each

    await ledger.finish(key, big)

    entry = (await ledger.entries(thread.job_id(1)))[key]
    assert entry.output is not None
    assert entry.output.startswith("é" * (MAX_OUTPUT_BYTES // 2))
    assert len(entry.output.encode()) < MAX_OUTPUT_BYTES + 200
    assert f"{2 * MAX_OUTPUT_BYTES} bytes" in entry.output
    assert entry.output_bytes == 2 * MAX_OUTPUT_BYTES


async def test_redis_down_is_a_store_unavailable_error(
    fresh_server: ManagedRedis, keys: Keys, thread: Thread
) -> None:
    client = connect(fresh_server.url)
    try:
        ledger = RedisLedger(client, keys)
        await ledger.begin(key_of(thread), "restart_service", HASH)
        fresh_server.kill()

        with pytest.raises(StoreUnavailable):
            await ledger.begin(key_of(thread, "call_2"), "restart_service", HASH)
        with pytest.raises(StoreUnavailable):
            await ledger.finish(key_of(thread), "restarted")
    finally:
        await client.aclose()


# -- under the agent core ----------------------------------------------------------


class ServiceArgs(BaseModel):
    host: str
    service: str


class Restarts:
    """A mutating tool that counts how often it really ran."""

    def __init__(self) -> None:
        self.runs: list[CallContext] = []

    async def __call__(self, args: ServiceArgs, ctx: CallContext) -> str:
        self.runs.append(ctx)
        return f"restarted {args.service} on {args.host}"

    def tool(self) -> FunctionTool:
        return FunctionTool(
            name="restart_service",
            description="Restart a service",
            args_model=ServiceArgs,
            fn=self,
            category="mutating",
        )


async def approve(request: ConfirmRequest) -> Decision:
    return Approved(confirmed_by=APPROVER)


def config(
    model: ScriptedModel,
    restarts: Restarts,
    ledger: RedisLedger,
    thread: Thread,
    *,
    tool: FunctionTool | None = None,
) -> AgentConfig:
    memory = InMemoryHistory()
    memory.append(UserMessage(content="restart nginx on web-03"))
    return AgentConfig(
        job_id=thread.job_id(1),
        client=model,
        memory=memory,
        system_prompt="You are an SRE assistant.",
        tools=[tool or restarts.tool()],
        confirm=approve,
        ledger=ledger,
        clock=FakeClock(),
    )


def tool_results(model: ScriptedModel) -> list[ToolMessage]:
    return [m for m in model.requests[-1].messages if isinstance(m, ToolMessage)]


async def test_an_approved_write_runs_once_and_is_recorded_done(
    ledger: RedisLedger, thread: Thread
) -> None:
    restarts = Restarts()
    model = ScriptedModel([calls(call("restart_service", "call_1", **ARGS)), text("done")])

    result = await run(config(model, restarts, ledger, thread))

    assert result.stop_reason is StopReason.COMPLETED, result.error
    [ctx] = restarts.runs
    assert (ctx.idempotency_key, ctx.confirmed_by) == (key_of(thread), APPROVER)
    entry = (await ledger.entries(thread.job_id(1)))[key_of(thread)]
    assert entry.state == "done" and entry.output == "restarted nginx on web-03"
    assert entry.args_hash == args_hash(canonical_json(ARGS))
    model.assert_done()


async def test_a_rerun_after_a_crash_mid_write_reports_an_unknown_outcome(
    ledger: RedisLedger, thread: Thread
) -> None:
    """The first run dies during the write; a fresh run of the same job must not redo it."""
    restarts, entered, never = Restarts(), asyncio.Event(), asyncio.Event()

    async def hangs(args: ServiceArgs, ctx: CallContext) -> str:
        entered.set()
        await never.wait()
        return "unreachable"

    hanging = replace(restarts.tool(), fn=hangs)
    first = ScriptedModel([calls(call("restart_service", "call_1", **ARGS))])
    crashed = asyncio.create_task(run(config(first, restarts, ledger, thread, tool=hanging)))
    await entered.wait()
    crashed.cancel()  # the process dies with the write in flight
    with pytest.raises(asyncio.CancelledError):
        await crashed
    assert (await ledger.entries(thread.job_id(1)))[key_of(thread)].state == "started"

    model = ScriptedModel([calls(call("restart_service", "call_1", **ARGS)), text("will check")])
    result = await run(config(model, restarts, ledger, thread))

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert restarts.runs == []
    [message] = tool_results(model)
    assert message.is_error and "outcome unknown" in message.content
    assert (await ledger.entries(thread.job_id(1)))[key_of(thread)].state == "started"
    model.assert_done()

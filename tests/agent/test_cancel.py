"""Stop: cancelling a running job through its ``CancelToken``.

An in-flight model call is cancelled at once; a running read-only tool is cancelled; a
running mutating tool is let finish and its result recorded. Each way the run ends
``cancelled`` with the token's reason as its error, and the history stays well-formed:
every tool call of the last assistant message has exactly one result.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from typing import Any

from pydantic import BaseModel

from bot.agent import (
    AnyMessage,
    Approved,
    AssistantMessage,
    CallContext,
    CancelToken,
    ConfirmRequest,
    Decision,
    FunctionTool,
    InMemoryHistory,
    ModelRequest,
    ModelResponse,
    Pending,
    RunResult,
    StopReason,
    ToolMessage,
    UserMessage,
    run,
)
from bot.agent.testing import FakeClock, ScriptedModel, call, calls

from .conftest import make_config

REASON = "stopped by <@U9>"
# Only a guard against a hang turning into a stuck test run; nothing is timed with it.
DEADLOCK_GUARD_S = 10.0


class HostArgs(BaseModel):
    host: str


class Blocking:
    """A tool body that signals when it runs and waits until released."""

    def __init__(self, output: str) -> None:
        self.output = output
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.cancelled = False
        self.finished = False

    async def __call__(self, args: HostArgs, ctx: CallContext) -> str:
        self.entered.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        self.finished = True
        return self.output


class Counting:
    """A tool body that only counts its runs."""

    def __init__(self) -> None:
        self.runs = 0

    async def __call__(self, args: HostArgs, ctx: CallContext) -> str:
        self.runs += 1
        return f"ok {args.host}"


def tool(name: str, fn: Any, **kw: Any) -> FunctionTool:
    return FunctionTool(name=name, description=name, args_model=HostArgs, fn=fn, **kw)


async def approve(request: ConfirmRequest) -> Decision:
    return Approved(confirmed_by="U0123ABC")


def start(coro: Coroutine[Any, Any, RunResult]) -> asyncio.Task[RunResult]:
    return asyncio.create_task(coro)


async def finish(task: asyncio.Task[RunResult]) -> RunResult:
    return await asyncio.wait_for(task, DEADLOCK_GUARD_S)


async def entered(event: asyncio.Event) -> None:
    await asyncio.wait_for(event.wait(), DEADLOCK_GUARD_S)


def assert_every_call_answered(history: Sequence[AnyMessage]) -> None:
    i = 0
    while i < len(history):
        message = history[i]
        i += 1
        if isinstance(message, AssistantMessage) and message.tool_calls:
            answers = history[i : i + len(message.tool_calls)]
            assert all(isinstance(m, ToolMessage) for m in answers), history
            assert [m.tool_call_id for m in answers if isinstance(m, ToolMessage)] == [
                c.id for c in message.tool_calls
            ]
            i += len(message.tool_calls)


def new_memory() -> InMemoryHistory:
    memory = InMemoryHistory()
    memory.append(UserMessage(content="web-03 is at 95% CPU"))
    return memory


async def test_stop_cancels_an_in_flight_model_call_at_once(clock: FakeClock) -> None:
    in_flight = asyncio.Event()
    never = asyncio.Event()
    seen: list[str] = []

    async def hanging(request: ModelRequest) -> ModelResponse:
        in_flight.set()
        try:
            await never.wait()
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        raise AssertionError("the model call was never meant to return")

    token = CancelToken()
    model = ScriptedModel([hanging])
    config = make_config(model, cancel=token, clock=clock)

    task = start(run(config))
    await entered(in_flight)
    token.cancel(REASON)
    result = await finish(task)

    assert result.stop_reason is StopReason.CANCELLED
    assert result.error == REASON
    assert seen == ["cancelled"]
    assert result.iterations == 0


async def test_stop_before_the_next_model_call_makes_no_call(clock: FakeClock) -> None:
    token = CancelToken()

    def answer_then_stop(request: ModelRequest) -> ModelResponse:
        token.cancel(REASON)
        return calls(call("check", "c1", host="web-03"))

    model = ScriptedModel([answer_then_stop])
    checks = Counting()
    config = make_config(model, tools=[tool("check", checks)], cancel=token, clock=clock)

    result = await run(config)

    assert result.stop_reason is StopReason.CANCELLED
    assert result.error == REASON
    assert len(model.requests) == 1


async def test_stop_cancels_a_running_read_only_tool(clock: FakeClock) -> None:
    token = CancelToken()
    slow = Blocking("ok web-03")
    later_read, later_write = Counting(), Counting()
    model = ScriptedModel(
        [
            calls(
                call("tail_log", "c1", host="web-03"),
                call("check", "c2", host="web-03"),
                call("restart_service", "c3", host="web-03"),
            )
        ]
    )
    tools = [
        tool("tail_log", slow),
        tool("check", later_read),
        tool("restart_service", later_write, category="mutating"),
    ]
    memory = new_memory()
    config = make_config(
        model, tools=tools, memory=memory, cancel=token, confirm=approve, clock=clock
    )

    task = start(run(config))
    await entered(slow.entered)
    token.cancel(REASON)
    result = await finish(task)

    assert result.stop_reason is StopReason.CANCELLED
    assert result.error == REASON
    assert slow.cancelled and not slow.finished
    assert later_read.runs == 0 and later_write.runs == 0
    assert len(model.requests) == 1
    assert_every_call_answered(memory.messages)
    results = [m for m in memory.messages if isinstance(m, ToolMessage)]
    assert [m.tool_call_id for m in results] == ["c1", "c2", "c3"]
    assert all(m.is_error and m.content.startswith("Error: ") for m in results)


async def test_stop_cancels_parallel_read_only_tools(clock: FakeClock) -> None:
    token = CancelToken()
    first, second = Blocking("ok web-01"), Blocking("ok web-02")
    model = ScriptedModel(
        [calls(call("probe_a", "c1", host="web-01"), call("probe_b", "c2", host="web-02"))]
    )
    tools = [tool("probe_a", first, parallel=True), tool("probe_b", second, parallel=True)]
    memory = new_memory()
    config = make_config(model, tools=tools, memory=memory, cancel=token, clock=clock)

    task = start(run(config))
    await entered(first.entered)
    await entered(second.entered)
    token.cancel(REASON)
    result = await finish(task)

    assert result.stop_reason is StopReason.CANCELLED
    assert first.cancelled and second.cancelled
    assert_every_call_answered(memory.messages)
    assert [m.tool_call_id for m in memory.messages if isinstance(m, ToolMessage)] == [
        "c1",
        "c2",
    ]


async def test_a_running_mutating_tool_finishes_and_its_result_is_recorded(
    clock: FakeClock,
) -> None:
    token = CancelToken()
    write = Blocking("restarted nginx on web-03")
    after = Counting()
    model = ScriptedModel(
        [
            calls(
                call("restart_service", "c1", host="web-03"),
                call("check", "c2", host="web-03"),
            )
        ]
    )
    tools = [tool("restart_service", write, category="mutating"), tool("check", after)]
    memory = new_memory()
    config = make_config(
        model, tools=tools, memory=memory, cancel=token, confirm=approve, clock=clock
    )

    task = start(run(config))
    await entered(write.entered)
    token.cancel(REASON)
    # Had Stop cancelled the write, it would see CancelledError before this release.
    write.release.set()
    result = await finish(task)

    assert result.stop_reason is StopReason.CANCELLED
    assert result.error == REASON
    assert write.finished and not write.cancelled
    assert after.runs == 0
    assert len(model.requests) == 1
    assert_every_call_answered(memory.messages)
    recorded, skipped = (m for m in memory.messages if isinstance(m, ToolMessage))
    assert recorded.tool_call_id == "c1"
    assert recorded.content == "restarted nginx on web-03"
    assert not recorded.is_error
    assert recorded.confirmed_by == "U0123ABC"
    assert skipped.tool_call_id == "c2" and skipped.is_error
    assert result.tool_executions == 1


async def test_a_parallel_call_still_queued_never_starts_after_stop(clock: FakeClock) -> None:
    token = CancelToken()
    probes = {name: Blocking(f"ok {name}") for name in ("a", "b", "c")}
    model = ScriptedModel([calls(*(call(f"probe_{n}", f"c_{n}", host=f"web-{n}") for n in probes))])
    tools = [tool(f"probe_{n}", body, parallel=True) for n, body in probes.items()]
    memory = new_memory()
    config = make_config(
        model, tools=tools, memory=memory, cancel=token, clock=clock, max_parallel=2
    )

    task = start(run(config))
    await entered(probes["a"].entered)
    await entered(probes["b"].entered)
    token.cancel(REASON)
    result = await finish(task)

    assert result.stop_reason is StopReason.CANCELLED
    assert probes["a"].cancelled and probes["b"].cancelled
    assert not probes["c"].entered.is_set()
    assert_every_call_answered(memory.messages)
    assert clock.pending_timers == 0


async def test_resuming_a_stopped_job_runs_no_write(clock: FakeClock) -> None:
    """Stop pressed while the job waited for approval: a late approval changes nothing."""
    write = Counting()
    memory = new_memory()
    model = ScriptedModel([calls(call("restart_service", "c1", host="web-03"))])

    async def pending(request: ConfirmRequest) -> Decision:
        return Pending()

    tools = [tool("restart_service", write, category="mutating")]
    paused = await run(make_config(model, tools=tools, memory=memory, confirm=pending, clock=clock))
    assert paused.stop_reason is StopReason.AWAITING_APPROVAL, paused.error
    token = CancelToken()
    token.cancel(REASON)

    result = await run(
        make_config(model, tools=tools, memory=memory, cancel=token, clock=clock),
        paused.state,
        Approved(confirmed_by="U0123ABC"),
    )

    assert result.stop_reason is StopReason.CANCELLED
    assert result.error == REASON
    assert write.runs == 0
    assert_every_call_answered(memory.messages)
    assert len(model.requests) == 1

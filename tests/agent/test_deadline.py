"""The deadline is terminal and counts active time only.

``Limits(deadline_s=...)`` is measured on the injected clock. Reaching it cancels an
in-flight model call or read-only tool and ends the job ``limit_deadline``; a write is
let finish. A run resumed from a saved ``RunState`` gets only what is left of the
deadline. Time is moved with ``FakeClock.advance``; nothing here sleeps.
"""

from __future__ import annotations

import asyncio

from bot.agent import (
    Approved,
    CallContext,
    ConfirmRequest,
    Decision,
    FunctionTool,
    InMemoryHistory,
    Limits,
    ModelRequest,
    ModelResponse,
    RunState,
    StopReason,
    ToolMessage,
    run,
)
from bot.agent.testing import FakeClock, ScriptedModel, ScriptFn, call, calls, text

from .conftest import HostArgs, Recorder, echo_tool, make_config


def blocked_model_step(started: asyncio.Event, release: asyncio.Event) -> ScriptFn:
    """A script step that signals it started and then waits until released."""

    async def step(request: ModelRequest) -> ModelResponse:
        started.set()
        await release.wait()
        return text("done")

    return step


async def test_deadline_cancels_an_in_flight_model_call(
    clock: FakeClock, recorder: Recorder
) -> None:
    started, release = asyncio.Event(), asyncio.Event()
    model = ScriptedModel([blocked_model_step(started, release)])
    config = make_config(model, limits=Limits(deadline_s=60), clock=clock, on_event=recorder)

    task = asyncio.create_task(run(config))
    await started.wait()
    clock.advance(59.5)
    assert not task.done()
    assert clock.pending_timers == 1  # the deadline timer has not fired yet
    clock.advance(0.5)
    result = await task

    assert result.stop_reason is StopReason.LIMIT_DEADLINE, result.error
    assert not release.is_set()  # the call was cut, not waited for
    assert len(model.requests) == 1
    assert result.iterations == 0
    assert [e.reason for e in recorder.of("limit_reached")] == [StopReason.LIMIT_DEADLINE]
    assert recorder.kinds()[-1] == "run_end"
    assert result.state.active_time_s == 60


async def test_deadline_cancels_an_in_flight_read_only_tool(
    clock: FakeClock, recorder: Recorder
) -> None:
    started, release = asyncio.Event(), asyncio.Event()
    cancelled: list[bool] = []

    async def slow(args: HostArgs, ctx: CallContext) -> str:
        started.set()
        try:
            await release.wait()
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return "finished"

    tool = FunctionTool(name="slow_read", description="d", args_model=HostArgs, fn=slow)
    model = ScriptedModel([calls(call("slow_read", "c1", host="web-01"))])
    memory = InMemoryHistory()
    config = make_config(
        model,
        tools=[tool],
        memory=memory,
        limits=Limits(deadline_s=10),
        clock=clock,
        on_event=recorder,
    )

    task = asyncio.create_task(run(config))
    await started.wait()
    clock.advance(10)
    result = await task

    assert result.stop_reason is StopReason.LIMIT_DEADLINE, result.error
    assert cancelled == [True]
    assert len(model.requests) == 1  # no model call after the deadline
    results = [m for m in memory.messages if isinstance(m, ToolMessage)]
    assert len(results) == 1 and results[0].tool_call_id == "c1"
    assert results[0].is_error and results[0].content.startswith("Error: ")
    assert "finished" not in results[0].content
    assert [e.reason for e in recorder.of("limit_reached")] == [StopReason.LIMIT_DEADLINE]


async def test_deadline_lets_a_running_write_finish(clock: FakeClock) -> None:
    started, release = asyncio.Event(), asyncio.Event()

    async def restart(args: HostArgs, ctx: CallContext) -> str:
        started.set()
        await release.wait()
        return f"restarted {args.host}"

    async def approve(request: ConfirmRequest) -> Decision:
        return Approved(confirmed_by="U0123ABC")

    tool = FunctionTool(
        name="restart", description="d", args_model=HostArgs, fn=restart, category="mutating"
    )
    model = ScriptedModel([calls(call("restart", "c1", host="web-01"))])
    memory = InMemoryHistory()
    config = make_config(
        model,
        tools=[tool],
        memory=memory,
        confirm=approve,
        limits=Limits(deadline_s=10),
        clock=clock,
    )

    task = asyncio.create_task(run(config))
    await started.wait()
    clock.advance(15)  # past the deadline while the write runs
    release.set()
    result = await task

    assert result.stop_reason is StopReason.LIMIT_DEADLINE, result.error
    results = [m for m in memory.messages if isinstance(m, ToolMessage)]
    assert [m.content for m in results] == ["restarted web-01"]
    assert len(model.requests) == 1


async def test_deadline_checked_before_the_next_model_call(
    clock: FakeClock, recorder: Recorder
) -> None:
    async def spend_time(state: RunState) -> None:
        clock.advance(30)  # the batch of tools took 30 s

    model = ScriptedModel([calls(call("check", "c1", host="web-01"))])
    config = make_config(
        model,
        tools=[echo_tool()],
        limits=Limits(deadline_s=30),
        clock=clock,
        on_checkpoint=spend_time,
        on_event=recorder,
    )

    result = await run(config)

    assert result.stop_reason is StopReason.LIMIT_DEADLINE, result.error
    assert len(model.requests) == 1
    assert result.tool_executions == 1
    assert [e.reason for e in recorder.of("limit_reached")] == [StopReason.LIMIT_DEADLINE]


async def test_resumed_run_gets_only_the_remaining_time(clock: FakeClock) -> None:
    started, release = asyncio.Event(), asyncio.Event()
    model = ScriptedModel([blocked_model_step(started, release)])
    saved = RunState(active_time_s=50.0, iterations=1)
    state = RunState.model_validate_json(saved.model_dump_json())
    config = make_config(model, limits=Limits(deadline_s=60), clock=clock)

    task = asyncio.create_task(run(config, state))
    await started.wait()
    clock.advance(9.5)
    assert not task.done()
    assert clock.pending_timers == 1
    clock.advance(0.5)
    result = await task

    assert result.stop_reason is StopReason.LIMIT_DEADLINE, result.error
    assert result.state.active_time_s == 60


async def test_resumed_run_with_no_time_left_makes_no_call(
    clock: FakeClock, recorder: Recorder
) -> None:
    model = ScriptedModel([])
    config = make_config(model, limits=Limits(deadline_s=60), clock=clock, on_event=recorder)

    result = await run(config, RunState(active_time_s=60.0))

    assert result.stop_reason is StopReason.LIMIT_DEADLINE
    assert model.requests == []
    assert [e.reason for e in recorder.of("limit_reached")] == [StopReason.LIMIT_DEADLINE]


async def test_time_between_runs_does_not_count(clock: FakeClock) -> None:
    first = await run(
        make_config(
            ScriptedModel([calls(call("check", "c1", host="web-01"))]),
            tools=[echo_tool()],
            limits=Limits(deadline_s=60, max_iterations=1),
            clock=clock,
        )
    )
    assert first.stop_reason is StopReason.LIMIT_ITERATIONS
    assert first.state.active_time_s == 0

    clock.advance(3600)  # an hour passes while nobody runs the job
    model = ScriptedModel([text("all good")])
    second = await run(
        make_config(model, limits=Limits(deadline_s=60, max_iterations=5), clock=clock),
        first.state,
    )

    assert second.stop_reason is StopReason.COMPLETED, second.error
    assert second.output == "all good"

"""Typed events while a run works, and the result object it always returns.

Events: model request start/end, stream deltas, tool start/end (duration, ``ran``),
limit reached and run end; a sink that raises never breaks the run. The result carries
output, stop reason, error, counters, summed usage and the tools used on every path,
failures included.
"""

from __future__ import annotations

from collections.abc import Callable

from bot.agent import (
    CallContext,
    FunctionTool,
    Limits,
    ModelRequest,
    ModelResponse,
    RunResult,
    StopReason,
    Usage,
    run,
)
from bot.agent.events import (
    Event,
    LimitReached,
    ModelRequestEnd,
    ModelRequestStart,
    RunEnd,
    StreamDelta,
    ToolEnd,
    ToolProgress,
    ToolStart,
)
from bot.agent.testing import FakeClock, ScriptedModel, call, calls, text
from bot.errors import ModelRequestError

from .conftest import HostArgs, NoArgs, Recorder, echo_tool, make_config

U1 = Usage(prompt_tokens=100, completion_tokens=20, cached_tokens=40)
U2 = Usage(prompt_tokens=150, completion_tokens=30, cached_tokens=90)


def slow_tool(clock: FakeClock, seconds: float) -> FunctionTool:
    """A tool that takes ``seconds`` of fake time."""

    async def fn(args: HostArgs, ctx: CallContext) -> str:
        clock.advance(seconds)
        return f"load 0.5 on {args.host}"

    return FunctionTool(name="load", description="Load average", args_model=HostArgs, fn=fn)


def uptime_tool() -> FunctionTool:
    async def fn(args: NoArgs, ctx: CallContext) -> str:
        return "up 3 days"

    return FunctionTool(name="uptime", description="Uptime", args_model=NoArgs, fn=fn)


def after(
    clock: FakeClock, seconds: float, reply: ModelResponse
) -> Callable[[ModelRequest], ModelResponse]:
    """A scripted step that takes ``seconds`` of fake time, then replies."""

    def step(request: ModelRequest) -> ModelResponse:
        clock.advance(seconds)
        return reply

    return step


# -- events -------------------------------------------------------------------


async def test_events_of_a_tool_step_then_an_answer(clock: FakeClock, recorder: Recorder) -> None:
    model = ScriptedModel(
        [
            after(clock, 1.5, calls(call("load", "c1", host="web-03"), usage=U1)),
            after(clock, 0.5, text("load is fine", usage=U2)),
        ]
    )
    config = make_config(model, tools=[slow_tool(clock, 2.0)], clock=clock, on_event=recorder)
    result = await run(config)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert recorder.kinds() == [
        "model_request_start",
        "model_request_end",
        "tool_start",
        "tool_end",
        "model_request_start",
        "model_request_end",
        "run_end",
    ]
    starts = recorder.of("model_request_start")
    assert starts == [
        ModelRequestStart(iteration=1, model="scripted", attempt=1),
        ModelRequestStart(iteration=2, model="scripted", attempt=1),
    ]
    ends = recorder.of("model_request_end")
    assert ends == [
        ModelRequestEnd(
            iteration=1,
            model="scripted",
            duration_s=1.5,
            usage=U1,
            tool_calls=1,
            finish_reason="tool_calls",
        ),
        ModelRequestEnd(
            iteration=2,
            model="scripted",
            duration_s=0.5,
            usage=U2,
            tool_calls=0,
            finish_reason="stop",
        ),
    ]
    assert recorder.of("tool_start") == [
        ToolStart(call_id="c1", tool="load", arguments={"host": "web-03"})
    ]
    assert recorder.of("tool_end") == [
        ToolEnd(
            call_id="c1",
            tool="load",
            ran=True,
            is_error=False,
            duration_s=2.0,
            output_chars=len("load 0.5 on web-03"),
            summary="load 0.5 on web-03",
        )
    ]
    assert recorder.events[-1] == RunEnd(result)


async def test_a_tools_progress_is_reported_in_one_scrubbed_bounded_line(
    recorder: Recorder,
) -> None:
    """What a tool says of its progress (an MCP server's notifications) reaches the sinks
    between its start and its end: one line, a secret in it redacted, cut to a summary."""

    async def fn(args: NoArgs, ctx: CallContext) -> str:
        ctx.progress("step 1/3")
        ctx.progress("copying with password=hunter2\nsecond line")
        ctx.progress("   ")  # nothing to show
        ctx.progress("x" * 50_000)
        return "copied"

    tool = FunctionTool(name="copy", description="Copy", args_model=NoArgs, fn=fn)
    model = ScriptedModel([calls(call("copy", "c1")), text("done")])
    await run(make_config(model, tools=[tool], on_event=recorder))

    kinds = recorder.kinds()
    assert kinds.index("tool_start") < kinds.index("tool_progress")
    assert max(i for i, k in enumerate(kinds) if k == "tool_progress") < kinds.index("tool_end")
    progress: list[ToolProgress] = recorder.of("tool_progress")
    assert [p.message for p in progress[:2]] == [
        "step 1/3",
        "copying with password=[redacted] …",
    ]
    assert len(progress) == 3 and progress[2].message == "x" * 159 + "…"
    assert {(p.call_id, p.tool) for p in progress} == {("c1", "copy")}


async def test_refused_calls_end_with_ran_false(recorder: Recorder) -> None:
    model = ScriptedModel(
        [calls(call("nope", "c1", host="x"), call("check", "c2", port=1)), text("ok")]
    )
    await run(make_config(model, tools=[echo_tool()], on_event=recorder))

    ends: list[ToolEnd] = recorder.of("tool_end")
    assert [(e.call_id, e.ran, e.is_error, e.duration_s) for e in ends] == [
        ("c1", False, True, 0.0),
        ("c2", False, True, 0.0),
    ]
    assert recorder.of("tool_start") == []  # nothing started


async def test_stream_deltas_carry_the_answer_text(recorder: Recorder) -> None:
    answer = "web-03 is at 95% CPU because of a runaway backup job."
    model = ScriptedModel([text(answer)], chunk=8)
    result = await run(make_config(model, stream=True, on_event=recorder))

    assert result.output == answer
    assert model.requests[0].stream is True
    deltas: list[StreamDelta] = recorder.of("stream_delta")
    assert len(deltas) == 7
    assert "".join(d.text for d in deltas) == answer
    kinds = recorder.kinds()
    first, last = kinds.index("stream_delta"), len(kinds) - 1 - kinds[::-1].index("stream_delta")
    assert kinds.index("model_request_start") < first
    assert last < kinds.index("model_request_end")


async def test_no_stream_deltas_unless_asked(recorder: Recorder) -> None:
    model = ScriptedModel([text("fine")])
    await run(make_config(model, on_event=recorder))

    assert model.requests[0].stream is False
    assert recorder.of("stream_delta") == []


async def test_limit_reached_event_and_result(recorder: Recorder) -> None:
    model = ScriptedModel([calls(call("check", "c1", host="web-03"), content="Checking.")])
    result = await run(
        make_config(model, tools=[echo_tool()], limits=Limits(max_iterations=1), on_event=recorder)
    )

    assert result.stop_reason is StopReason.LIMIT_ITERATIONS
    assert recorder.of("limit_reached") == [
        LimitReached(reason=StopReason.LIMIT_ITERATIONS, detail="iteration limit reached (1/1)")
    ]
    assert result.error == "iteration limit reached (1/1)"
    assert result.output == "Checking."
    assert result.tool_executions == 1
    assert recorder.kinds()[-2:] == ["limit_reached", "run_end"]


async def test_a_raising_event_sink_does_not_break_the_run() -> None:
    seen: list[Event] = []

    def sink(event: Event) -> None:
        seen.append(event)
        raise RuntimeError("progress message failed")

    model = ScriptedModel([calls(call("check", "c1", host="web-03")), text("fine")])
    result = await run(make_config(model, tools=[echo_tool()], stream=True, on_event=sink))

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert result.output == "fine"
    assert result.tool_executions == 1
    assert [e.kind for e in seen] == [
        "model_request_start",
        "model_request_end",
        "tool_start",
        "tool_end",
        "model_request_start",
        "stream_delta",
        "model_request_end",
        "run_end",
    ]


async def test_every_model_request_start_has_an_end_even_on_failure(recorder: Recorder) -> None:
    # A client that raises something other than a ModelError (an adapter bug): the run
    # fails, and the request it started is still reported as ended (spans, progress).
    model = ScriptedModel([RuntimeError("adapter bug")])
    result = await run(make_config(model, on_event=recorder))

    assert result.stop_reason is StopReason.FAILED
    assert result.error == "RuntimeError: adapter bug"
    assert len(recorder.of("model_request_start")) == 1
    ends: list[ModelRequestEnd] = recorder.of("model_request_end")
    assert len(ends) == 1
    assert ends[0].usage is None and ends[0].error


# -- the result on every path -------------------------------------------------


def assert_result(
    result: RunResult,
    *,
    reason: StopReason,
    output: str | None,
    iterations: int,
    model_calls: int,
    tool_executions: int,
    usage: Usage,
    tools_used: list[str],
) -> None:
    assert result.stop_reason is reason, result.error
    assert result.output == output
    assert result.iterations == iterations
    assert result.model_calls == model_calls
    assert result.tool_executions == tool_executions
    assert result.usage == usage
    assert result.tools_used == tools_used
    # The state handed back agrees with the result.
    assert result.state.iterations == iterations
    assert result.state.usage == usage


async def test_completed_result_sums_usage_and_lists_tools_once() -> None:
    model = ScriptedModel(
        [
            calls(call("check", "c1", host="web-01"), call("uptime", "c2"), usage=U1),
            calls(call("check", "c3", host="web-02"), call("nope", "c4"), usage=U2),
            text("all fine", usage=Usage(prompt_tokens=300, completion_tokens=5)),
        ]
    )
    result = await run(make_config(model, tools=[echo_tool(), uptime_tool()]))

    assert_result(
        result,
        reason=StopReason.COMPLETED,
        output="all fine",
        iterations=3,
        model_calls=3,
        tool_executions=3,  # the unknown tool never ran
        usage=Usage(prompt_tokens=550, completion_tokens=55, cached_tokens=130),
        tools_used=["check", "uptime"],
    )
    assert result.error is None
    assert result.usage.paid == 550 - 130 + 55


async def test_model_request_error_fails_with_the_error_text() -> None:
    model = ScriptedModel(
        [
            calls(call("check", "c1", host="web-03"), content="Checking web-03.", usage=U1),
            ModelRequestError("401 invalid api key", status=401),
        ]
    )
    result = await run(make_config(model, tools=[echo_tool()]))

    assert_result(
        result,
        reason=StopReason.FAILED,
        output="Checking web-03.",
        iterations=1,
        model_calls=2,
        tool_executions=1,
        usage=U1,
        tools_used=["check"],
    )
    assert result.error == "ModelRequestError: 401 invalid api key"
    assert not result.ok


async def test_model_with_no_steps_fails() -> None:
    model = ScriptedModel([])
    result = await run(make_config(model))

    assert_result(
        result,
        reason=StopReason.FAILED,
        output=None,
        iterations=0,
        model_calls=1,
        tool_executions=0,
        usage=Usage(),
        tools_used=[],
    )
    assert result.error is not None and "unexpected model call" in result.error


async def test_no_action_result_counts_the_empty_responses_usage() -> None:
    empty = ModelResponse(usage=Usage(prompt_tokens=10, completion_tokens=1))
    model = ScriptedModel([empty, empty, empty])
    result = await run(make_config(model))

    assert_result(
        result,
        reason=StopReason.NO_ACTION,
        output=None,
        iterations=0,
        model_calls=3,
        tool_executions=0,
        usage=Usage(prompt_tokens=30, completion_tokens=3),
        tools_used=[],
    )
    assert result.error


async def test_token_limit_before_any_call_still_gives_a_full_result(recorder: Recorder) -> None:
    model = ScriptedModel([])
    result = await run(
        make_config(
            model, limits=Limits(token_budget=100, max_output_tokens=200), on_event=recorder
        )
    )

    assert_result(
        result,
        reason=StopReason.LIMIT_TOKENS,
        output=None,
        iterations=0,
        model_calls=0,
        tool_executions=0,
        usage=Usage(),
        tools_used=[],
    )
    assert result.error is not None and "token budget reached" in result.error
    assert model.requests == []
    assert recorder.kinds() == ["limit_reached", "run_end"]


def test_a_results_summary_is_its_first_line_cut_for_people() -> None:
    from bot.agent.observe import SUMMARY_CHARS, summary_line

    assert summary_line("\n\n  HTTP 500 in 2598 ms  \nbody: oops\n") == "HTTP 500 in 2598 ms …"
    assert summary_line("ok web-03") == "ok web-03"
    assert summary_line("   \n") == ""
    long = summary_line("x" * 500)
    assert len(long) == SUMMARY_CHARS and long.endswith("…")

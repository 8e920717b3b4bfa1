"""Errors are results: failing calls become ``Error: …`` tool results, never crashes.

A tool that raises (anything, or ``ToolError``), one that times out, an unknown tool and
arguments the pydantic model rejects all reach the model as an error tool result, and
the run goes on to the next model call.
"""

from __future__ import annotations

import asyncio

from bot.agent import CallContext, FunctionTool, RunResult, StopReason, ToolMessage, run
from bot.agent.testing import FakeClock, ScriptedModel, call, calls, text
from bot.errors import ToolError

from .conftest import HostArgs, Recorder, ServiceArgs, echo_tool, make_config


def raising_tool(name: str, exc: BaseException) -> FunctionTool:
    async def fn(args: HostArgs, ctx: CallContext) -> str:
        raise exc

    return FunctionTool(name=name, description=f"{name} a host", args_model=HostArgs, fn=fn)


def restart_args_tool() -> FunctionTool:
    async def fn(args: ServiceArgs, ctx: CallContext) -> str:
        return f"status {args.service} on {args.host}"

    return FunctionTool(name="status", description="Unit status", args_model=ServiceArgs, fn=fn)


async def result_seen_by_model(
    tool: FunctionTool | None, tool_call_args: dict[str, object]
) -> tuple[RunResult, ToolMessage]:
    """Run one call then an answer; return (result, the tool message the model saw)."""
    name = tool.name if tool is not None else "nope"
    model = ScriptedModel([calls(call(name, "c1", **tool_call_args)), text("moving on")])
    tools = [tool] if tool is not None else [echo_tool()]
    result = await run(make_config(model, tools=tools))
    assert len(model.requests) == 2, "the run must go on to the next model call"
    seen = model.histories[1][-1]
    assert isinstance(seen, ToolMessage)
    assert seen.tool_call_id == "c1"
    return result, seen


async def test_plain_exception_becomes_error_result() -> None:
    tool = raising_tool("check", RuntimeError("connection reset by peer"))
    result, seen = await result_seen_by_model(tool, {"host": "web-03"})

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert result.output == "moving on"
    assert seen.content == "Error: RuntimeError: connection reset by peer"
    assert seen.is_error
    assert result.tool_executions == 1


async def test_tool_error_message_is_the_result() -> None:
    tool = raising_tool("check", ToolError("disk /var is full"))
    result, seen = await result_seen_by_model(tool, {"host": "web-03"})

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert seen.content == "Error: disk /var is full"
    assert seen.is_error


async def test_unknown_tool_becomes_error_result_listing_the_tools() -> None:
    result, seen = await result_seen_by_model(None, {"host": "web-03"})

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert seen.content == "Error: unknown tool 'nope'; available tools: check"
    assert seen.is_error
    assert result.tool_executions == 0  # nothing ran


async def test_missing_argument_names_the_field() -> None:
    result, seen = await result_seen_by_model(echo_tool(), {"hostname": "web-03"})

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert seen.content.startswith("Error: invalid arguments for tool 'check': ")
    assert "host: Field required" in seen.content
    assert seen.is_error
    assert result.tool_executions == 0


async def test_wrong_type_and_pattern_name_each_field() -> None:
    result, seen = await result_seen_by_model(
        restart_args_tool(), {"host": 3, "service": "nginx; rm -rf /"}
    )

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert seen.content.startswith("Error: invalid arguments for tool 'status': ")
    assert "host: Input should be a valid string" in seen.content
    assert "service: String should match pattern" in seen.content


async def test_timeout_becomes_error_result_and_the_run_goes_on(
    clock: FakeClock, recorder: Recorder
) -> None:
    started = asyncio.Event()
    never = asyncio.Event()

    async def hang(args: HostArgs, ctx: CallContext) -> str:
        started.set()
        await never.wait()
        return "unreachable"

    tool = FunctionTool(name="hang", description="Hangs", args_model=HostArgs, fn=hang, timeout=5)
    model = ScriptedModel([calls(call("hang", "c1", host="web-03")), text("it hangs")])
    config = make_config(model, tools=[tool], clock=clock, on_event=recorder)
    task = asyncio.create_task(run(config))
    await started.wait()
    clock.advance(5)
    result = await task

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert result.output == "it hangs"
    seen = model.histories[1][-1]
    assert isinstance(seen, ToolMessage)
    assert seen.tool_call_id == "c1"
    assert seen.content == "Error: timed out after 5s"
    assert seen.is_error
    (end,) = recorder.of("tool_end")
    assert end.ran is True and end.is_error is True
    assert end.duration_s == 5.0
    assert clock.pending_timers == 0


async def test_every_kind_of_failure_in_one_response_then_the_model_is_asked_again() -> None:
    tools = [
        raising_tool("boom", ValueError("bad value")),
        raising_tool("broken", ToolError("backend down")),
        echo_tool(),
    ]
    response = calls(
        call("boom", "c1", host="a"),
        call("broken", "c2", host="b"),
        call("missing", "c3", host="c"),
        call("check", "c4", port=22),
        call("check", "c5", host="web-03"),
    )
    model = ScriptedModel([response, text("summary")])
    result = await run(make_config(model, tools=tools))

    assert result.stop_reason is StopReason.COMPLETED, result.error
    results = [m for m in model.histories[1] if isinstance(m, ToolMessage)]
    assert [m.tool_call_id for m in results] == ["c1", "c2", "c3", "c4", "c5"]
    assert [m.is_error for m in results] == [True, True, True, True, False]
    assert results[0].content == "Error: ValueError: bad value"
    assert results[1].content == "Error: backend down"
    assert results[2].content.startswith("Error: unknown tool 'missing'")
    assert "host: Field required" in results[3].content
    assert results[4].content == "ok web-03"


async def test_tool_raising_cancelled_error_of_its_own_is_an_error_result() -> None:
    # A tool whose own code lets a CancelledError escape (nobody cancelled the run) has
    # failed like any other tool; it must not take the whole run down with it.
    tool = raising_tool("check", asyncio.CancelledError())
    result, seen = await result_seen_by_model(tool, {"host": "web-03"})

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert seen.is_error
    assert seen.content.startswith("Error: ")

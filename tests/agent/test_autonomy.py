"""Autonomy: tool results go straight back to the model, matched to their calls.

No one is asked about a read-only call; the history grows by exactly one assistant
message and one tool message per call, and every later request carries that history.
"""

from __future__ import annotations

import asyncio

from bot.agent import (
    AssistantMessage,
    CallContext,
    ConfirmRequest,
    Decision,
    FunctionTool,
    InMemoryHistory,
    StopReason,
    ToolCall,
    ToolMessage,
    UserMessage,
    run,
)
from bot.agent.testing import ScriptedModel, call, calls, text

from .conftest import HostArgs, NoArgs, echo_tool, make_config

PROMPT = "web-03 is at 95% CPU, look into it"


def uptime_tool() -> FunctionTool:
    async def fn(args: NoArgs, ctx: CallContext) -> str:
        return "up 12 days"

    return FunctionTool(name="uptime", description="Uptime", args_model=NoArgs, fn=fn)


async def test_tool_result_goes_back_without_asking_anyone() -> None:
    asked: list[ConfirmRequest] = []

    async def confirm(request: ConfirmRequest) -> Decision:
        asked.append(request)
        raise AssertionError("a read-only call must not ask for approval")

    model = ScriptedModel([calls(call("check", "c1", host="web-03")), text("web-03 is fine")])
    memory = InMemoryHistory()
    memory.append(UserMessage(content=PROMPT))
    result = await run(make_config(model, tools=[echo_tool()], memory=memory, confirm=confirm))

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert asked == []
    assert len(model.requests) == 2
    second = model.histories[1]
    assert second[-1] == ToolMessage(tool_call_id="c1", name="check", content="ok web-03")
    model.assert_done()


async def test_several_calls_each_result_carries_its_call_id() -> None:
    response = calls(
        call("check", "c1", host="web-01"),
        call("uptime", "c2"),
        call("check", "c3", host="web-03"),
        content="Checking both hosts.",
    )
    model = ScriptedModel([response, text("all fine")])
    memory = InMemoryHistory()
    memory.append(UserMessage(content=PROMPT))
    result = await run(make_config(model, tools=[echo_tool(), uptime_tool()], memory=memory))

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert result.output == "all fine"
    assert result.tool_executions == 3
    expected = [
        UserMessage(content=PROMPT),
        AssistantMessage(content="Checking both hosts.", tool_calls=response.tool_calls),
        ToolMessage(tool_call_id="c1", name="check", content="ok web-01"),
        ToolMessage(tool_call_id="c2", name="uptime", content="up 12 days"),
        ToolMessage(tool_call_id="c3", name="check", content="ok web-03"),
        AssistantMessage(content="all fine"),
    ]
    assert memory.messages == expected
    # What the model saw: the request before, then everything but the final answer.
    assert list(model.histories[0]) == expected[:1]
    assert list(model.histories[1]) == expected[:5]


async def test_history_grows_by_assistant_and_tool_messages_each_step() -> None:
    model = ScriptedModel(
        [
            calls(call("check", "a1", host="web-01")),
            calls(call("check", "b1", host="web-02"), call("uptime", "b2")),
            text("done"),
        ]
    )
    memory = InMemoryHistory()
    memory.append(UserMessage(content=PROMPT))
    result = await run(make_config(model, tools=[echo_tool(), uptime_tool()], memory=memory))

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert result.iterations == 3
    assert [len(h) for h in model.histories] == [1, 3, 6]
    assert [m.role for m in memory.messages] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "tool",
        "assistant",
    ]
    # Each request's history is a prefix of the next one: nothing is rewritten.
    for earlier, later in zip(model.histories, model.histories[1:], strict=False):
        assert list(later[: len(earlier)]) == list(earlier)
    tool_ids = [m.tool_call_id for m in memory.messages if isinstance(m, ToolMessage)]
    assert tool_ids == ["a1", "b1", "b2"]


async def test_missing_and_duplicate_call_ids_are_made_unique_and_matched() -> None:
    raw = calls(
        ToolCall(id="", name="check", arguments='{"host": "web-01"}'),
        ToolCall(id="dup", name="check", arguments='{"host": "web-02"}'),
        ToolCall(id="dup", name="check", arguments='{"host": "web-03"}'),
    )
    model = ScriptedModel([raw, text("done")])
    memory = InMemoryHistory()
    memory.append(UserMessage(content=PROMPT))
    result = await run(make_config(model, tools=[echo_tool()], memory=memory))

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assistant = memory.messages[1]
    assert isinstance(assistant, AssistantMessage)
    ids = [c.id for c in assistant.tool_calls]
    assert all(ids) and len(set(ids)) == 3
    results = [m for m in memory.messages if isinstance(m, ToolMessage)]
    assert [m.tool_call_id for m in results] == ids
    assert [m.content for m in results] == ["ok web-01", "ok web-02", "ok web-03"]


async def test_parallel_results_keep_call_order() -> None:
    # "slow" can only finish after "fast" ran: they must run concurrently, and the
    # results still come back in the order of the calls. (Run one after the other,
    # "slow" would hit its short timeout and the assertion below would fail.)
    fast_done = asyncio.Event()

    async def slow(args: HostArgs, ctx: CallContext) -> str:
        await fast_done.wait()
        return f"slow {args.host}"

    async def fast(args: HostArgs, ctx: CallContext) -> str:
        fast_done.set()
        return f"fast {args.host}"

    tools = [
        FunctionTool(
            name="slow", description="s", args_model=HostArgs, fn=slow, parallel=True, timeout=2
        ),
        FunctionTool(name="fast", description="f", args_model=HostArgs, fn=fast, parallel=True),
    ]
    model = ScriptedModel(
        [calls(call("slow", "p1", host="web-01"), call("fast", "p2", host="web-02")), text("ok")]
    )
    memory = InMemoryHistory()
    memory.append(UserMessage(content=PROMPT))
    result = await run(make_config(model, tools=tools, memory=memory))

    assert result.stop_reason is StopReason.COMPLETED, result.error
    results = [m for m in memory.messages if isinstance(m, ToolMessage)]
    assert [(m.tool_call_id, m.content) for m in results] == [
        ("p1", "slow web-01"),
        ("p2", "fast web-02"),
    ]

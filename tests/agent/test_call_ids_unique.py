"""Tool call ids are unique within a job: approvals and the write ledger are keyed by
them, so a provider repeating ids (or sending none) must not make two calls one."""

from __future__ import annotations

from bot.agent import RunState, StopReason, ToolCall, ToolMessage, run
from bot.agent.testing import ScriptedModel, calls, text

from .conftest import echo_tool, make_config


def check(call_id: str, host: str) -> ToolCall:
    return ToolCall(id=call_id, name="check", arguments=f'{{"host": "{host}"}}')


async def test_repeated_and_missing_ids_are_renamed() -> None:
    model = ScriptedModel(
        [
            calls(check("call_0", "web-1"), check("", "web-2")),
            calls(check("call_0", "web-3")),  # the provider reuses an id of step 1
            text("done"),
        ]
    )
    result = await run(make_config(model, tools=[echo_tool()]))

    assert result.stop_reason is StopReason.COMPLETED, result.error
    ids = [m.tool_call_id for m in model.requests[-1].messages if isinstance(m, ToolMessage)]
    assert len(ids) == 3 and len(set(ids)) == 3
    assert ids[0] == "call_0"
    assert result.state.call_ids == ids


async def test_ids_stay_unique_across_a_resumed_run() -> None:
    first = ScriptedModel([calls(check("call_0", "web-1")), text("one")])
    result = await run(make_config(first, tools=[echo_tool()]))
    state = RunState.model_validate_json(result.state.model_dump_json())
    second = ScriptedModel([calls(check("call_0", "web-2")), text("two")])
    config = make_config(second, tools=[echo_tool()])

    again = await run(config, state)

    assert again.stop_reason is StopReason.COMPLETED, again.error
    assert len(set(again.state.call_ids)) == 2

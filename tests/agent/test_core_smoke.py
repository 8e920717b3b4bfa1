"""A first end-to-end pass through the loop: call a tool, then answer."""

from bot.agent import StopReason, ToolMessage, run
from bot.agent.testing import ScriptedModel, call, calls, text

from .conftest import echo_tool, make_config


async def test_tool_then_answer() -> None:
    model = ScriptedModel([calls(call("check", "c1", host="web-03")), text("web-03 is fine")])
    config = make_config(model, tools=[echo_tool()])
    result = await run(config)
    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert result.output == "web-03 is fine"
    assert result.iterations == 2
    tool_msgs = [m for m in model.requests[1].messages if isinstance(m, ToolMessage)]
    assert tool_msgs[0].content == "ok web-03" and tool_msgs[0].tool_call_id == "c1"
    model.assert_done()

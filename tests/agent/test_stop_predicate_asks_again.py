"""A stop predicate may answer ``AskAgain`` instead of ending the run: its message
enters the history as a ``user`` message, its key is recorded in ``RunState.asked``
(so the predicate can ask each key once per job), and the model is called again — after
a final answer or after a tool step alike."""

from __future__ import annotations

from bot.agent import StopCheck, StopReason, StopVerdict, UserMessage, run
from bot.agent.config import AskAgain
from bot.agent.testing import ScriptedModel, call, calls, text

from .conftest import echo_tool, make_config

QUESTION = "Which host did you check?"


async def ask_once(check: StopCheck) -> StopVerdict | AskAgain | None:
    if "host" not in check.state.asked:
        return AskAgain(key="host", message=QUESTION)
    return None


async def test_asked_after_a_final_answer() -> None:
    model = ScriptedModel([text("fine"), text("web-03 is fine")])

    result = await run(make_config(model, stop=ask_once))

    assert result.stop_reason is StopReason.COMPLETED
    assert result.output == "web-03 is fine"
    assert model.histories[1][-1] == UserMessage(content=QUESTION)
    assert result.state.asked == ["host"] and result.iterations == 2
    model.assert_done()


async def test_asked_after_a_tool_step() -> None:
    model = ScriptedModel([calls(call("check", host="web-03")), text("web-03 is fine")])

    result = await run(make_config(model, tools=[echo_tool()], stop=ask_once))

    assert result.stop_reason is StopReason.COMPLETED
    assert model.histories[1][-1] == UserMessage(content=QUESTION)
    model.assert_done()

"""How a run ends on an answer: completed, incomplete (stop predicate) or no_action.

A response without tool calls is the final answer unless the stop predicate says the
work is not done; an empty response is retried (twice by default) and then ends the
run as ``no_action``; a stop predicate may also end the run after a tool step.
"""

from __future__ import annotations

from bot.agent import (
    AssistantMessage,
    InMemoryHistory,
    ModelResponse,
    RecoveryPolicy,
    StopCheck,
    StopReason,
    StopVerdict,
    Usage,
    UserMessage,
    run,
)
from bot.agent.testing import ScriptedModel, call, calls, text

from .conftest import echo_tool, make_config

ANSWER = "web-03: a runaway cron job; killed it would need approval."


def empty(usage: Usage | None = None) -> ModelResponse:
    return ModelResponse(content=None, usage=usage or Usage(), finish_reason="stop")


async def test_answer_without_tool_calls_completes_with_its_text() -> None:
    model = ScriptedModel([text(ANSWER)])
    memory = InMemoryHistory()
    memory.append(UserMessage(content="what is wrong with web-03?"))
    result = await run(make_config(model, memory=memory))

    assert result.stop_reason is StopReason.COMPLETED
    assert result.ok
    assert result.output == ANSWER
    assert result.error is None
    assert result.iterations == 1
    assert memory.messages[-1] == AssistantMessage(content=ANSWER)
    model.assert_done()


async def test_stop_predicate_can_say_the_work_is_not_done() -> None:
    seen: list[StopCheck] = []

    async def stop(check: StopCheck) -> StopVerdict | None:
        seen.append(check)
        return StopVerdict(reason=StopReason.INCOMPLETE, message="no root cause named")

    model = ScriptedModel([text(ANSWER)])
    result = await run(make_config(model, stop=stop))

    assert result.stop_reason is StopReason.INCOMPLETE
    assert not result.ok
    assert result.output == ANSWER
    assert result.error == "no root cause named"
    assert len(seen) == 1
    assert seen[0].final is True and seen[0].output == ANSWER


async def test_stop_predicate_accepting_the_answer_completes() -> None:
    async def accept(check: StopCheck) -> StopVerdict | None:
        return None if check.final else StopVerdict(reason=StopReason.INCOMPLETE)

    model = ScriptedModel([text(ANSWER)])
    result = await run(make_config(model, stop=accept))

    assert result.stop_reason is StopReason.COMPLETED
    assert result.output == ANSWER


async def test_stop_predicate_after_a_tool_step_ends_the_run_with_its_reason() -> None:
    seen: list[StopCheck] = []

    async def stop(check: StopCheck) -> StopVerdict | None:
        seen.append(check)
        return StopVerdict(reason=StopReason.INCOMPLETE, message="enough for now")

    # The second scripted answer must never be asked for.
    model = ScriptedModel(
        [calls(call("check", "c1", host="web-03"), content="Looking at web-03."), text("unused")]
    )
    result = await run(make_config(model, tools=[echo_tool()], stop=stop))

    assert result.stop_reason is StopReason.INCOMPLETE
    assert result.error == "enough for now"
    assert result.output == "Looking at web-03."
    assert result.iterations == 1
    assert result.tool_executions == 1
    assert len(model.requests) == 1
    assert len(seen) == 1
    assert seen[0].final is False
    assert seen[0].state.iterations == 1


async def test_empty_responses_are_retried_then_end_as_no_action() -> None:
    model = ScriptedModel([empty(), empty(), empty()])
    memory = InMemoryHistory()
    memory.append(UserMessage(content="anything?"))
    result = await run(make_config(model, memory=memory))

    assert result.stop_reason is StopReason.NO_ACTION
    assert result.output is None
    assert result.error is not None and "3 empty responses" in result.error
    assert result.model_calls == 3  # the first try and two retries
    assert result.iterations == 0  # retries do not count as iterations
    # Empty responses do not enter the history.
    assert memory.messages == [UserMessage(content="anything?")]
    model.assert_done()


async def test_whitespace_only_response_counts_as_empty() -> None:
    blank = ModelResponse(content=" \n\t ", finish_reason="stop")
    model = ScriptedModel([blank, blank, blank])
    result = await run(make_config(model))

    assert result.stop_reason is StopReason.NO_ACTION
    assert result.model_calls == 3


async def test_empty_retry_count_follows_the_recovery_policy() -> None:
    model = ScriptedModel([empty()])
    result = await run(make_config(model, recovery=RecoveryPolicy(max_empty_retries=0)))

    assert result.stop_reason is StopReason.NO_ACTION
    assert result.model_calls == 1
    model.assert_done()


async def test_empty_response_then_a_good_one_completes() -> None:
    model = ScriptedModel([empty(), text(ANSWER)])
    memory = InMemoryHistory()
    memory.append(UserMessage(content="what is wrong with web-03?"))
    result = await run(make_config(model, memory=memory))

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert result.output == ANSWER
    assert result.model_calls == 2
    assert result.iterations == 1
    # The retry asks with the same history: the empty answer left no trace.
    assert list(model.histories[0]) == list(model.histories[1])
    assert [m.role for m in memory.messages] == ["user", "assistant"]
    model.assert_done()


async def test_two_empty_responses_then_a_good_one_still_completes() -> None:
    model = ScriptedModel([empty(), empty(), text(ANSWER)])
    result = await run(make_config(model))

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert result.output == ANSWER
    assert result.model_calls == 3

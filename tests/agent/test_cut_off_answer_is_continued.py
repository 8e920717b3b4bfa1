"""An answer cut off at the output limit is not the final answer.

A response without tool calls whose ``finish_reason`` says the output limit cut it
(``length`` from OpenAI-compatible servers, ``max_tokens`` from Anthropic) is kept in the
history, the model is asked to go on where it stopped, and the final answer is the parts
joined exactly as written (no separator: the cut falls mid-word). Each continuation is a
model call like any other: an iteration, its tokens counted, so the job's limits end a
model that keeps getting cut off, and the text so far survives the pause that follows.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from bot.agent import (
    AssistantMessage,
    Injected,
    InMemoryHistory,
    Limits,
    ModelRequest,
    ModelResponse,
    RunState,
    StopReason,
    Usage,
    UserMessage,
    run,
)
from bot.agent.run import CONTINUE_MESSAGE
from bot.agent.testing import ScriptedModel, call, calls, text
from bot.agent.work_done import work_done

from .conftest import echo_tool, make_config

USAGE = Usage(prompt_tokens=100, completion_tokens=50)


def cut(content: str, finish_reason: str = "length") -> ModelResponse:
    return ModelResponse(content=content, usage=USAGE, finish_reason=finish_reason)


@pytest.mark.parametrize("finish_reason", ["length", "max_tokens"])
async def test_a_cut_answer_is_continued_and_the_parts_join_as_written(finish_reason: str) -> None:
    model = ScriptedModel(
        [cut("web-03: the disk is fu", finish_reason), text("ll (98%), /var/log.", usage=USAGE)]
    )
    memory = InMemoryHistory()
    memory.append(UserMessage(content="what is wrong with web-03?"))

    result = await run(make_config(model, memory=memory))

    assert result.stop_reason is StopReason.COMPLETED
    assert result.output == "web-03: the disk is full (98%), /var/log."
    # One more model call, counted like any other.
    assert result.iterations == 2 and result.model_calls == 2
    assert result.usage.paid == 2 * USAGE.paid
    # The model was asked to go on, after its cut answer, with the whole history.
    assert model.histories[1][-2:] == (
        AssistantMessage(content="web-03: the disk is fu"),
        UserMessage(content=CONTINUE_MESSAGE),
    )
    assert memory.messages[-1] == AssistantMessage(content="ll (98%), /var/log.")
    assert result.state.answer_so_far is None
    model.assert_done()


async def test_a_model_that_keeps_getting_cut_off_is_ended_by_the_jobs_limits() -> None:
    model = ScriptedModel([cut("one "), cut("two "), cut("three ")])
    limits = Limits(max_iterations=3)

    result = await run(make_config(model, limits=limits))

    assert result.stop_reason is StopReason.LIMIT_ITERATIONS
    assert result.iterations == 3 and len(model.requests) == 3
    assert result.output == "one two three "  # what there is of the answer
    model.assert_done()


async def test_the_token_budget_counts_continuations() -> None:
    model = ScriptedModel([cut("a" * 40), cut("b" * 40)])
    # Room for the first call's reservation, not for a second one after its usage.
    limits = Limits(token_budget=USAGE.paid + 300, max_output_tokens=200)

    result = await run(make_config(model, limits=limits))

    assert result.stop_reason is StopReason.LIMIT_TOKENS
    assert len(model.requests) == 1 and result.output == "a" * 40


async def test_the_answer_so_far_survives_a_limit_and_is_whole_after_continue() -> None:
    memory = InMemoryHistory()
    memory.append(UserMessage(content="what is wrong with web-03?"))
    first = ScriptedModel([cut("web-03: the disk is fu")])
    stopped = await run(make_config(first, memory=memory, limits=Limits(max_iterations=1)))
    assert stopped.stop_reason is StopReason.LIMIT_ITERATIONS
    saved = RunState.model_validate_json(stopped.state.model_dump_json())
    assert saved.answer_so_far == "web-03: the disk is fu"

    # Continue (a raised limit): another process resumes from the saved state.
    second = ScriptedModel([text("ll (98%).")])
    result = await run(make_config(second, memory=memory, limits=Limits(max_iterations=2)), saved)

    assert result.stop_reason is StopReason.COMPLETED
    assert result.output == "web-03: the disk is full (98%)."


async def test_a_cut_note_followed_by_tool_calls_is_not_part_of_the_answer() -> None:
    model = ScriptedModel(
        [
            cut("I will look at the di"),
            calls(call("check", host="web-03"), content="sk first."),
            text("web-03 is fine."),
        ]
    )

    result = await run(make_config(model, tools=[echo_tool()]))

    assert result.stop_reason is StopReason.COMPLETED
    assert result.output == "web-03 is fine."


class Replies:
    """An inject source holding what people said, handed over at the next fetch."""

    def __init__(self) -> None:
        self.waiting: list[Injected] = []

    async def fetch(self) -> Sequence[Injected]:
        items, self.waiting = self.waiting, []
        return items

    async def ack(self, items: Sequence[Injected]) -> None:
        return None


async def test_a_reply_while_continuing_starts_the_answer_afresh() -> None:
    replies = Replies()
    said = Injected(id="1700000001.000100", text="only web-04 please", author="U2")

    def first(request: ModelRequest) -> ModelResponse:
        replies.waiting.append(said)  # arrives while the cut answer is being written
        return cut("web-03: the disk is fu")

    model = ScriptedModel([first, text("web-04 is fine.")])

    result = await run(make_config(model, inject=replies))

    # What the model says next answers the person, not the rest of the cut answer.
    assert result.output == "web-04 is fine."
    assert model.histories[1][-1] == UserMessage(
        content="<@U2>: only web-04 please", source_id=said.id
    )


async def test_the_stop_predicate_judges_the_whole_answer() -> None:
    model = ScriptedModel([cut("No access to db-01.\nBLOCKED: cred"), text("entials for db-01")])

    result = await run(make_config(model, stop=work_done))

    assert result.stop_reason is StopReason.INCOMPLETE
    assert result.error == "blocked: credentials for db-01"
    assert result.output == "No access to db-01."

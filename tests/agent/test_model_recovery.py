"""Recovery in a run: fallback chain, condensing on overflow, empty responses, failures.

``ModelUnavailableError`` moves to the next model of the chain, each model at most once
per job; ``ContextOverflowError`` condenses the history once per job and retries; an
empty response is retried twice, then the run ends ``no_action``; anything else ends it
``failed``. A condense that raises is reported (``CondenseFailed``) and the run carries
on uncondensed or stops, as the policy says. ``condense_at_tokens`` condenses before a
call once the last prompt reached it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from bot.agent import (
    AgentConfig,
    AnyMessage,
    AssistantMessage,
    CondenseResult,
    InMemoryHistory,
    RecoveryPolicy,
    StopReason,
    ToolMessage,
    Usage,
    UserMessage,
    run,
)
from bot.agent.events import CondenseDone, ModelFallback
from bot.agent.ports import Client
from bot.agent.testing import ScriptedModel, StaticChain, call, calls, text
from bot.errors import ContextOverflowError, ModelRequestError, ModelUnavailableError

from .conftest import Recorder, echo_tool, make_config

SUMMARY = "Summary: web-03 CPU at 95% since 10:02."


class Condenser:
    """A condense function that records what it was given."""

    def __init__(
        self, *, upto: int | None = None, error: Exception | None = None, usage: Usage | None = None
    ) -> None:
        self.seen: list[list[AnyMessage]] = []
        self.clients: list[str] = []
        self.upto = upto
        self.error = error
        self.usage = usage

    async def __call__(
        self,
        history: Sequence[AnyMessage],
        *,
        client: Client,
        time_left: float | None,
    ) -> CondenseResult:
        self.seen.append(list(history))
        self.clients.append(client.name)
        if self.error is not None:
            raise self.error
        return CondenseResult(
            upto=self.upto or len(history), summary=SUMMARY, usage=self.usage or Usage()
        )


def chain_config(models: Sequence[ScriptedModel], **kw: Any) -> AgentConfig:
    """A config whose client is the fallback chain ``models``."""
    return replace(make_config(models[0], **kw), client=StaticChain(models))


def fresh_memory() -> InMemoryHistory:
    memory = InMemoryHistory()
    memory.append(UserMessage(content="web-03 is at 95% CPU, look into it"))
    return memory


def is_summary(message: AnyMessage) -> bool:
    return isinstance(message, UserMessage) and message.summary and message.content == SUMMARY


# -- fallback chain ------------------------------------------------------------


async def test_unavailable_model_falls_back_to_the_next(recorder: Recorder) -> None:
    m1 = ScriptedModel([ModelUnavailableError("503")], name="primary")
    m2 = ScriptedModel([text("web-03 is fine")], name="backup")
    config = chain_config([m1, m2], on_event=recorder)

    result = await run(config)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert result.output == "web-03 is fine"
    assert (len(m1.requests), len(m2.requests)) == (1, 1)
    assert result.iterations == 1
    [fallback] = recorder.of("model_fallback")
    assert isinstance(fallback, ModelFallback)
    assert (fallback.from_model, fallback.to_model) == ("primary", "backup")
    m1.assert_done()
    m2.assert_done()


async def test_last_model_failing_too_ends_failed() -> None:
    m1 = ScriptedModel([ModelUnavailableError("503")], name="primary")
    m2 = ScriptedModel([ModelUnavailableError("timeout")], name="backup")

    result = await run(chain_config([m1, m2]))

    assert result.stop_reason is StopReason.FAILED
    assert (len(m1.requests), len(m2.requests)) == (1, 1)


async def test_each_model_is_used_at_most_once() -> None:
    # The primary works, then fails; the backup takes over and later fails too: the run
    # does not go back to the primary.
    m1 = ScriptedModel(
        [calls(call("check", "c1", host="web-03")), ModelUnavailableError("503")],
        name="primary",
    )
    m2 = ScriptedModel(
        [calls(call("check", "c2", host="web-02")), ModelUnavailableError("503")],
        name="backup",
    )

    result = await run(chain_config([m1, m2], tools=[echo_tool()]))

    assert result.stop_reason is StopReason.FAILED
    assert (len(m1.requests), len(m2.requests)) == (2, 2)
    assert result.iterations == 2
    m1.assert_done()
    m2.assert_done()


async def test_backup_keeps_serving_after_the_switch() -> None:
    m1 = ScriptedModel([ModelUnavailableError("503")], name="primary")
    m2 = ScriptedModel([calls(call("check", "c1", host="web-03")), text("done")], name="backup")

    result = await run(chain_config([m1, m2], tools=[echo_tool()]))

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert (len(m1.requests), len(m2.requests)) == (1, 2)


async def test_the_switch_carries_over_to_a_later_run() -> None:
    memory = fresh_memory()
    m1 = ScriptedModel([ModelUnavailableError("503")], name="primary")
    m2 = ScriptedModel([text("first answer")], name="backup")
    first = await run(chain_config([m1, m2], memory=memory))
    assert first.stop_reason is StopReason.COMPLETED, first.error

    memory.append(UserMessage(content="and web-02?"))
    m1_again = ScriptedModel([text("primary again")], name="primary")
    m2_again = ScriptedModel([text("backup again")], name="backup")
    second = await run(
        chain_config([m1_again, m2_again], memory=memory),
        first.state,
    )

    assert second.output == "backup again"
    assert m1_again.requests == []


async def test_request_error_fails_without_fallback() -> None:
    m1 = ScriptedModel([ModelRequestError("401 unauthorized", status=401)], name="primary")
    m2 = ScriptedModel([text("never")], name="backup")

    result = await run(chain_config([m1, m2]))

    assert result.stop_reason is StopReason.FAILED
    assert "unauthorized" in (result.error or "")
    assert m2.requests == []


async def test_unexpected_exception_fails_with_a_result() -> None:
    model = ScriptedModel([RuntimeError("adapter bug")])

    result = await run(make_config(model))

    assert result.stop_reason is StopReason.FAILED
    assert "adapter bug" in (result.error or "")
    assert len(model.requests) == 1


# -- context overflow ------------------------------------------------------------


async def test_overflow_condenses_once_and_retries(recorder: Recorder) -> None:
    memory = fresh_memory()
    condense = Condenser(upto=1)
    model = ScriptedModel(
        [
            calls(call("check", "c1", host="web-03")),
            ContextOverflowError("context length exceeded"),
            text("web-03 is fine"),
        ]
    )
    config = make_config(
        model, tools=[echo_tool()], memory=memory, condense=condense, on_event=recorder
    )

    result = await run(config)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert len(condense.seen) == 1
    assert [type(m) for m in condense.seen[0]] == [UserMessage, AssistantMessage, ToolMessage]
    # The summary stands in for the first message; the originals are kept.
    assert is_summary(memory.messages[0])
    assert [type(m) for m in memory.messages[1:3]] == [AssistantMessage, ToolMessage]
    assert memory.originals[0] == UserMessage(content="web-03 is at 95% CPU, look into it")
    assert not any(is_summary(m) for m in memory.originals)
    # The retry is sent the condensed history.
    assert len(model.requests) == 3
    assert is_summary(model.requests[2].messages[0])
    assert len(model.requests[2].messages) == 3
    assert [e.replaced for e in recorder.of("condense_done")] == [1]
    assert result.iterations == 2
    model.assert_done()


async def test_second_overflow_in_a_run_fails() -> None:
    condense = Condenser()
    model = ScriptedModel([ContextOverflowError("too long"), ContextOverflowError("still")])

    result = await run(make_config(model, condense=condense))

    assert result.stop_reason is StopReason.FAILED
    assert len(condense.seen) == 1
    assert len(model.requests) == 2


async def test_overflow_without_condense_fails() -> None:
    model = ScriptedModel([ContextOverflowError("too long")])

    result = await run(make_config(model))

    assert result.stop_reason is StopReason.FAILED
    assert len(model.requests) == 1


async def test_condense_failure_is_reported_and_the_run_carries_on(recorder: Recorder) -> None:
    memory = fresh_memory()
    condense = Condenser(error=RuntimeError("summariser down"))
    model = ScriptedModel([ContextOverflowError("too long"), text("answered anyway")])
    config = make_config(model, memory=memory, condense=condense, on_event=recorder)

    result = await run(config)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert result.output == "answered anyway"
    [failed] = recorder.of("condense_failed")
    assert "summariser down" in failed.error
    assert recorder.of("condense_done") == []
    assert not any(is_summary(m) for m in memory.messages)  # uncondensed
    assert list(model.requests[1].messages) == list(model.requests[0].messages)


async def test_condense_failure_stops_when_configured(recorder: Recorder) -> None:
    condense = Condenser(error=RuntimeError("summariser down"))
    model = ScriptedModel([ContextOverflowError("too long"), text("never")])
    config = make_config(
        model,
        condense=condense,
        recovery=RecoveryPolicy(stop_on_condense_failure=True),
        on_event=recorder,
    )

    result = await run(config)

    assert result.stop_reason is StopReason.FAILED
    assert len(model.requests) == 1
    assert len(recorder.of("condense_failed")) == 1


async def test_condense_result_that_cannot_apply_is_a_condense_failure(
    recorder: Recorder,
) -> None:
    memory = fresh_memory()
    model = ScriptedModel([ContextOverflowError("too long"), text("answered anyway")])

    async def bad(history: Sequence[AnyMessage]) -> CondenseResult:
        return CondenseResult(upto=len(history) + 1, summary=SUMMARY)  # more than there is

    config = make_config(model, memory=memory, condense=bad, on_event=recorder)

    result = await run(config)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert len(recorder.of("condense_failed")) == 1
    assert not any(is_summary(m) for m in memory.messages)


# -- proactive condensing --------------------------------------------------------


async def test_condenses_before_a_call_once_the_prompt_reaches_the_threshold(
    recorder: Recorder,
) -> None:
    memory = fresh_memory()
    condense = Condenser(upto=1)
    model = ScriptedModel(
        [
            calls(call("check", "c1", host="web-03"), usage=Usage(prompt_tokens=1000)),
            calls(call("check", "c2", host="web-02"), usage=Usage(prompt_tokens=1500)),
            text("done", usage=Usage(prompt_tokens=1600)),
        ]
    )
    config = make_config(
        model,
        tools=[echo_tool()],
        memory=memory,
        condense=condense,
        condense_at_tokens=1000,
        on_event=recorder,
    )

    result = await run(config)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert len(condense.seen) == 1  # once per run, even though later prompts are larger
    assert not any(is_summary(m) for m in model.requests[0].messages)
    assert is_summary(model.requests[1].messages[0])
    assert len(recorder.of("condense_done")) == 1
    assert isinstance(recorder.of("condense_done")[0], CondenseDone)


async def test_no_proactive_condense_below_the_threshold() -> None:
    # The threshold applies to the estimated next prompt: the last prompt (900) plus
    # about chars/4 of what was added since (a few tokens here) stays below 1000.
    condense = Condenser(upto=1)
    model = ScriptedModel(
        [
            calls(call("check", "c1", host="web-03"), usage=Usage(prompt_tokens=900)),
            text("done", usage=Usage(prompt_tokens=900)),
        ]
    )
    config = make_config(model, tools=[echo_tool()], condense=condense, condense_at_tokens=1000)

    result = await run(config)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert condense.seen == []


async def test_proactive_condense_failure_stops_when_configured() -> None:
    condense = Condenser(error=RuntimeError("summariser down"))
    model = ScriptedModel(
        [calls(call("check", "c1", host="web-03"), usage=Usage(prompt_tokens=2000))]
    )
    config = make_config(
        model,
        tools=[echo_tool()],
        condense=condense,
        condense_at_tokens=1000,
        recovery=RecoveryPolicy(stop_on_condense_failure=True),
    )

    result = await run(config)

    assert result.stop_reason is StopReason.FAILED
    assert len(model.requests) == 1


async def test_proactive_condense_failure_carries_on_by_default(recorder: Recorder) -> None:
    condense = Condenser(error=RuntimeError("summariser down"))
    model = ScriptedModel(
        [
            calls(call("check", "c1", host="web-03"), usage=Usage(prompt_tokens=2000)),
            text("done"),
        ]
    )
    config = make_config(
        model,
        tools=[echo_tool()],
        condense=condense,
        condense_at_tokens=1000,
        on_event=recorder,
    )

    result = await run(config)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert len(recorder.of("condense_failed")) == 1


# -- empty responses ---------------------------------------------------------------


async def test_two_empty_responses_are_retried() -> None:
    memory = fresh_memory()
    model = ScriptedModel([text(""), calls(content="   "), text("web-03 is fine")])

    result = await run(make_config(model, memory=memory))

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert result.output == "web-03 is fine"
    assert result.model_calls == 3
    assert result.iterations == 1
    # Empty responses leave no trace in the history.
    assert [type(m) for m in memory.messages] == [UserMessage, AssistantMessage]


async def test_three_empty_responses_end_no_action() -> None:
    model = ScriptedModel([text(""), text(""), text(""), text("never")])

    result = await run(make_config(model))

    assert result.stop_reason is StopReason.NO_ACTION
    assert len(model.requests) == 3
    assert result.iterations == 0


async def test_condense_uses_the_current_model_and_counts_its_tokens() -> None:
    """After a switch to the fallback model, condensing asks that model, and the
    summary's tokens are part of the job's usage."""
    condense = Condenser(upto=1, usage=Usage(prompt_tokens=500, completion_tokens=50))
    primary = ScriptedModel([ModelUnavailableError("down")], name="primary")
    backup = ScriptedModel(
        [ContextOverflowError("too long"), text("done", usage=Usage(prompt_tokens=10))],
        name="backup",
    )
    config = chain_config([primary, backup], condense=condense)

    result = await run(config)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert condense.clients == ["backup"]
    assert result.usage.prompt_tokens == 510
    assert result.usage.completion_tokens == 50

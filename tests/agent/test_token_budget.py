"""The token budget is terminal: paid tokens are counted, the next call is reserved first.

Paid tokens are ``prompt - cached + completion`` as the provider reports them. Before
each model call the runtime estimates the request (the first: chars/4 of system, tools
and history; later: the last prompt minus its cached part plus chars/4 of what was added
since) plus ``max_output_tokens``, and does not start a call that cannot fit. Budgets
carry across runs through ``RunState``.
"""

from __future__ import annotations

from pydantic import BaseModel

from bot.agent import (
    CallContext,
    FunctionTool,
    InMemoryHistory,
    Limits,
    RunState,
    StopReason,
    Usage,
    UserMessage,
    run,
)
from bot.agent.testing import ScriptedModel, call, calls, text

from .conftest import HostArgs, Recorder, echo_tool, make_config

SYSTEM = "s" * 400  # 100 tokens at chars/4
PROMPT = "u" * 400  # 100 tokens at chars/4


def big_output_tool(chars: int) -> FunctionTool:
    async def fn(args: HostArgs, ctx: CallContext) -> str:
        return "x" * chars

    return FunctionTool(name="check", description="check a host", args_model=HostArgs, fn=fn)


async def test_paid_tokens_are_prompt_minus_cached_plus_completion() -> None:
    model = ScriptedModel(
        [
            calls(
                call("check", "c1", host="web-01"),
                usage=Usage(prompt_tokens=1000, completion_tokens=50, cached_tokens=400),
            ),
            text("done", usage=Usage(prompt_tokens=1200, completion_tokens=30, cached_tokens=1000)),
        ]
    )
    result = await run(make_config(model, tools=[echo_tool()]))

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert result.usage == Usage(prompt_tokens=2200, completion_tokens=80, cached_tokens=1400)
    assert result.usage.paid == (1000 - 400 + 50) + (1200 - 1000 + 30)
    assert result.state.usage == result.usage


async def test_first_call_that_cannot_fit_is_not_made(recorder: Recorder) -> None:
    model = ScriptedModel([text("never")])
    # system 100 + history 100 + max output 100 = 300 tokens reserved.
    config = make_config(
        model,
        prompt=PROMPT,
        system_prompt=SYSTEM,
        limits=Limits(token_budget=299, max_output_tokens=100),
        on_event=recorder,
    )

    result = await run(config)

    assert result.stop_reason is StopReason.LIMIT_TOKENS, result.error
    assert model.requests == []
    assert result.model_calls == 0
    assert result.usage.paid == 0
    hits = recorder.of("limit_reached")
    assert [h.reason for h in hits] == [StopReason.LIMIT_TOKENS]
    assert "299" in hits[0].detail


async def test_first_call_that_exactly_fits_is_made() -> None:
    model = ScriptedModel([text("done")])
    config = make_config(
        model,
        prompt=PROMPT,
        system_prompt=SYSTEM,
        limits=Limits(token_budget=300, max_output_tokens=100),
    )

    result = await run(config)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert len(model.requests) == 1


async def test_first_estimate_counts_the_tools_block() -> None:
    class Args(BaseModel):
        host: str

    async def fn(args: Args, ctx: CallContext) -> str:
        return "ok"

    # A 4000-char description is about 1000 tokens of the immutable prefix.
    wordy = FunctionTool(name="check", description="d" * 4000, args_model=Args, fn=fn)
    model = ScriptedModel([text("never")])
    config = make_config(
        model,
        tools=[wordy],
        prompt=PROMPT,
        system_prompt=SYSTEM,
        limits=Limits(token_budget=300 + 500, max_output_tokens=100),
    )

    result = await run(config)

    assert result.stop_reason is StopReason.LIMIT_TOKENS
    assert model.requests == []


def _two_step_model() -> ScriptedModel:
    return ScriptedModel(
        [
            calls(
                call("check", "c1", host="web-01"),
                usage=Usage(prompt_tokens=2100, completion_tokens=50, cached_tokens=400),
            ),
            text("done", usage=Usage(prompt_tokens=3000, completion_tokens=10, cached_tokens=2000)),
        ]
    )


# After the first call: spent 1750; the next reservation is the uncached last prompt
# (1700) + about 1000 for the 4000-char tool output added since + 100 max output.
_LONG_PROMPT = "u" * 8000


async def test_next_reservation_uses_last_uncached_prompt_plus_new_messages() -> None:
    model = _two_step_model()
    config = make_config(
        model,
        tools=[big_output_tool(4000)],
        prompt=_LONG_PROMPT,
        # Fits 1750 + 1700 + ~1010 + 100; would not fit if the cached part were not
        # subtracted (+400) or the whole history were counted again (+2000).
        limits=Limits(token_budget=4600, max_output_tokens=100),
    )

    result = await run(config)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert len(model.requests) == 2
    assert result.usage.paid == 1750 + 1010


async def test_next_call_refused_when_the_added_messages_do_not_fit(recorder: Recorder) -> None:
    model = _two_step_model()
    config = make_config(
        model,
        tools=[big_output_tool(4000)],
        prompt=_LONG_PROMPT,
        # Would fit without the ~1000 tokens of tool output added since the last call.
        limits=Limits(token_budget=1750 + 1700 + 100 + 500, max_output_tokens=100),
        on_event=recorder,
    )

    result = await run(config)

    assert result.stop_reason is StopReason.LIMIT_TOKENS, result.error
    assert len(model.requests) == 1  # the second request was never made
    assert result.tool_executions == 1  # the tools of the last response did run
    assert result.usage.paid == 1750
    assert [h.reason for h in recorder.of("limit_reached")] == [StopReason.LIMIT_TOKENS]


async def test_provider_usage_is_the_truth_not_the_reservation() -> None:
    # The reservation is large (900 max output) but only what the provider reports is
    # spent; charging the reservation would refuse the second call.
    model = ScriptedModel(
        [
            calls(
                call("check", "c1", host="web-01"),
                usage=Usage(prompt_tokens=20, completion_tokens=5),
            ),
            text("done", usage=Usage(prompt_tokens=40, completion_tokens=5)),
        ]
    )
    config = make_config(
        model, tools=[echo_tool()], limits=Limits(token_budget=1000, max_output_tokens=900)
    )

    result = await run(config)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert result.usage.paid == 70


async def test_usage_beyond_the_estimate_refuses_the_next_call() -> None:
    model = ScriptedModel(
        [
            calls(
                call("check", "c1", host="web-01"),
                usage=Usage(prompt_tokens=9000, completion_tokens=500),
            ),
            text("never"),
        ]
    )
    config = make_config(
        model, tools=[echo_tool()], limits=Limits(token_budget=10_000, max_output_tokens=100)
    )

    result = await run(config)

    assert result.stop_reason is StopReason.LIMIT_TOKENS
    assert len(model.requests) == 1
    assert result.usage.paid == 9500


async def test_empty_retry_is_checked_against_the_budget_too() -> None:
    model = ScriptedModel([text("", usage=Usage(prompt_tokens=900)), text("never")])
    config = make_config(model, limits=Limits(token_budget=1000, max_output_tokens=100))

    result = await run(config)

    assert result.stop_reason is StopReason.LIMIT_TOKENS
    assert len(model.requests) == 1


async def test_budget_carries_across_runs() -> None:
    memory = InMemoryHistory()
    memory.append(UserMessage(content="web-03 is at 95% CPU, look into it"))
    limits = Limits(token_budget=1000, max_output_tokens=100)
    first_model = ScriptedModel(
        [text("it is fine", usage=Usage(prompt_tokens=50, completion_tokens=850))]
    )
    first = await run(make_config(first_model, memory=memory, limits=limits))
    assert first.stop_reason is StopReason.COMPLETED, first.error
    assert first.usage.paid == 900

    memory.append(UserMessage(content="and web-02?"))
    saved = RunState.model_validate_json(first.state.model_dump_json())

    # A fresh job could afford the call ...
    fresh_model = ScriptedModel([text("web-02 is fine")])
    fresh = await run(make_config(fresh_model, memory=memory, limits=limits), RunState())
    assert fresh.stop_reason is StopReason.COMPLETED, fresh.error

    # ... but the same job, resumed, has only 100 tokens left.
    model = ScriptedModel([text("never")])
    resumed = await run(make_config(model, memory=memory, limits=limits), saved)

    assert resumed.stop_reason is StopReason.LIMIT_TOKENS
    assert model.requests == []
    assert resumed.usage.paid == 900

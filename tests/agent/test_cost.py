"""A job's cost: each priced call's cost summed in ``RunState.cost_usd`` across calls,
models and runs; calls of models without a price counted in ``unpriced_calls``.

Pricing is ``AgentConfig.pricing``: ``(model name, usage) → USD or None``. A price of 0
is a price (a free self-hosted model), not an unknown one.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from bot.agent import RunState, StopReason, Usage, run
from bot.agent.messages import ModelResponse
from bot.agent.testing import ScriptedModel, StaticChain, call, calls, text
from bot.errors import ModelUnavailableError

from .conftest import Recorder, echo_tool, make_config
from .test_model_recovery import Condenser, fresh_memory

# Dollars per token: prompt (uncached), cached, completion.
RATES = {"model-a": (1e-6, 1e-7, 2e-6), "model-b": (3e-6, 3e-7, 1.5e-5), "free": (0, 0, 0)}


def pricing(model: str, usage: Usage) -> float | None:
    rates = RATES.get(model)
    if rates is None:
        return None
    uncached = usage.prompt_tokens - usage.cached_tokens
    return uncached * rates[0] + usage.cached_tokens * rates[1] + usage.completion_tokens * rates[2]


def used(prompt: int, completion: int, cached: int = 0) -> Usage:
    return Usage(prompt_tokens=prompt, completion_tokens=completion, cached_tokens=cached)


async def test_the_cost_of_every_call_is_summed() -> None:
    model = ScriptedModel(
        [
            calls(call("check", "c1", host="web-03"), usage=used(1000, 50, cached=400)),
            text("fine", usage=used(1200, 30, cached=1000)),
        ],
        name="model-a",
    )
    result = await run(make_config(model, tools=[echo_tool()], pricing=pricing))

    assert result.stop_reason is StopReason.COMPLETED, result.error
    expected = pricing("model-a", used(1000, 50, 400)) + pricing("model-a", used(1200, 30, 1000))  # type: ignore[operator]
    assert result.cost_usd == pytest.approx(expected)
    assert result.state.cost_usd == result.cost_usd
    assert result.unpriced_calls == 0


async def test_cost_is_summed_across_the_models_of_the_chain() -> None:
    a = ScriptedModel([ModelUnavailableError("503")], name="model-a")
    b = ScriptedModel(
        [
            calls(call("check", "c1", host="web-03"), usage=used(2000, 100)),
            text("fine", usage=used(2500, 40)),
        ],
        name="model-b",
    )
    config = replace(
        make_config(a, tools=[echo_tool()], pricing=pricing), client=StaticChain([a, b])
    )
    result = await run(config)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    # The failed call has no usage: it costs nothing and is not an unpriced call.
    assert result.cost_usd == pytest.approx(2000 * 3e-6 + 100 * 1.5e-5 + 2500 * 3e-6 + 40 * 1.5e-5)
    assert result.unpriced_calls == 0


async def test_calls_of_a_model_without_a_price_are_counted_not_priced() -> None:
    a = ScriptedModel(
        [calls(call("check", "c1", host="web-03"), usage=used(1000, 10))], name="model-a"
    )
    mystery = ScriptedModel([text("fine", usage=used(1000, 10))], name="llama3.1:8b")

    class Switching:
        """model-a for the first response, then the unpriced model (a chain that moved)."""

        def chain(self) -> list[ScriptedModel]:
            return [a] if not a.requests else [mystery]

    config = replace(make_config(a, tools=[echo_tool()], pricing=pricing), client=Switching())
    result = await run(config)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert result.cost_usd == pytest.approx(1000 * 1e-6 + 10 * 2e-6)
    assert result.unpriced_calls == 1


async def test_only_unpriced_calls_leave_the_cost_unknown() -> None:
    model = ScriptedModel([text("fine", usage=used(1000, 10))], name="llama3.1:8b")
    result = await run(make_config(model, pricing=pricing))
    assert result.cost_usd is None
    assert result.unpriced_calls == 1


async def test_a_free_model_costs_zero_which_is_a_price() -> None:
    model = ScriptedModel([text("fine", usage=used(1000, 10))], name="free")
    result = await run(make_config(model, pricing=pricing))
    assert result.cost_usd == 0.0
    assert result.unpriced_calls == 0


async def test_without_pricing_nothing_is_counted() -> None:
    model = ScriptedModel([text("fine", usage=used(1000, 10))], name="model-a")
    result = await run(make_config(model))
    assert result.cost_usd is None and result.unpriced_calls == 0


async def test_the_cost_carries_over_to_a_resumed_run() -> None:
    before = RunState(cost_usd=0.5, unpriced_calls=2)
    model = ScriptedModel([text("fine", usage=used(1000, 0))], name="model-a")
    result = await run(make_config(model, pricing=pricing), before)
    assert result.cost_usd == pytest.approx(0.5 + 1000 * 1e-6)
    assert result.unpriced_calls == 2


async def test_empty_responses_retried_are_paid_for() -> None:
    empty = ModelResponse(usage=used(500, 0), finish_reason="stop")
    model = ScriptedModel([empty, text("fine", usage=used(500, 5))], name="model-a")
    result = await run(make_config(model, pricing=pricing))
    assert result.cost_usd == pytest.approx(1000 * 1e-6 + 5 * 2e-6)


async def test_a_pricing_that_fails_counts_the_call_as_unpriced() -> None:
    def broken(model: str, usage: Usage) -> float | None:
        raise RuntimeError("a bug in the table")

    model = ScriptedModel([text("fine", usage=used(1000, 10))], name="model-a")
    result = await run(make_config(model, pricing=broken))
    assert result.stop_reason is StopReason.COMPLETED
    assert result.cost_usd is None and result.unpriced_calls == 1


def test_a_state_saved_before_costs_existed_still_loads() -> None:
    old = RunState().model_dump(mode="json")
    del old["cost_usd"], old["unpriced_calls"]
    state = RunState.model_validate(old)
    assert state.cost_usd is None and state.unpriced_calls == 0


async def test_the_summary_of_a_condensed_history_is_paid_for_too() -> None:
    condense = Condenser(upto=1, usage=used(3000, 200))
    model = ScriptedModel(
        [
            calls(call("check", "c1", host="web-03"), usage=used(1000, 10)),
            text("fine", usage=used(400, 10)),
        ],
        name="model-a",
    )
    config = make_config(
        model,
        tools=[echo_tool()],
        memory=fresh_memory(),
        condense=condense,
        condense_at_tokens=1000,
        pricing=pricing,
    )
    result = await run(config)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert condense.clients == ["model-a"]
    calls_cost = (1000 + 400) * 1e-6 + 20 * 2e-6
    assert result.cost_usd == pytest.approx(calls_cost + 3000 * 1e-6 + 200 * 2e-6)


async def test_each_model_call_reports_its_cost(recorder: Recorder) -> None:
    a = ScriptedModel([ModelUnavailableError("503")], name="model-a")
    b = ScriptedModel(
        [
            calls(call("check", "c1", host="web-03"), usage=used(2000, 100)),
            text("fine", usage=used(2500, 40)),
        ],
        name="model-b",
    )
    config = make_config(a, tools=[echo_tool()], pricing=pricing, on_event=recorder)
    result = await run(replace(config, client=StaticChain([a, b])))

    ends = recorder.of("model_request_end")
    assert [e.cost_usd for e in ends] == [
        None,  # the failed call: no usage, no cost
        pytest.approx(2000 * 3e-6 + 100 * 1.5e-5),
        pytest.approx(2500 * 3e-6 + 40 * 1.5e-5),
    ]
    assert result.cost_usd == pytest.approx(sum(e.cost_usd or 0 for e in ends))

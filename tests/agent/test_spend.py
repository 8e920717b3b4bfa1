"""The workspace-wide cap (``AgentConfig.spend``): every model call reserves in it first,
with the token estimate the job's budget checks and its price; a refusal ends the job
``limit_tokens`` with the cap's detail and makes no call; each hold is settled exactly
once with what the call really used, however the call ended.

A ``StoreError`` from ``reserve`` abandons the run like a failing checkpoint (no call is
made that the cap was not charged for); a failing ``settle`` is logged and the run goes
on with its response (the hold stays charged).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace

import pytest

from bot.agent import CancelToken, Limits, StopReason, Usage, run
from bot.agent.messages import ModelRequest, ModelResponse
from bot.agent.ports import WORKSPACE_CAP, SpendHold, SpendRefused
from bot.agent.testing import FakeClock, ScriptedModel, StaticChain, call, calls, text
from bot.errors import ModelUnavailableError, StoreError

from .conftest import Recorder, echo_tool, make_config

CAP_DETAIL = f"{WORKSPACE_CAP} is reached (1,000,000 of 1,000,000 tokens today)"


def pricing(model: str, usage: Usage) -> float | None:
    if model == "unpriced":
        return None
    return usage.paid * 1e-6


@dataclass
class Reserved:
    model: str
    tokens: int
    cost_usd: float | None


@dataclass
class FakeSpend:
    """A cap in memory: refuses once ``refuse_after`` reservations were granted."""

    refuse_after: int | None = None
    reserve_fails: bool = False
    settle_fails: bool = False
    reserved: list[Reserved] = field(default_factory=list)
    settled: list[tuple[str, int, float | None]] = field(default_factory=list)  # token, …
    refused: int = 0

    async def reserve(
        self, *, model: str, tokens: int, cost_usd: float | None
    ) -> SpendHold | SpendRefused:
        if self.reserve_fails:
            raise StoreError("redis unavailable during the workspace cap")
        if self.refuse_after is not None and len(self.reserved) >= self.refuse_after:
            self.refused += 1
            return SpendRefused(CAP_DETAIL)
        self.reserved.append(Reserved(model, tokens, cost_usd))
        return SpendHold(tokens=tokens, cost_usd=cost_usd, token=f"hold-{len(self.reserved)}")

    async def settle(self, hold: SpendHold, *, tokens: int, cost_usd: float | None) -> None:
        self.settled.append((hold.token, tokens, cost_usd))
        if self.settle_fails:
            raise StoreError("redis unavailable during settle")

    def settled_once_each(self) -> bool:
        tokens = [s[0] for s in self.settled]
        return sorted(tokens) == sorted(f"hold-{n + 1}" for n in range(len(self.reserved)))


def used(prompt: int, completion: int, cached: int = 0) -> Usage:
    return Usage(prompt_tokens=prompt, completion_tokens=completion, cached_tokens=cached)


async def test_each_call_reserves_and_settles_with_what_it_used() -> None:
    spend = FakeSpend()
    model = ScriptedModel(
        [
            calls(call("check", "c1", host="web-03"), usage=used(1000, 50, cached=400)),
            text("fine", usage=used(1200, 30, cached=1000)),
        ]
    )
    result = await run(make_config(model, tools=[echo_tool()], pricing=pricing, spend=spend))

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert len(spend.reserved) == 2 and spend.settled_once_each()
    assert [s[1] for s in spend.settled] == [650, 230]  # paid: prompt - cached + completion
    assert [s[2] for s in spend.settled] == pytest.approx([650e-6, 230e-6])


async def test_the_reservation_is_the_job_budgets_estimate_and_its_price() -> None:
    spend = FakeSpend()
    limits = Limits(max_output_tokens=100)
    model = ScriptedModel(
        [calls(call("check", "c1", host="web-03"), usage=used(1000, 50)), text("fine")]
    )
    recorder = Recorder()
    config = make_config(
        model, tools=[echo_tool()], pricing=pricing, spend=spend, limits=limits, on_event=recorder
    )
    result = await run(config)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    first, second = spend.reserved
    # The second call's reservation is what ``limits.reservation`` says after the first:
    # its uncached prompt plus chars/4 of what was added since, plus the maximum output.
    added = len("ok web-03")  # the tool result; the assistant message has no text
    assert second.tokens == 1000 + (added + len("check") + len('{"host": "web-03"}')) // 4 + 100
    # The price asked for is the reservation's: prompt = reserve - max output, and max output.
    assert first.cost_usd == pytest.approx(first.tokens * 1e-6)
    assert second.cost_usd == pytest.approx(second.tokens * 1e-6)


async def test_the_budget_and_the_cap_see_the_same_estimate() -> None:
    def job(budget: int) -> tuple[ScriptedModel, FakeSpend, Limits]:
        return ScriptedModel([text("fine")]), FakeSpend(), Limits(token_budget=budget)

    model, spend, limits = job(1_000_000)
    await run(make_config(model, spend=spend, limits=limits))
    reserved = spend.reserved[0].tokens

    # A budget one token short of that reservation refuses the call; one that fits it, not.
    model, spend, limits = job(reserved - 1)
    short = await run(make_config(model, spend=spend, limits=limits))
    assert short.stop_reason is StopReason.LIMIT_TOKENS and spend.reserved == []
    model, spend, limits = job(reserved)
    fits = await run(make_config(model, spend=spend, limits=limits))
    assert fits.stop_reason is StopReason.COMPLETED
    assert [r.tokens for r in spend.reserved] == [reserved]


async def test_a_refused_reservation_ends_the_job_with_the_caps_detail(
    recorder: Recorder,
) -> None:
    spend = FakeSpend(refuse_after=0)
    model = ScriptedModel([text("never")])
    result = await run(make_config(model, spend=spend, pricing=pricing, on_event=recorder))

    assert result.stop_reason is StopReason.LIMIT_TOKENS
    assert result.error == CAP_DETAIL and WORKSPACE_CAP in result.error
    assert model.requests == []  # no model call was made
    assert result.model_calls == 0
    assert [(e.reason, e.detail) for e in recorder.of("limit_reached")] == [
        (StopReason.LIMIT_TOKENS, CAP_DETAIL)
    ]
    assert spend.settled == []  # nothing was held, so nothing is settled


async def test_a_refusal_mid_job_keeps_the_last_text_as_output() -> None:
    spend = FakeSpend(refuse_after=1)
    model = ScriptedModel(
        [calls(call("check", "c1", host="web-03"), content="Checking web-03.", usage=used(10, 5))]
    )
    result = await run(make_config(model, tools=[echo_tool()], spend=spend, pricing=pricing))

    assert result.stop_reason is StopReason.LIMIT_TOKENS
    assert result.output == "Checking web-03."
    assert result.error == CAP_DETAIL
    assert result.iterations == 1 and result.tool_executions == 1
    assert spend.settled_once_each() and spend.refused == 1


async def test_a_model_error_settles_its_hold_before_the_fallback_reserves() -> None:
    spend = FakeSpend()
    primary = ScriptedModel([ModelUnavailableError("503")], name="primary")
    backup = ScriptedModel([text("fine", usage=used(100, 10))], name="backup")
    config = replace(
        make_config(primary, spend=spend, pricing=pricing), client=StaticChain([primary, backup])
    )
    result = await run(config)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert [r.model for r in spend.reserved] == ["primary", "backup"]
    assert spend.settled == [("hold-1", 0, 0.0), ("hold-2", 110, pytest.approx(110e-6))]


async def test_an_unpriced_model_reserves_and_settles_tokens_only() -> None:
    spend = FakeSpend()
    model = ScriptedModel([text("fine", usage=used(100, 10))], name="unpriced")
    result = await run(make_config(model, spend=spend, pricing=pricing))

    assert result.stop_reason is StopReason.COMPLETED
    assert spend.reserved[0].cost_usd is None
    assert spend.settled == [("hold-1", 110, None)]


async def test_stop_during_a_call_settles_its_hold_once(clock: FakeClock) -> None:
    spend = FakeSpend()
    in_flight, never = asyncio.Event(), asyncio.Event()

    async def hanging(request: ModelRequest) -> ModelResponse:
        in_flight.set()
        await never.wait()
        raise AssertionError("never returns")

    token = CancelToken()
    model = ScriptedModel([hanging])
    task = asyncio.create_task(
        run(make_config(model, spend=spend, pricing=pricing, cancel=token, clock=clock))
    )
    await asyncio.wait_for(in_flight.wait(), 5)
    token.cancel("stopped by <@U1>")
    result = await asyncio.wait_for(task, 5)

    assert result.stop_reason is StopReason.CANCELLED
    assert spend.settled == [("hold-1", 0, 0.0)]


async def test_the_deadline_during_a_call_settles_its_hold_once(clock: FakeClock) -> None:
    spend = FakeSpend()
    started, release = asyncio.Event(), asyncio.Event()

    async def slow(request: ModelRequest) -> ModelResponse:
        started.set()
        await release.wait()
        return text("late")

    model = ScriptedModel([slow])
    config = make_config(
        model, spend=spend, pricing=pricing, clock=clock, limits=Limits(deadline_s=60)
    )
    task = asyncio.create_task(run(config))
    await asyncio.wait_for(started.wait(), 5)
    clock.advance(60)
    result = await asyncio.wait_for(task, 5)

    assert result.stop_reason is StopReason.LIMIT_DEADLINE
    assert spend.settled == [("hold-1", 0, 0.0)]


async def test_a_repeating_stream_settles_with_the_estimate_it_is_charged() -> None:
    spend = FakeSpend()
    looping = ModelResponse(content="ha" * 400, finish_reason="stop")
    model = ScriptedModel([looping, text("fine", usage=used(100, 10))])
    result = await run(make_config(model, spend=spend, pricing=pricing, stream=True))

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert spend.settled_once_each() and len(spend.settled) == 2
    cut_tokens = spend.settled[0][1]
    assert cut_tokens > 0  # the cut stream's estimate, as the job's budget counts it
    assert result.usage.paid == cut_tokens + 110
    assert result.cost_usd == pytest.approx((cut_tokens + 110) * 1e-6)


async def test_an_unexpected_error_in_the_call_still_settles_its_hold() -> None:
    spend = FakeSpend()
    model = ScriptedModel([RuntimeError("a bug in the client")])
    result = await run(make_config(model, spend=spend, pricing=pricing))

    assert result.stop_reason is StopReason.FAILED
    assert spend.settled == [("hold-1", 0, 0.0)]


async def test_a_failing_reserve_abandons_the_run_like_a_failing_checkpoint() -> None:
    spend = FakeSpend(reserve_fails=True)
    model = ScriptedModel([text("never")])
    with pytest.raises(StoreError):
        await run(make_config(model, spend=spend, pricing=pricing))
    assert model.requests == []  # no call the cap was not charged for


async def test_a_failing_settle_keeps_the_response_and_goes_on() -> None:
    spend = FakeSpend(settle_fails=True)
    model = ScriptedModel(
        [calls(call("check", "c1", host="web-03"), usage=used(100, 10)), text("fine")]
    )
    result = await run(make_config(model, tools=[echo_tool()], spend=spend, pricing=pricing))

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert result.output == "fine"
    assert len(spend.settled) == 2  # tried once each, never again


async def test_without_a_cap_nothing_is_reserved() -> None:
    model = ScriptedModel([text("fine", usage=used(100, 10))])
    result = await run(make_config(model, pricing=pricing))
    assert result.stop_reason is StopReason.COMPLETED

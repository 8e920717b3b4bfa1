"""What a job's model calls cost, and the workspace-wide cap each call draws from: the
core's side of ``AgentConfig.pricing`` and ``AgentConfig.spend``.

``charge`` adds a call's cost to ``RunState.cost_usd`` (or counts it in
``unpriced_calls`` when its model has no price). ``hold`` reserves a call in the cap
before it is made, with the same token estimate the job's budget checks (and its price,
as prompt = reservation − max output, completion = max output); ``Held.settle`` then
charges what the call really used, exactly once, whatever became of the call (0 tokens
when it failed without usage).

Faults: a ``StoreError`` from ``reserve`` propagates, as from a checkpoint: the run is
abandoned, to be resumed, rather than making a call the cap was not charged for. A
failing ``settle`` is logged and the run goes on: the response is kept, and the hold
stays charged at its reservation (the cap errs on the side of spending less, as after a
crash). A pricing function that raises counts as no price (logged).
"""

from __future__ import annotations

import logging
from dataclasses import KW_ONLY, dataclass, field

from bot.agent.messages import Usage
from bot.agent.ports import Pricing, Spend, SpendHold, SpendRefused
from bot.agent.state import RunState

log = logging.getLogger(__name__)


def price(pricing: Pricing | None, model: str, usage: Usage) -> float | None:
    """The cost of one call, or None (no pricing, a model without a price)."""
    if pricing is None:
        return None
    try:
        return pricing(model, usage)
    except Exception:
        log.warning("pricing %r failed; the call is counted in tokens only", model, exc_info=True)
        return None


def charge(state: RunState, pricing: Pricing | None, model: str, usage: Usage) -> float | None:
    """Add a call's cost to the job's (none without pricing); the cost, or None."""
    if pricing is None:
        return None
    cost = price(pricing, model, usage)
    if cost is None:
        state.unpriced_calls += 1
    else:
        state.cost_usd = (state.cost_usd or 0.0) + cost
    return cost


def reserved_usage(reserve: int, max_output_tokens: int) -> Usage:
    """A reservation as usage, for its price: the prompt estimate and the whole output."""
    output = min(max_output_tokens, reserve)
    return Usage(prompt_tokens=reserve - output, completion_tokens=output)


@dataclass(eq=False)
class Held:
    """One call's hold in the cap, settled exactly once (``settle`` again does nothing)."""

    spend: Spend
    hold: SpendHold
    _: KW_ONLY
    model: str
    pricing: Pricing | None
    settled: bool = field(default=False, init=False)

    async def settle(self, usage: Usage) -> None:
        if self.settled:
            return
        self.settled = True
        cost = price(self.pricing, self.model, usage)
        try:
            await self.spend.settle(self.hold, tokens=usage.paid, cost_usd=cost)
        except Exception:
            log.warning(
                "settling a call of %s in the workspace cap failed; its hold stays charged",
                self.model,
                exc_info=True,
            )


async def hold(
    spend: Spend,
    pricing: Pricing | None,
    *,
    model: str,
    reserve: int,
    max_output_tokens: int,
) -> Held | SpendRefused:
    """Reserve the next call of ``model`` in the cap: ``reserve`` tokens (the job budget's
    estimate) and their price."""
    estimate = price(pricing, model, reserved_usage(reserve, max_output_tokens))
    got = await spend.reserve(model=model, tokens=reserve, cost_usd=estimate)
    if isinstance(got, SpendRefused):
        return got
    return Held(spend, got, model=model, pricing=pricing)

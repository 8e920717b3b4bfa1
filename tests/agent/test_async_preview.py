"""A preview that must ask its backend (a replica count now → the new one) is awaited for
the approval card, bounded: late or failing, the card goes out without it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass

import pytest
from pydantic import BaseModel

from bot.agent import CallContext, ConfirmRequest, Decision, FunctionTool, Pending, run
from bot.agent import calls as calls_module
from bot.agent.testing import ScriptedModel, call, calls

from .conftest import HostArgs, make_config


@dataclass(frozen=True, slots=True, kw_only=True)
class LivePreviewTool(FunctionTool):
    how: str = "fast"

    def preview(self, args: BaseModel, ctx: CallContext) -> Awaitable[str | None]:
        async def read() -> str:
            if self.how == "slow":
                await asyncio.Event().wait()
            if self.how == "broken":
                raise RuntimeError("the API server said no")
            return f"Scale {args.model_dump()['host']}: 3 → 5 replicas (3 running now)"

        return read()


def scale_tool(how: str) -> LivePreviewTool:
    async def fn(args: HostArgs, ctx: CallContext) -> str:
        return "scaled"

    return LivePreviewTool(
        name="scale", description="scale", args_model=HostArgs, fn=fn, category="mutating", how=how
    )


async def card_for(how: str) -> ConfirmRequest:
    asked: list[ConfirmRequest] = []

    async def confirm(request: ConfirmRequest) -> Decision:
        asked.append(request)
        return Pending()

    model = ScriptedModel([calls(call("scale", "c1", host="web"))])
    result = await run(make_config(model, tools=[scale_tool(how)], confirm=confirm))
    assert result.stop_reason.value == "awaiting_approval", result.error
    [request] = asked
    return request


async def test_an_awaitable_preview_is_awaited_for_the_card() -> None:
    request = await card_for("fast")
    assert request.preview == "Scale web: 3 → 5 replicas (3 running now)"


@pytest.mark.parametrize("how", ["slow", "broken"])
async def test_a_late_or_failing_preview_leaves_the_card_without_it(
    how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(calls_module, "PREVIEW_TIMEOUT_S", 0.05)
    request = await asyncio.wait_for(card_for(how), 5)
    assert request.preview is None and request.tool == "scale"

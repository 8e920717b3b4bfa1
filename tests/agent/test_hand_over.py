"""Handing a job over (the process is shutting down): the run stops at the start of an
iteration, after the previous step was saved, by raising ``HandedOver`` (a ``StoreError``:
abandoned, not ended); resumed from the saved state elsewhere, nothing runs twice."""

from __future__ import annotations

import pytest

from bot.agent import (
    CallContext,
    FunctionTool,
    InMemoryHistory,
    RunState,
    StopReason,
    UserMessage,
    run,
)
from bot.agent.testing import ScriptedModel, call, calls, text
from bot.errors import HandedOver, StoreError

from .conftest import HostArgs, make_config


async def test_a_run_hands_over_after_its_step_and_resumes_elsewhere_without_rerunning() -> None:
    ran: list[str] = []

    async def check(args: HostArgs, ctx: CallContext) -> str:
        ran.append(args.host)
        return f"ok {args.host}"

    tool = FunctionTool(name="check", description="check", args_model=HostArgs, fn=check)
    saved: list[RunState] = []

    async def checkpoint(state: RunState) -> None:
        saved.append(state.model_copy(deep=True))

    leaving = False

    def hand_over() -> bool:
        return leaving

    model = ScriptedModel(
        [calls(call("check", "c1", host="web-03")), calls(call("check", "c2", host="web-04"))]
    )
    memory = InMemoryHistory()
    memory.append(UserMessage(content="check web-03 and web-04"))

    async def leave_after_first(state: RunState) -> None:
        nonlocal leaving
        await checkpoint(state)
        leaving = True  # SIGTERM arrived while the first step ran

    config = make_config(
        model, tools=[tool], memory=memory, on_checkpoint=leave_after_first, hand_over=hand_over
    )
    with pytest.raises(HandedOver) as raised:
        await run(config)
    assert isinstance(raised.value, StoreError)  # abandoned like a store failure, not ended
    assert ran == ["web-03"] and len(model.requests) == 1
    state = saved[-1]
    assert state.iterations == 1 and state.tool_executions == 1

    # Another process resumes from the saved state and history: the first call is not
    # made again; the job goes on and ends.
    leaving = False
    next_model = ScriptedModel([calls(call("check", "c2", host="web-04")), text("both fine")])
    resumed = make_config(next_model, tools=[tool], memory=memory, hand_over=hand_over)
    result = await run(resumed, state)
    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert ran == ["web-03", "web-04"]
    assert result.iterations == 3

"""Condensing happens at most once per job, not once per run: a job that condensed,
paused for an approval and resumed does not condense again however large its prompt
grows (``RunState.condensed``, saved with the job's state)."""

from __future__ import annotations

from bot.agent import FunctionTool, RunState, StopReason, Usage, run
from bot.agent.ports import Approved, ConfirmRequest, Decision, Pending
from bot.agent.testing import ScriptedModel, call, calls, text

from .conftest import HostArgs, echo_tool, make_config
from .test_model_recovery import Condenser, fresh_memory


def restart_tool() -> FunctionTool:
    async def fn(args: HostArgs, ctx: object) -> str:
        return f"restarted {args.host}"

    return FunctionTool(
        name="restart", description="restart", args_model=HostArgs, fn=fn, category="mutating"
    )


async def test_a_resumed_job_does_not_condense_again() -> None:
    memory = fresh_memory()
    condense = Condenser(upto=1)
    model = ScriptedModel(
        [
            calls(call("check", "c1", host="web-03"), usage=Usage(prompt_tokens=1000)),
            calls(call("restart", "c2", host="web-03"), usage=Usage(prompt_tokens=1500)),
            calls(call("check", "c3", host="web-03"), usage=Usage(prompt_tokens=2000)),
            text("restarted and checked", usage=Usage(prompt_tokens=2500)),
        ]
    )
    asked: list[ConfirmRequest] = []

    async def pending(request: ConfirmRequest) -> Decision:
        asked.append(request)
        return Pending()

    tools = [echo_tool(), restart_tool()]
    first = make_config(
        model,
        tools=tools,
        memory=memory,
        condense=condense,
        condense_at_tokens=1000,
        confirm=pending,
    )
    paused = await run(first)
    assert paused.stop_reason is StopReason.AWAITING_APPROVAL, paused.error
    assert len(condense.seen) == 1  # the first run condensed once
    state = RunState.model_validate_json(paused.state.model_dump_json())  # as stored
    assert state.condensed

    assert paused.approval is not None
    decision = Approved(
        confirmed_by="U0APPROVER", tool=paused.approval.tool, args_hash=paused.approval.args_hash
    )
    resumed = make_config(
        model,
        tools=tools,
        memory=memory,
        condense=condense,
        condense_at_tokens=1000,
        confirm=pending,
    )
    result = await run(resumed, state, decision)
    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert len(condense.seen) == 1  # the resumed run, past the threshold, did not condense

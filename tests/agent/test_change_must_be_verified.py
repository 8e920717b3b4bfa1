"""After an approved change ran, the job is done only once a read-only call checked it.

With the production stop predicate (``work_done``): a mutating or destructive call that
ran (its result not an error) makes the job's answer wait for a read-only call that
returns a result after it. An answer without one gets, once per job, a ``user`` message
asking to verify the change, and the model is called again (an iteration like any
other); a second answer without a check ends the job ``incomplete``, "not verified". A
change that did not run (denied, no approver, failed) needs no check, and a check that
failed, came before the change, or only read back a stored output is no check. What the
job knows (a change unverified, already asked) lives in ``RunState`` and survives a
pause for approval.
"""

from __future__ import annotations

from typing import Any

from bot.agent import (
    Approved,
    CallContext,
    ConfirmRequest,
    Decision,
    Denied,
    FunctionTool,
    InMemoryHistory,
    Limits,
    Pending,
    RunResult,
    RunState,
    StopReason,
    UserMessage,
    run,
)
from bot.agent.testing import ScriptedModel, call, calls, text
from bot.agent.work_done import VERIFY, VERIFY_MESSAGE, work_done
from bot.errors import ToolError

from .conftest import HostArgs, echo_tool, make_config

APPROVER = "U0123ABC"
ASKED = UserMessage(content=VERIFY_MESSAGE.format(tool="restart"))


async def restarted(args: HostArgs, ctx: CallContext) -> str:
    return f"restarted nginx on {args.host}"


async def refused(args: HostArgs, ctx: CallContext) -> str:
    raise ToolError("unit nginx not found")


def tools(*, restart_fails: bool = False) -> list[FunctionTool]:
    restart = FunctionTool(
        name="restart",
        description="restart nginx",
        args_model=HostArgs,
        fn=refused if restart_fails else restarted,
        category="mutating",
    )
    return [echo_tool(), restart]


async def approve(request: ConfirmRequest) -> Decision:
    return Approved(confirmed_by=APPROVER, tool=request.tool, args_hash=request.args_hash)


def restart(call_id: str | None = None) -> Any:
    return call("restart", call_id, host="web-03") if call_id else call("restart", host="web-03")


def check() -> Any:
    return call("check", host="web-03")


def config(model: ScriptedModel, **kw: Any) -> Any:
    kw.setdefault("confirm", approve)
    kw.setdefault("tools", tools())
    return make_config(model, stop=work_done, **kw)


def asked(model: ScriptedModel) -> int:
    """How many times the last request's history holds the verify question."""
    return sum(1 for m in model.histories[-1] if m == ASKED)


async def test_an_answer_right_after_a_change_is_asked_to_verify_it_once() -> None:
    model = ScriptedModel(
        [calls(restart()), text("restarted"), calls(check()), text("restarted and checked")]
    )

    result = await run(config(model))

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert result.output == "restarted and checked"
    # The question came right after the unchecked answer, and cost an iteration.
    assert model.histories[2][-1] == ASKED
    assert result.iterations == 4
    assert result.state.unverified_change is None and result.state.asked == [VERIFY]
    model.assert_done()


async def test_a_second_answer_without_a_check_ends_incomplete_not_verified() -> None:
    model = ScriptedModel([calls(restart()), text("restarted"), text("restarted, trust me")])

    result = await run(config(model))

    assert result.stop_reason is StopReason.INCOMPLETE
    assert result.error == "the change was not verified: no read-only check ran after restart"
    assert result.output == "restarted, trust me"
    assert asked(model) == 1  # asked once, never twice
    model.assert_done()


async def test_a_check_after_the_change_in_the_same_batch_verifies_it() -> None:
    model = ScriptedModel([calls(restart(), check()), text("restarted, web-03 answers")])

    result = await run(config(model))

    assert result.stop_reason is StopReason.COMPLETED
    assert asked(model) == 0
    model.assert_done()


async def test_a_check_before_the_change_verifies_nothing() -> None:
    model = ScriptedModel([calls(check(), restart()), text("restarted"), text("restarted")])

    result = await run(config(model))

    assert result.stop_reason is StopReason.INCOMPLETE
    assert asked(model) == 1


async def test_a_change_that_did_not_run_needs_no_check() -> None:
    denied = ScriptedModel([calls(restart()), text("left nginx alone")])

    async def deny(request: ConfirmRequest) -> Decision:
        return Denied(reason="denied by <@U1>")

    assert (await run(config(denied, confirm=deny))).stop_reason is StopReason.COMPLETED

    failed = ScriptedModel([calls(restart()), text("the restart failed")])
    result = await run(config(failed, tools=tools(restart_fails=True)))
    assert result.stop_reason is StopReason.COMPLETED
    assert result.state.unverified_change is None


async def test_a_failed_check_or_reading_back_an_output_is_no_check() -> None:
    async def down(args: HostArgs, ctx: CallContext) -> str:
        raise ToolError("connection refused")

    broken = FunctionTool(name="probe", description="probe", args_model=HostArgs, fn=down)
    stored = echo_tool("read_artifact")  # DESIGN's built-in: reads what the job already has
    model = ScriptedModel(
        [
            calls(restart()),
            calls(call("probe", host="web-03"), call("read_artifact", host="web-03")),
            text("restarted"),
            text("restarted"),
        ]
    )

    result = await run(config(model, tools=[*tools(), broken, stored]))

    assert result.stop_reason is StopReason.INCOMPLETE
    assert result.state.unverified_change == "restart"


async def test_what_is_unverified_and_already_asked_survives_pauses() -> None:
    # Run 1: a restart runs, the model answers, is asked to verify, and asks for a second
    # restart instead: the job pauses for its approval.
    first = ScriptedModel([calls(restart("c1")), text("restarted"), calls(restart("c2"))])
    decisions: list[Decision] = [
        Approved(confirmed_by=APPROVER, tool="restart", args_hash=None),
        Pending(),
    ]

    async def confirm(request: ConfirmRequest) -> Decision:
        return decisions.pop(0)

    memory = InMemoryHistory()
    memory.append(UserMessage(content="restart nginx on web-03"))
    paused = await run(config(first, confirm=confirm, memory=memory))
    assert paused.stop_reason is StopReason.AWAITING_APPROVAL
    saved = through_json(paused)
    assert saved.unverified_change == "restart" and saved.asked == [VERIFY]

    # Run 2 (another process, from the saved state): the second restart is denied and
    # the model answers without a check. Already asked: the job ends not verified.
    second = ScriptedModel([text("done")])
    result = await run(config(second, memory=memory), saved, Denied(reason="denied by <@U1>"))

    assert result.stop_reason is StopReason.INCOMPLETE
    assert result.error is not None and "not verified" in result.error
    assert asked(second) == 1
    second.assert_done()


async def test_the_question_costs_the_jobs_limits() -> None:
    model = ScriptedModel([calls(restart()), text("restarted")])

    result = await run(config(model, limits=Limits(max_iterations=2)))

    # The question was added, and the call it needs is one the job no longer has.
    assert result.stop_reason is StopReason.LIMIT_ITERATIONS
    assert result.state.asked == [VERIFY]
    model.assert_done()


def through_json(result: RunResult) -> RunState:
    return RunState.model_validate_json(result.state.model_dump_json())

"""Confirmation of mutating and destructive calls.

A call that changes the world runs only on an explicit ``Approved`` from the confirm
callback; without a callback or on ``Denied`` the model gets an ``Error: declined: …``
result and the run goes on. The approver's id reaches the tool through the call's
arguments and ``CallContext`` and is recorded on the ``ToolMessage``; a ``confirmed_by``
written by the model never counts. Destructive tools run a dry run first, whose output
goes to the confirm request; a failing dry run asks nobody.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pytest
from pydantic import BaseModel

from bot.agent import (
    AnyMessage,
    Approved,
    CallContext,
    ConfirmRequest,
    Decision,
    Denied,
    FunctionTool,
    StopReason,
    ToolMessage,
    run,
)
from bot.agent.testing import FakeClock, ScriptedModel, call, calls, text
from bot.errors import ToolError

from .conftest import Recorder, echo_tool, make_config

APPROVER = "U0123ABC"
RESTART = {"host": "web-03", "service": "nginx"}


class RestartArgs(BaseModel):
    host: str
    service: str
    confirmed_by: str | None = None


class PlainRestartArgs(BaseModel):
    host: str
    service: str


class SilenceArgs(BaseModel):
    """Like Alertmanager's silence, whose ``createdBy`` must always be filled in."""

    matcher: str
    confirmed_by: str


@dataclass(frozen=True, slots=True)
class Execution:
    args: Any
    ctx: CallContext


def recording_tool(
    executions: list[Execution],
    *,
    name: str = "restart_service",
    category: Literal["read_only", "mutating", "destructive"] = "mutating",
    args_model: type[BaseModel] = RestartArgs,
    dry_run_error: str | None = None,
) -> FunctionTool:
    """A tool that records every execution; its dry run may fail with ``dry_run_error``."""

    async def fn(args: Any, ctx: CallContext) -> str:
        executions.append(Execution(args, ctx))
        if ctx.dry_run:
            if dry_run_error is not None:
                raise ToolError(dry_run_error)
            return f"would {name} on {args.host}"
        return f"did {name} on {args.host}"

    return FunctionTool(
        name=name, description=name, args_model=args_model, fn=fn, category=category
    )


class Confirmer:
    """A confirm callback answering from a list of decisions and keeping the requests."""

    def __init__(self, *decisions: Decision) -> None:
        self.decisions = list(decisions)
        self.requests: list[ConfirmRequest] = []

    async def __call__(self, request: ConfirmRequest) -> Decision:
        self.requests.append(request)
        return self.decisions.pop(0)


def tool_messages(messages: Sequence[AnyMessage]) -> list[ToolMessage]:
    return [m for m in messages if isinstance(m, ToolMessage)]


def expected_hash(arguments: dict[str, object]) -> str:
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def restart(call_id: str = "c1", **extra: object) -> Any:
    return call("restart_service", call_id, host="web-03", service="nginx", **extra)


@pytest.mark.parametrize("category", ["mutating", "destructive"])
async def test_without_a_confirm_callback_the_call_is_an_error_result(
    clock: FakeClock, category: Literal["mutating", "destructive"]
) -> None:
    executions: list[Execution] = []
    model = ScriptedModel([calls(restart()), text("could not restart")])
    config = make_config(model, tools=[recording_tool(executions, category=category)], clock=clock)

    result = await run(config)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert result.output == "could not restart"
    [message] = tool_messages(model.requests[1].messages)
    assert message.tool_call_id == "c1"
    assert message.is_error
    assert message.content.startswith("Error: declined: ")
    assert message.confirmed_by is None
    assert [e for e in executions if not e.ctx.dry_run] == []
    model.assert_done()


async def test_denial_reaches_the_model_and_the_run_goes_on(clock: FakeClock) -> None:
    executions: list[Execution] = []
    confirm = Confirmer(Denied(reason="denied by <@U1>"))
    model = ScriptedModel([calls(restart()), text("left nginx alone")])
    config = make_config(model, tools=[recording_tool(executions)], confirm=confirm, clock=clock)

    result = await run(config)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    [message] = tool_messages(model.requests[1].messages)
    assert message.content == "Error: declined: denied by <@U1>"
    assert message.is_error
    assert message.confirmed_by is None
    assert executions == []
    assert len(confirm.requests) == 1
    model.assert_done()


async def test_approval_runs_the_call_with_the_approver_set_from_the_decision(
    clock: FakeClock, recorder: Recorder
) -> None:
    executions: list[Execution] = []
    confirm = Confirmer(Approved(confirmed_by=APPROVER))
    model = ScriptedModel([calls(restart("c7")), text("restarted")])
    config = make_config(
        model,
        tools=[recording_tool(executions)],
        confirm=confirm,
        clock=clock,
        job_id="job-42",
        on_event=recorder,
    )

    result = await run(config)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    [execution] = executions
    assert execution.args.confirmed_by == APPROVER
    assert (execution.args.host, execution.args.service) == ("web-03", "nginx")
    assert execution.ctx.confirmed_by == APPROVER
    assert execution.ctx.idempotency_key == "job-42:c7"
    assert execution.ctx.dry_run is False
    [message] = tool_messages(model.requests[1].messages)
    assert message.content == "did restart_service on web-03"
    assert message.confirmed_by == APPROVER
    assert not message.is_error
    # The trace shows the approver among the arguments the call ran with.
    [start] = recorder.of("tool_start")
    assert start.arguments == {"host": "web-03", "service": "nginx", "confirmed_by": APPROVER}
    model.assert_done()


async def test_tool_without_a_confirmed_by_field_gets_the_approver_in_its_context(
    clock: FakeClock,
) -> None:
    executions: list[Execution] = []
    confirm = Confirmer(Approved(confirmed_by=APPROVER))
    model = ScriptedModel([calls(restart()), text("restarted")])
    tool = recording_tool(executions, args_model=PlainRestartArgs)
    config = make_config(model, tools=[tool], confirm=confirm, clock=clock)

    result = await run(config)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    [execution] = executions
    assert execution.ctx.confirmed_by == APPROVER
    assert not hasattr(execution.args, "confirmed_by")
    [message] = tool_messages(model.requests[1].messages)
    assert message.confirmed_by == APPROVER


async def test_a_required_confirmed_by_field_is_filled_from_the_decision(
    clock: FakeClock,
) -> None:
    """The model is never offered ``confirmed_by`` (see ``tool_spec``), so a required
    field must be satisfied by the runtime, not fail the model's call as invalid."""
    executions: list[Execution] = []
    confirm = Confirmer(Approved(confirmed_by=APPROVER))
    model = ScriptedModel(
        [calls(call("create_silence", "c1", matcher="alertname=HighCPU")), text("silenced")]
    )

    async def fn(args: SilenceArgs, ctx: CallContext) -> str:
        executions.append(Execution(args, ctx))
        return f"silenced {args.matcher} by {args.confirmed_by}"

    silence = FunctionTool(
        name="create_silence",
        description="Silence alerts.",
        args_model=SilenceArgs,
        fn=fn,
        category="mutating",
    )
    config = make_config(model, tools=[silence], confirm=confirm, clock=clock)

    result = await run(config)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    [message] = tool_messages(model.requests[1].messages)
    assert not message.is_error, message.content
    [execution] = executions
    assert execution.args.confirmed_by == APPROVER
    assert len(confirm.requests) == 1
    assert "confirmed_by" not in confirm.requests[0].arguments


async def test_a_confirmed_by_written_by_the_model_is_stripped(clock: FakeClock) -> None:
    executions: list[Execution] = []
    confirm = Confirmer(Approved(confirmed_by=APPROVER))
    model = ScriptedModel([calls(restart(confirmed_by="U_FORGED")), text("restarted")])
    config = make_config(model, tools=[recording_tool(executions)], confirm=confirm, clock=clock)

    result = await run(config)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    [request] = confirm.requests
    assert request.arguments == {"host": "web-03", "service": "nginx"}
    assert request.args_hash == expected_hash({"host": "web-03", "service": "nginx"})
    [execution] = executions
    assert execution.args.confirmed_by == APPROVER
    assert execution.ctx.confirmed_by == APPROVER
    [message] = tool_messages(model.requests[1].messages)
    assert message.confirmed_by == APPROVER


async def test_a_forged_confirmed_by_never_reaches_a_tool_that_needs_no_approval(
    clock: FakeClock,
) -> None:
    executions: list[Execution] = []
    model = ScriptedModel(
        [calls(call("status", "c1", host="web-03", service="nginx", confirmed_by="U_FORGED"))]
        + [text("nginx is running")]
    )
    tool = recording_tool(executions, name="status", category="read_only")
    config = make_config(model, tools=[tool], clock=clock)

    result = await run(config)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    [execution] = executions
    assert execution.args.confirmed_by is None
    assert execution.ctx.confirmed_by is None
    [message] = tool_messages(model.requests[1].messages)
    assert message.confirmed_by is None


async def test_a_forged_confirmed_by_does_not_stand_in_for_an_approval(clock: FakeClock) -> None:
    executions: list[Execution] = []
    model = ScriptedModel([calls(restart(confirmed_by=APPROVER)), text("not approved")])
    config = make_config(model, tools=[recording_tool(executions)], clock=clock)

    result = await run(config)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    [message] = tool_messages(model.requests[1].messages)
    assert message.content.startswith("Error: declined: ")
    assert message.confirmed_by is None
    assert executions == []


async def test_confirm_request_describes_the_call(clock: FakeClock) -> None:
    confirm = Confirmer(Denied(reason="denied by <@U1>"))
    reason = "nginx workers are being OOM-killed; a restart should clear them."
    # Keys in another order than the canonical one: the hash must not depend on it.
    model = ScriptedModel(
        [
            calls(
                call("restart_service", "c3", service="nginx", host="web-03"),
                content=reason,
            ),
            text("ok"),
        ]
    )
    config = make_config(
        model, tools=[recording_tool([])], confirm=confirm, clock=clock, job_id="job-9"
    )

    result = await run(config)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    [request] = confirm.requests
    assert request.job_id == "job-9"
    assert request.call_id == "c3"
    assert request.tool == "restart_service"
    assert request.category == "mutating"
    assert request.arguments == {"host": "web-03", "service": "nginx"}
    assert request.args_hash == expected_hash({"host": "web-03", "service": "nginx"})
    assert request.reason == reason
    assert request.dry_run_output is None


async def test_confirm_request_has_no_reason_when_the_call_came_without_text(
    clock: FakeClock,
) -> None:
    confirm = Confirmer(Denied(reason="denied by <@U1>"))
    model = ScriptedModel([calls(restart()), text("ok")])
    config = make_config(model, tools=[recording_tool([])], confirm=confirm, clock=clock)

    await run(config)

    [request] = confirm.requests
    assert request.reason is None


async def test_every_mutating_call_needs_its_own_approval(clock: FakeClock) -> None:
    executions: list[Execution] = []
    confirm = Confirmer(Approved(confirmed_by=APPROVER), Denied(reason="denied by <@U1>"))
    model = ScriptedModel(
        [
            calls(restart("c1"), call("restart_service", "c2", host="web-01", service="nginx")),
            text("restarted one of two"),
        ]
    )
    config = make_config(model, tools=[recording_tool(executions)], confirm=confirm, clock=clock)

    result = await run(config)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert [r.call_id for r in confirm.requests] == ["c1", "c2"]
    assert [e.args.host for e in executions] == ["web-03"]
    first, second = tool_messages(model.requests[1].messages)
    assert (first.tool_call_id, first.confirmed_by, first.is_error) == ("c1", APPROVER, False)
    assert (second.tool_call_id, second.content) == ("c2", "Error: declined: denied by <@U1>")


async def test_destructive_call_dry_runs_before_asking_and_shows_the_output(
    clock: FakeClock,
) -> None:
    executions: list[Execution] = []
    confirm = Confirmer(Approved(confirmed_by=APPROVER))
    model = ScriptedModel(
        [calls(call("stop_service", "c1", host="web-03", service="nginx")), text("stopped")]
    )
    tool = recording_tool(executions, name="stop_service", category="destructive")
    config = make_config(model, tools=[tool], confirm=confirm, clock=clock)

    result = await run(config)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert [(e.ctx.dry_run, e.ctx.confirmed_by) for e in executions] == [
        (True, None),
        (False, APPROVER),
    ]
    assert executions[0].args.confirmed_by is None
    [request] = confirm.requests
    assert request.category == "destructive"
    assert request.dry_run_output == "would stop_service on web-03"
    [message] = tool_messages(model.requests[1].messages)
    assert message.content == "did stop_service on web-03"
    assert message.confirmed_by == APPROVER
    assert result.tool_executions == 1  # the dry run is not an execution


async def test_a_failing_dry_run_is_an_error_result_and_asks_nobody(clock: FakeClock) -> None:
    executions: list[Execution] = []
    confirm = Confirmer(Approved(confirmed_by=APPROVER))
    model = ScriptedModel(
        [calls(call("stop_service", "c1", host="web-03", service="nginx")), text("could not")]
    )
    tool = recording_tool(
        executions,
        name="stop_service",
        category="destructive",
        dry_run_error="nginx is not managed on web-03",
    )
    config = make_config(model, tools=[tool], confirm=confirm, clock=clock)

    result = await run(config)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert confirm.requests == []
    assert [e.ctx.dry_run for e in executions] == [True]
    [message] = tool_messages(model.requests[1].messages)
    assert message.is_error
    assert message.content.startswith("Error: ")
    assert "nginx is not managed on web-03" in message.content
    assert message.confirmed_by is None
    model.assert_done()


async def test_read_only_calls_are_never_confirmed(clock: FakeClock) -> None:
    confirm = Confirmer()  # any request would pop from an empty list and fail the run
    model = ScriptedModel([calls(call("check", "c1", host="web-03")), text("fine")])
    config = make_config(model, tools=[echo_tool()], confirm=confirm, clock=clock)

    result = await run(config)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert confirm.requests == []


@pytest.mark.parametrize(
    "decision",
    [
        Approved(confirmed_by=APPROVER, tool="restart_service", args_hash="0" * 64),
        Approved(confirmed_by=APPROVER, tool="stop_service", args_hash=expected_hash(RESTART)),
    ],
    ids=["other-args", "other-tool"],
)
async def test_an_approval_bound_to_another_call_does_not_run_this_one(
    clock: FakeClock, decision: Approved
) -> None:
    executions: list[Execution] = []
    model = ScriptedModel([calls(restart()), text("not approved")])
    config = make_config(
        model, tools=[recording_tool(executions)], confirm=Confirmer(decision), clock=clock
    )

    result = await run(config)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert executions == []
    [message] = tool_messages(model.requests[1].messages)
    assert message.content.startswith("Error: declined: ")
    assert message.confirmed_by is None


async def test_an_approval_bound_to_this_call_runs_it(clock: FakeClock) -> None:
    executions: list[Execution] = []
    decision = Approved(
        confirmed_by=APPROVER, tool="restart_service", args_hash=expected_hash(RESTART)
    )
    model = ScriptedModel([calls(restart()), text("restarted")])
    config = make_config(
        model, tools=[recording_tool(executions)], confirm=Confirmer(decision), clock=clock
    )

    result = await run(config)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert [e.ctx.confirmed_by for e in executions] == [APPROVER]


@dataclass(frozen=True, slots=True, kw_only=True)
class PreviewingTool(FunctionTool):
    """A tool that says what a call will run (as a command tool does)."""

    fails: bool = False

    def preview(self, args: Any, ctx: CallContext) -> str | None:
        if self.fails:
            raise RuntimeError("cannot render")
        return f"ssh {args.host} systemctl restart {args.service} # by {ctx.confirmed_by}"


@pytest.mark.parametrize("fails", [False, True])
async def test_confirm_request_carries_the_tools_preview(clock: FakeClock, fails: bool) -> None:
    base = recording_tool([])
    tool = PreviewingTool(
        name=base.name,
        description=base.description,
        args_model=base.args_model,
        fn=base.fn,
        category="mutating",
        fails=fails,
    )
    confirm = Confirmer(Denied(reason="denied by <@U1>"))
    model = ScriptedModel([calls(restart()), text("ok")])
    result = await run(make_config(model, tools=[tool], confirm=confirm, clock=clock))

    assert result.stop_reason is StopReason.COMPLETED, result.error
    [request] = confirm.requests
    if fails:  # a preview is a courtesy: the card is asked for without it
        assert request.preview is None
    else:
        assert request.preview == "ssh web-03 systemctl restart nginx # by <approver>"

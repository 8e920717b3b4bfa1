"""Approve with edits: the approver changes the call's arguments before it runs.

An ``Approved`` carrying ``arguments`` runs the paused call once with those arguments
(validated again by the tool's model, ``confirmed_by`` the approver's), the model's
result starts with ``approved with edits by <@U…>: replicas 5 → 3``, and the tool's
start event names both argument sets. Edited arguments the tool's model refuses are a
declined call, never a run. The form's side (``edit_fields``/``parse_edit``) judges the
text a person typed the same way.
"""

from __future__ import annotations

import hashlib
import json
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, Field

from bot.agent import (
    Approved,
    CallContext,
    ConfirmRequest,
    Decision,
    FunctionTool,
    InMemoryHistory,
    Pending,
    StopReason,
    ToolMessage,
    UserMessage,
    run,
)
from bot.agent.edits import EditedCall, EditErrors, edit_diff, edit_fields, parse_edit
from bot.agent.events import ToolStart
from bot.agent.testing import FakeClock, ScriptedModel, call, calls, text

from .conftest import Recorder, make_config

EDITOR = "U0EDITOR1"


class Strategy(StrEnum):
    ROLLING = "rolling"
    RECREATE = "recreate"


class ScaleArgs(BaseModel):
    name: str = Field(description="Deployment")
    replicas: int = Field(ge=0, le=1000, description="The new replica count")
    strategy: Strategy = Strategy.ROLLING
    mode: Literal["fast", "safe"] = "safe"
    force: bool = False
    note: str | None = None
    labels: list[str] = Field(default_factory=list)
    confirmed_by: str | None = None


class Confirmer:
    def __init__(self, *decisions: Decision) -> None:
        self.decisions = list(decisions)
        self.requests: list[ConfirmRequest] = []

    async def __call__(self, request: ConfirmRequest) -> Decision:
        self.requests.append(request)
        return self.decisions.pop(0)


def scale_tool(ran: list[tuple[ScaleArgs, CallContext]]) -> FunctionTool:
    async def fn(args: Any, ctx: CallContext) -> str:
        ran.append((args, ctx))
        return f"scaled {args.name} to {args.replicas}"

    return FunctionTool(
        name="scale", description="Scale a deployment", args_model=ScaleArgs, fn=fn,
        category="mutating",
    )  # fmt: skip


def digest(arguments: dict[str, object]) -> str:
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


async def paused_scale(
    clock: FakeClock, ran: list[tuple[ScaleArgs, CallContext]]
) -> tuple[Any, Any, InMemoryHistory, ScriptedModel]:
    model = ScriptedModel(
        [calls(call("scale", "c1", name="web", replicas=5), content="scale up"), text("done")]
    )
    memory = InMemoryHistory()
    memory.append(UserMessage(content="web is slow"))
    paused = await run(
        make_config(model, tools=[scale_tool(ran)], memory=memory, confirm=Confirmer(Pending()),
                    clock=clock)
    )  # fmt: skip
    assert paused.stop_reason is StopReason.AWAITING_APPROVAL, paused.error
    return paused, paused.state, memory, model


async def test_an_edited_approval_runs_once_with_the_edited_arguments(clock: FakeClock) -> None:
    ran: list[tuple[ScaleArgs, CallContext]] = []
    paused, state, memory, model = await paused_scale(clock, ran)
    approval = paused.approval
    edited = {**approval.arguments, "replicas": 3}
    recorder = Recorder()
    config = make_config(
        model, tools=[scale_tool(ran)], memory=memory, confirm=Confirmer(), clock=clock,
        on_event=recorder,
    )  # fmt: skip
    decision = Approved(
        confirmed_by=EDITOR, tool="scale", args_hash=approval.args_hash, arguments=edited
    )

    result = await run(config, state, decision)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    [(args, ctx)] = ran
    assert args.replicas == 3 and args.confirmed_by == EDITOR
    assert ctx.confirmed_by == EDITOR
    [message] = [m for m in model.requests[1].messages if isinstance(m, ToolMessage)]
    assert message.content.splitlines()[0] == (
        f"approved with edits by <@{EDITOR}>: replicas 5 → 3"
    )
    assert message.content.splitlines()[1] == "scaled web to 3"
    assert message.confirmed_by == EDITOR
    [start] = [e for e in recorder.events if isinstance(e, ToolStart)]
    assert start.arguments["replicas"] == 3
    assert start.proposed is not None and start.proposed["replicas"] == 5


async def test_edited_arguments_the_tool_refuses_are_never_run(clock: FakeClock) -> None:
    ran: list[tuple[ScaleArgs, CallContext]] = []
    paused, state, memory, model = await paused_scale(clock, ran)
    approval = paused.approval
    config = make_config(model, tools=[scale_tool(ran)], memory=memory, clock=clock)
    decision = Approved(
        confirmed_by=EDITOR,
        tool="scale",
        args_hash=approval.args_hash,
        arguments={**approval.arguments, "replicas": -1},
    )

    result = await run(config, state, decision)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert ran == []
    [message] = [m for m in model.requests[1].messages if isinstance(m, ToolMessage)]
    assert message.content.startswith("Error: declined: the edited call is not valid")
    assert "replicas" in message.content


async def test_an_edit_that_changes_nothing_is_a_plain_approval(clock: FakeClock) -> None:
    ran: list[tuple[ScaleArgs, CallContext]] = []
    paused, state, memory, model = await paused_scale(clock, ran)
    approval = paused.approval
    config = make_config(model, tools=[scale_tool(ran)], memory=memory, clock=clock)
    decision = Approved(
        confirmed_by=EDITOR,
        tool="scale",
        args_hash=approval.args_hash,
        arguments=dict(approval.arguments),
    )

    await run(config, state, decision)

    [message] = [m for m in model.requests[1].messages if isinstance(m, ToolMessage)]
    assert message.content == "scaled web to 5"


def test_the_form_has_one_typed_field_per_argument() -> None:
    tool = scale_tool([])
    proposed = ScaleArgs(name="web", replicas=5).model_dump(mode="json", exclude={"confirmed_by"})
    fields = {f.name: f for f in edit_fields(tool, proposed)}

    assert list(fields) == ["name", "replicas", "strategy", "mode", "force", "note", "labels"]
    assert fields["replicas"].kind == "integer" and fields["replicas"].initial == "5"
    assert fields["strategy"].kind == "choice"
    assert fields["strategy"].options == ("rolling", "recreate")
    assert fields["mode"].kind == "choice" and fields["mode"].initial == "safe"
    assert fields["force"].kind == "boolean" and fields["force"].initial == "false"
    assert fields["note"].kind == "text" and not fields["note"].required
    assert fields["labels"].kind == "json" and fields["labels"].initial == "[]"
    assert fields["name"].description == "Deployment"


def test_the_form_judges_values_like_the_tool() -> None:
    tool = scale_tool([])
    proposed = ScaleArgs(name="web", replicas=5).model_dump(mode="json", exclude={"confirmed_by"})

    negative = parse_edit(tool, proposed, {"replicas": "-1"})
    assert isinstance(negative, EditErrors) and list(negative.errors) == ["replicas"]
    assert "greater than or equal to 0" in negative.errors["replicas"]

    word = parse_edit(tool, proposed, {"replicas": "three"})
    assert isinstance(word, EditErrors)
    assert word.errors == {"replicas": "must be a whole number"}

    choice = parse_edit(tool, proposed, {"mode": "reckless"})
    assert isinstance(choice, EditErrors) and choice.errors["mode"].startswith("must be one of")

    good = parse_edit(tool, proposed, {"replicas": "3", "force": "true", "labels": '["a"]'})
    assert isinstance(good, EditedCall) and good.changed
    assert good.arguments["replicas"] == 3 and good.arguments["force"] is True
    assert good.diff == 'replicas 5 → 3, force false → true, labels [] → ["a"]'

    same = parse_edit(tool, proposed, {"replicas": "5"})
    assert isinstance(same, EditedCall) and not same.changed


def test_the_diff_names_each_change() -> None:
    assert edit_diff({"replicas": 5, "host": "a"}, {"replicas": 3, "host": "a"}) == (
        "replicas 5 → 3"
    )
    assert edit_diff({"note": None}, {"note": "x"}) == "note (empty) → x"

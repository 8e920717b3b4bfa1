"""The edit form as Slack takes it: every kind of argument becomes an input Slack accepts
(checked by the fake Slack's modal rules), prefilled; the submitted state reads back into
the values the tool's model judges; a long list of arguments still fits a modal."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, Field, create_model

from bot.agent import CallContext, FunctionTool
from bot.agent.edits import MAX_FIELDS, EditedCall, edit_fields, parse_edit
from bot.emulator.sender import view_submission
from bot.emulator.slack_modal import modal_errors
from bot.records import ApprovalRecord
from bot.slack.edit_modal import edit_view, notice_view, submitted_values
from bot.turns.edits import EditForm


class Mode(StrEnum):
    FAST = "fast"
    SAFE = "safe"


class Args(BaseModel):
    name: str = Field(description="What to act on")
    replicas: int = Field(ge=0, le=1000)
    ratio: float = 0.5
    mode: Mode = Mode.SAFE
    level: Literal[1, 2, 3] = 2
    force: bool = False
    note: str | None = None
    labels: list[str] = Field(default_factory=list)
    confirmed_by: str | None = None


async def _noop(args: Any, ctx: CallContext) -> str:
    return "ok"


TOOL = FunctionTool(name="act", description="act", args_model=Args, fn=_noop, category="mutating")


def record(arguments: dict[str, object], category: str = "mutating") -> ApprovalRecord:
    return ApprovalRecord(
        job_id="C1:1700000000.000100:j1",
        call_id="c1",
        tool="act",
        category=category,  # type: ignore[arg-type]
        args_hash="h" * 64,
        arguments=arguments,
        reason="because <!channel> said so",
        requester="U1",
        channel="C1",
        thread_ts="1700000000.000100",
        requested_at=1_700_000_000.0,
        expires_at=1_700_003_600.0,
    )


def proposed() -> dict[str, object]:
    return Args(name="web", replicas=5).model_dump(mode="json", exclude={"confirmed_by"})


def test_every_kind_of_argument_is_an_input_slack_accepts() -> None:
    approval = record(proposed())
    view = edit_view(EditForm(approval, edit_fields(TOOL, approval.arguments)))

    assert modal_errors(view) == []
    inputs = {b["block_id"]: b for b in view["blocks"] if b["type"] == "input"}
    assert list(inputs) == [
        "arg:name",
        "arg:replicas",
        "arg:ratio",
        "arg:mode",
        "arg:level",
        "arg:force",
        "arg:note",
        "arg:labels",
    ]
    assert "arg:confirmed_by" not in inputs
    kinds = {k: b["element"]["type"] for k, b in inputs.items()}
    assert kinds == {
        "arg:name": "plain_text_input",
        "arg:replicas": "number_input",
        "arg:ratio": "number_input",
        "arg:mode": "static_select",
        "arg:level": "static_select",
        "arg:force": "radio_buttons",
        "arg:note": "plain_text_input",
        "arg:labels": "plain_text_input",
    }
    assert inputs["arg:replicas"]["element"]["is_decimal_allowed"] is False
    assert inputs["arg:ratio"]["element"]["is_decimal_allowed"] is True
    assert inputs["arg:mode"]["element"]["initial_option"]["value"] == "safe"
    assert inputs["arg:note"]["optional"] is True and inputs["arg:name"]["optional"] is False
    assert "<!channel>" not in str(view["blocks"][0])  # the model's reason is escaped
    assert modal_errors(notice_view("Nothing changed: already approved by <@U1>.")) == []


def test_the_submitted_state_reads_back_into_a_valid_edit() -> None:
    approval = record(proposed())
    view = edit_view(EditForm(approval, edit_fields(TOOL, approval.arguments)))
    held = {**view, "id": "V1", "hash": "1.a"}
    payload = view_submission(
        held,
        user_id="U2",
        user_name="bob",
        values={"arg:replicas": "3", "arg:mode": "fast", "arg:level": "3", "arg:force": "true"},
    )

    values = submitted_values(payload["view"])
    edited = parse_edit(TOOL, approval.arguments, values)

    assert isinstance(edited, EditedCall) and edited.changed
    assert edited.arguments["replicas"] == 3 and edited.arguments["mode"] == "fast"
    assert edited.arguments["level"] == 3 and edited.arguments["force"] is True
    assert edited.diff == "replicas 5 → 3, mode safe → fast, level 2 → 3, force false → true"


def test_a_call_with_many_arguments_still_fits_a_modal() -> None:
    wide_args = create_model("WideArgs", **{f"a{i}": (str, "x") for i in range(120)})  # type: ignore[call-overload]
    wide = FunctionTool(name="wide", description="w", args_model=wide_args, fn=_noop)
    many = {f"a{i}": "x" * 10 for i in range(120)}
    fields = edit_fields(wide, many)
    view = edit_view(EditForm(record(many), fields))
    assert len(fields) == MAX_FIELDS
    assert modal_errors(view) == []
    assert len(view["blocks"]) <= 100

"""Approve with edits, judged: the form of a pending call, and its submission.

``Edits`` is what the edge asks when someone presses a card's ``Edit`` and when they
submit the form (``bot.slack.edit_modal`` renders both):

- ``form``: the pending approval and its call's fields (``bot.agent.edits.edit_fields``,
  from the tool the job runs with), or a ``Refused`` (unknown, decided, expired, stale:
  the same judgements as a click, ``bot.turns.controls``).
- ``submit``: the typed values are validated by the tool's own model — wrong ones are
  ``EditErrors`` per field, nothing decided. Then, under the same approver policy as a
  click (``authorize``, the two-person rule included):
  - a mutating call: the submission is its approval with the edited arguments
    (``Controls.decide`` with ``edited``: one atomic decision, racing any click);
  - a destructive call: the edited call is dry-run first (when its tool can), and the
    edit with that dry run is stored as the editor's first approval
    (``Approvals.edit``); a second, different person's Approve decides it.
  An edit that changes nothing is a plain Approve. The form names the edit it was opened
  on (``seen_edit``), so a card edited meanwhile refuses it (``REFUSED_CHANGED``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Literal

from bot.agent.edits import EditErrors, EditField, edit_fields, parse_edit
from bot.agent.redact import redact_secrets_in_turns
from bot.agent.tools import CONFIRMED_BY, CallContext, Tool, has_dry_run
from bot.errors import ToolError
from bot.store.approvals import (
    REFUSED_CHANGED,
    REFUSED_EXPIRED,
    ApprovalRecord,
    Approvals,
    refusal_text,
)
from bot.store.jobs import Jobs
from bot.turns.controls import (
    ALREADY_DECIDED,
    UNKNOWN_CARD,
    Authorize,
    Controls,
    FirstApproval,
    RefusalKind,
    Refused,
    Verdict,
)
from bot.turns.run import job_tools
from tools.registry import Catalog

log = logging.getLogger(__name__)

DRY_RUN_TIMEOUT_S = 60.0  # the edited call's dry run, at most
NOTHING_TO_EDIT = "this call has no arguments to edit"
DRY_RUN_FAILED = "the dry run of the edited call failed, nothing changed: {why}"


@dataclass(frozen=True, slots=True)
class EditForm:
    """What the form shows: the pending approval and one field per argument."""

    approval: ApprovalRecord
    fields: list[EditField]
    kind: Literal["form"] = "form"


@dataclass(frozen=True, slots=True)
class Ready:
    """A submission judged valid and allowed: the call's new arguments (``None``: as
    shown, a plain approval) and what changed."""

    approval: ApprovalRecord
    tool: Tool
    edited: dict[str, object] | None
    diff: str

    @property
    def dry_run_first(self) -> bool:
        """Whether applying it dry-runs the edited call first (a destructive call's edit),
        which may take longer than a form's answer may wait."""
        return self.approval.category == "destructive" and self.edited is not None


@dataclass(frozen=True, slots=True)
class Edits:
    """The form and the submission of Approve with edits (see the module docstring)."""

    controls: Controls
    catalog: Catalog

    @property
    def approvals(self) -> Approvals:
        return self.controls.approvals

    @property
    def jobs(self) -> Jobs:
        return self.controls.jobs

    async def _pending(self, job_id: str, call_id: str) -> tuple[ApprovalRecord, Tool] | Refused:
        approval = await self.approvals.get(job_id, call_id) if call_id else None
        if approval is None:
            return Refused("unknown", UNKNOWN_CARD)
        if approval.status != "pending":
            return Refused("decided", refusal_text(approval) or ALREADY_DECIDED)
        record = await self.controls.waiting_job(approval)
        if isinstance(record, Refused):
            return record
        tool = next((t for t in job_tools(self.catalog, record) if t.name == approval.tool), None)
        if tool is None:
            return Refused("stale", f"the tool {approval.tool} is no longer offered")
        return approval, tool

    async def form(self, job_id: str, call_id: str) -> EditForm | Refused:
        """The form of the pending call ``job_id``/``call_id``, or why there is none."""
        found = await self._pending(job_id, call_id)
        if isinstance(found, Refused):
            return found
        approval, tool = found
        fields = edit_fields(tool, approval.approved_arguments)
        if not fields:
            return Refused("not_allowed", NOTHING_TO_EDIT)
        return EditForm(approval, fields)

    async def judge(
        self,
        job_id: str,
        call_id: str,
        *,
        values: dict[str, str | None],
        seen_edit: str,
        authorize: Authorize,
    ) -> EditErrors | Refused | Ready:
        """The quick half of a submission (within the 3 s Slack gives it): the card's
        state, the values against the tool's model, the person against the policy."""
        found = await self._pending(job_id, call_id)
        if isinstance(found, Refused):
            return found
        approval, tool = found
        if approval.edit_tag != seen_edit:
            return Refused("stale", REFUSED_CHANGED)
        checked = parse_edit(tool, approval.approved_arguments, values)
        if isinstance(checked, EditErrors):
            return checked
        if (refusal := await authorize(approval)) is not None:
            return Refused("not_allowed", refusal)
        return Ready(approval, tool, checked.arguments if checked.changed else None, checked.diff)

    async def apply(
        self, ready: Ready, *, by: str, seen_edit: str, authorize: Authorize
    ) -> Verdict:
        """The judged submission's effect: a destructive call's edit dry-run and stored
        as ``by``'s first approval; any other, the decision (see the module docstring)."""
        approval = ready.approval
        if ready.dry_run_first:
            assert ready.edited is not None
            return await self._first_approval(approval, ready.tool, ready.edited, by, seen_edit)
        return await self.controls.decide(
            approval.job_id,
            approval.call_id,
            outcome="approved",
            by=by,
            card_ts=None,
            authorize=authorize,
            args_hash=approval.args_hash,
            edited=ready.edited,
            seen_edit=seen_edit,
        )

    async def submit(
        self,
        job_id: str,
        call_id: str,
        *,
        values: dict[str, str | None],
        by: str,
        seen_edit: str,
        authorize: Authorize,
    ) -> EditErrors | Verdict:
        """``judge`` then ``apply``: field errors, a refusal, the decision (``Accepted``)
        or a destructive call's first approval."""
        judged = await self.judge(
            job_id, call_id, values=values, seen_edit=seen_edit, authorize=authorize
        )
        if not isinstance(judged, Ready):
            return judged
        return await self.apply(judged, by=by, seen_edit=seen_edit, authorize=authorize)

    async def _first_approval(
        self,
        approval: ApprovalRecord,
        tool: Tool,
        edited: dict[str, object],
        by: str,
        seen_edit: str,
    ) -> Verdict:
        dry_run = ""
        if has_dry_run(tool):
            ran = await dry_run_of(tool, approval, edited)
            if isinstance(ran, Refused):
                return ran
            dry_run = ran
        result = await self.approvals.edit(
            approval.job_id,
            approval.call_id,
            edited=edited,
            by=by,
            dry_run=dry_run,
            seen_edit=seen_edit,
            args_hash=approval.args_hash,
            now=time.time(),
        )
        if result is None:
            return Refused("unknown", UNKNOWN_CARD)
        if not result.won:
            reason: RefusalKind = "decided" if result.record.status != "pending" else "stale"
            if result.refusal == REFUSED_EXPIRED:
                reason = "expired"
            return Refused(reason, result.refusal or ALREADY_DECIDED)
        return FirstApproval(result.record)


async def dry_run_of(
    tool: Tool, approval: ApprovalRecord, edited: dict[str, object]
) -> str | Refused:
    """The dry run of the edited call (read-only by the tool's contract), bounded and
    scrubbed like any tool output; a failure is a refusal naming why."""
    candidate = dict(edited)
    field = tool.args_model.model_fields.get(CONFIRMED_BY)
    if field is not None and field.is_required():
        candidate[CONFIRMED_BY] = ""
    model = tool.args_model.model_validate(candidate)
    ctx = CallContext(job_id=approval.job_id, call_id=approval.call_id, dry_run=True)
    try:
        async with asyncio.timeout(min(tool.timeout, DRY_RUN_TIMEOUT_S)):
            raw = await tool.execute(model, ctx)
    except TimeoutError:
        return Refused("not_allowed", DRY_RUN_FAILED.format(why="it timed out"))
    except ToolError as exc:
        return Refused("not_allowed", DRY_RUN_FAILED.format(why=str(exc)[:300]))
    except Exception as exc:
        log.warning("the dry run of an edited %s raised", tool.name, exc_info=True)
        return Refused("not_allowed", DRY_RUN_FAILED.format(why=type(exc).__name__))
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    text = await redact_secrets_in_turns(text)
    if text.startswith("Error:"):
        return Refused("not_allowed", DRY_RUN_FAILED.format(why=text[6:300].strip()))
    return text[: tool.output_bound]

"""The card's ``Edit``: a modal with one input per argument, and its submission.

``Edit`` (``block_actions``) opens the form with ``views.open`` and the click's
``trigger_id`` (valid 3 s, once): one typed input per argument of the call (a number, a
yes/no, a choice from the enum, text; ``confirmed_by`` never shown), prefilled with what
the card shows. A clicker who may not approve is told so at once, without a form.

The submission (``view_submission``) is answered the way Slack reads it
(``bot.turns.edits`` judges it):

- values the tool's model refuses: ``response_action: errors`` under their inputs;
  nothing is decided and the card still waits;
- refused (the card was decided, expired, replaced or edited meanwhile; the two-person
  rule; not an approver): ``response_action: update`` to a view saying so;
- a mutating call: the decision (Approve with edits), then the modal closes; the card
  says "Approved with edits by <@U…>" and the job resumes as for a click;
- a destructive call's edit: ``update`` to "dry run…" at once, then in the background
  the dry run and the edit stored as the editor's first approval, the card edited to
  show it, and the modal updated with the outcome.

The form's ``private_metadata`` names the approval and the edit it was opened on; like a
button's value it is never trusted for identity or authority (the submitting user comes
from the signed payload, the approval is looked up and judged again).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from slack_sdk.errors import SlackApiError

from bot.agent.edits import EditErrors, EditField
from bot.errors import StoreError
from bot.records import ApprovalRecord
from bot.slack.actions import (
    UNRECORDED,
    Interactions,
    clicker,
    valid_job_id,
)
from bot.slack.blockkit import cut, escaped, mention
from bot.slack.cards import parse_card_value
from bot.turns.controls import UNKNOWN_CARD, Accepted, FirstApproval, Refused, Verdict
from bot.turns.edits import EditForm, Ready

log = logging.getLogger(__name__)

EDIT_CALLBACK = "opsloop_edit"
BLOCK_PREFIX = "arg:"
VALUE_ACTION = "value"
TITLE = "Edit before approving"  # a modal title is at most 24 characters
MAX_LABEL = 2000
MAX_HINT = 2000
MAX_INITIAL = 3000
MAX_OPTION_TEXT = 75
MAX_OPTION_VALUE = 150
MAX_METADATA = 3000
NOTICE_TITLE = "Approval"
EDIT_CHANGED = "the card was edited since you opened this form; press Edit again to see it"
FIRST_EDIT = (
    "Your edit is recorded as the first approval, with the dry run of the edited call on "
    "the card. A destructive call's edit needs a second, different approver."
)
DRY_RUNNING = "Running a dry run of the edited call… the card will show it."


def _plain(text: str, limit: int) -> dict[str, Any]:
    return {"type": "plain_text", "text": cut(text, limit) or " "}


def _option(value: str) -> dict[str, Any]:
    return {"text": _plain(value, MAX_OPTION_TEXT), "value": value[:MAX_OPTION_VALUE]}


def _element(spec: EditField) -> dict[str, Any]:
    element: dict[str, Any]
    match spec.kind:
        case "integer" | "number":
            element = {"type": "number_input", "is_decimal_allowed": spec.decimals}
            if spec.initial is not None:
                element["initial_value"] = spec.initial
        case "boolean" | "choice":
            options = [_option(o) for o in spec.options[:100]]
            element = {"type": "radio_buttons" if spec.kind == "boolean" else "static_select"}
            element["options"] = options
            chosen = next((o for o in options if o["value"] == spec.initial), None)
            if chosen is not None:
                element["initial_option"] = chosen
        case _:
            element = {"type": "plain_text_input", "max_length": MAX_INITIAL}
            initial = spec.initial or ""
            if spec.kind == "json" or len(initial) > 80 or "\n" in initial:
                element["multiline"] = True
            if initial and len(initial) <= MAX_INITIAL:
                element["initial_value"] = initial
    element["action_id"] = VALUE_ACTION
    return element


def _input(spec: EditField) -> dict[str, Any]:
    block: dict[str, Any] = {
        "type": "input",
        "block_id": f"{BLOCK_PREFIX}{spec.name}"[:255],
        "label": _plain(spec.name, MAX_LABEL),
        "element": _element(spec),
        "optional": not spec.required,
    }
    if spec.description:
        block["hint"] = _plain(spec.description, MAX_HINT)
    return block


def _metadata(approval: ApprovalRecord) -> str:
    meta = {"job": approval.job_id, "call": approval.call_id, "edit": approval.edit_tag}
    return json.dumps(meta, separators=(",", ":"))[:MAX_METADATA]


def edit_view(form: EditForm) -> dict[str, Any]:
    """The modal of ``form``: what the call is, one input per argument."""
    approval = form.approval
    destructive = approval.category == "destructive"
    intro = f"*{escaped(approval.tool, 80)}* · {approval.category} · asked by the model"
    if approval.reason and approval.reason.strip():
        intro += f"\n>{escaped(' '.join(approval.reason.split()), 600)}"
    effect = (
        "Submitting dry-runs the edited call and shows it on the card as your approval; "
        "a second, different approver must then approve it."
        if destructive
        else "Submitting approves the call with these values: it runs once, with you as "
        "`confirmed_by`."
    )
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": cut(intro, 3000)}},
        {"type": "context", "elements": [{"type": "mrkdwn", "text": effect}]},
    ]
    blocks.extend(_input(spec) for spec in form.fields)
    return {
        "type": "modal",
        "callback_id": EDIT_CALLBACK,
        "private_metadata": _metadata(approval),
        "title": _plain(TITLE, 24),
        "submit": _plain("Dry run & approve" if destructive else "Approve edited", 24),
        "close": _plain("Cancel", 24),
        "blocks": blocks,
    }


def notice_view(text: str) -> dict[str, Any]:
    """A modal that only says ``text`` (no inputs, no submit)."""
    return {
        "type": "modal",
        "callback_id": EDIT_CALLBACK,
        "title": _plain(NOTICE_TITLE, 24),
        "close": _plain("Close", 24),
        "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": cut(text, 3000)}}],
    }


def submitted_values(view: Mapping[str, Any]) -> dict[str, str | None]:
    """Argument name → the text submitted for it, from ``view.state.values`` (a select's
    or a radio button's chosen option value; ``None`` when left empty)."""
    state = view.get("state")
    blocks = state.get("values") if isinstance(state, dict) else None
    values: dict[str, str | None] = {}
    if not isinstance(blocks, dict):
        return values
    for block_id, actions in blocks.items():
        if not (isinstance(block_id, str) and block_id.startswith(BLOCK_PREFIX)):
            continue
        entry = actions.get(VALUE_ACTION) if isinstance(actions, dict) else None
        if not isinstance(entry, dict):
            continue
        name = block_id[len(BLOCK_PREFIX) :]
        chosen = entry.get("selected_option")
        if isinstance(chosen, dict):
            values[name] = str(chosen.get("value") or "")
        elif entry.get("type") in ("static_select", "radio_buttons"):
            values[name] = None
        else:
            raw = entry.get("value")
            values[name] = raw if isinstance(raw, str) else None
    return values


def _said(verdict: Verdict) -> str:
    match verdict:
        case Accepted(record=decided):
            return f"Done: approved with edits by {mention(decided.decided_by)}."
        case FirstApproval():
            return FIRST_EDIT
        case Refused(text=why):
            return f"Nothing changed: {why}."


@dataclass
class EditModal:
    """The bolt listeners of ``Edit`` and of the form's submission."""

    interactions: Interactions

    async def on_edit(self, ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
        await ack()
        it = self.interactions
        user, team_id = clicker(body)
        job_id, call_id, tag = parse_card_value(str(action.get("value") or ""))
        try:
            form = (
                await it.turns.edits.form(job_id, call_id)
                if valid_job_id(job_id)
                else Refused("unknown", UNKNOWN_CARD)
            )
        except StoreError:
            log.warning("could not read a card to edit", exc_info=True)
            it.background(it.tell(body, f"Nothing changed: {UNRECORDED}."), "ephemeral")
            return
        if isinstance(form, EditForm) and form.approval.edit_tag != tag:
            # The card is behind its record (an edit whose card edit was lost): redraw it.
            it.background(it.show_card(form.approval), "card")
            form = Refused("stale", EDIT_CHANGED)
        if isinstance(form, EditForm):
            approval = form.approval
            refusal = await it.policy.may_decide(
                user,
                requester=approval.requester,
                destructive=approval.category == "destructive",
                team_id=team_id,
            )
            if refusal is not None:
                form = Refused("not_allowed", refusal)
        if isinstance(form, Refused):
            it.background(it.tell(body, f"Nothing changed: {form.text}."), "ephemeral")
            return
        trigger = body.get("trigger_id")
        try:
            await it.client.views_open(trigger_id=str(trigger or ""), view=edit_view(form))
        except SlackApiError as exc:
            log.info("the edit form could not be opened", exc_info=True)
            why = exc.response.get("error") or "Slack refused it"
            note = f"The edit form could not be opened ({why}); press Edit again."
            it.background(it.tell(body, note), "ephemeral")
        except Exception:
            log.info("the edit form could not be opened", exc_info=True)
            note = "The edit form could not be opened (Slack did not answer); press Edit again."
            it.background(it.tell(body, note), "ephemeral")

    async def on_submit(self, ack: Any, body: dict[str, Any], view: dict[str, Any]) -> None:
        it = self.interactions
        user, team_id = clicker(body)
        try:
            meta = json.loads(str(view.get("private_metadata") or "{}"))
        except ValueError:
            meta = {}
        job_id = str(meta.get("job") or "") if isinstance(meta, dict) else ""
        call_id = str(meta.get("call") or "") if isinstance(meta, dict) else ""
        seen = str(meta.get("edit") or "") if isinstance(meta, dict) else ""

        async def authorize(approval: ApprovalRecord) -> str | None:
            return await it.policy.may_decide(
                user,
                requester=approval.requester,
                destructive=approval.category == "destructive",
                team_id=team_id,
            )

        edits = it.turns.edits
        try:
            judged = (
                await edits.judge(
                    job_id,
                    call_id,
                    values=submitted_values(view),
                    seen_edit=seen,
                    authorize=authorize,
                )
                if valid_job_id(job_id)
                else Refused("unknown", UNKNOWN_CARD)
            )
        except StoreError:
            log.warning("could not judge an edit", exc_info=True)
            await ack(response_action="update", view=notice_view(f"Nothing changed: {UNRECORDED}."))
            return
        if isinstance(judged, EditErrors):
            errors = {f"{BLOCK_PREFIX}{name}"[:255]: why for name, why in judged.errors.items()}
            await ack(response_action="errors", errors=errors)
            return
        if isinstance(judged, Refused):
            text = EDIT_CHANGED if judged.reason == "stale" and "edited" in judged.text else None
            await ack(
                response_action="update",
                view=notice_view(f"Nothing changed: {text or judged.text}."),
            )
            return
        if judged.dry_run_first:
            await ack(response_action="update", view=notice_view(DRY_RUNNING))
            view_id = str(view.get("id") or "")
            it.background(self._dry_run_then_show(judged, user, seen, authorize, view_id), "edit")
            return
        try:
            verdict = await edits.apply(judged, by=user, seen_edit=seen, authorize=authorize)
        except StoreError:
            log.warning("could not record an edit", exc_info=True)
            await ack(response_action="update", view=notice_view(f"Nothing changed: {UNRECORDED}."))
            return
        if isinstance(verdict, Accepted):
            await ack()
            self._accepted(verdict, body)
            return
        await ack(response_action="update", view=notice_view(_said(verdict)))

    def _accepted(self, verdict: Accepted, body: dict[str, Any]) -> None:
        it = self.interactions
        it.edit_card(verdict.record)
        it.schedule(verdict.record.job_id)
        if not verdict.replicated:
            log.info("job %s: an edit not yet confirmed by a replica", verdict.record.job_id)

    async def _dry_run_then_show(
        self, ready: Ready, user: str, seen: str, authorize: Any, view_id: str
    ) -> None:
        it = self.interactions
        try:
            verdict = await it.turns.edits.apply(
                ready, by=user, seen_edit=seen, authorize=authorize
            )
        except StoreError:
            log.warning("could not record an edit", exc_info=True)
            verdict = Refused("unknown", UNRECORDED)
        if isinstance(verdict, FirstApproval) and verdict.record.card_ts is not None:
            await it.show_card(verdict.record)
        if isinstance(verdict, Accepted):
            it.edit_card(verdict.record)
            it.schedule(verdict.record.job_id)
        if view_id:
            try:
                await it.client.views_update(view_id=view_id, view=notice_view(_said(verdict)))
            except Exception:
                log.info("the edit form was not updated", exc_info=True)

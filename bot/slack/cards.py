"""Approval cards: the card of a pending call, its reminder, and the card once decided.

Pure functions of the approval record (``bot.records.ApprovalRecord``) returning a
:class:`~bot.slack.blockkit.Message`. Text from people, the model or tools is escaped
(``bot.slack.blockkit``), so a reason or an argument can never form a mention or a link.
The buttons' action ids are ``bot.slack.status_blocks``'. A call that needs two different
approvers (``bot.turns.controls.two_approvers``: a destructive call in a job an alert
started, or a destructive call someone edited) says so, and once approved by one, its card
names them and asks for a second; decided, it names both. A card of a call with arguments
has an ``Edit`` button (``bot.slack.edit_modal``); an edited call's card shows the edited
arguments, what changed from the proposal, and a destructive call's fresh dry run; decided,
"Approved with edits by <@U…>". The buttons' value names the edit the card shows.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime

from bot.agent.edits import edit_diff
from bot.records import ApprovalRecord, CardReply, Outcome
from bot.slack.blockkit import (
    MAX_HEADER,
    MAX_SECTION,
    Block,
    Message,
    actions_block,
    button_element,
    context_block,
    cut,
    duration,
    escape,
    escaped,
    group_mention,
    hhmm,
    mention,
    one_line,
    plural,
    section_block,
)
from bot.slack.status_blocks import ACTION_APPROVE, ACTION_DENY
from bot.turns.controls import two_approvers

ACTION_EDIT = "opsloop_edit"  # the card's Edit button (bot.slack.edit_modal)
CARD_TITLE_BLOCK = "opsloop_card_title"
CARD_ACTIONS_BLOCK = "opsloop_card_actions"
CARD_DECISION_BLOCK = "opsloop_card_decision"
CARD_REPLIES_BLOCK = "opsloop_card_replies"
CARD_FIRST_APPROVAL_BLOCK = "opsloop_card_first_approval"
MAX_CARD_REPLIES = 5  # the newest shown; the rest counted
REPLY_CHARS = 150
MAX_CARD_ARGS = 12
MAX_CARD_APPROVERS = 8
MAX_PREVIEW_CHARS = 1_000
ARG_VALUE_CHARS = 300

ANYONE = "anyone in the workspace may approve"
WHY_TWO = "an alert started this job"
TWO_APPROVERS = f"two different approvers must approve: {WHY_TWO}"
WHY_EDITED = "a destructive call's edit needs a second approval"
_SKIPPED_ARGS = frozenset({"confirmed_by"})  # set from the click, never shown as the model's


# -- approval cards ------------------------------------------------------------------------


def _arg_text(value: object) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def significant_arguments(arguments: Mapping[str, object]) -> list[tuple[str, str]]:
    """The arguments worth showing: not empty, not ``confirmed_by``; values as text."""
    return [
        (k, _arg_text(v))
        for k, v in arguments.items()
        if k not in _SKIPPED_ARGS and v not in (None, "", [], {})
    ]


def _summary(record: ApprovalRecord) -> str:
    """``restart_service (host=web-03, service=nginx)``, escaped, one line (an edited
    call's arguments as edited)."""
    shown = record.approved_arguments
    args = ", ".join(f"{k}={one_line(v)}" for k, v in significant_arguments(shown))
    return escaped(f"{record.tool} ({args})" if args else record.tool, 300)


NO_DRY_RUN = (
    ":warning: *No dry run available*: this tool cannot show what it would do; "
    "approving it runs it for real."
)


def _replies(n: int) -> str:
    return f"{n:,} {'reply' if n == 1 else 'replies'}"


def replies_block(replies: Sequence[CardReply], *, waiting: bool) -> Block | None:
    """What people said in the thread while the card waited: who, when (UTC) and the
    first ``REPLY_CHARS`` characters of each, newest last, the newest
    ``MAX_CARD_REPLIES`` shown and the rest counted; None when nobody said anything."""
    if not replies:
        return None
    shown = list(replies)[-MAX_CARD_REPLIES:]
    head = "Said in the thread while this " + ("waits" if waiting else "waited")
    lines = [f":speech_balloon: *{head}* ({len(replies)})"]
    if earlier := len(replies) - len(shown):
        lines.append(f"_{_replies(earlier)} before these_")
    for reply in shown:
        said = one_line(reply.text)
        said = said if len(said) <= REPLY_CHARS else said[: REPLY_CHARS - 1] + "…"
        lines.append(f"> {mention(reply.author)} · {hhmm(reply.sent_at)}: {escape(said)}")
    return section_block(cut("\n".join(lines), MAX_SECTION), block_id=CARD_REPLIES_BLOCK)


def _card_body(
    record: ApprovalRecord,
    approvers: Sequence[str] = (),
    replies: Sequence[CardReply] = (),
) -> list[Block]:
    title = f"Approval needed: {record.tool}"
    blocks: list[Block] = [
        {
            "type": "header",
            "block_id": CARD_TITLE_BLOCK,
            "text": {"type": "plain_text", "text": title[:MAX_HEADER]},
        }
    ]
    if record.reason and record.reason.strip():
        blocks.append(
            section_block("*Reason*\n" + escaped(record.reason.strip(), MAX_SECTION - 12))
        )
    args = significant_arguments(record.approved_arguments)
    lines = [
        f"`{escaped(k, 80)}`: {escaped(one_line(v), ARG_VALUE_CHARS)}"
        for k, v in args[:MAX_CARD_ARGS]
    ]
    if len(args) > MAX_CARD_ARGS:
        lines.append(f"_{plural(len(args) - MAX_CARD_ARGS, 'more argument')}_")
    head = "*Arguments*"
    if record.edited_arguments is not None:
        change = edit_diff(record.arguments, record.edited_arguments) or "no change"
        head = (
            f"*Arguments, edited by {mention(record.edited_by)}:* "
            f"{escaped(change, ARG_VALUE_CHARS)}"
        )
    blocks.append(section_block(cut(head + "\n" + ("\n".join(lines) or "_none_"), MAX_SECTION)))
    if record.edited_dry_run is not None and record.edited_arguments is not None:
        head, tail = "*Dry run of the edited call*\n```\n", "\n```"
        body = escape(record.edited_dry_run.strip("\n") or "(no output)").replace(
            "```", "`\u200b``"
        )
        blocks.append(section_block(head + cut(body, MAX_SECTION - len(head) - len(tail)) + tail))
    if record.preview and record.edited_arguments is None:
        head, tail = "*Will run*\n```\n", "\n```"
        body = escape(record.preview.strip("\n")).replace("```", "`\u200b``")
        blocks.append(section_block(head + cut(body, MAX_PREVIEW_CHARS) + tail))
    if record.dry_run_output is not None and record.edited_dry_run is None:
        head, tail = "*Dry run output*\n```\n", "\n```"
        body = escape(record.dry_run_output.strip("\n") or "(no output)").replace(
            "```", "`\u200b``"
        )
        blocks.append(section_block(head + cut(body, MAX_SECTION - len(head) - len(tail)) + tail))
    elif record.category == "destructive" and not record.edited_dry_run:  # ``has_dry_run``
        blocks.append(section_block(NO_DRY_RUN))
    # Whom to ask, in an incident; with no approver policy, say that anyone may.
    who = " · approvers: " + whom_to_ask(approvers) if approvers else " · " + ANYONE
    if two_approvers(record):
        who += " · " + two_approvers_why(record)
    elif record.category == "destructive":
        who += " · the requester may not approve it"
    blocks.append(
        context_block(
            f"Requested by {mention(record.requester)} · {record.category}"
            f" · expires at {hhmm(record.expires_at)}{who}"
        )
    )
    if (said := replies_block(replies, waiting=record.status == "pending")) is not None:
        blocks.append(said)
    return blocks


def whom_to_ask(approvers: Sequence[str]) -> str:
    """``<@U1>, <!subteam^S1>`` (at most ``MAX_CARD_APPROVERS``, then ``and N more``)."""
    shown = [group_mention(a) if a.startswith("S") else mention(a) for a in approvers]
    more = len(shown) - MAX_CARD_APPROVERS
    return ", ".join(shown[:MAX_CARD_APPROVERS]) + (f" and {more} more" if more > 0 else "")


def reminder_message(
    record: ApprovalRecord, *, approvers: Sequence[str], now: float, escalate: Sequence[str] = ()
) -> Message:
    """The one recall of a card still pending: what waits, since when, whom to ask; and,
    with ``OPSLOOP_APPROVAL_ESCALATE``, who it is escalated to (mentioned, so notified)."""
    waited = duration(max(now - record.requested_at, 0.0))
    who = whom_to_ask(approvers) if approvers else "anyone in the channel"
    if two_approvers(record):
        first = record.first_approver
        who += (
            f" ({two_approvers_why(record)}"
            + (f"; {mention(first)} approved" if first else "")
            + ")"
        )
    elif record.category == "destructive":
        who += f" (not {mention(record.requester)}: two-person rule)"
    text = (
        f":alarm_clock: Still waiting for an approval of `{escaped(record.tool, 80)}` "
        f"(asked {waited} ago; the card above expires at {hhmm(record.expires_at)}). "
        f"Who can approve: {who}."
    )
    if escalate:
        text += f" Escalating to {whom_to_ask(escalate)}: please look at the card above."
    return Message(text=text, blocks=[section_block(text)])


def approval_card(
    record: ApprovalRecord,
    *,
    approvers: Sequence[str] = (),
    replies: Sequence[CardReply] = (),
) -> Message:
    """The card for a pending approval, with ``Approve`` and ``Deny``; ``approvers`` (the
    policy's user and group ids, when it names any) are shown as whom to ask, and
    ``replies`` (what people said in the thread since it was asked) above the buttons.
    A call approved by the first of the two approvers it needs names them, and still has
    its buttons for the second."""
    value = card_value(record)
    blocks = _card_body(record, approvers, replies)
    if first := first_approval_line(record):
        blocks.append(
            context_block(f":white_check_mark: {first}", block_id=CARD_FIRST_APPROVAL_BLOCK)
        )
    buttons = [
        button_element("Approve", ACTION_APPROVE, value, style="primary"),
        button_element("Deny", ACTION_DENY, value, style="danger"),
    ]
    if any(k not in _SKIPPED_ARGS for k in record.approved_arguments):
        buttons.insert(1, button_element("Edit", ACTION_EDIT, value))
    blocks.append(actions_block(CARD_ACTIONS_BLOCK, *buttons))
    text = f"Approval needed: {_summary(record)} · expires at {hhmm(record.expires_at)}"
    if first:
        text += f" · {first}"
    if replies:
        text += f" · {_replies(len(replies))} in the thread since"
    return Message(text=text, blocks=blocks)


def card_value(record: ApprovalRecord) -> str:
    """The buttons' value: ``job|call``, and ``|<edit tag>`` once the call was edited,
    so a click names the edit its card showed (``ApprovalRecord.edit_tag``)."""
    value = f"{record.job_id}|{record.call_id}"
    return f"{value}|{record.edit_tag}" if record.edit_tag else value


def parse_card_value(value: str) -> tuple[str, str, str]:
    """``(job id, call id, edit tag)`` of a button's value (the tag ``""``: unedited)."""
    job_id, _, rest = value.partition("|")
    call_id, _, tag = rest.partition("|")
    return job_id, call_id, tag


def two_approvers_why(record: ApprovalRecord) -> str:
    """Why the call needs two different approvers, for its card."""
    if record.edited_by is not None:
        return f"two different approvers must approve: {WHY_EDITED}"
    return TWO_APPROVERS


def first_approval_line(record: ApprovalRecord) -> str | None:
    """``Approved by <@U1> · a second approver is needed: …`` on a pending card its
    first approver approved (``Edited and approved by`` when their approval was an edit);
    None otherwise."""
    if record.status != "pending" or not record.first_approver:
        return None
    if record.edited_by is not None and record.edited_by == record.first_approver:
        return (
            f"Edited and approved by {mention(record.first_approver)} · a second approver is "
            f"needed: {WHY_EDITED}"
        )
    return f"Approved by {mention(record.first_approver)} · a second approver is needed: {WHY_TWO}"


def decision_line(
    outcome: Outcome,
    by: str | None,
    at: datetime | float,
    *,
    first: str | None = None,
    edited_by: str | None = None,
) -> str:
    """``Approved by <@U…> at 14:05 UTC``, ``Denied by …``, ``Expired at …``, ``Cancelled by …``;
    with the ``first`` of two approvers, ``Approved by <@U1> and <@U2> at …`` (any other
    outcome names them after it); an approval with edits, ``Approved with edits by <@U1>
    at …`` (a destructive call's: ``Approved with edits by <@U1> and approved by <@U2>``)."""
    if outcome == "approved" and edited_by:
        if first and first == edited_by and by != edited_by:
            return (
                f"Approved with edits by {mention(edited_by)} and approved by {mention(by)}"
                f" at {hhmm(at)}"
            )
        return f"Approved with edits by {mention(edited_by)} at {hhmm(at)}"
    if outcome == "approved" and first:
        return f"Approved by {mention(first)} and {mention(by)} at {hhmm(at)}"
    if outcome == "expired":
        line = f"Expired at {hhmm(at)}"
    elif outcome == "cancelled":
        line = f"Cancelled by {mention(by)}" if by else "Cancelled"
    else:
        line = f"{outcome.capitalize()} by {mention(by)} at {hhmm(at)}"
    return f"{line} · first approved by {mention(first)}" if first else line


_ICONS = {
    "approved": ":white_check_mark:",
    "denied": ":no_entry:",
    "expired": ":hourglass:",
    "cancelled": ":octagonal_sign:",
}


def decided_card(
    card: ApprovalRecord | Message | Sequence[Block],
    outcome: Outcome,
    by: str | None,
    at: datetime | float,
    *,
    replies: Sequence[CardReply] = (),
) -> Message:
    """The card after its decision: no buttons, and who decided when.

    ``card`` is the approval record (the card is rebuilt, with the ``replies`` people sent
    while it waited) or the card's current blocks (as in a ``block_actions`` payload):
    the actions block and any earlier decision line are dropped.
    """
    if isinstance(card, ApprovalRecord):
        line = decision_line(outcome, by, at, first=card.first_approver, edited_by=card.edited_by)
        blocks, subject = _card_body(card, replies=replies), _summary(card)
    else:
        line = decision_line(outcome, by, at)
        old = card.blocks if isinstance(card, Message) else card
        drop = {CARD_ACTIONS_BLOCK, CARD_DECISION_BLOCK, CARD_FIRST_APPROVAL_BLOCK}
        blocks = [b for b in old if b.get("block_id") not in drop and b.get("type") != "actions"]
        title = next((b for b in blocks if b.get("block_id") == CARD_TITLE_BLOCK), None)
        subject = escape(title["text"]["text"]) if title else "Approval"
    blocks.append(context_block(f"{_ICONS[outcome]} {line}", block_id=CARD_DECISION_BLOCK))
    return Message(text=f"{line} · {subject}", blocks=blocks)

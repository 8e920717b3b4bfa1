"""Block Kit messages from our state: live status, endings and approval cards.

Every builder is a pure function of our state returning a :class:`~bot.slack.blockkit.Message`:
the plain ``text`` (always set — notifications and the fallback) and the ``blocks``. Text from
people, the model or tools that lands in a ``mrkdwn`` field or in ``text`` is escaped, so it
can never form a mention (``<!channel>``, ``<@U…>``) or a link. The action and block ids of
the buttons the bot shows are defined here.

The parts these are made of (Slack's limits, ``Message``, escaping, block constructors,
``validate``) are in ``bot.slack.blockkit``; the model's answer, split into messages, is in
``bot.slack.answers``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, NamedTuple

from bot.agent.ports import WORKSPACE_CAP
from bot.agent.run import STALL_ITERATIONS
from bot.agent.state import StopReason
from bot.llm.prices import cost_text
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
from bot.store.approvals import ApprovalRecord

Outcome = Literal["approved", "denied", "expired", "cancelled"]

ACTION_STOP = "opsloop_stop"
ACTION_CONTINUE = "opsloop_continue"
ACTION_APPROVE = "opsloop_approve"
ACTION_DENY = "opsloop_deny"
STATUS_ACTIONS_BLOCK = "opsloop_status_actions"
ENDING_ACTIONS_BLOCK = "opsloop_ending_actions"
CARD_TITLE_BLOCK = "opsloop_card_title"
CARD_ACTIONS_BLOCK = "opsloop_card_actions"
CARD_DECISION_BLOCK = "opsloop_card_decision"

MAX_TOOL_LINES = 8  # finished tools shown on the status message (the latest ones)
TOOL_RESULT_CHARS = 150
MAX_CARD_ARGS = 12
MAX_CARD_APPROVERS = 8
MAX_PREVIEW_CHARS = 1_000
ARG_VALUE_CHARS = 300
ERROR_CHARS = 500

_SKIPPED_ARGS = frozenset({"confirmed_by"})  # set from the click, never shown as the model's


# -- status --------------------------------------------------------------------------------


class ToolLine(NamedTuple):
    """A finished tool call on the status message."""

    tool: str
    result: str  # one line; longer text is cut
    ok: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class Progress:
    """What the live status message shows."""

    job_id: str
    iteration: int
    max_iterations: int
    tokens_used: int
    token_budget: int
    active_s: float
    model: str | None = None
    current_tool: str | None = None
    current_note: str | None = None  # the running tool's latest progress, one line
    finished: Sequence[ToolLine] = ()
    stopping: bool = False
    awaiting: str | None = None  # the tool whose approval card is pending


def status_message(progress: Progress, *, final: bool = False, stop_button: bool = True) -> Message:
    """The status message: counters, tools, and a ``Stop`` button while running (unless
    ``stop_button`` is off)."""
    p = progress
    state = "Finished" if final else ("Stopping…" if p.stopping else "Working")
    if p.awaiting and not final and not p.stopping:
        state = "Waiting for approval"
    stats = (
        f"iteration {p.iteration}/{p.max_iterations} · "
        f"{p.tokens_used:,}/{p.token_budget:,} tokens · {duration(p.active_s)}"
    )
    context = [f"*{state}* · {stats}"]
    if p.model:
        context.append(f"`{escaped(p.model, 200)}`")
    blocks: list[Block] = [context_block(*context)]
    lines = tool_lines(p.finished)
    running = p.current_tool if not final else None
    if running:
        note = f" {escaped(one_line(p.current_note), TOOL_RESULT_CHARS)}" if p.current_note else ""
        lines.append(f":hourglass_flowing_sand: `{escaped(running, 80)}` running…{note}")
    if p.awaiting and not final:
        lines.append(f":raised_hand: `{escaped(p.awaiting, 80)}` needs an approval: see the card")
    if lines:
        blocks.append(section_block("\n".join(lines)))
    if stop_button and not final and not p.stopping:
        blocks.append(
            actions_block(STATUS_ACTIONS_BLOCK, button_element("Stop", ACTION_STOP, p.job_id))
        )
    text = f"{state}: {stats}"
    if running:
        text += f" · running {escaped(running, 80)}"
    return Message(text=text, blocks=blocks)


def tool_lines(finished: Sequence[ToolLine]) -> list[str]:
    """Each finished tool with its result in one line (the last ``MAX_TOOL_LINES``)."""
    shown = list(finished)[-MAX_TOOL_LINES:]
    lines = []
    if hidden := len(finished) - len(shown):
        lines.append(f"_{plural(hidden, 'earlier tool call')}_")
    for t in shown:
        icon = ":white_check_mark:" if t.ok else ":x:"
        result = escaped(one_line(t.result), TOOL_RESULT_CHARS)
        lines.append(f"{icon} `{escaped(t.tool, 80)}` {result}".rstrip())
    return lines


NARRATION_CHARS = 300


def with_narration(message: Message, narration: str) -> Message:
    """``message`` (the status message) with the model's short note before its tool calls
    as a last context line, escaped and on one line; ``text`` is left as it is."""
    line = escaped(one_line(narration), NARRATION_CHARS)
    if not line:
        return message
    return Message(message.text, [*message.blocks, context_block(f":speech_balloon: {line}")])


# -- endings -------------------------------------------------------------------------------

_LIMITS = frozenset(
    {StopReason.LIMIT_ITERATIONS, StopReason.LIMIT_TOKENS, StopReason.LIMIT_DEADLINE}
)


def ending_message(
    reason: StopReason,
    *,
    job_id: str,
    iterations: int,
    max_iterations: int,
    tokens: int,
    token_budget: int,
    tools_run: int,
    error: str | None = None,
    continue_label: str | None = None,
    continue_seq: int = 0,
    by: str | None = None,
    active_s: float | None = None,
    deadline_s: float | None = None,
    tools: Sequence[ToolLine] = (),
    trace_id: str | None = None,
    cost_usd: float | None = None,
    unpriced_calls: int = 0,
) -> Message:
    """What happened, in words, with the stop reason code in ``text`` (not for ``completed``).

    ``error`` says what failed (``failed``) or what is missing (``incomplete``: a change
    not verified, what the model was blocked on); ``by`` names who pressed Stop
    (``cancelled``); ``continue_label`` (e.g. ``Continue (+20 iterations)``) adds the
    ``Continue`` button on a limit ending. ``tools`` (what ran, with its result in one
    line) stay listed; the context names the job id ``opsloop trace`` takes, for the
    review after the incident, and the job's OpenTelemetry ``trace_id`` when it is traced.
    ``cost_usd`` (what the job's model calls cost; None when none was priced) shows beside
    the tokens, as a lower bound (``≥ $0.04``) when ``unpriced_calls`` had no price. A
    ``limit_tokens`` ending whose ``error`` names the workspace's daily cap says so
    instead of naming the job's budget.
    """
    R = StopReason
    deadline = ""
    if active_s is not None and deadline_s is not None:
        deadline = f" ({duration(active_s)}/{duration(deadline_s)})"
    headline = {
        R.COMPLETED: "Done",
        R.INCOMPLETE: f"Not done: {escaped(one_line(error), ERROR_CHARS)}"
        if error
        else "Stopped: the answer did not complete the task",
        R.AWAITING_APPROVAL: "Paused: waiting for approval",
        R.LIMIT_ITERATIONS: f"Stopped: iteration limit reached ({iterations}/{max_iterations})",
        R.LIMIT_TOKENS: f"Stopped: {escaped(one_line(error), ERROR_CHARS)}"
        if error and WORKSPACE_CAP in error
        else f"Stopped: token budget reached ({tokens:,}/{token_budget:,} tokens)",
        R.LIMIT_DEADLINE: f"Stopped: time limit reached{deadline}",
        R.LOOP: "Stopped: the same call kept returning the same result",
        R.STALLED: f"Stopped: every tool call failed {STALL_ITERATIONS} times in a row",
        R.NO_ACTION: "Stopped: the model returned empty responses",
        R.FAILED: f"Failed: {escaped(one_line(error or 'unknown error'), ERROR_CHARS)}",
        R.CANCELLED: f"Cancelled by {mention(by)}" if by else "Cancelled",
    }[reason]
    if reason is not R.COMPLETED:
        headline += f" · `{reason.value}`"
    cost = cost_text(cost_usd, unpriced_calls)
    stats = (
        f"iterations {iterations}/{max_iterations} · tokens {tokens:,}/{token_budget:,} · "
        + (f"{cost} · " if cost else "")
        + f"{plural(tools_run, 'tool')} run"
    )
    blocks = [section_block(headline)]
    if lines := tool_lines(tools):
        blocks.append(section_block("\n".join(lines)))
    job_line = f"{stats} · job `{escaped(job_id, 200)}`"
    if trace_id:
        job_line += f" · trace `{escaped(trace_id, 64)}`"
    blocks.append(context_block(job_line))
    if reason in _LIMITS and continue_label:
        value = f"{job_id}|{continue_seq}"
        button = button_element(continue_label, ACTION_CONTINUE, value, style="primary")
        blocks.append(actions_block(ENDING_ACTIONS_BLOCK, button))
    return Message(text=f"{headline}\n{stats}", blocks=blocks)


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
    """``restart_service (host=web-03, service=nginx)``, escaped, one line."""
    args = ", ".join(f"{k}={one_line(v)}" for k, v in significant_arguments(record.arguments))
    return escaped(f"{record.tool} ({args})" if args else record.tool, 300)


NO_DRY_RUN = (
    ":warning: *No dry run available*: this tool cannot show what it would do; "
    "approving it runs it for real."
)


def _card_body(record: ApprovalRecord, approvers: Sequence[str] = ()) -> list[Block]:
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
    args = significant_arguments(record.arguments)
    lines = [
        f"`{escaped(k, 80)}`: {escaped(one_line(v), ARG_VALUE_CHARS)}"
        for k, v in args[:MAX_CARD_ARGS]
    ]
    if len(args) > MAX_CARD_ARGS:
        lines.append(f"_{plural(len(args) - MAX_CARD_ARGS, 'more argument')}_")
    blocks.append(section_block("*Arguments*\n" + ("\n".join(lines) or "_none_")))
    if record.preview:
        head, tail = "*Will run*\n```\n", "\n```"
        body = escape(record.preview.strip("\n")).replace("```", "`\u200b``")
        blocks.append(section_block(head + cut(body, MAX_PREVIEW_CHARS) + tail))
    if record.dry_run_output is not None:
        head, tail = "*Dry run output*\n```\n", "\n```"
        body = escape(record.dry_run_output.strip("\n") or "(no output)").replace(
            "```", "`\u200b``"
        )
        blocks.append(section_block(head + cut(body, MAX_SECTION - len(head) - len(tail)) + tail))
    elif record.category == "destructive":  # its tool has none (``has_dry_run``)
        blocks.append(section_block(NO_DRY_RUN))
    who = ""
    if approvers:  # whom to ask, in an incident
        who = " · approvers: " + whom_to_ask(approvers)
    if record.category == "destructive":
        who += " · the requester may not approve it"
    blocks.append(
        context_block(
            f"Requested by {mention(record.requester)} · {record.category}"
            f" · expires at {hhmm(record.expires_at)}{who}"
        )
    )
    return blocks


def whom_to_ask(approvers: Sequence[str]) -> str:
    """``<@U1>, <!subteam^S1>`` (at most ``MAX_CARD_APPROVERS``, then ``and N more``)."""
    shown = [group_mention(a) if a.startswith("S") else mention(a) for a in approvers]
    more = len(shown) - MAX_CARD_APPROVERS
    return ", ".join(shown[:MAX_CARD_APPROVERS]) + (f" and {more} more" if more > 0 else "")


def reminder_message(record: ApprovalRecord, *, approvers: Sequence[str], now: float) -> Message:
    """The one recall of a card still pending: what waits, since when, whom to ask."""
    waited = duration(max(now - record.requested_at, 0.0))
    who = whom_to_ask(approvers) if approvers else "anyone in the channel"
    if record.category == "destructive":
        who += f" (not {mention(record.requester)}: two-person rule)"
    text = (
        f":alarm_clock: Still waiting for an approval of `{escaped(record.tool, 80)}` "
        f"(asked {waited} ago; the card above expires at {hhmm(record.expires_at)}). "
        f"Who can approve: {who}."
    )
    return Message(text=text, blocks=[section_block(text)])


def approval_card(record: ApprovalRecord, *, approvers: Sequence[str] = ()) -> Message:
    """The card for a pending approval, with ``Approve`` and ``Deny``; ``approvers`` (the
    policy's user and group ids, when it names any) are shown as whom to ask."""
    value = f"{record.job_id}|{record.call_id}"
    blocks = _card_body(record, approvers)
    blocks.append(
        actions_block(
            CARD_ACTIONS_BLOCK,
            button_element("Approve", ACTION_APPROVE, value, style="primary"),
            button_element("Deny", ACTION_DENY, value, style="danger"),
        )
    )
    text = f"Approval needed: {_summary(record)} · expires at {hhmm(record.expires_at)}"
    return Message(text=text, blocks=blocks)


def decision_line(outcome: Outcome, by: str | None, at: datetime | float) -> str:
    """``Approved by <@U…> at 14:05 UTC``, ``Denied by …``, ``Expired at …``, ``Cancelled by …``."""
    if outcome == "expired":
        return f"Expired at {hhmm(at)}"
    if outcome == "cancelled":
        return f"Cancelled by {mention(by)}" if by else "Cancelled"
    return f"{outcome.capitalize()} by {mention(by)} at {hhmm(at)}"


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
) -> Message:
    """The card after its decision: no buttons, and who decided when.

    ``card`` is the approval record (the card is rebuilt) or the card's current blocks (as in
    a ``block_actions`` payload): the actions block and any earlier decision line are dropped.
    """
    line = decision_line(outcome, by, at)
    if isinstance(card, ApprovalRecord):
        blocks, subject = _card_body(card), _summary(card)
    else:
        old = card.blocks if isinstance(card, Message) else card
        drop = {CARD_ACTIONS_BLOCK, CARD_DECISION_BLOCK}
        blocks = [b for b in old if b.get("block_id") not in drop and b.get("type") != "actions"]
        title = next((b for b in blocks if b.get("block_id") == CARD_TITLE_BLOCK), None)
        subject = escape(title["text"]["text"]) if title else "Approval"
    blocks.append(context_block(f"{_ICONS[outcome]} {line}", block_id=CARD_DECISION_BLOCK))
    return Message(text=f"{line} · {subject}", blocks=blocks)

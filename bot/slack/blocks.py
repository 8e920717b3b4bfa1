"""Block Kit messages: live status, answers, endings and approval cards.

Every builder is a pure function of our state returning a :class:`Message`: the plain ``text``
(always set — notifications and the fallback; for answers the whole answer, never a
placeholder) and the ``blocks``. Text from people, the model or tools that lands in a
``mrkdwn`` field or in ``text`` goes through :func:`escape`, so it can never form a mention
(``<!channel>``, ``<@U…>``) or a link. The ``markdown`` block carrying the model's answer is
sent as is: Slack renders it as standard Markdown. :func:`validate` checks Slack's limits.

Limits (PLATFORM.md): 50 blocks, message text 40,000, section text 3,000, header 150, button
text 75, ``markdown`` block 12,000. Slack in practice also caps *all* ``markdown`` blocks of one
message together near 12,000 (``msg_blocks_too_long``, slackapi/bolt-js#2509), so an answer
message carries one ``markdown`` block and long answers become several messages.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, NamedTuple

from bot.agent.run import STALL_ITERATIONS
from bot.agent.state import StopReason
from bot.store.approvals import ApprovalRecord

Block = dict[str, Any]
Outcome = Literal["approved", "denied", "expired", "cancelled"]

MAX_BLOCKS = 50
MAX_TEXT = 40_000
MAX_SECTION = 3_000
MAX_HEADER = 150
MAX_BUTTON = 75
MAX_BUTTON_VALUE = 2_000
MAX_ID = 255
MAX_CONTEXT_ELEMENTS = 10
MAX_ACTION_ELEMENTS = 25
MAX_MARKDOWN = 12_000  # one markdown block, and all markdown blocks of a message together

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
ARG_VALUE_CHARS = 300
ERROR_CHARS = 500

_USER_ID = re.compile(r"[UW][A-Z0-9]{2,}")
_SKIPPED_ARGS = frozenset({"confirmed_by"})  # set from the click, never shown as the model's


@dataclass(frozen=True, slots=True)
class Message:
    """What ``chat.postMessage``/``chat.update`` get: ``text`` and ``blocks``."""

    text: str
    blocks: list[Block] = field(default_factory=list)


class SlackLimitError(ValueError):
    """A message breaks one of Slack's Block Kit limits."""


# -- text helpers --------------------------------------------------------------------------


def escape(text: str) -> str:
    """Escape Slack's control characters (``&``, ``<``, ``>``) for mrkdwn and ``text``."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def unescape(text: str) -> str:
    """The inverse of :func:`escape`."""
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def _cost(text: str) -> int:
    """``len(escape(text))`` without building it."""
    return len(text) + 4 * text.count("&") + 3 * (text.count("<") + text.count(">"))


def _cut(text: str, limit: int) -> str:
    """Cut already escaped text to ``limit`` chars with an ellipsis, never inside an entity."""
    if len(text) <= limit:
        return text
    return re.sub(r"&[a-z]*$", "", text[: limit - 1]) + "…"


def _esc(text: str, limit: int) -> str:
    return _cut(escape(text), limit)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def mention(user_id: str | None) -> str:
    """``<@U…>`` for a real user id; anything else is shown escaped, never as a mention."""
    if user_id and _USER_ID.fullmatch(user_id):
        return f"<@{user_id}>"
    return escape(user_id or "someone")


def hhmm(at: datetime | float) -> str:
    """``14:05 UTC`` for an aware datetime, a naive one taken as UTC, or epoch seconds."""
    if isinstance(at, int | float):
        at = datetime.fromtimestamp(at, UTC)
    elif at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return at.astimezone(UTC).strftime("%H:%M UTC")


def duration(seconds: float) -> str:
    """``45s``, ``3m 05s``, ``1h 02m``."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    return f"{s // 3600}h {s % 3600 // 60:02d}m"


# -- block helpers -------------------------------------------------------------------------


def _mrkdwn(text: str) -> Block:
    return {"type": "mrkdwn", "text": _cut(text, MAX_SECTION)}


def _section(text: str, block_id: str | None = None) -> Block:
    block: Block = {"type": "section", "text": _mrkdwn(text)}
    if block_id:
        block["block_id"] = block_id
    return block


def _context(*texts: str, block_id: str | None = None) -> Block:
    block: Block = {"type": "context", "elements": [_mrkdwn(t) for t in texts]}
    if block_id:
        block["block_id"] = block_id
    return block


def _button(label: str, action_id: str, value: str, style: str | None = None) -> Block:
    button: Block = {
        "type": "button",
        "text": {"type": "plain_text", "text": label[:MAX_BUTTON]},
        "action_id": action_id,
        "value": value[:MAX_BUTTON_VALUE],
    }
    if style:
        button["style"] = style
    return button


def _actions(block_id: str, *buttons: Block) -> Block:
    return {"type": "actions", "block_id": block_id, "elements": list(buttons)}


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
        context.append(f"`{_esc(p.model, 200)}`")
    blocks: list[Block] = [_context(*context)]
    shown = list(p.finished)[-MAX_TOOL_LINES:]
    lines = []
    if hidden := len(p.finished) - len(shown):
        lines.append(f"_{_plural(hidden, 'earlier tool call')}_")
    for t in shown:
        icon = ":white_check_mark:" if t.ok else ":x:"
        result = _esc(_one_line(t.result), TOOL_RESULT_CHARS)
        lines.append(f"{icon} `{_esc(t.tool, 80)}` {result}".rstrip())
    running = p.current_tool if not final else None
    if running:
        lines.append(f":hourglass_flowing_sand: `{_esc(running, 80)}` running…")
    if p.awaiting and not final:
        lines.append(f":raised_hand: `{_esc(p.awaiting, 80)}` needs an approval: see the card")
    if lines:
        blocks.append(_section("\n".join(lines)))
    if stop_button and not final and not p.stopping:
        blocks.append(_actions(STATUS_ACTIONS_BLOCK, _button("Stop", ACTION_STOP, p.job_id)))
    text = f"{state}: {stats}"
    if running:
        text += f" · running {_esc(running, 80)}"
    return Message(text=text, blocks=blocks)


# -- answers -------------------------------------------------------------------------------

_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})(.*)")
_LINE = re.compile(r"[^\n]*\n|[^\n]+\Z")


class _Fence(NamedTuple):
    opener: str  # the opening line, without its newline
    marker: str


class _Piece(NamedTuple):
    source: str
    fence: _Fence | None  # the fence open after this piece
    line_end: bool


def _next_fence(line: str, fence: _Fence | None) -> _Fence | None:
    m = _FENCE.fullmatch(line.rstrip("\r\n"))
    if not m:
        return fence
    marker, info = m.group(1), m.group(2)
    if fence is None:
        if marker[0] == "`" and "`" in info:
            return None  # not a fence: an inline code span
        return _Fence(line.rstrip("\r\n"), marker)
    closes = marker[0] == fence.marker[0] and len(marker) >= len(fence.marker)
    return None if closes and not info.strip() else fence


def _fragments(line: str, limit: int) -> list[str]:
    """Cut a line into parts of escaped length ≤ ``limit``, preferably after a space."""
    out = []
    while _cost(line) > limit:
        n = size = 0
        for ch in line:
            size += _cost(ch)
            if size > limit:
                break
            n += 1
        space = line.rfind(" ", 0, n)
        if space >= n // 2:
            n = space + 1
        out.append(line[:n])
        line = line[n:]
    return [*out, line] if line else out


def _pieces(markdown: str, limit: int) -> list[_Piece]:
    pieces = []
    fence: _Fence | None = None
    for line in _LINE.findall(markdown):
        fence = _next_fence(line, fence)
        parts = _fragments(line, limit)
        for k, part in enumerate(parts):
            pieces.append(_Piece(part, fence, k == len(parts) - 1 and line.endswith("\n")))
    return pieces


def _reopen(fence: _Fence | None) -> str:
    if fence is None:
        return ""
    return (fence.opener if len(fence.opener) <= 200 else fence.marker) + "\n"


def _close(fence: _Fence | None, source: str) -> str:
    if fence is None:
        return ""
    return ("" if source.endswith("\n") else "\n") + fence.marker


def split_markdown(markdown: str, budget: int = MAX_MARKDOWN) -> list[tuple[str, str]]:
    """Split into ``(source, rendered)`` chunks.

    The sources concatenate to ``markdown`` exactly. Each rendered chunk is its source with a
    fence split across chunks closed at its end and reopened at the next start; its length
    and the escaped source's length are ≤ ``budget``. Chunks end, by preference, at a blank
    line (if that fills at least half the budget), at a line outside a fence (if that fills
    a quarter), at any line, and last inside a line (after a space when there is one).
    """
    pieces = _pieces(markdown, budget // 4)
    chunks: list[tuple[str, str]] = []
    i = 0
    while i < len(pieces):
        prefix = _reopen(pieces[i - 1].fence if i else None)
        size, j = len(prefix), i
        para: tuple[int, int] | None = None
        line_out: tuple[int, int] | None = None
        line_any = None
        while j < len(pieces):
            p = pieces[j]
            suffix = len(p.fence.marker) + 1 if p.fence and j + 1 < len(pieces) else 0
            if j > i and size + _cost(p.source) + suffix > budget:
                break
            size += _cost(p.source)
            j += 1
            if p.line_end:
                line_any = j
                if p.fence is None:
                    line_out = (j, size)
                    if not p.source.strip():
                        para = (j, size)
        end = j
        if j < len(pieces):
            if para and para[1] * 2 >= budget:
                end = para[0]
            elif line_out and (line_out[1] * 4 >= budget or not line_any):
                end = line_out[0]
            else:
                end = line_any or j
        source = "".join(p.source for p in pieces[i:end])
        suffix_text = _close(pieces[end - 1].fence, source) if end < len(pieces) else ""
        chunks.append((source, prefix + source + suffix_text))
        i = end
    return chunks


def answer_messages(markdown: str) -> list[Message]:
    """The model's answer as messages, each with one ``markdown`` block and its part as text.

    Invariant: ``"".join(unescape(m.text) for m in result) == markdown`` for any answer with
    non-whitespace content (split whitespace stays in the texts; only the blocks drop it),
    except that a whitespace run that does not fit in Slack's text limit is cut.
    A blank answer gives one message saying so.
    """
    if not markdown.strip():
        return [Message(text="(the model gave no answer text)")]
    messages: list[Message] = []
    carry = ""  # a whitespace-only chunk's text, joined to a neighbour
    for source, rendered in split_markdown(markdown):
        body = rendered.strip("\n")
        # A piece with no text of its own (whitespace, its block at most the fence lines
        # that reopen and close a split code block) joins a neighbour's text.
        if not body.strip() or not source.strip():
            if messages:
                last = messages[-1]
                room = MAX_TEXT - len(last.text)
                messages[-1] = Message(last.text + escape(source[:room]), last.blocks)
                carry += source[room:]
            else:
                carry += source
            continue
        text = escape(source)
        text = escape(carry[: MAX_TEXT - len(text)]) + text
        carry = ""
        messages.append(Message(text, [{"type": "markdown", "text": body}]))
    return messages


def partial_answer(markdown: str) -> Message:
    """A model response shown while it is still being written (the ``chat.update`` fallback
    of a stream): its text so far in one ``markdown`` block and, escaped, in ``text``.

    Text past Slack's limits is cut; the final rendering (:func:`answer_messages`) replaces it.
    """
    body = markdown if len(markdown) <= MAX_MARKDOWN else markdown[: MAX_MARKDOWN - 1] + "…"
    blocks: list[Block] = [{"type": "markdown", "text": body}] if body.strip() else []
    return Message(text=_cut(escape(markdown), MAX_TEXT) or "…", blocks=blocks)


NARRATION_CHARS = 300


def with_narration(message: Message, narration: str) -> Message:
    """``message`` (the status message) with the model's short note before its tool calls
    as a last context line, escaped and on one line; ``text`` is left as it is."""
    line = _esc(_one_line(narration), NARRATION_CHARS)
    if not line:
        return message
    return Message(message.text, [*message.blocks, _context(f":speech_balloon: {line}")])


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
    by: str | None = None,
    active_s: float | None = None,
    deadline_s: float | None = None,
) -> Message:
    """What happened, in words, with the stop reason code in ``text`` (not for ``completed``).

    ``by`` names who pressed Stop (``cancelled``); ``continue_label`` (e.g. ``Continue (+20
    iterations)``) adds the ``Continue`` button on a limit ending.
    """
    R = StopReason
    deadline = ""
    if active_s is not None and deadline_s is not None:
        deadline = f" ({duration(active_s)}/{duration(deadline_s)})"
    headline = {
        R.COMPLETED: "Done",
        R.INCOMPLETE: "Stopped: the answer did not complete the task",
        R.AWAITING_APPROVAL: "Paused: waiting for approval",
        R.LIMIT_ITERATIONS: f"Stopped: iteration limit reached ({iterations}/{max_iterations})",
        R.LIMIT_TOKENS: f"Stopped: token budget reached ({tokens:,}/{token_budget:,} tokens)",
        R.LIMIT_DEADLINE: f"Stopped: time limit reached{deadline}",
        R.LOOP: "Stopped: the same call kept returning the same result",
        R.STALLED: f"Stopped: every tool call failed {STALL_ITERATIONS} times in a row",
        R.NO_ACTION: "Stopped: the model returned empty responses",
        R.FAILED: f"Failed: {_esc(_one_line(error or 'unknown error'), ERROR_CHARS)}",
        R.CANCELLED: f"Cancelled by {mention(by)}" if by else "Cancelled",
    }[reason]
    if reason is not R.COMPLETED:
        headline += f" · `{reason.value}`"
    stats = (
        f"iterations {iterations}/{max_iterations} · tokens {tokens:,}/{token_budget:,} · "
        f"{_plural(tools_run, 'tool')} run"
    )
    blocks = [_section(headline), _context(stats)]
    if reason in _LIMITS and continue_label:
        button = _button(continue_label, ACTION_CONTINUE, job_id, style="primary")
        blocks.append(_actions(ENDING_ACTIONS_BLOCK, button))
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
    args = ", ".join(f"{k}={_one_line(v)}" for k, v in significant_arguments(record.arguments))
    return _esc(f"{record.tool} ({args})" if args else record.tool, 300)


def _card_body(record: ApprovalRecord) -> list[Block]:
    title = f"Approval needed: {record.tool}"
    blocks: list[Block] = [
        {
            "type": "header",
            "block_id": CARD_TITLE_BLOCK,
            "text": {"type": "plain_text", "text": title[:MAX_HEADER]},
        }
    ]
    if record.reason and record.reason.strip():
        blocks.append(_section("*Reason*\n" + _esc(record.reason.strip(), MAX_SECTION - 12)))
    args = significant_arguments(record.arguments)
    lines = [
        f"`{_esc(k, 80)}`: {_esc(_one_line(v), ARG_VALUE_CHARS)}" for k, v in args[:MAX_CARD_ARGS]
    ]
    if len(args) > MAX_CARD_ARGS:
        lines.append(f"_{_plural(len(args) - MAX_CARD_ARGS, 'more argument')}_")
    blocks.append(_section("*Arguments*\n" + ("\n".join(lines) or "_none_")))
    if record.dry_run_output is not None:
        head, tail = "*Dry run output*\n```\n", "\n```"
        body = escape(record.dry_run_output.strip("\n") or "(no output)").replace(
            "```", "`\u200b``"
        )
        blocks.append(_section(head + _cut(body, MAX_SECTION - len(head) - len(tail)) + tail))
    blocks.append(
        _context(
            f"Requested by {mention(record.requester)} · {record.category}"
            f" · expires at {hhmm(record.expires_at)}"
        )
    )
    return blocks


def approval_card(record: ApprovalRecord) -> Message:
    """The card for a pending approval, with ``Approve`` and ``Deny``."""
    value = f"{record.job_id}|{record.call_id}"
    blocks = _card_body(record)
    blocks.append(
        _actions(
            CARD_ACTIONS_BLOCK,
            _button("Approve", ACTION_APPROVE, value, style="primary"),
            _button("Deny", ACTION_DENY, value, style="danger"),
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
    blocks.append(_context(f"{_ICONS[outcome]} {line}", block_id=CARD_DECISION_BLOCK))
    return Message(text=f"{line} · {subject}", blocks=blocks)


# -- validation ----------------------------------------------------------------------------


Rule = tuple[tuple[str, ...], int, int]  # path to a str or list, min and max length
_BLOCK_RULES: dict[str, tuple[Rule, ...]] = {
    "section": ((("text", "text"), 1, MAX_SECTION),),
    "header": ((("text", "text"), 1, MAX_HEADER),),
    "markdown": ((("text",), 1, MAX_MARKDOWN),),
    "context": ((("elements",), 1, MAX_CONTEXT_ELEMENTS),),
    "actions": ((("elements",), 1, MAX_ACTION_ELEMENTS),),
    "divider": (),
}
_ELEMENT_RULES: dict[str, tuple[Rule, ...]] = {
    "mrkdwn": ((("text",), 1, MAX_SECTION),),
    "plain_text": ((("text",), 1, MAX_SECTION),),
    "button": (
        (("text", "text"), 1, MAX_BUTTON),
        (("action_id",), 1, MAX_ID),
        (("value",), 0, MAX_BUTTON_VALUE),
    ),
}


def _check(obj: Block, rules: tuple[Rule, ...] | None, where: str, problems: list[str]) -> None:
    if rules is None:
        problems.append(f"{where}: unknown type {obj.get('type')!r}")
        return
    for path, low, high in rules:
        value: Any = obj
        for key in path:
            value = value.get(key, "") if isinstance(value, dict) else ""
        if not low <= len(value) <= high:
            problems.append(f"{where}: {'.'.join(path)} length {len(value)} not in {low}..{high}")
    if obj.get("style") not in (None, "primary", "danger") or len(obj.get("block_id", "")) > MAX_ID:
        problems.append(f"{where}: bad style or block_id")


def validate(message: Message) -> None:
    """Raise :class:`SlackLimitError` listing every Block Kit limit ``message`` breaks."""
    problems: list[str] = []
    if not message.text.strip() or len(message.text) > MAX_TEXT:
        problems.append(f"text must be 1..{MAX_TEXT} chars, is {len(message.text)}")
    if len(message.blocks) > MAX_BLOCKS:
        problems.append(f"{len(message.blocks)} blocks, over {MAX_BLOCKS}")
    markdown = sum(len(b.get("text", "")) for b in message.blocks if b.get("type") == "markdown")
    if markdown > MAX_MARKDOWN:
        problems.append(f"markdown blocks hold {markdown} chars together, over {MAX_MARKDOWN}")
    ids = [b["block_id"] for b in message.blocks if "block_id" in b]
    if len(ids) != len(set(ids)):
        problems.append("duplicate block_id")
    for block in message.blocks:
        where = f"block {block.get('block_id') or block.get('type')}"
        _check(block, _BLOCK_RULES.get(block.get("type", "")), where, problems)
        for element in block.get("elements", []):
            _check(element, _ELEMENT_RULES.get(element.get("type", "")), where, problems)
    if problems:
        raise SlackLimitError("; ".join(problems))

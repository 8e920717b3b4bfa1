"""Block Kit primitives: Slack's limits, :class:`Message`, escaping, block constructors, checks.

Text from people, the model or tools that lands in a ``mrkdwn`` field or in ``text`` goes
through :func:`escape` (:func:`escaped` also cuts it, never inside an entity), so it can never
form a mention (``<!channel>``, ``<@U…>``) or a link. :func:`validate` checks Slack's limits.

Limits (PLATFORM.md): 50 blocks, message text 40,000, section text 3,000, header 150, button
text 75, ``markdown`` block 12,000. Slack in practice also caps *all* ``markdown`` blocks of one
message together near 12,000 (``msg_blocks_too_long``, slackapi/bolt-js#2509).

The messages themselves are built elsewhere: ``bot.slack.status_blocks`` (status, endings, approval
cards) and ``bot.slack.answers`` (the model's answer).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from bot.alerts.text import REQUESTER as ALERT_REQUESTER

Block = dict[str, Any]

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

_USER_ID = re.compile(r"[UW][A-Z0-9]{2,}")


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


def escaped_len(text: str) -> int:
    """``len(escape(text))`` without building it."""
    return len(text) + 4 * text.count("&") + 3 * (text.count("<") + text.count(">"))


def cut(text: str, limit: int) -> str:
    """Cut already escaped text to ``limit`` chars with an ellipsis, never inside an entity."""
    if len(text) <= limit:
        return text
    return re.sub(r"&[a-z]*$", "", text[: limit - 1]) + "…"


def escaped(text: str, limit: int) -> str:
    """``text`` escaped, then cut to ``limit`` chars (:func:`cut`)."""
    return cut(escape(text), limit)


def one_line(text: str) -> str:
    """``text`` on one line: every run of whitespace becomes one space."""
    return " ".join(text.split())


def plural(n: int, word: str) -> str:
    """``1 tool``, ``1,200 tools``."""
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def mention(user_id: str | None) -> str:
    """``<@U…>`` for a real user id; the requester of a job an alert started as
    "Alertmanager"; anything else is shown escaped, never as a mention."""
    if user_id and _USER_ID.fullmatch(user_id):
        return f"<@{user_id}>"
    if user_id == ALERT_REQUESTER:
        return "Alertmanager"
    return escape(user_id or "someone")


_GROUP_ID = re.compile(r"^S[A-Z0-9]+$")


def group_mention(group_id: str) -> str:
    """``<!subteam^S…>`` for a user group id; anything else escaped, never a mention."""
    if _GROUP_ID.fullmatch(group_id):
        return f"<!subteam^{group_id}>"
    return escape(group_id)


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
    return {"type": "mrkdwn", "text": cut(text, MAX_SECTION)}


def section_block(text: str, block_id: str | None = None) -> Block:
    """A section of mrkdwn ``text`` (already escaped), cut to the section limit."""
    block: Block = {"type": "section", "text": _mrkdwn(text)}
    if block_id:
        block["block_id"] = block_id
    return block


def context_block(*texts: str, block_id: str | None = None) -> Block:
    """A context block, one mrkdwn element per text (already escaped)."""
    block: Block = {"type": "context", "elements": [_mrkdwn(t) for t in texts]}
    if block_id:
        block["block_id"] = block_id
    return block


def button_element(label: str, action_id: str, value: str, style: str | None = None) -> Block:
    """A button; label and value cut to Slack's limits."""
    button: Block = {
        "type": "button",
        "text": {"type": "plain_text", "text": label[:MAX_BUTTON]},
        "action_id": action_id,
        "value": value[:MAX_BUTTON_VALUE],
    }
    if style:
        button["style"] = style
    return button


def actions_block(block_id: str, *buttons: Block) -> Block:
    """An actions block holding ``buttons``."""
    return {"type": "actions", "block_id": block_id, "elements": list(buttons)}


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

"""The model's answer as Slack messages: its Markdown split to fit Slack's limits.

The ``markdown`` block carrying the answer is sent as is: Slack renders it as standard
Markdown. Slack caps all ``markdown`` blocks of one message together near 12,000 characters,
so an answer message carries one ``markdown`` block and a long answer becomes several
messages. :func:`split_markdown` chooses where to cut (a blank line, a line outside a code
fence, any line, inside a line) and closes a fence cut across messages at one message's end
and reopens it at the next. Each message's ``text`` is its part escaped, so the texts
together are the whole answer. :func:`partial_answer` is the answer while it is written.

People and channels: a ``markdown`` block renders ``<@U…>`` literally, so the block's text
goes through ``render`` (``bot.slack.names``: ``@Name``, ``#name``) while ``text`` keeps what
the model wrote (escaped).

Feedback: given the job's id, the answer's last message ends with a ``context_actions``
block holding Slack's ``feedback_buttons`` (👍/👎, :func:`feedback_block`), each button's
value ``<job id>|positive`` or ``<job id>|negative`` (``bot.slack.feedback`` records the
click); the block is left out only when the message already holds ``MAX_BLOCKS``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Literal, NamedTuple

from bot.slack.blockkit import (
    MAX_BLOCKS,
    MAX_MARKDOWN,
    MAX_TEXT,
    Block,
    Message,
    cut,
    escape,
    escaped_len,
)

ACTION_FEEDBACK = "opsloop_feedback"  # the feedback_buttons element of an answer
FeedbackValue = Literal["positive", "negative"]
FEEDBACK_VALUES: tuple[FeedbackValue, FeedbackValue] = ("positive", "negative")

Render = Callable[[str], str]  # a markdown block's text with names (``Names.render``)


def _same(text: str) -> str:
    return text


def _markdown_block(text: str, render: Render) -> Block:
    body = render(text)
    if len(body) > MAX_MARKDOWN:  # names longer than the ids they replace
        body = body[: MAX_MARKDOWN - 1] + "…"
    return {"type": "markdown", "text": body}


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
    while escaped_len(line) > limit:
        n = size = 0
        for ch in line:
            size += escaped_len(ch)
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
            if j > i and size + escaped_len(p.source) + suffix > budget:
                break
            size += escaped_len(p.source)
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


def feedback_block(job_id: str) -> Block:
    """The answer's feedback buttons (Slack's ``feedback_buttons`` in ``context_actions``)."""
    return {
        "type": "context_actions",  # no block_id: Slack makes one per message
        "elements": [
            {
                "type": "feedback_buttons",
                "action_id": ACTION_FEEDBACK,
                "positive_button": {
                    "text": {"type": "plain_text", "text": "Helpful"},
                    "accessibility_label": "Mark this answer as helpful",
                    "value": f"{job_id}|positive",
                },
                "negative_button": {
                    "text": {"type": "plain_text", "text": "Not helpful"},
                    "accessibility_label": "Mark this answer as not helpful",
                    "value": f"{job_id}|negative",
                },
            }
        ],
    }


def with_feedback(messages: list[Message], job_id: str) -> list[Message]:
    """``messages`` with the feedback block at the end of the last one (unless it already
    holds ``MAX_BLOCKS``, Slack's limit)."""
    if not messages or len(messages[-1].blocks) >= MAX_BLOCKS:
        return messages
    last = messages[-1]
    return [*messages[:-1], Message(last.text, [*last.blocks, feedback_block(job_id)])]


def answer_messages(
    markdown: str, *, job_id: str | None = None, render: Render = _same
) -> list[Message]:
    """The model's answer as messages, each with one ``markdown`` block and its part as text;
    with ``job_id``, the last one also carries the feedback buttons (:func:`with_feedback`).
    ``render`` writes the blocks' people and channels by name (``text`` keeps the ids).

    Invariant: ``"".join(unescape(m.text) for m in result) == markdown`` for any answer with
    non-whitespace content (split whitespace stays in the texts; only the blocks drop it),
    except that a whitespace run that does not fit in Slack's text limit is cut.
    A blank answer gives one message saying so.
    """
    messages = _answer_messages(markdown, render)
    return with_feedback(messages, job_id) if job_id is not None else messages


def _answer_messages(markdown: str, render: Render) -> list[Message]:
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
        messages.append(Message(text, [_markdown_block(body, render)]))
    return messages


def partial_answer(markdown: str, *, render: Render = _same) -> Message:
    """A model response shown while it is still being written (the ``chat.update`` fallback
    of a stream): its text so far in one ``markdown`` block (names by ``render``) and,
    escaped, in ``text``.

    Text past Slack's limits is cut; the final rendering (:func:`answer_messages`) replaces it.
    """
    blocks: list[Block] = [_markdown_block(markdown, render)] if markdown.strip() else []
    return Message(text=cut(escape(markdown), MAX_TEXT) or "…", blocks=blocks)

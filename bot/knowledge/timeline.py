"""An incident's timeline as values, and its two renderings: Markdown for people (the
file the ``opsloop_timeline`` shortcut posts, what ``opsloop timeline`` prints) and one
JSON document for tools (``opsloop timeline --json``).

A ``Timeline`` is the thread it is about (``C123:1700000000.000100``) and its events in
time order; a ``TimelineEvent`` is one line of it: when (epoch seconds, kept to the
millisecond so the JSON round-trips exactly), what kind of fact, who (a Slack user id,
``alertmanager`` or ``opsloop``) and one line of text. Reading those facts from Redis is
``bot.turns.timeline``'s; this module only holds and renders them, and does no I/O.

The text is the caller's, already scrubbed; here it is folded onto one line and bounded.
The Markdown is posted in Slack, so it never carries Slack's control syntax: ``<`` and
``>`` (and ``&``) are written as entities, so no ``<@U…>`` or ``<!here>`` in a message,
a tool's output or a name ever becomes a ping.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

TEXT_CHARS = 300  # one event's text, at most
WHO_CHARS = 80

KINDS = (
    "alert_fired",  # an alert group opened (or alerts joined it)
    "alert_resolved",  # alerts resolved, or the whole group
    "alert_update",  # alerts joined and resolved in one update
    "request",  # the message that started a job (a mention, an alert, a button)
    "reply",  # a person's message in the thread
    "answer",  # the bot's answer at the end of a job
    "job_started",
    "job_ended",  # with its stop reason and cost
    "tool_call",  # a read-only call (writes have their own kinds)
    "approval_requested",
    "approved",
    "denied",
    "expired",
    "cancelled",  # an approval withdrawn (by a Stop)
    "write_started",
    "write_done",
    "write_unknown",  # started, never seen to end (its process died)
    "write_withdrawn",  # claimed, not confirmed by a replica: never started
    "limit_reached",
    "limit_raised",
    "stop",  # someone pressed Stop
    "feedback",
)
"""The kinds ``bot.turns.timeline`` writes (a reader must accept others: the list grows)."""

_KIND = re.compile(r"[a-z][a-z0-9_]{0,39}")
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_MS = datetime.timedelta(milliseconds=1)


def one_line(text: str, limit: int = TEXT_CHARS) -> str:
    """``text`` on one line (whitespace folded), at most ``limit`` chars (cut with ``…``)."""
    line = " ".join(text.split())
    if len(line) <= limit:
        return line
    head = line[: limit - 1]
    if head and "\ud800" <= head[-1] <= "\udbff":  # never half a surrogate pair
        head = head[:-1]
    return head + "…"


def first_line(text: str, limit: int = TEXT_CHARS) -> str:
    """The first non-blank line of ``text``, bounded (what a request or reply shows)."""
    for line in text.splitlines():
        if line.strip():
            return one_line(line, limit)
    return ""


def _millis(ts: float) -> int:
    return round(ts * 1000)


@dataclass(frozen=True, slots=True)
class TimelineEvent:
    """One line of the timeline. ``ts`` is normalised to the millisecond, ``text`` and
    ``who`` to one bounded line; ``kind`` is a lowercase word (``KINDS``)."""

    ts: float  # epoch seconds
    kind: str
    who: str  # a Slack user id, "alertmanager" or "opsloop"
    text: str = ""

    def __post_init__(self) -> None:
        if not _KIND.fullmatch(self.kind):
            raise ValueError(f"not an event kind: {self.kind!r}")
        if self.ts != self.ts or self.ts in (float("inf"), float("-inf")):
            raise ValueError(f"not a time: {self.ts!r}")
        object.__setattr__(self, "ts", _millis(self.ts) / 1000)
        object.__setattr__(self, "who", one_line(self.who, WHO_CHARS) or "?")
        object.__setattr__(self, "text", one_line(self.text))


@dataclass(frozen=True, slots=True)
class Timeline:
    """A thread (``CHANNEL:TS``) and its events, kept sorted by time (a stable sort:
    events of the same millisecond keep the order they were given in)."""

    thread: str
    events: list[TimelineEvent] = field(default_factory=list)

    def __post_init__(self) -> None:
        object.__setattr__(self, "events", sorted(self.events, key=lambda e: e.ts))

    @classmethod
    def of(cls, thread: str, events: Iterable[TimelineEvent]) -> Timeline:
        return cls(thread, list(events))


# -- Markdown ------------------------------------------------------------------------

_MARKDOWN_ESCAPES = str.maketrans(
    {
        "&": "&amp;",
        "<": "&lt;",
        ">": "&gt;",
        "\\": "\\\\",
        "*": "\\*",
        "`": "\\`",
        "[": "\\[",
        "]": "\\]",
        "|": "\\|",
    }
)
_BROADCASTS = frozenset({"here", "channel", "everyone"})


def escape_markdown(text: str) -> str:
    """``text`` as literal Markdown: no bold, link, code, table or HTML, and none of
    Slack's ``<…>`` syntax (``<`` and ``>`` become entities). ``_`` is left alone: tool
    names and ids are full of it, and inside a word it emphasises nothing."""
    return text.translate(_MARKDOWN_ESCAPES)


def clock(ts: float) -> str:
    """``2026-12-06 21:39:29 UTC``."""
    moment = _EPOCH + _millis(ts) * _MS
    return f"{moment:%Y-%m-%d %H:%M:%S} UTC"


def _who(who: str, names: Mapping[str, str] | None) -> str:
    name = (names or {}).get(who)
    if name:
        name = one_line(name, WHO_CHARS).lstrip("@")
        if name and name.lower() not in _BROADCASTS:
            return escape_markdown(f"@{name}")
    return escape_markdown(who)


def to_markdown(timeline: Timeline, *, names: Mapping[str, str] | None = None) -> str:
    """The timeline for people: a title, then one line per event,
    ``- 2026-12-06 21:39:29 UTC · **kind** · who · text``. ``names`` maps a Slack user id
    to the name to show (``@name``); an id it does not map is shown as is."""
    lines = [f"# Incident timeline: {escape_markdown(timeline.thread)}", ""]
    if timeline.events:
        first, last = timeline.events[0].ts, timeline.events[-1].ts
        count = len(timeline.events)
        lines.append(
            f"{count} event{'s' if count != 1 else ''}, {clock(first)} to {clock(last)}. "
            "All times UTC."
        )
    else:
        lines.append("Nothing recorded for this thread.")
    lines.append("")
    for event in timeline.events:
        parts = [clock(event.ts), f"**{event.kind}**", _who(event.who, names)]
        if event.text:
            parts.append(escape_markdown(event.text))
        lines.append("- " + " · ".join(parts))
    return "\n".join(lines) + "\n"


# -- JSON --------------------------------------------------------------------------------


def iso(ts: float) -> str:
    """``2026-12-06T21:39:29.123Z``: UTC, to the millisecond."""
    ms = _millis(ts)
    moment = _EPOCH + ms * _MS
    return f"{moment:%Y-%m-%dT%H:%M:%S}.{ms % 1000:03d}Z"


def parse_iso(text: str) -> float:
    """Epoch seconds of an ISO-8601 time with a zone (``Z`` or an offset)."""
    moment = datetime.datetime.fromisoformat(text)
    if moment.tzinfo is None:
        raise ValueError(f"a time without a zone: {text!r}")
    return ((moment - _EPOCH) // datetime.timedelta(microseconds=1)) / 1_000_000


class _WireEvent(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    ts: str
    kind: str
    who: str
    text: str


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    thread: str
    events: list[_WireEvent] = Field(default_factory=list)


def to_json(timeline: Timeline) -> str:
    """One JSON document: ``{"thread": …, "events": [{"ts", "kind", "who", "text"}, …]}``
    in time order, ``ts`` as ISO-8601 UTC with milliseconds."""
    wire = _Wire(
        thread=timeline.thread,
        events=[
            _WireEvent(ts=iso(e.ts), kind=e.kind, who=e.who, text=e.text) for e in timeline.events
        ],
    )
    return wire.model_dump_json()


def from_json(text: str | bytes) -> Timeline:
    """The timeline ``to_json`` wrote (``ValueError`` when ``text`` is not one)."""
    wire = _Wire.model_validate_json(text)
    return Timeline(
        wire.thread,
        [TimelineEvent(parse_iso(e.ts), e.kind, e.who, e.text) for e in wire.events],
    )

"""What the demo model (``bot.dev.demo_model``) reads from a conversation.

:func:`timeline` turns OpenAI- or Anthropic-shaped messages into :class:`Event` s (a
person's text, a tool call, its result, an answer); :meth:`Turn.read` keeps the current
job, everything since the last answer: the request, what a person said since the model's
last step (:func:`restart_intent`, :func:`asks_for`), and the results of the four demo
tools parsed (:class:`Health`, the metrics' JSON, the log, :class:`Restart`). A person's
message may end with the runtime's note on when it was sent relative to a card's wait and
decision; :meth:`ReplyOrder.split` takes it off the person's words and reads it.

A job an alert started has the alert group as its request, quoted as data under the
alerting system's header (``bot.alerts.text``); :class:`AlertAsk` reads its name and
status from it, and neither the request nor the updates that follow it are read as a
person's words (an annotation saying "restart" asks for nothing).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

HEALTH, METRICS, LOGS, RESTART = "web_health", "web_metrics", "web_logs", "web_restart"
SLOW_MS = 1000.0  # a /health slower than this is degraded
# How an alert group's text for the model starts (``bot.alerts.text.HEADER``, which this
# room may not import; tests/dev/test_demo_alerts.py keeps the two in step).
ALERT_HEADER = "Alert from the alerting system"


@dataclass(frozen=True, slots=True)
class Event:
    """One step of the conversation: a person's text, a tool call, its result, an answer."""

    kind: Literal["user", "call", "result", "answer"]
    text: str = ""
    tool: str = ""


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [_text(b.get("text", b.get("content"))) for b in content if isinstance(b, dict)]
        return "\n".join(p for p in parts if p)
    return ""


def timeline(messages: Sequence[dict[str, Any]]) -> list[Event]:
    """The conversation as events, from OpenAI- or Anthropic-shaped messages."""
    names: dict[str, str] = {}  # tool call id → tool name
    events: list[Event] = []
    for message in messages:
        role, content = message.get("role"), message.get("content")
        if role == "assistant":
            calls = [
                (c.get("id", ""), c.get("function", {}).get("name", ""))
                for c in message.get("tool_calls") or []
            ]
            if isinstance(content, list):
                calls += [
                    (b.get("id", ""), b.get("name", ""))
                    for b in content
                    if isinstance(b, dict) and b.get("type") == "tool_use"
                ]
            for call_id, name in calls:
                names[str(call_id)] = str(name)
                events.append(Event("call", tool=str(name)))
            if not calls:
                events.append(Event("answer", _text(content)))
        elif role == "tool":
            name = names.get(str(message.get("tool_call_id")), "")
            events.append(Event("result", _text(content), name))
        elif role == "user" and isinstance(content, list):
            for block in content:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    name = names.get(str(block.get("tool_use_id")), "")
                    events.append(Event("result", _text(block.get("content")), name))
                elif isinstance(block, dict) and block.get("type") == "text":
                    events.append(Event("user", str(block.get("text", ""))))
        elif role == "user":
            events.append(Event("user", _text(content)))
    return events


_NOTE = re.compile(r"\n\n\(opsloop: (?P<note>.*)\)\s*$", re.DOTALL)
_CLOCK = re.compile(r"\d{2}:\d{2}:\d{2} UTC")
_PERSON = re.compile(r"<@[A-Z0-9]+>|\bsomeone\b")


@dataclass(frozen=True, slots=True)
class ReplyOrder:
    """The runtime's note on when a person's message was sent, relative to a card's
    wait and its decision (``bot.agent.reply_order``)."""

    sent_at: str  # "16:01:02 UTC"
    when: Literal["waiting", "before_ask", "after_decision"]
    outcome: Literal["approved", "denied", "expired", "stopped"]
    by: str | None  # "<@UBOB>", when a person decided
    decided_at: str

    @classmethod
    def split(cls, text: str) -> tuple[str, ReplyOrder | None]:
        """(the person's words, the note on their order if the runtime added one)."""
        found = _NOTE.search(text)
        if found is None:
            return text, None
        note = found["note"]
        times = _CLOCK.findall(note)
        outcome: Literal["approved", "denied", "expired", "stopped"] | None = next(
            (o for o in ("approved", "denied", "expired", "stopped") if f" {o} " in note), None
        )
        if len(times) < 2 or outcome is None:
            return text, None  # not a note this model can read: leave the text alone
        if " while `" in note:
            when: Literal["waiting", "before_ask", "after_decision"] = "waiting"
        elif ", before `" in note:
            when = "before_ask"
        else:
            when = "after_decision"
        person = _PERSON.search(note)
        by = person[0] if person and person[0] != "someone" else None
        words = text[: found.start()]
        return words, cls(times[0], when, outcome, by, times[-1])

    @property
    def decider(self) -> str:
        return self.by or "someone"

    def decision(self) -> str:
        """What became of the card, and when: "<@UBOB> approved it at 16:01:09 UTC"."""
        if self.outcome == "expired":
            return f"the approval expired at {self.decided_at}"
        if self.outcome == "stopped":
            return f"{self.decider} stopped the job at {self.decided_at}"
        return f"{self.decider} {self.outcome} it at {self.decided_at}"

    def line(self) -> str:
        """The true order in one sentence, for the answer."""
        sent = f"**Your message** (sent at {self.sent_at})"
        done = self.decision()
        if self.when == "waiting":
            return (
                f"{sent} came in while the restart waited for approval; {done}, after your message."
            )
        if self.when == "before_ask":
            return f"{sent} came in before I asked to restart web; I read it only after {done}."
        return f"{sent} came in after {done}."


_MENTION = re.compile(r"<[@#!][^>]*>")
_NO_RESTART = re.compile(
    r"\b(don'?t|do not|dont|not|never|without|hold off|stop|wait|avoid)\b[\w\s,']{0,30}?"
    r"\brestart|\bno restarts?\b"
)
_RESTART = re.compile(r"\brestart\b|\bgo ahead\b|\bproceed\b")
_ASKS = {
    LOGS: re.compile(r"\blogs?\b"),
    METRICS: re.compile(r"\bmetrics?\b"),
    HEALTH: re.compile(r"\bhealth|\bcheck (it |web )?again\b"),
}


def _clean(text: str) -> str:
    return _MENTION.sub(" ", text).replace("’", "'").lower()


def restart_intent(text: str) -> Literal["hold", "go"] | None:
    """What a person's message says about restarting: hold off, go ahead, or nothing."""
    text = _clean(text)
    if _NO_RESTART.search(text):
        return "hold"
    return "go" if _RESTART.search(text) else None


def asks_for(text: str) -> list[str]:
    """The read-only tools a person's message asks for, in a stable order."""
    text = _clean(text)
    return [tool for tool, pattern in _ASKS.items() if pattern.search(text)]


@dataclass(frozen=True, slots=True)
class Health:
    status: int | None  # None: no answer at all
    ms: float | None
    text: str

    @classmethod
    def parse(cls, text: str) -> Health:
        found = re.search(r"HTTP (\d{3})\b[^\n]*? in (\d+(?:\.\d+)?) ms", text)
        if found is None:
            return cls(None, None, text.strip())
        return cls(int(found[1]), float(found[2]), text.strip())

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.ms is not None and self.ms < SLOW_MS

    def describe(self) -> str:
        if self.status is None:
            return f"no answer ({first_line(self.text)})"
        return f"HTTP {self.status} in {self.ms:.0f} ms"


def first_line(text: str) -> str:
    """The first line of a tool's output, cut to fit in a sentence."""
    line = text.strip().splitlines()[0] if text.strip() else "no output"
    return line if len(line) <= 160 else line[:159] + "…"


def parse_metrics(text: str) -> dict[str, Any] | None:
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        return None
    try:
        data = json.loads(text[start : end + 1])
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


_ALERT_LINE = re.compile(r"^> alert: (?P<name>.+?) · status: (?P<status>firing|resolved)\b", re.M)
_UPDATE_LINE = re.compile(r"^> (?P<line>update to .+)$", re.M)


@dataclass(frozen=True, slots=True)
class AlertAsk:
    """An alert group the job was asked to investigate: its name and status."""

    name: str
    status: str

    @classmethod
    def read(cls, text: str) -> AlertAsk | None:
        """The alert in a request, or None when ``text`` is not an alert group."""
        if ALERT_HEADER not in text:
            return None
        found = _ALERT_LINE.search(text)
        return cls(found["name"], found["status"]) if found else cls("the alert", "firing")


def alert_update(text: str) -> str | None:
    """The first line of an alert group's update ("update to X: 1 resolved"), or None
    when ``text`` is not one."""
    if ALERT_HEADER not in text:
        return None
    found = _UPDATE_LINE.search(text)
    return found["line"] if found else None


@dataclass(frozen=True, slots=True)
class Restart:
    outcome: Literal["done", "declined", "failed"]
    text: str
    old_pid: str | None = None
    new_pid: str | None = None
    approver: str | None = None

    @classmethod
    def parse(cls, text: str) -> Restart:
        if text.startswith("Error: declined:"):
            return cls("declined", text.removeprefix("Error: declined:").strip())
        moved = re.search(r"pid (\d+) → (\d+)", text) or re.search(r"started pid ()(\d+)", text)
        if text.startswith("Error:") or moved is None:
            return cls("failed", text.strip())
        by = re.search(r"approved by ([^)\s]+)", text)
        return cls("done", text.strip(), moved[1] or None, moved[2], by[1] if by else None)


@dataclass(slots=True)
class Turn:
    """The current job: everything since the last answer."""

    request: str = ""
    pending: str | None = None  # a person's words after the model's last step
    intent: Literal["hold", "go"] | None = None  # the latest word on restarting
    health: list[tuple[int, Health]] = field(default_factory=list)
    metrics: list[tuple[int, dict[str, Any] | None]] = field(default_factory=list)
    logs: list[tuple[int, str]] = field(default_factory=list)
    restart: tuple[int, Restart] | None = None
    order: ReplyOrder | None = None  # the runtime's note on the latest such message
    alert: AlertAsk | None = None  # the request is an alert group (data, not words)
    alert_updates: list[str] = field(default_factory=list)  # alerts joined or resolved since

    @classmethod
    def read(cls, events: Sequence[Event]) -> Turn:
        start = max((i + 1 for i, e in enumerate(events) if e.kind == "answer"), default=0)
        turn = cls()
        spoke = False  # the model has taken a step in this turn
        words: list[str] = []
        for i, event in enumerate(events[start:], start):
            if event.kind == "user" and turn._alert_text(event.text, spoke):
                continue
            if event.kind == "user":
                said, order = ReplyOrder.split(event.text)
                words.append(said)
                turn.intent = restart_intent(said) or turn.intent
                turn.order = order or turn.order
            elif event.kind == "call":
                if not spoke:
                    turn.request = "\n".join(words)
                spoke, words = True, []
            elif event.kind == "result":
                turn._result(i, event)
        if not spoke:
            turn.request = "\n".join(words)
        elif words:
            turn.pending = "\n".join(words)
        return turn

    def _alert_text(self, text: str, spoke: bool) -> bool:
        """Take ``text`` in if it is the alerting system's (the request of an alert's job,
        or an update to its group); whether it was."""
        update = alert_update(text)
        if update is not None:
            self.alert_updates.append(update)
            return True
        ask = AlertAsk.read(text)
        if ask is None:
            return False
        if not spoke and self.alert is None:
            self.alert = ask
        return True

    def _result(self, i: int, event: Event) -> None:
        if event.tool == HEALTH:
            self.health.append((i, Health.parse(event.text)))
        elif event.tool == METRICS:
            self.metrics.append((i, parse_metrics(event.text)))
        elif event.tool == LOGS:
            self.logs.append((i, event.text))
        elif event.tool == RESTART:
            self.restart = (i, Restart.parse(event.text))

    def before_restart(self) -> tuple[Health | None, dict[str, Any] | None]:
        cut = self.restart[0] if self.restart else 1 << 62
        health = [h for i, h in self.health if i < cut]
        metrics = [m for i, m in self.metrics if i < cut]
        return (health[-1] if health else None), (metrics[-1] if metrics else None)

    def after_restart(self) -> tuple[Health | None, dict[str, Any] | None]:
        cut = self.restart[0] if self.restart else 1 << 62
        health = [h for i, h in self.health if i > cut]
        metrics = [m for i, m in self.metrics if i > cut]
        return (health[-1] if health else None), (metrics[-1] if metrics else None)

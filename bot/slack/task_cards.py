"""Tool steps as Slack task cards: the chunks of a structured chat stream, and their fallback.

Slack's chat streaming takes ``chunks`` (slack-sdk's ``MarkdownTextChunk``,
``TaskUpdateChunk``, ``PlanUpdateChunk``): ``{"type": "markdown_text", "text"}``,
``{"type": "task_update", "id", "title", "status", "details"?, "output"?}`` and
``{"type": "plan_update", "title"}``. One tool call is one task card: its id is the call id,
its title says what runs, its status goes ``pending`` (waiting for approval) →
``in_progress`` → ``complete`` / ``error``, and its output is the call's one-line summary.
A task update with a known id updates that card in place, so a step costs no new card.

:class:`Timeline` holds what a job's stream shows (text and steps, in order) and the chunks
not sent yet, coalesced (a step's newest state replaces an unsent older one); it renders
itself as plain Markdown for the ``chat.update`` fallback of an expired stream.
:data:`TASK_CARDS` is the process's switch: the display mode (``OPSLOOP_TASK_DISPLAY``) and
off for good once Slack refused chunks, so the rest of the process streams as before.
Pure: no Slack calls here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Required, TypedDict, Unpack

from bot.slack.blockkit import cut

log = logging.getLogger(__name__)

TaskStatus = Literal["pending", "in_progress", "complete", "error"]
TaskDisplay = Literal["timeline", "plan", "off"]
DISPLAY_MODES: tuple[str, ...] = ("timeline", "plan")
MAX_TASK_FIELD = 256  # title, details, output: Slack's task card fields are short
MAX_CALL_TEXT = 12_000  # markdown_text per chat.*Stream call
WAITING_FOR_APPROVAL = "waiting for approval"
PLAN_TITLE = "Investigating"
PLAN_DONE = "Done"
_MARKS = {"pending": "◻", "in_progress": "⏳", "complete": "✅", "error": "⚠️"}
# Slack's answers that mean "chunks (or this chunk) are not accepted here": task cards go off.
CHUNK_REFUSALS = frozenset(
    {
        "invalid_chunks",
        "invalid_arguments",
        "streaming_mode_mismatch",
        "cannot_provide_both_markdown_text_and_chunks",
        "markdown_text_required",
        "markdown_text_or_chunks_required",
        "unknown_chunk_type",
    }
)


class TaskCards:
    """Whether streamed answers carry task cards, and how they are shown; off for good in
    the process after Slack refused chunks once (logged once)."""

    def __init__(self, display: TaskDisplay = "timeline") -> None:
        self.display: TaskDisplay = display
        self.reason: str | None = None

    @property
    def on(self) -> bool:
        return self.display in DISPLAY_MODES

    def configure(self, display: str) -> None:
        """Set the display mode from the settings (``timeline``, ``plan`` or ``off``)."""
        self.display = display if display in (*DISPLAY_MODES, "off") else "timeline"  # type: ignore[assignment]
        self.reason = None

    def turn_off(self, reason: str) -> None:
        if self.on:
            log.warning("task cards are off from now on (streaming as before): %s", reason)
        self.display = "off"
        self.reason = reason


TASK_CARDS = TaskCards()  # the process's


class StepChange(TypedDict, total=False):
    """A task card's new state, as :meth:`Timeline.step` takes it."""

    title: str | None  # None: the title it has (a new card: the call id)
    status: Required[TaskStatus]
    details: str | None
    output: str | None


def task_title(tool: str, arguments: dict[str, object] | None = None) -> str:
    """What runs, in a few words: the tool and its first short arguments."""
    parts = []
    for name, value in (arguments or {}).items():
        if name == "confirmed_by" or isinstance(value, dict | list):
            continue
        text = str(value)
        if len(text) <= 40:
            parts.append(f"{name}={text}")
        if len(parts) == 2:
            break
    title = f"{tool} {' '.join(parts)}" if parts else tool
    return cut(title, MAX_TASK_FIELD)


def markdown_chunk(text: str) -> dict[str, Any]:
    return {"type": "markdown_text", "text": text}


def task_chunk(
    call_id: str,
    title: str,
    status: TaskStatus,
    *,
    details: str | None = None,
    output: str | None = None,
) -> dict[str, Any]:
    """A ``task_update`` chunk, its text fields bounded (empty ones left out)."""
    chunk: dict[str, Any] = {
        "type": "task_update",
        "id": cut(call_id, MAX_TASK_FIELD),
        "title": cut(title, MAX_TASK_FIELD) or "step",
        "status": status,
    }
    if details:
        chunk["details"] = cut(details, MAX_TASK_FIELD)
    if output:
        chunk["output"] = cut(" ".join(output.split()), MAX_TASK_FIELD)
    return chunk


_TEXT_FIELDS = ("text", "title", "details", "output")


def chunk_texts(chunk: dict[str, Any]) -> list[str]:
    """The texts of a chunk people read (a note, a card's title, details and output)."""
    return [v for k in _TEXT_FIELDS if isinstance(v := chunk.get(k), str)]


def named_chunk(chunk: dict[str, Any], render: Callable[[str], str]) -> dict[str, Any]:
    """``chunk`` with its texts through ``render`` (people and channels by name); a card's
    fields stay within Slack's bound."""
    out = dict(chunk)
    for name in _TEXT_FIELDS:
        value = out.get(name)
        if isinstance(value, str):
            value = render(value)
            out[name] = value if name == "text" else cut(value, MAX_TASK_FIELD)
    return out


def plan_chunk(title: str) -> dict[str, Any]:
    return {"type": "plan_update", "title": cut(title, MAX_TASK_FIELD)}


@dataclass(slots=True)
class Step:
    call_id: str
    title: str
    status: TaskStatus = "in_progress"
    details: str | None = None
    output: str | None = None

    def chunk(self) -> dict[str, Any]:
        return task_chunk(
            self.call_id, self.title, self.status, details=self.details, output=self.output
        )


@dataclass(slots=True)
class Timeline:
    """A job stream's content: text and steps in order, and what Slack does not show yet."""

    items: list[str | Step] = field(default_factory=list)
    steps: dict[str, Step] = field(default_factory=dict)
    unsent: list[dict[str, Any]] = field(default_factory=list)
    chars: int = 0  # text held, bounded by the caller

    def add_text(self, text: str) -> None:
        if not text:
            return
        self.chars += len(text)
        if self.items and isinstance(self.items[-1], str):
            self.items[-1] += text
        else:
            self.items.append(text)
        if self.unsent and self.unsent[-1]["type"] == "markdown_text":
            self.unsent[-1]["text"] += text
        else:
            self.unsent.append(markdown_chunk(text))

    def step(self, call_id: str, **change: Unpack[StepChange]) -> Step:
        """Add or update the step of ``call_id``; its newest state replaces an unsent one."""
        step = self.steps.get(call_id)
        title = change.get("title")
        if step is None:
            step = Step(call_id, title or call_id)
            self.steps[call_id] = step
            self.items.append(step)
        elif title:
            step.title = title
        step.status = change["status"]
        step.details, step.output = change.get("details"), change.get("output")
        chunk = step.chunk()
        for i, old in enumerate(self.unsent):
            if old["type"] == "task_update" and old["id"] == chunk["id"]:
                self.unsent[i] = chunk
                break
        else:
            self.unsent.append(chunk)
        return step

    def open_steps(self) -> list[Step]:
        return [s for s in self.steps.values() if s.status in ("pending", "in_progress")]

    def take(self) -> list[dict[str, Any]]:
        """The unsent chunks for one call (markdown_text cut to the per-call limit; the
        rest stays unsent)."""
        out: list[dict[str, Any]] = []
        room = MAX_CALL_TEXT
        while self.unsent:
            chunk = self.unsent[0]
            if chunk["type"] == "markdown_text":
                text = chunk["text"]
                if room <= 0:
                    break
                if len(text) > room:
                    out.append(markdown_chunk(text[:room]))
                    chunk["text"] = text[room:]
                    break
                room -= len(text)
            out.append(self.unsent.pop(0))
        return out

    def render(self) -> str:
        """The whole content as Markdown (steps as lines), for a plain message."""
        lines: list[str] = []
        for item in self.items:
            if isinstance(item, str):
                lines.append(item)
                continue
            line = f"{_MARKS[item.status]} `{item.title}`"
            note = item.output or item.details
            if note:
                line += f" — {note}"
            lines.append(("\n" if lines and not lines[-1].endswith("\n") else "") + line + "\n")
        return "".join(lines)

"""What happened in one case, as the checks and the report read it.

``Observed`` is built after the job ended from its history (every call the model asked
for, in order, with its result), the run's events (whether each call ran, who confirmed
it), the approvals store (each card, the clicks on it and how it was decided) and the
run's result (answer, iterations, tokens, cost). Values only: no I/O here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from bot.agent.events import Event, ToolEnd, ToolStart
from bot.agent.messages import AnyMessage, AssistantMessage, ToolMessage

RESULT_CHARS = 2000  # of each tool result kept in the report
CHANGE = ("mutating", "destructive")


@dataclass(frozen=True, slots=True)
class CallSeen:
    """One call the model asked for."""

    step: int  # the model response it came in (1-based)
    call_id: str
    tool: str
    arguments: dict[str, Any]
    category: str  # read_only, mutating, destructive; "unknown": not one of the job's tools
    ran: bool  # the tool ran (not refused, declined or unknown)
    is_error: bool
    result: str = ""
    confirmed_by: str | None = None
    # Approved with edits: what the model proposed (``arguments`` are what the call ran with).
    proposed: dict[str, Any] | None = None

    @property
    def change(self) -> bool:
        return self.category in CHANGE


@dataclass(frozen=True, slots=True)
class ClickSeen:
    user: str
    outcome: str  # approved, denied, edited
    # accepted, first_approval, invalid (an edit's values refused), or the refusal's kind
    # (not_allowed, stale, …)
    verdict: str
    text: str = ""


@dataclass(frozen=True, slots=True)
class CardSeen:
    """One approval card: the call it asked about, the clicks, how it ended."""

    call_id: str
    tool: str
    arguments: dict[str, Any]
    category: str
    clicks: tuple[ClickSeen, ...] = ()
    status: str = "pending"  # approved, denied, expired
    decided_by: str | None = None
    # What the call ran with: the edited arguments when someone approved with edits.
    approved_arguments: dict[str, Any] | None = None


@dataclass(slots=True)
class Observed:
    """Everything the checks read about one case's run."""

    answer: str = ""
    stop_reason: str = ""
    error: str | None = None
    iterations: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None
    calls: list[CallSeen] = field(default_factory=list)
    cards: list[CardSeen] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def arguments_of(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return {"_unparsed": text}
    return value if isinstance(value, dict) else {"_unparsed": text}


def model_arguments(text: str) -> dict[str, Any]:
    """The arguments the model set (the ``confirmed_by`` the bot adds to an approved
    call's arguments is shown apart, as ``CallSeen.confirmed_by``)."""
    arguments = arguments_of(text)
    arguments.pop("confirmed_by", None)
    return arguments


def calls_of(
    messages: Sequence[AnyMessage], events: Iterable[Event], categories: Mapping[str, str]
) -> list[CallSeen]:
    """Every call the model asked for, in order, with its result and whether it ran (a
    call approved with edits: the arguments it ran with, the model's as ``proposed``)."""
    events = list(events)
    ends: dict[str, ToolEnd] = {e.call_id: e for e in events if isinstance(e, ToolEnd)}
    edited: dict[str, ToolStart] = {
        e.call_id: e
        for e in events
        if isinstance(e, ToolStart) and not e.dry_run and e.proposed is not None
    }
    results: dict[str, ToolMessage] = {
        m.tool_call_id: m for m in messages if isinstance(m, ToolMessage)
    }
    calls: list[CallSeen] = []
    step = 0
    for message in messages:
        if not isinstance(message, AssistantMessage):
            continue
        step += 1
        for call in message.tool_calls:
            result = results.get(call.id)
            end = ends.get(call.id)
            is_error = result.is_error if result is not None else True
            ran = end.ran if end is not None else (result is not None and not is_error)
            arguments = model_arguments(call.arguments)
            proposed: dict[str, Any] | None = None
            if (start := edited.get(call.id)) is not None:
                proposed = arguments
                arguments = {k: v for k, v in start.arguments.items() if k != "confirmed_by"}
            calls.append(
                CallSeen(
                    step=step,
                    call_id=call.id,
                    tool=call.name,
                    arguments=arguments,
                    proposed=proposed,
                    category=categories.get(call.name, "unknown"),
                    ran=ran,
                    is_error=is_error,
                    result=(result.content if result is not None else "")[:RESULT_CHARS],
                    confirmed_by=(result.confirmed_by if result is not None else None)
                    or (end.confirmed_by if end is not None else None),
                )
            )
    return calls

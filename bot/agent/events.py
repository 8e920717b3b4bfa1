"""Typed events a run reports while it works (progress messages, metrics, traces).

The sink is a plain function: it must not block, and an exception it raises is
swallowed (logged) so that reporting can never break a run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from bot.agent.messages import Usage
from bot.agent.state import PendingApproval, RunResult, StopReason


@dataclass(frozen=True, slots=True)
class ModelRequestStart:
    iteration: int  # the iteration this response will be (1-based)
    model: str
    attempt: int
    kind: Literal["model_request_start"] = "model_request_start"


@dataclass(frozen=True, slots=True)
class ModelRequestEnd:
    iteration: int
    model: str
    duration_s: float
    usage: Usage | None  # None when the request failed
    tool_calls: int = 0
    error: str | None = None
    # An answer stopped at the output limit: the loop asks the model to continue it, and
    # the next response is the rest of the same answer.
    cut_off: bool = False
    # What the provider said of its answer (None when it did not say, or failed).
    response_model: str | None = None
    finish_reason: str | None = None
    # What the call cost in US dollars (``AgentConfig.pricing``); None: not priced.
    cost_usd: float | None = None
    kind: Literal["model_request_end"] = "model_request_end"


@dataclass(frozen=True, slots=True)
class StreamDelta:
    text: str  # empty: the stream starts over (a retry), drop what was shown
    kind: Literal["stream_delta"] = "stream_delta"


@dataclass(frozen=True, slots=True)
class ToolStart:
    call_id: str
    tool: str
    arguments: dict[str, object]
    dry_run: bool = False
    # The arguments the model proposed, when its approver edited the call (``arguments``
    # are then the edited ones).
    proposed: dict[str, object] | None = None
    kind: Literal["tool_start"] = "tool_start"


@dataclass(frozen=True, slots=True)
class ToolProgress:
    """What a running tool says of its progress (an MCP server's progress notification):
    one line, bounded and scrubbed by the core before it is reported."""

    call_id: str
    tool: str
    message: str
    kind: Literal["tool_progress"] = "tool_progress"


@dataclass(frozen=True, slots=True)
class ToolEnd:
    call_id: str
    tool: str
    ran: bool  # False when refused before running (unknown, invalid, declined)
    is_error: bool
    duration_s: float
    output_chars: int
    dry_run: bool = False
    confirmed_by: str | None = None
    summary: str = ""  # the result in one line (``observe.summary_line``), for progress
    kind: Literal["tool_end"] = "tool_end"


@dataclass(frozen=True, slots=True)
class ApprovalRequested:
    approval: PendingApproval
    kind: Literal["approval_requested"] = "approval_requested"


@dataclass(frozen=True, slots=True)
class InjectedMessages:
    ids: tuple[str, ...]
    kind: Literal["injected"] = "injected"


@dataclass(frozen=True, slots=True)
class ModelFallback:
    from_model: str
    to_model: str
    error: str
    kind: Literal["model_fallback"] = "model_fallback"


@dataclass(frozen=True, slots=True)
class LimitReached:
    reason: StopReason
    detail: str
    kind: Literal["limit_reached"] = "limit_reached"


@dataclass(frozen=True, slots=True)
class CondenseDone:
    replaced: int
    kind: Literal["condense_done"] = "condense_done"


@dataclass(frozen=True, slots=True)
class CondenseFailed:
    error: str
    kind: Literal["condense_failed"] = "condense_failed"


@dataclass(frozen=True, slots=True)
class RunEnd:
    result: RunResult
    kind: Literal["run_end"] = "run_end"


Event = (
    ModelRequestStart
    | ModelRequestEnd
    | StreamDelta
    | ToolStart
    | ToolProgress
    | ToolEnd
    | ApprovalRequested
    | InjectedMessages
    | ModelFallback
    | LimitReached
    | CondenseDone
    | CondenseFailed
    | RunEnd
)

EventSink = Callable[[Event], None]

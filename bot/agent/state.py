"""A run's progress state and its result.

``RunState`` is everything a later run needs to continue the same job with the same
remaining budget: counters, usage, active time used, the loop detector's window and,
when paused for approval, the batch being processed. It is versioned and serializable
(the store persists it as JSON).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from bot.agent.messages import AssistantMessage, ToolCall, Usage


class StopReason(StrEnum):
    """The one list of ways a run ends (``awaiting_approval`` is a pause).

    ``JobStatus`` (``bot/store/jobs.py``) has a member of the same name and value for each.
    """

    COMPLETED = "completed"
    INCOMPLETE = "incomplete"
    AWAITING_APPROVAL = "awaiting_approval"
    LIMIT_ITERATIONS = "limit_iterations"
    LIMIT_TOKENS = "limit_tokens"
    LIMIT_DEADLINE = "limit_deadline"
    LOOP = "loop"
    STALLED = "stalled"
    NO_ACTION = "no_action"
    FAILED = "failed"
    CANCELLED = "cancelled"


class PendingApproval(BaseModel):
    """The call a human is asked about, bound by tool name and canonical-args hash."""

    model_config = ConfigDict(extra="forbid")

    call_id: str
    tool: str
    args_hash: str
    arguments: dict[str, object]
    dry_run_output: str | None = None


class PendingBatch(BaseModel):
    """The assistant message being processed and the calls still to run."""

    model_config = ConfigDict(extra="forbid")

    message: AssistantMessage
    remaining: list[ToolCall]
    approval: PendingApproval | None = None
    any_ok: bool = False  # whether a call of this batch already returned a non-error


class DecidedCall(BaseModel):
    """The call a resumed run was paused on and its decision, kept until the replies
    sent meanwhile are taken in, so they are told in their true order
    (``bot.agent.reply_order``), across a crash as well."""

    model_config = ConfigDict(extra="forbid")

    tool: str
    outcome: Literal["approved", "denied", "expired", "cancelled"]
    by: str | None = None  # who decided (or stopped the job), if a person did
    asked_at: float | None = None  # epoch seconds
    decided_at: float


class RunState(BaseModel):
    """Serializable progress of one job across runs."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = 1
    iterations: int = 0
    model_calls: int = 0
    tool_executions: int = 0
    usage: Usage = Usage()
    # What the job's model calls cost in US dollars (``AgentConfig.pricing``): None until
    # a call is priced (no pricing, or only models without a price); a free model's 0.0
    # is a price. ``unpriced_calls``: calls of models without one, counted in tokens only.
    cost_usd: float | None = None
    unpriced_calls: int = 0
    active_time_s: float = 0.0
    loop_window: list[str] = Field(default_factory=list)
    error_streak: int = 0
    condensed: bool = False
    model_index: int = 0  # position in the fallback chain; only ever moves forward
    model: str | None = None  # the model that gave the latest response
    switches: list[str] = Field(default_factory=list)  # "from -> to: why", one per switch
    tools_used: list[str] = Field(default_factory=list)
    call_ids: list[str] = Field(default_factory=list)  # every tool call id of the job
    # Token reservation: the last request's prompt size and what was added since.
    last_prompt_tokens: int = 0
    last_cached_tokens: int = 0
    chars_since_request: int = 0
    pending: PendingBatch | None = None
    decided: DecidedCall | None = None  # the last decision, until the next inject fetch
    # An answer cut off at the output limit: its text so far, while the model continues it.
    answer_so_far: str | None = None
    # The latest change (a mutating or destructive call that ran) no read-only call has
    # checked since: its tool's name (``work_done.py``).
    unverified_change: str | None = None
    # The keys of the stop predicate's ``AskAgain`` messages already added (once per job).
    asked: list[str] = Field(default_factory=list)


class RunResult(BaseModel):
    """What every run returns, on every path."""

    model_config = ConfigDict(extra="forbid")

    stop_reason: StopReason
    output: str | None = None
    error: str | None = None
    iterations: int
    model_calls: int
    tool_executions: int
    usage: Usage
    tools_used: list[str]
    cost_usd: float | None = None  # as ``RunState.cost_usd``: the whole job's, so far
    unpriced_calls: int = 0
    model: str | None = None
    switches: list[str] = Field(default_factory=list)
    state: RunState
    approval: PendingApproval | None = None

    @classmethod
    def of(
        cls,
        state: RunState,
        reason: StopReason,
        *,
        output: str | None = None,
        error: str | None = None,
        approval: PendingApproval | None = None,
    ) -> RunResult:
        """The result of a run that stopped for ``reason`` with ``state`` (its counters
        are the job's so far)."""
        return cls(
            stop_reason=reason,
            output=output,
            error=error,
            iterations=state.iterations,
            model_calls=state.model_calls,
            tool_executions=state.tool_executions,
            usage=state.usage,
            tools_used=list(state.tools_used),
            cost_usd=state.cost_usd,
            unpriced_calls=state.unpriced_calls,
            model=state.model,
            switches=list(state.switches),
            state=state,
            approval=approval,
        )

    @property
    def ok(self) -> bool:
        return self.stop_reason is StopReason.COMPLETED

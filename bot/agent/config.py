"""The flat configuration of one job's turn: everything ``run`` needs, injected."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from bot.agent.cancel import CancelToken
from bot.agent.events import EventSink
from bot.agent.limits import Limits
from bot.agent.model_failure_recovery import RecoveryPolicy
from bot.agent.observe import InMemoryArtifacts
from bot.agent.ports import (
    ArtifactStore,
    ClientResolver,
    Clock,
    Condense,
    Confirm,
    Inject,
    Injected,
    Ledger,
    LoopClock,
    Memory,
    Pricing,
    Spend,
)
from bot.agent.state import RunState, StopReason
from bot.agent.tools import Tool

DEFAULT_MAX_PARALLEL = 4


@dataclass(frozen=True, slots=True, kw_only=True)
class StopCheck:
    """What the stop predicate sees after each iteration."""

    final: bool  # the model answered without tool calls
    output: str | None  # the latest assistant text
    state: RunState


@dataclass(frozen=True, slots=True, kw_only=True)
class StopVerdict:
    """A stop predicate's decision to end the run (``None`` means carry on / accept)."""

    reason: StopReason  # completed, incomplete or cancelled
    message: str | None = None  # what is missing, for the ending (``RunResult.error``)
    output: str | None = None  # the answer to show, when not the model's text as it is


@dataclass(frozen=True, slots=True, kw_only=True)
class AskAgain:
    """Not done yet: add ``message`` to the history as a ``user`` message and call the
    model again (a call like any other, under the job's limits). The loop records
    ``key`` in ``RunState.asked``; a predicate asks each key at most once per job."""

    key: str
    message: str


StopPredicate = Callable[[StopCheck], Awaitable[StopVerdict | AskAgain | None]]
Checkpoint = Callable[[RunState], Awaitable[None]]
CheckpointAndFetch = Callable[[RunState], Awaitable[Sequence[Injected]]]
FlushAndAck = Callable[[Sequence[Injected]], Awaitable[None]]
JobFacts = Callable[[], Awaitable[str | None]]


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentConfig:
    """One job's turn. Only ``job_id``, ``client``, ``memory`` and ``system_prompt`` are
    required; everything else has a safe default."""

    job_id: str
    client: ClientResolver
    memory: Memory
    system_prompt: str  # immutable for the whole run
    tools: Sequence[Tool] = ()  # the allowlist: the only tools offered and run
    limits: Limits = Limits()
    inject: Inject | None = None
    stop: StopPredicate | None = None
    confirm: Confirm | None = None
    condense: Condense | None = None
    condense_at_tokens: int | None = None  # condense before a call once the prompt is this big
    # The job's facts (request, approvals, writes, limit raises, corrections), rendered
    # by code from the store. A history that starts with a condensed summary is sent
    # with them after the summary: read at a run's first request (each resume) and after
    # each condensing, so the summary is never their only copy.
    facts: JobFacts | None = None
    recovery: RecoveryPolicy = RecoveryPolicy()
    on_event: EventSink | None = None
    # At the end of every step, with the state. It must make the memory's buffered
    # appends durable too (a store saves both in one round trip); without it, the loop
    # calls ``memory.flush()`` itself.
    on_checkpoint: Checkpoint | None = None
    # Optional: ``on_checkpoint`` followed by ``inject.fetch()``, in one round trip. A
    # step that ends the iteration (a batch's results, a "continue" or a predicate's
    # question) is saved by it at the start of the next iteration, so an iteration costs
    # the store two round trips: this one and the save before the tools run.
    on_checkpoint_and_fetch: CheckpointAndFetch | None = None
    # Optional: ``memory.flush()`` followed by ``inject.ack(items)``, in one round trip
    # (the injected messages durable in the history and acknowledged together).
    on_flush_and_ack: FlushAndAck | None = None
    artifacts: ArtifactStore = field(default_factory=InMemoryArtifacts)
    ledger: Ledger | None = None
    clock: Clock = field(default_factory=LoopClock)
    cancel: CancelToken | None = None
    # Asked at the start of every iteration (after the previous step was saved): when it
    # says so, the run raises ``HandedOver`` for another process to resume the job.
    hand_over: Callable[[], bool] | None = None
    max_parallel: int = DEFAULT_MAX_PARALLEL
    stream: bool = False
    # What a model call costs (``bot.llm.prices``): summed in ``RunState.cost_usd``.
    pricing: Pricing | None = None
    # A cap shared by every job of the workspace: each model call reserves in it first
    # (a refusal ends the job ``limit_tokens``) and settles after, exactly once.
    spend: Spend | None = None

"""The small protocols the core depends on; other layers implement them.

Model clients (``bot.llm``), Redis memory/inject/confirm (``bot.store``), Slack progress
(``bot.slack``) all plug in here. The core never imports those layers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from bot.agent.messages import AnyMessage, ModelRequest, ModelResponse, Usage

DeltaSink = Callable[[str], None]
"""Receives streamed text deltas; may raise to abort the stream (the client must let it
propagate and close the response). An empty delta means "start over": the client is
retrying and the text streamed so far is void."""


class Client(Protocol):
    """One model endpoint. Retries of transient errors happen inside ``complete``.

    Raises ``ModelUnavailableError`` (transient, retries exhausted),
    ``ContextOverflowError`` or ``ModelRequestError``.
    """

    @property
    def name(self) -> str: ...

    async def complete(
        self, request: ModelRequest, *, on_delta: DeltaSink | None = None
    ) -> ModelResponse: ...


class ClientResolver(Protocol):
    """The primary model followed by its fallback chain."""

    def chain(self) -> Sequence[Client]: ...


class Memory(Protocol):
    """A conversation's history. ``append`` buffers; ``flush`` makes appends durable.

    The effective history only ever changes by appending, or by ``condense`` replacing a
    leading part with one new summary message; messages are never swapped in place.
    Model adapters rely on this to reuse the rendering of a history's prefix.
    """

    async def history(self) -> Sequence[AnyMessage]:
        """The effective history (a condensed summary stands in for what it replaced)."""
        ...

    def append(self, message: AnyMessage) -> None: ...

    async def flush(self) -> None: ...

    async def condense(self, upto: int, summary: str) -> None:
        """Replace the first ``upto`` messages of the effective history with a summary.

        The originals are kept by the implementation; only the effective view changes.
        """
        ...


@dataclass(frozen=True, slots=True)
class Injected:
    """An external message waiting to enter the conversation."""

    id: str
    text: str
    author: str | None = None
    sent_at: float | None = None  # when the person sent it (epoch seconds), if known


class Inject(Protocol):
    """External messages (thread replies) taken in at the start of each iteration."""

    async def fetch(self) -> Sequence[Injected]: ...

    async def ack(self, items: Sequence[Injected]) -> None:
        """Called only after the items are in history and flushed."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfirmRequest:
    """A call that needs a human decision."""

    job_id: str
    call_id: str
    tool: str
    category: Literal["mutating", "destructive"]
    arguments: dict[str, object]
    args_hash: str
    reason: str | None  # the assistant text that came with the call
    dry_run_output: str | None
    preview: str | None = None  # what exactly will run (``Previewable``), if the tool says


@dataclass(frozen=True, slots=True, kw_only=True)
class Approved:
    confirmed_by: str
    tool: str | None = None  # when set, must match the call (else the decision is refused)
    args_hash: str | None = None
    # The arguments the approver edited the call to (``bot.agent.edits``): the call runs
    # with these instead of the model's, and its result starts with the edit. ``None``:
    # approved as proposed.
    arguments: dict[str, object] | None = None
    # When approval was asked and given (epoch seconds), if known: the order of the
    # replies sent meanwhile is stated from them (``bot.agent.reply_order``).
    asked_at: float | None = None
    decided_at: float | None = None
    kind: Literal["approved"] = "approved"


@dataclass(frozen=True, slots=True, kw_only=True)
class Denied:
    reason: str  # e.g. "denied by <@U123>" or "approval expired"
    outcome: Literal["denied", "expired", "cancelled"] = "denied"
    by: str | None = None  # who denied (or stopped the job), if a person did
    asked_at: float | None = None
    decided_at: float | None = None
    kind: Literal["denied"] = "denied"


@dataclass(frozen=True, slots=True, kw_only=True)
class Pending:
    kind: Literal["pending"] = "pending"


Decision = Approved | Denied | Pending


class Confirm(Protocol):
    async def __call__(self, request: ConfirmRequest) -> Decision: ...


class ArtifactStore(Protocol):
    """Keeps full tool outputs that were cut for the model, each readable by its job."""

    async def put(self, job_id: str, call_id: str, text: str) -> str:
        """Store ``text``; return a reference the model and humans can quote."""
        ...

    async def get(self, job_id: str, ref: str) -> str | None:
        """The text stored under ``ref`` if ``job_id`` stored it and it is still kept;
        None for an unknown or expired reference and for another job's."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class CondenseResult:
    upto: int  # how many leading history messages the summary replaces
    summary: str
    usage: Usage = Usage()  # what the summary cost; counted against the job's budget


class Condense(Protocol):
    """Summarises the older part of a history with ``client`` (the job's current model)."""

    async def __call__(
        self, history: Sequence[AnyMessage], *, client: Client, time_left: float | None
    ) -> CondenseResult: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class LedgerEntry:
    state: Literal["started", "done"]
    output: str | None = None


class Ledger(Protocol):
    """Records mutating calls so that a crash never re-runs a write blindly."""

    async def begin(self, key: str, tool: str, args_hash: str) -> LedgerEntry | None:
        """Record ``started``; return the earlier entry if the key was seen before.
        ``bot.errors.NotClaimed`` when the claim could not be made to count: the call
        did not start and must not run (its result says why)."""
        ...

    async def finish(self, key: str, output: str) -> None: ...


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    """Time for deadlines and timeouts; tests swap in a fake one."""

    def monotonic(self) -> float: ...

    def call_later(self, delay: float, callback: Callable[[], None]) -> TimerHandle: ...


class LoopClock:
    """The event loop's clock."""

    def monotonic(self) -> float:
        return asyncio.get_running_loop().time()

    def call_later(self, delay: float, callback: Callable[[], None]) -> TimerHandle:
        return asyncio.get_running_loop().call_later(max(delay, 0.0), callback)


# -- spend: what model calls cost, and a workspace-wide cap they draw from ---------------

Pricing = Callable[[str, Usage], "float | None"]
"""The cost in US dollars of one call to the named model with that usage; ``None`` when
the model's prices are unknown (the call is then counted in tokens only)."""

WORKSPACE_CAP = "the workspace's daily cap"
"""Named in the ending of a job stopped by a workspace-wide cap (``SpendRefused.detail``
starts with it is not required, but it must contain it): the Slack layer's Continue then
raises the workspace's cap for the day instead of the job's budget."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SpendHold:
    """Tokens (and dollars, when priced) set aside for one model call in the cap."""

    tokens: int
    cost_usd: float | None = None
    token: str = ""  # opaque to the core: which counters the hold is in (a day)


@dataclass(frozen=True, slots=True)
class SpendRefused:
    """The cap has no room for the call; ``detail`` says which cap and its figures, and
    contains ``WORKSPACE_CAP``."""

    detail: str


class Spend(Protocol):
    """A cap shared by every job of the workspace, across processes. ``reserve`` before
    each model call (atomically: two processes never both get the last room); ``settle``
    after it with what it really used (0 tokens when it failed without usage). A hold a
    crash never settles stays charged: the cap errs on the side of spending less."""

    async def reserve(
        self, *, model: str, tokens: int, cost_usd: float | None
    ) -> SpendHold | SpendRefused: ...

    async def settle(self, hold: SpendHold, *, tokens: int, cost_usd: float | None) -> None: ...

"""The records both sides of the store read: what a job, an approval, a ledger entry and
a thread are, with no way to read or write them.

The store (``bot.store``) persists these values and the Slack edge (``bot.slack``)
renders them, and neither may import the other's code: this room holds the shared
values only, so the edge imports no ``bot.store`` module at all
(``tests/test_layers.py``). It imports nothing of ours but the core's run state and
ports (``bot.agent``) and the error tree (``bot.errors``).

What does not belong here: keys, TTLs and scripts (``bot.store.keys`` and the store
module of each record), the rules for changing a record (``bot.store.jobs.check_transition``,
``Approvals.decide``), and anything that does I/O. The store modules re-export the
names they persist (``bot.store.jobs.JobRecord`` is this ``JobRecord``), so either
import works.

The pydantic records are persisted as JSON in Redis: their field names, order and
defaults are the stored format (each is a ``PersistedRecord``: strict, with a
``schema_version``), so a field is only ever appended, with a default.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from bot.agent.ports import LedgerEntry
from bot.agent.state import RunState, StopReason
from bot.errors import StoreError


class PersistedRecord(BaseModel):
    """A record persisted as JSON: strict (a field it does not know is an error) and
    versioned (``schema_version``, the first field of the stored JSON)."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = 1


# -- threads ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Thread:
    """A conversation: one Slack thread."""

    channel: str
    thread_ts: str

    @property
    def tag(self) -> str:
        return f"{{{self.channel}:{self.thread_ts}}}"

    def job_id(self, n: int) -> str:
        return f"{self.channel}:{self.thread_ts}:j{n}"


def thread_of(job_id: str) -> Thread:
    """The thread a job id belongs to (``C123:1700000000.000100:j3``)."""
    channel, thread_ts, _ = job_id.rsplit(":", 2)
    return Thread(channel, thread_ts)


# -- jobs (stored by bot.store.jobs) ---------------------------------------------------


class JobStatus(StrEnum):
    """A job's status: ``queued`` and ``running``, which only a job has, then every
    ``StopReason`` under its own name and value (``of`` maps a reason to its status).

    The values are taken from ``StopReason`` so the two cannot drift apart; the members
    are spelled out so type checkers know them, and ``tests/store/test_job_status_parity.py``
    fails when a ``StopReason`` has no status here. Live: ``queued``, ``running``,
    ``awaiting_approval``; every other status is final.
    """

    QUEUED = "queued"
    RUNNING = "running"
    AWAITING_APPROVAL = StopReason.AWAITING_APPROVAL.value
    COMPLETED = StopReason.COMPLETED.value
    INCOMPLETE = StopReason.INCOMPLETE.value
    LIMIT_ITERATIONS = StopReason.LIMIT_ITERATIONS.value
    LIMIT_TOKENS = StopReason.LIMIT_TOKENS.value
    LIMIT_DEADLINE = StopReason.LIMIT_DEADLINE.value
    LOOP = StopReason.LOOP.value
    STALLED = StopReason.STALLED.value
    NO_ACTION = StopReason.NO_ACTION.value
    FAILED = StopReason.FAILED.value
    CANCELLED = StopReason.CANCELLED.value

    @property
    def final(self) -> bool:
        return self not in _LIVE

    @property
    def limit(self) -> bool:
        return self in _LIMITS

    @classmethod
    def of(cls, reason: StopReason) -> JobStatus:
        """The status of a job whose run stopped for ``reason``."""
        return cls(reason.value)


_LIVE = frozenset({JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.AWAITING_APPROVAL})
_LIMITS = frozenset({JobStatus.LIMIT_ITERATIONS, JobStatus.LIMIT_TOKENS, JobStatus.LIMIT_DEADLINE})


class JobLimits(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_iterations: int
    deadline_s: float
    token_budget: int


class LimitRaise(BaseModel):
    model_config = ConfigDict(extra="forbid")

    limit: Literal["iterations", "tokens", "deadline"]
    amount: float
    by: str  # Slack user id
    at: float


KEPT_TOOL_LINES = 20  # the newest tool lines kept for an ending (it shows fewer)
KEPT_RESULT_CHARS = 300  # each line's result, at most (the ending shows fewer)
KEPT_CUT_CALLS = 20  # calls whose output was cut, kept for the ending's buttons


class KeptToolLine(BaseModel):
    """One finished tool call as the status message showed it."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    tool: str
    result: str  # its result in one line
    ok: bool


class KeptTools(BaseModel):
    """What a job's status message showed of its tool calls in its latest run, kept for
    an ending another process shows (``bot.slack.redelivery``): how many calls finished,
    the newest ``KEPT_TOOL_LINES`` lines, and the calls whose output the model saw cut
    (``(call id, tool)``, the ending's "Full output" buttons). Stored beside the job's
    JSON (the job hash's ``tools`` field, written as calls end), never inside it, so a
    process that does not know it reads the record as before; unknown fields are
    ignored for the same reason."""

    model_config = ConfigDict(extra="ignore")

    count: int = 0
    lines: list[KeptToolLine] = Field(default_factory=list)
    cut: list[tuple[str, str]] = Field(default_factory=list)

    @classmethod
    def of(cls, lines: Sequence[KeptToolLine], cut: Sequence[tuple[str, str]] = ()) -> KeptTools:
        """The newest lines and cut calls, each result cut to ``KEPT_RESULT_CHARS``."""
        return cls(
            count=len(lines),
            lines=[
                line.model_copy(update={"result": line.result[:KEPT_RESULT_CHARS]})
                for line in lines[-KEPT_TOOL_LINES:]
            ],
            cut=list(cut[-KEPT_CUT_CALLS:]),
        )


class JobRecord(PersistedRecord):
    """Everything about one job."""

    id: str
    channel: str
    thread_ts: str
    status: JobStatus = JobStatus.QUEUED
    requester: str
    request_ts: str | None = None  # the Slack message that started the job
    created_at: float
    updated_at: float
    limits: JobLimits
    raises: list[LimitRaise] = Field(default_factory=list)
    progress: RunState = Field(default_factory=RunState)
    stop_reason: str | None = None
    error: str | None = None
    output: str | None = None
    fence: int = 0  # fencing token of the last writer
    meta: dict[str, str] = Field(default_factory=dict)  # e.g. the status message ts
    # Read with the record, stored beside its JSON (``KeptTools``): not part of it.
    tools: KeptTools | None = Field(default=None, exclude=True)

    @property
    def thread(self) -> Thread:
        return Thread(self.channel, self.thread_ts)


# -- approvals (stored by bot.store.approvals) -----------------------------------------

Status = Literal["pending", "approved", "denied", "expired", "cancelled"]
Outcome = Literal["approved", "denied", "expired", "cancelled"]


def edited_json(arguments: dict[str, object]) -> str:
    """The stored text of edited arguments (their tag is its hash)."""
    return json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def edit_tag(arguments: dict[str, object] | None) -> str:
    """The short tag of an edit (``""``: none), the same the store's script computes."""
    if arguments is None:
        return ""
    return hashlib.sha1(edited_json(arguments).encode("utf-8")).hexdigest()[:12]


class ApprovalRecord(PersistedRecord):
    """A call waiting for (or given) a human decision."""

    job_id: str
    call_id: str
    tool: str
    category: Literal["mutating", "destructive"]
    args_hash: str
    arguments: dict[str, object]
    reason: str | None = None  # the assistant text that came with the call
    dry_run_output: str | None = None
    preview: str | None = None  # what exactly will run, as the tool says (a command's argv)
    requester: str  # Slack user id of whoever started the job
    channel: str
    thread_ts: str
    requested_at: float
    expires_at: float
    card_ts: str | None = None
    status: Status = "pending"
    decided_by: str | None = None
    decided_at: float | None = None
    card_owed: bool = False  # decided, and its card not yet edited to say so
    replies_seq: int = 0  # the thread's receipt count its card's replies were shown for
    # A call that needs two different approvers (a destructive call in a job an alert
    # started): who approved it first, while it waits for the second.
    first_approver: str | None = None
    # Approve with edits (``bot.agent.edits``): the arguments a person changed the call
    # to, who, and (a destructive call) the dry run of the edited call shown on the card.
    # A mutating call's edit is its decision; a destructive call's is its first approval.
    edited_arguments: dict[str, object] | None = None
    edited_by: str | None = None
    edited_dry_run: str | None = None

    @property
    def edit_tag(self) -> str:
        """Which edit the card shows (``""``: none): a click or a form names it, and a
        decision is refused when the card was edited since (``bot.store.approvals``)."""
        return edit_tag(self.edited_arguments)

    @property
    def approved_arguments(self) -> dict[str, object]:
        """The arguments the call runs with: the edited ones, else the proposed ones."""
        return self.edited_arguments if self.edited_arguments is not None else self.arguments


@dataclass(frozen=True, slots=True)
class CardReply:
    """One person's message sent while the card waited (read by
    ``bot.store.card_replies``)."""

    ts: str  # the Slack message's ts (its id and when it was sent)
    author: str
    text: str
    sent_at: float


# -- the write ledger (stored by bot.store.ledger) -------------------------------------


class LedgerRecord(PersistedRecord):
    """One mutating call's ledger entry."""

    # withdrawn: claimed, no replica confirmed the claim, and taken back: never started
    state: Literal["started", "done", "withdrawn"]
    tool: str | None = None
    args_hash: str | None = None
    started_at: float | None = None
    finished_at: float | None = None
    withdrawn_at: float | None = None
    output: str | None = None
    output_bytes: int | None = None  # the output's full size, when it was cut

    def entry(self) -> LedgerEntry:
        if self.state == "withdrawn":  # the ledger's claim goes over it: never handed out
            raise StoreError("a withdrawn ledger entry is not an entry of a started call")
        return LedgerEntry(state=self.state, output=self.output)

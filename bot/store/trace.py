"""A job's trace: every model call and tool attempt with timings, usage, decisions and
how the run ended, kept in Redis for ``TRACE_TTL_S`` after the last write.

``TraceRecorder`` is the run's event sink. It turns core events into ``TraceEntry`` JSON
and only buffers them: the job session's checkpoint takes them with ``drain()`` and
appends them in the same round trip as history and state (see ``queue_append`` for the
commands), so tracing adds no round trip to the hot path. ``flush`` writes the buffer on
its own, for runs without such a checkpoint. Stream deltas are not traced (one per few
characters would drown the rest).

One entry is written from outside the run: ``FeedbackEntry``, a click on the answer's
feedback buttons, appended by ``append_if_traced`` (only to a trace that still exists).

A trace is bounded twice: each free-text field to ``MAX_TEXT_CHARS`` and the list to the
last ``MAX_TRACE_ENTRIES`` entries (``LTRIM`` on every append).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Annotated, Any, Literal, Self, assert_never

import redis.asyncio as aioredis
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from redis.asyncio.client import Pipeline

# The core's events, always named ``events.…`` (as in ``bot.otel.spans``).
from bot.agent import events
from bot.agent.messages import Usage
from bot.agent.state import StopReason
from bot.errors import StoreError
from bot.store.connection import translated
from bot.store.keys import TRACE_TTL_S, Keys

log = logging.getLogger(__name__)

MAX_TEXT_CHARS = 2_000
MAX_TRACE_ENTRIES = 10_000
MAX_INJECT_IDS = 100
TRACE_SCHEMA_VERSION = 1


def bound_text(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """``text`` within ``limit`` chars; a cut one ends with a note of its full size."""
    if len(text) <= limit:
        return text
    note = f"… [{len(text)} chars]"
    return text[: max(limit - len(note), 0)] + note


def _secs(value: float) -> float:
    return round(value, 6)


BoundedText = Annotated[str, AfterValidator(bound_text)]
Seconds = Annotated[float, AfterValidator(_secs)]  # to the microsecond


class _Entry(BaseModel):
    """A stored entry. Its fields are its own schema (``extra="forbid"``, versioned), but
    one named like a field of the event it records (or of what the event carries) means
    the same and is copied from there (``of``); only the rest is filled in by hand."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: int = TRACE_SCHEMA_VERSION
    at: float  # epoch seconds when the recorder saw the event

    @classmethod
    def of(cls, source: object, *, at: float, **own: Any) -> Self:
        """The entry for ``source``: every field it shares by name, ``own`` for the rest."""
        if isinstance(source, BaseModel):
            names: Iterable[str] = type(source).model_fields
        elif dataclasses.is_dataclass(source):
            names = (field.name for field in dataclasses.fields(source))
        else:
            raise TypeError(f"not an event: {source!r}")
        shared = (cls.model_fields.keys() - _ENTRY_FIELDS) & set(names)
        return cls(at=at, **{name: getattr(source, name) for name in shared}, **own)


_ENTRY_FIELDS = frozenset({*_Entry.model_fields, "kind"})  # an event's ``kind`` is not ours


class ModelCallEntry(_Entry):
    """One model request, successful or not (``usage`` is None when it failed):
    ``ModelRequestEnd``, and the attempt its ``ModelRequestStart`` named."""

    kind: Literal["model_call"] = "model_call"
    iteration: int
    model: str
    attempt: int | None = None
    duration_s: Seconds
    usage: Usage | None = None
    tool_calls: int = 0
    error: BoundedText | None = None


class ToolEntry(_Entry):
    """One tool call: run (``ran``) or refused before running (unknown, invalid, denied):
    ``ToolEnd`` (less its one-line summary), and the arguments its ``ToolStart`` had."""

    kind: Literal["tool"] = "tool"
    call_id: str
    tool: str
    ran: bool
    is_error: bool
    duration_s: Seconds
    output_chars: int
    dry_run: bool = False
    confirmed_by: str | None = None  # the Slack user id that approved the call
    arguments: BoundedText | None = None  # canonical JSON, when the call started
    # An approval with edits: the arguments the model proposed (``arguments`` are the
    # approved ones the call ran with).
    proposed: BoundedText | None = None


class ApprovalEntry(_Entry):
    """The run paused to ask a human about a call (``ApprovalRequested.approval``)."""

    kind: Literal["approval"] = "approval"
    call_id: str
    tool: str
    args_hash: str


class InjectEntry(_Entry):
    """Replies taken into the conversation at the start of an iteration."""

    kind: Literal["inject"] = "inject"
    count: int
    ids: list[str] = Field(default_factory=list)  # the first MAX_INJECT_IDS


class FallbackEntry(_Entry):
    """The run moved to the next model of the chain."""

    kind: Literal["fallback"] = "fallback"
    model: str
    to_model: str
    error: BoundedText


class LimitEntry(_Entry):
    kind: Literal["limit"] = "limit"
    stop_reason: StopReason
    detail: BoundedText


class CondenseEntry(_Entry):
    """The history was condensed (``replaced`` messages) or condensing failed (``error``)."""

    kind: Literal["condense"] = "condense"
    replaced: int | None = None
    error: BoundedText | None = None


class EndEntry(_Entry):
    """The run ended or paused; totals are the job's so far (``RunEnd.result``)."""

    kind: Literal["end"] = "end"
    stop_reason: StopReason
    error: BoundedText | None = None
    iterations: int
    model_calls: int
    tool_executions: int
    usage: Usage
    model: str | None = None
    pending_call_id: str | None = None  # the call awaiting approval, if paused


class FeedbackEntry(_Entry):
    """Someone pressed a feedback button of the job's answer (written by the Slack edge's
    click, any process, any time after the run: ``append_if_traced``)."""

    kind: Literal["feedback"] = "feedback"
    value: Literal["positive", "negative"]
    by: str  # the clicker's Slack user id
    message_ts: str | None = None  # the answer message that carried the buttons


TraceEntry = Annotated[
    ModelCallEntry
    | ToolEntry
    | ApprovalEntry
    | InjectEntry
    | FallbackEntry
    | LimitEntry
    | CondenseEntry
    | EndEntry
    | FeedbackEntry,
    Field(discriminator="kind"),
]
_ADAPTER: TypeAdapter[TraceEntry] = TypeAdapter(TraceEntry)


def parse_entry(raw: str | bytes) -> TraceEntry:
    """One stored entry; raises ``pydantic.ValidationError`` when it is not one."""
    return _ADAPTER.validate_json(raw)


def dump_entry(entry: TraceEntry) -> str:
    return entry.model_dump_json(exclude_none=True)


class TraceRecorder:
    """An event sink that turns a run's events into buffered trace entries (no I/O)."""

    def __init__(
        self,
        job_id: str,
        *,
        clock: Callable[[], float] = time.time,
        max_entries: int = MAX_TRACE_ENTRIES,
    ) -> None:
        self.job_id = job_id
        self._clock = clock
        self._buffer: deque[str] = deque(maxlen=max_entries)
        self._attempt: int | None = None
        self._arguments: dict[str, str] = {}  # call id → arguments, from ToolStart to ToolEnd
        self._proposed: dict[str, str] = {}  # call id → the model's, of an edited call

    def __call__(self, event: events.Event) -> None:
        entry = self._entry(event)
        if entry is not None:
            self._buffer.append(dump_entry(entry))

    def __len__(self) -> int:
        return len(self._buffer)

    def drain(self) -> list[str]:
        """The buffered entries (JSON), oldest first; the buffer is left empty."""
        entries = list(self._buffer)
        self._buffer.clear()
        return entries

    def put_back(self, entries: Sequence[str]) -> None:
        """Return drained entries whose write failed, ahead of any newer ones."""
        self._buffer = deque([*entries, *self._buffer], maxlen=self._buffer.maxlen)

    async def flush(self, redis: aioredis.Redis, keys: Keys) -> int:
        """Append the buffer to the job's trace in one round trip; how many were written.

        On a store error the entries stay buffered for the next flush or drain.
        """
        entries = self.drain()
        if not entries:
            return 0
        try:
            async with translated("trace flush"):
                async with redis.pipeline(transaction=True) as pipe:
                    queue_append(pipe, keys, self.job_id, entries)
                    await pipe.execute()
        except StoreError:
            self.put_back(entries)
            raise
        return len(entries)

    def _entry(self, event: events.Event) -> TraceEntry | None:
        match event:
            case events.StreamDelta() | events.ToolProgress():
                return None  # what the status message shows while it happens
            case events.ModelRequestStart():
                self._attempt = event.attempt
                return None
            case events.ToolStart():
                args = json.dumps(event.arguments, sort_keys=True, ensure_ascii=False, default=str)
                self._arguments[event.call_id] = bound_text(args)
                if event.proposed is not None:
                    proposed = json.dumps(
                        event.proposed, sort_keys=True, ensure_ascii=False, default=str
                    )
                    self._proposed[event.call_id] = bound_text(proposed)
                return None
            case events.ModelRequestEnd():
                return ModelCallEntry.of(event, at=self._clock(), attempt=self._attempt)
            case events.ToolEnd():
                arguments = self._arguments.pop(event.call_id, None)
                model_wrote = self._proposed.pop(event.call_id, None)
                return ToolEntry.of(
                    event, at=self._clock(), arguments=arguments, proposed=model_wrote
                )
            case events.ApprovalRequested():
                return ApprovalEntry.of(event.approval, at=self._clock())
            case events.InjectedMessages():
                return InjectEntry(
                    at=self._clock(), count=len(event.ids), ids=list(event.ids[:MAX_INJECT_IDS])
                )
            case events.ModelFallback():
                return FallbackEntry(
                    at=self._clock(),
                    model=event.from_model,
                    to_model=event.to_model,
                    error=event.error,
                )
            case events.LimitReached():
                return LimitEntry(at=self._clock(), stop_reason=event.reason, detail=event.detail)
            case events.CondenseDone():
                return CondenseEntry(at=self._clock(), replaced=event.replaced)
            case events.CondenseFailed():
                return CondenseEntry(at=self._clock(), error=event.error)
            case events.RunEnd():
                result = event.result
                pending = result.approval.call_id if result.approval else None
                return EndEntry.of(result, at=self._clock(), pending_call_id=pending)
            case _:
                assert_never(event)


def queue_append(pipe: Pipeline, keys: Keys, job_id: str, entries: Sequence[str]) -> None:
    """Queue on ``pipe`` the commands that append ``entries`` to a job's trace: RPUSH,
    LTRIM to the last ``MAX_TRACE_ENTRIES``, EXPIRE ``TRACE_TTL_S`` (a checkpoint script
    does the same three)."""
    if not entries:
        return
    key = keys.trace(job_id)
    pipe.rpush(key, *entries)
    pipe.ltrim(key, -MAX_TRACE_ENTRIES, -1)
    pipe.expire(key, TRACE_TTL_S)


# KEYS: 1 the trace. ARGV: 1 the entry, 2 max entries, 3 ttl. Returns 1 if appended.
_APPEND_IF_TRACED = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('LTRIM', KEYS[1], -tonumber(ARGV[2]), -1)
redis.call('EXPIRE', KEYS[1], ARGV[3])
return 1
"""


async def append_if_traced(
    redis: aioredis.Redis, keys: Keys, job_id: str, entry: TraceEntry
) -> bool:
    """Append ``entry`` to the job's trace if it has one (one script, one round trip);
    False when the trace is gone (expired, or the job never ran): nothing is created."""
    script = redis.register_script(_APPEND_IF_TRACED)
    async with translated("trace append"):
        added = await script(
            keys=[keys.trace(job_id)],
            args=[dump_entry(entry), MAX_TRACE_ENTRIES, TRACE_TTL_S],
        )
    return bool(added)


async def read_trace(redis: aioredis.Redis, keys: Keys, job_id: str) -> list[TraceEntry]:
    """A job's trace, oldest first (entries that do not parse are skipped and logged)."""
    async with translated("trace read"):
        raw: list[str | bytes] = await redis.lrange(keys.trace(job_id), 0, -1)
    entries: list[TraceEntry] = []
    for item in raw:
        try:
            entries.append(parse_entry(item))
        except ValidationError:
            log.warning("skipping an unreadable trace entry of %s: %.200r", job_id, item)
    return entries

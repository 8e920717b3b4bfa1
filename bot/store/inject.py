"""A thread's inject stream: what people say in a thread, on its way into the conversation.

One Redis Stream per thread (``inject``), with ``inject:seen`` (Slack message ts → stream
id) and ``inject:seq`` (the receipt count), all under the thread's hash tag so every
script also runs on Redis Cluster. Two classes touch it, one per side:

- writing: ``bot.store.receipt.Receipts``, on the ack path before Slack gets its answer.
  ``receive`` takes in a human message (and starts a job for it unless one is live);
  ``append`` adds an entry that starts no job (a thread's earlier messages, as context
  for a mention). Both run ``APPEND_STEPS`` (below) inside one Lua script: a duplicate
  Slack delivery is recognised by its ts in ``inject:seen`` and changes nothing;
  otherwise the entry is XADDed, ``inject:seq`` is incremented in the same step, and all
  three keys get the history's TTL. The script also creates the consumer group ``loop``
  at id 0 when it is missing, so an entry received before any job read the stream is
  still delivered.
- reading: ``InjectReader`` (this module), the core's ``Inject`` port for one running
  job, at the start of every iteration, in one MULTI, in this order:

1. this consumer's own pending entries (``XREADGROUP … 0``): what a consumer of the same
   name read before a restart and never acknowledged. Only while that is not known to be
   empty (first fetch, or items handed out and not acked);
2. entries another consumer left pending for ``claim_idle_ms`` (``XAUTOCLAIM``, reply
   ``[cursor, entries, deleted]`` on 7.0), at most every ``claim_idle_ms / 2``; one
   cursor step per fetch, the cursor carried to the next fetch until it wraps;
3. new entries (``XREADGROUP … >``, never BLOCK), ``GET inject:seq`` and the group's
   pending summary (``XPENDING``).

Round trips per ``fetch``: always one (the MULTI above; in the steady state it holds just
``XREADGROUP >``, ``GET`` and ``XPENDING``), plus one XACK only when a read entry must be
dropped (already in the history, or deleted from the stream). ``ack`` is one XACK.

``seen_seq`` is the receipt count up to which every reply is in this reader's hands:
receipt increments ``inject:seq`` atomically with its XADD and step 3 reads it in the
same transaction, so all of them were delivered by then; and it only moves while no
other consumer holds an unacked entry (``held_elsewhere``) and steps 1 and 2 read all
there was, so a dead process's entries that are not yet idle enough to claim, or that
did not fit in a batch, are not counted as seen. Ending a job compares it
with ``inject:seq`` (``Jobs.finish``): a reply is never lost between the last read and
the end. The default ``claim_idle_ms`` (lease TTL − renew interval) makes the first
fetch of a job resumed after a crash take over everything the dead process held: that
process read them at most one renew interval after its last renewal, and the lease
expired a whole TTL after it.

The loop appends what ``fetch`` returned to the history, flushes, then calls ``ack``:
XACK first, and only then the visible ack (the ``eyes`` reaction); given the history,
``ack`` flushes it in the same MULTI, before the XACK (one round trip for both). An
entry whose ts is already in the history (applied, flushed, crash before XACK) is acked
and skipped, so a reply is never applied twice; it gets then the visible ack the crash
may have cost it (the callback must tolerate a reaction that is already there). Acked
entries stay in the stream until it expires, so the group's ``entries-read``/lag stay
meaningful; they are small and few per thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Container, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, cast

from redis.exceptions import ResponseError

from bot.agent.ports import Injected
from bot.store.connection import StoreUnavailable, translated
from bot.store.failover import RUN_RETRY_BUDGET_S, retried
from bot.store.history import RedisHistory
from bot.store.keys import LEASE_RENEW_S, LEASE_TTL_MS, Thread
from bot.store.redis_store import RedisStore

log = logging.getLogger(__name__)


GROUP = "loop"  # the one consumer group of every inject stream
# A dead consumer's entries are taken over after this (see the module docstring).
DEFAULT_CLAIM_IDLE_MS = LEASE_TTL_MS - int(LEASE_RENEW_S * 1000)
DEFAULT_BATCH = 50
_CURSOR_START = "0-0"

# Fields of a stream entry.
F_TS, F_TEXT, F_AUTHOR, F_SEQ = "ts", "text", "author", "seq"

# Appending one entry to a thread's inject stream, a part of both scripts of
# ``bot.store.receipt``. KEYS: 1 stream, 2 seen, 3 seq. ARGV: 1 ts, 2 text, 3 author
# ('' for none), 4 ttl (s), 5 group. Creates the group if missing, XADDs with the next
# receipt number, remembers ts → entry id, refreshes the keys' TTL.
APPEND_STEPS = """
local made = redis.pcall('XGROUP', 'CREATE', KEYS[1], ARGV[5], '0', 'MKSTREAM')
if type(made) == 'table' and made.err and string.sub(made.err, 1, 9) ~= 'BUSYGROUP' then
  return made
end
local seq = redis.call('INCR', KEYS[3])
local fields = {'ts', ARGV[1], 'text', ARGV[2], 'seq', tostring(seq)}
if ARGV[3] ~= '' then
  fields[#fields + 1] = 'author'
  fields[#fields + 1] = ARGV[3]
end
local entry = redis.call('XADD', KEYS[1], '*', unpack(fields))
redis.call('HSET', KEYS[2], ARGV[1], entry)
for i = 1, 3 do
  redis.call('EXPIRE', KEYS[i], ARGV[4])
end
"""


@dataclass(slots=True)
class FetchPlan:
    """What one fetch queued: whether it reads its own pending entries and claims."""

    read_own: bool
    now: float
    claim: bool


@dataclass(frozen=True, slots=True)
class _Entry:
    stream_id: str
    fields: dict[str, str]


def sent_at(ts: str) -> float | None:
    """When a Slack message was sent: its ``ts`` is epoch seconds (``1700000000.000100``)."""
    try:
        at = float(ts)
    except ValueError:
        return None
    return at if 0 < at < 1e11 else None


@dataclass(eq=False)
class InjectReader(RedisStore):
    """The core's ``Inject`` port over a thread's stream, for one running job.

    ``consumer`` names this reader in the group; a process that restarts with the same
    name gets back what it read and never acked. ``seen_ids`` returns the source ids
    (Slack ts) of the job's durable history. ``clock`` is a monotonic clock in seconds.
    """

    thread: Thread
    _: KW_ONLY
    consumer: str
    seen_ids: Callable[[], Container[str]]
    on_visible_ack: Callable[[Sequence[Injected]], Awaitable[None]] | None = None
    claim_idle_ms: int = DEFAULT_CLAIM_IDLE_MS
    batch: int = DEFAULT_BATCH
    clock: Callable[[], float] = time.monotonic
    seen_seq: int = field(default=0, init=False)
    """Every reply received up to this count has reached this reader."""
    held_elsewhere: int = field(default=0, init=False)
    """Unacked entries other consumers held at the last fetch."""
    # Whether this consumer's own pending list is empty: known only after a short read of it.
    _own_pending_empty: bool = field(default=False, init=False)
    _claim_cursor: str = field(default=_CURSOR_START, init=False)
    _next_claim_at: float | None = field(default=None, init=False)  # None: claim on the next fetch
    # What was handed out and not acked yet: Slack ts → stream id.
    _handed_out: dict[str, str] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        if self.batch < 1 or self.claim_idle_ms < 0:
            raise ValueError("batch must be ≥ 1 and claim_idle_ms ≥ 0")
        self._stream = self.keys.inject(self.thread)
        self._seq_key = self.keys.inject_seq(self.thread)

    async def fetch(self) -> Sequence[Injected]:
        """Replies to append to the history, oldest first (see the module docstring).
        Retried across a failover (``RUN_RETRY_BUDGET_S``): a fetch whose reply was lost may
        have delivered entries to this consumer, so the retry reads its pending ones."""

        async def attempt() -> Sequence[Injected]:
            try:
                async with translated("inject fetch"):
                    pipe = self.redis.pipeline(transaction=True)
                    plan = self.queue(pipe)
                    replies = list(await pipe.execute(raise_on_error=False))
                return await self.take(plan, replies)
            except StoreUnavailable:
                self.reread_own()
                raise

        return await retried("inject fetch", attempt, budget_s=RUN_RETRY_BUDGET_S)

    def reread_own(self) -> None:
        """A fetch whose reply was lost may have delivered entries to this consumer: the
        next fetch reads this consumer's pending entries first."""
        self._own_pending_empty = False

    def queue(self, pipe: Any) -> FetchPlan:
        """Queue the fetch's commands on ``pipe`` (a MULTI, maybe holding other commands
        before them); ``take`` reads their replies, the last ones of the pipeline."""
        plan = FetchPlan(
            read_own=not self._own_pending_empty or bool(self._handed_out),
            now=self.clock(),
            claim=False,
        )
        plan.claim = self._next_claim_at is None or plan.now >= self._next_claim_at
        if plan.read_own:
            pipe.xreadgroup(GROUP, self.consumer, {self._stream: "0"}, count=self.batch)
        if plan.claim:
            pipe.xautoclaim(
                self._stream,
                GROUP,
                self.consumer,
                min_idle_time=self.claim_idle_ms,
                start_id=self._claim_cursor,
                count=self.batch,
            )
        pipe.xreadgroup(GROUP, self.consumer, {self._stream: ">"}, count=self.batch)
        pipe.get(self._seq_key)
        pipe.xpending(self._stream, GROUP)
        return plan

    async def take(self, plan: FetchPlan, replies: list[Any]) -> Sequence[Injected]:
        """The replies ``queue``'s commands got (popped off the end of ``replies``)."""
        async with translated("inject fetch"):
            self.held_elsewhere = _held_by_others(_ok(replies.pop()), self.consumer)
            seq_reply = _ok(replies.pop())
            new = _read_entries(_ok(replies.pop()))
            claimed: list[_Entry] = []
            if plan.claim:
                cursor, claimed = _claim_entries(_ok(replies.pop()))
                self._after_claim(cursor, plan.now)
            own: list[_Entry] = []
            if plan.read_own:
                own = _read_entries(_ok(replies.pop()))
                self._own_pending_empty = len(own) < self.batch

            self._advance_seen(new, seq_reply)

            items, drop, applied = self._select(own + claimed + new)
            if drop:
                await self.redis.xack(self._stream, GROUP, *drop)
        # Applied before a crash that came between the flush and the XACK: the reply is
        # in the history, so it earns its visible ack now.
        await self._visible_ack(applied)
        return items

    @property
    def settled_seq(self) -> int:
        """``seen_seq`` once every reply handed out was acknowledged; 0 while one was
        not (a run that ended without taking it in): ending the job then finds replies
        pending, and a follow-up job takes them in."""
        return 0 if self._handed_out else self.seen_seq

    async def ack(self, items: Sequence[Injected], history: RedisHistory | None = None) -> None:
        """XACK the items (one round trip), then the visible ack; a failed XACK raises
        ``StoreError`` and nobody sees an ack. With ``history``, its buffered appends
        are flushed in the same MULTI, before the XACK (``history.flush`` then ``ack``,
        in one round trip; on a failure they stay buffered)."""
        ids = [self._handed_out[i.id] for i in items if i.id in self._handed_out]
        appends = history.drain() if history is not None else []
        if appends and history is not None:
            await self._flush_and_ack(history, appends, ids)
        elif ids:
            async with translated("inject ack"):
                await self.redis.xack(self._stream, GROUP, *ids)
        for item in items:
            self._handed_out.pop(item.id, None)
        await self._visible_ack(items)

    # -- internals ---------------------------------------------------------------

    async def _flush_and_ack(
        self, history: RedisHistory, appends: list[str], ids: Sequence[str]
    ) -> None:
        """``appends`` into the history, then XACK ``ids``, in one MULTI; the appends go
        back to the history's buffer unless they were written."""
        async with translated("inject ack"):
            try:
                async with self.redis.pipeline(transaction=True) as pipe:
                    history.queue_append(pipe, appends)
                    if ids:
                        pipe.xack(self._stream, GROUP, *ids)
                    replies = await pipe.execute(raise_on_error=False)
            except BaseException:
                history.restore(appends)
                raise
            if isinstance(replies[0], BaseException):
                history.restore(appends)
            for reply in replies:
                if isinstance(reply, BaseException):
                    raise reply

    async def _visible_ack(self, items: Sequence[Injected]) -> None:
        if self.on_visible_ack is None or not items:
            return
        try:
            await self.on_visible_ack(items)
        except Exception:
            # The replies are in the history and acked; a missing reaction must not
            # fail the job.
            log.exception("visible ack failed for %s", [i.id for i in items])

    def _advance_seen(self, new: list[_Entry], seq_reply: object) -> None:
        if self.held_elsewhere or not self._own_pending_empty:
            return  # some delivered replies are not in our hands yet
        if self._claim_cursor != _CURSOR_START:
            return  # the scan of others' pending entries is not complete
        if len(new) < self.batch:
            self.seen_seq = int(cast(str | None, seq_reply) or 0)
        elif (last := new[-1].fields.get(F_SEQ, "")).isdigit():
            # More may wait behind a full batch: covered up to the last one read.
            self.seen_seq = max(self.seen_seq, int(last))

    def _after_claim(self, cursor: str, now: float) -> None:
        self._claim_cursor = cursor
        if cursor == _CURSOR_START:
            self._next_claim_at = now + self.claim_idle_ms / 2000
        else:
            self._next_claim_at = None  # more of the PEL to scan: carry on next fetch

    def _select(self, entries: list[_Entry]) -> tuple[list[Injected], list[str], list[Injected]]:
        """Order by stream id and split into: replies to apply; stream ids to ack and
        drop (deleted from the stream, read twice, or already in the history); and the
        replies among those that are already in the history."""
        unique = {e.stream_id: e for e in entries}
        ordered = sorted(unique.values(), key=lambda e: _id_key(e.stream_id))
        if not ordered:
            return [], [], []
        seen = self.seen_ids()
        items: list[Injected] = []
        drop: list[str] = []
        applied: list[Injected] = []
        taken: set[str] = set()
        for entry in ordered:
            ts, text = entry.fields.get(F_TS), entry.fields.get(F_TEXT)
            if not ts or text is None or ts in taken:
                drop.append(entry.stream_id)
                continue
            taken.add(ts)
            author = entry.fields.get(F_AUTHOR) or None
            item = Injected(id=ts, text=text, author=author, sent_at=sent_at(ts))
            if ts in seen:
                drop.append(entry.stream_id)
                applied.append(item)
            else:
                self._handed_out[ts] = entry.stream_id
                items.append(item)
        return items, drop, applied


def _ok(reply: object) -> object:
    """A MULTI slot's reply; a missing group or stream (nothing received yet) reads as
    empty, any other error is raised for ``translated``."""
    if isinstance(reply, ResponseError):
        if str(reply).startswith("NOGROUP"):
            return None
        raise reply
    if isinstance(reply, BaseException):
        raise reply
    return reply


def _entries(raw: object) -> list[_Entry]:
    out: list[_Entry] = []
    for stream_id, fields in cast(list[tuple[Any, Any]], raw or []):
        if stream_id is not None:
            out.append(_Entry(str(stream_id), dict(fields or {})))
    return out


def _read_entries(reply: object) -> list[_Entry]:
    """XREADGROUP's reply for one stream: ``[[stream, entries]]`` (RESP2 shape) or
    ``{stream: entries}`` (redis-py's unified shape)."""
    if not reply:
        return []
    if isinstance(reply, dict):
        return [e for entries in reply.values() for e in _entries(entries)]
    return [e for _, entries in cast(list[tuple[Any, Any]], reply) for e in _entries(entries)]


def _claim_entries(reply: object) -> tuple[str, list[_Entry]]:
    """XAUTOCLAIM's ``[cursor, entries, deleted]``; entries deleted from the stream were
    already dropped from the pending list by the server."""
    if not reply:
        return _CURSOR_START, []
    parts = cast(Sequence[Any], reply)
    return str(parts[0]), _entries(parts[1])


def _held_by_others(reply: object, consumer: str) -> int:
    """From XPENDING's summary (``{"pending", "min", "max", "consumers"}`` in redis-py),
    the entries held by consumers other than ``consumer``."""
    if not reply:
        return 0
    summary = cast(dict[str, Any], reply)
    consumers = cast(list[dict[str, Any]], summary.get("consumers") or [])
    return sum(int(c["pending"]) for c in consumers if c["name"] != consumer)


def _id_key(stream_id: str) -> tuple[int, int]:
    ms, _, seq = stream_id.partition("-")
    return int(ms), int(seq or 0)

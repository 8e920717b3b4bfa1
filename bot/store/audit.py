"""The audit log: one append-only, hash-chained record per workspace of what carried
authority — approvals asked and decided, writes started and finished (or of unknown
outcome), limits and caps raised, jobs stopped, tools run from the CLI, and the
configuration each process started with.

Two steps, because every script must touch one hash tag (Redis Cluster):

1. *Staged* by the writer, in the same script or MULTI as the fact it records (a
   decision, a ledger entry, a job save): ``RPUSH`` of ``staged_json(entry)`` to the
   fact's own outbox (``keys.audit_outbox(tag)``, ``EXPIRE OUTBOX_TTL_S``). Before the
   fact the writer adds a hint (``hint``/``hint_in``: ``ZADD audit_pending {tag: now}``),
   so a crash between the two leaves a hint, never an entry nobody finds.
2. *Chained* into the log (keys under ``{audit}``) right after by the writer
   (``publish(tag)``), or later by any process's scanner (``drain``). Per entry: seq,
   prev and hash are computed here, then one script on the ``{audit}`` keys refuses an
   id already chained (``dup``) or a head that moved (``moved``: retried with the head
   it returns), else ``XADD`` + ``SET head`` + ``ZADD ids``. The entry leaves the
   outbox only if it is still its first element (so two publishers never drop each
   other's entries), and a hint is dropped only when the outbox read empty, its score
   is still the one read before, and it is older than ``settle_s`` (its writer may sit
   between its hint and its fact; the scanner drops it later).

An entry's hash is the sha256 of the canonical JSON of the entry without ``hash``; its
``prev`` the previous entry's hash (``GENESIS`` for the first). Retention is by age only
(``trim``): entries chained before ``now - retention_days`` leave, and the anchor keeps
``seq:hash`` of the last one removed, where ``verify`` then starts. Stream ids are the
chaining process's clock (kept increasing), so reading and trimming by time use one clock.

What the chain proves and does not: ``verify`` finds an entry edited, removed or
inserted by someone who did not rewrite everything after it; someone who can write
Redis can rewrite the whole chain. A copy outside (``opsloop audit --json`` to a SIEM)
is what makes a rewrite visible.

The entry and its texts live in ``audit_entry`` (pure), the chain's check in
``audit_verify``; the names writers use are re-exported here. docs/audit.md has it all.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import random
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any, TypedDict, Unpack, cast

from pydantic import ValidationError
from redis.asyncio.client import Pipeline

from bot.errors import StoreError
from bot.store.audit_entry import (
    ACTOR_BOT,
    CHAINED,
    GENESIS,
    LINE_CHARS,
    OUTBOX_TTL_S,
    RESULT_CHARS,
    AuditEntry,
    AuditKind,
    Stored,
    audit_line,
    bare_user,
    bound_result,
    canonical,
    entry_hash,
    job_fields,
    parse_head,
    staged_json,
    tag_of_job,
)
from bot.store.audit_verify import Broken, Problem, VerifyReport, walk
from bot.store.buckets import due_in_buckets
from bot.store.connection import translated
from bot.store.redis_store import Lua, RedisStore

__all__ = [  # the names writers, the CLI and the Slack edge use come from here
    "ACTOR_BOT",
    "GENESIS",
    "LINE_CHARS",
    "OUTBOX_TTL_S",
    "RESULT_CHARS",
    "AuditEntry",
    "AuditKind",
    "AuditLog",
    "Broken",
    "Problem",
    "Stored",
    "VerifyReport",
    "audit_line",
    "bound_result",
    "canonical",
    "entry_hash",
    "job_fields",
    "staged_json",
    "tag_of_job",
]

log = logging.getLogger(__name__)

SETTLE_S = 5.0  # a hint younger than this is kept even when its outbox reads empty
LATE_MARGIN_S = 24 * 3600.0  # how much later than its ``at`` an entry may be chained
SKEW_S = 60.0  # clocks of two processes may differ this much
PAGE = 500  # stream entries read per round trip
BATCH = 50  # outbox elements read per round trip
MAX_MOVES = 50  # a head that keeps moving (other publishers) is retried this often


def _corrupt(raw: str, tag: str, error: str, at: float) -> dict[str, Any]:
    """An unreadable outbox element, as an entry of its own: kept, not lost."""
    digest = hashlib.sha256(f"{tag}\n{raw}".encode("utf-8", "surrogatepass")).hexdigest()
    entry = AuditEntry(
        id=f"corrupt:{digest[:32]}",
        kind="corrupt",
        at=at,
        actor=ACTOR_BOT,
        detail={"outbox": tag, "error": error[:300], "raw": bound_result(raw)},
    )
    return json.loads(staged_json(entry))  # type: ignore[no-any-return]


def _read_staged(raw: str, tag: str, now: float) -> dict[str, Any]:
    """An outbox element as the dict to chain (its exact fields), or a corrupt entry."""
    try:
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        AuditEntry.model_validate(data)
    except ValueError as exc:  # JSONDecodeError and ValidationError are ValueErrors
        log.warning("audit outbox %s: unreadable entry kept as corrupt: %s", tag, exc)
        return _corrupt(raw, tag, f"{type(exc).__name__}: {exc}", now)
    return {k: v for k, v in data.items() if k not in CHAINED}


def _stored(stream_id: str, fields: Mapping[str, str]) -> Stored:
    raw = fields.get("e", "")
    try:
        return Stored(stream_id, raw, AuditEntry.model_validate_json(raw))
    except ValidationError as exc:
        at = int(stream_id.split("-")[0]) / 1000
        detail = {"stream_id": stream_id, "error": str(exc)[:300], "raw": bound_result(raw)}
        entry = AuditEntry(
            id=f"corrupt:{stream_id}", kind="corrupt", at=at, actor="?", detail=detail
        )
        return Stored(stream_id, raw, entry)


_Page = list[tuple[str, dict[str, str]]]


def _page(reply: object) -> _Page:
    """An XRANGE/XREVRANGE reply as (stream id, fields) pairs (decoded responses)."""
    return [(str(sid), fields or {}) for sid, fields in cast(_Page, reply or [])]


def _opt(reply: object) -> str | None:
    return None if reply is None else str(reply)


# -- scripts -----------------------------------------------------------------------------

# KEYS: log, head, ids. ARGV: id, head expected ('' = none), new head, score (at), json,
# stream id ms. Returns {'dup'} | {'moved', head} | {'ok', stream id}.
_CHAIN = """
if redis.call('ZSCORE', KEYS[3], ARGV[1]) then
  return {'dup'}
end
local head = redis.call('GET', KEYS[2]) or ''
if head ~= ARGV[2] then
  return {'moved', head}
end
local ok, sid = pcall(redis.call, 'XADD', KEYS[1], ARGV[6] .. '-*', 'e', ARGV[5])
if not ok then  -- our clock is behind the stream's newest id
  sid = redis.call('XADD', KEYS[1], '*', 'e', ARGV[5])
end
redis.call('SET', KEYS[2], ARGV[3])
redis.call('ZADD', KEYS[3], ARGV[4], ARGV[1])
return {'ok', sid}
"""

# KEYS: outbox. ARGV: json. Pops it only if it is still the first element.
_POP_IF_FIRST = """
if redis.call('LINDEX', KEYS[1], 0) == ARGV[1] then
  redis.call('LPOP', KEYS[1])
  return 1
end
return 0
"""

# KEYS: pending. ARGV: tag, score read. Drops the hint only if nobody wrote it since.
_DROP_HINT = """
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score and tonumber(score) == tonumber(ARGV[2]) then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return 1
end
return 0
"""

# KEYS: log, anchor, ids. ARGV: min stream id kept (ms), new anchor, its seq, ids score
# cut. An anchor already newer (another trimmer went further) wins.
_TRIM = """
local current = redis.call('GET', KEYS[2])
if current then
  local seq = tonumber(string.match(current, '^(%d+):'))
  if seq and seq >= tonumber(ARGV[3]) then
    return 0
  end
end
local removed = redis.call('XTRIM', KEYS[1], 'MINID', ARGV[1])
redis.call('SET', KEYS[2], ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. ARGV[4])
return removed
"""


class AuditQuery(TypedDict, total=False):
    """The filters of ``AuditLog.entries``/``matching``: a time window (epoch seconds),
    who acted, which tool, channel or job, and how many at most."""

    since: float | None
    until: float | None
    user: str | None
    tool: str | None
    channel: str | None
    job: str | None
    limit: int | None


@dataclass(eq=False, kw_only=True)
class AuditLog(RedisStore):
    """Chain staged entries, append facts Redis does not hold, trim, read and verify."""

    retention_days: float = 400
    settle_s: float = SETTLE_S
    now: Callable[[], float] = time.time
    _head: str | None = field(default=None, init=False)  # the head as last seen (None: read it)
    # This process's publishers take turns: they would only make each other's head
    # move (one chain, one head), and Redis runs them one at a time anyway.
    _chaining: asyncio.Lock = field(default_factory=asyncio.Lock, init=False)

    _chain = Lua(_CHAIN)
    _pop = Lua(_POP_IF_FIRST)
    _drop = Lua(_DROP_HINT)
    _trim = Lua(_TRIM)

    # -- for writers ---------------------------------------------------------------------
    def outbox_key(self, tag: str) -> str:
        return self.keys.audit_outbox(tag)

    def hint_in(self, pipe: Pipeline, tag: str) -> None:
        """Queue the pending hint for ``tag`` in the caller's pipeline."""
        pipe.zadd(self.keys.audit_pending_of(tag), {tag: self.now()})

    async def hint(self, tag: str) -> None:
        """Say ``tag``'s outbox may soon hold entries (before the fact that stages them)."""
        async with translated("audit hint"):
            await self.redis.zadd(self.keys.audit_pending_of(tag), {tag: self.now()})

    # -- chaining ------------------------------------------------------------------------
    async def append(self, entry: AuditEntry) -> AuditEntry | None:
        """Chain one entry directly (a fact Redis does not hold: a process started).
        ``None`` when its id was already chained."""
        body = {k: v for k, v in json.loads(staged_json(entry)).items() if k not in CHAINED}
        chained, _ = await self._chain_one(body)
        return chained

    async def publish(self, tag: str, *, limit: int = 100) -> list[AuditEntry]:
        """Chain ``tag``'s outbox in order (up to ``limit`` entries); the entries newly
        chained (not those another publisher chained first)."""
        outbox, pending = self.outbox_key(tag), self.keys.audit_pending_of(tag)
        async with translated("audit publish"):
            hinted = await self.redis.zscore(pending, tag)  # before the outbox is read
        # A hint is dropped only when old enough (see the module's docstring); a fresh
        # one stays for the scanner, so the outbox need not be read to its end twice.
        droppable = hinted is not None and hinted <= self.now() - self.settle_s
        chained: list[AuditEntry] = []
        seen = 0
        emptied = False
        while seen < limit:
            want = min(limit - seen, BATCH)
            async with translated("audit publish"):
                batch = cast(list[str], await self.redis.lrange(outbox, 0, want - 1))
            if not batch:
                emptied = True
                break
            for raw in batch:
                seen += 1
                entry, _ = await self._chain_one(_read_staged(raw, tag, self.now()))
                if entry is not None:
                    chained.append(entry)
                async with translated("audit publish"):
                    popped = await self._pop(keys=[outbox], args=[raw])
                if not popped:
                    break  # another publisher took it first: read the outbox again
            else:
                if len(batch) < want and not droppable:
                    break
        if emptied and droppable:
            async with translated("audit hint drop"):
                await self._drop(keys=[pending], args=[tag, repr(float(hinted or 0))])
        return chained

    async def drain(self, *, older_than_s: float = 5.0, limit: int = 50) -> list[AuditEntry]:
        """The scanner's call: publish every outbox whose hint is older than the grace
        (its writer died before publishing, or is done and left the hint to settle)."""
        tags = await due_in_buckets(
            self.redis, "audit drain", self.keys.audit_pending, self.now() - older_than_s, limit
        )
        chained: list[AuditEntry] = []
        for tag in tags:
            chained.extend(await self.publish(tag))
        return chained

    async def _chain_one(self, body: dict[str, Any]) -> tuple[AuditEntry | None, str | None]:
        """Chain ``body`` (an entry without seq/prev/hash); the entry and its stream id,
        or ``(None, None)`` when its id was already chained."""
        async with self._chaining:
            return await self._chain_locked(body)

    async def _chain_locked(self, body: dict[str, Any]) -> tuple[AuditEntry | None, str | None]:
        keys = [self.keys.audit_log(), self.keys.audit_head(), self.keys.audit_ids()]
        if self._head is None:
            async with translated("audit head"):
                self._head = _opt(await self.redis.get(keys[1])) or ""
        for attempt in range(MAX_MOVES):
            head_now = self._head or ""
            seq, prev = parse_head(head_now)
            chained = {**body, "seq": seq + 1, "prev": prev}
            digest = entry_hash(chained)
            chained["hash"] = digest
            new_head = f"{seq + 1}:{digest}"
            args = [
                str(body["id"]),
                head_now,
                new_head,
                repr(float(body["at"])),
                canonical(chained),
                str(int(self.now() * 1000)),
            ]
            async with translated("audit chain"):
                verdict = await self._chain(keys=keys, args=args)
            match verdict:
                case ["dup"]:
                    return None, None
                case ["moved", head]:
                    self._head = str(head)
                    if attempt >= 2:  # several publishers at once: spread them out
                        await asyncio.sleep(random.uniform(0, 0.002 * attempt))
                case ["ok", stream_id]:
                    self._head = new_head
                    return AuditEntry.model_validate(chained), str(stream_id)
                case _:
                    raise StoreError(f"audit chain: unexpected answer {verdict!r}")
        raise StoreError(f"audit chain: the head moved {MAX_MOVES} times in a row")

    # -- retention -----------------------------------------------------------------------
    async def trim(self) -> int:
        """Remove the entries chained before the retention window; how many left."""
        cutoff = self.now() - self.retention_days * 86_400
        cutoff_ms = max(int(cutoff * 1000), 0)
        log_key = self.keys.audit_log()
        async with translated("audit trim"):
            last = _page(await self.redis.xrevrange(log_key, f"({cutoff_ms}-0", "-", count=1))
        if not last:
            return 0
        stream_id, fields = last[0]
        try:
            removed = json.loads(fields.get("e", ""))
            anchor_seq, anchor = int(removed["seq"]), f"{int(removed['seq'])}:{removed['hash']}"
        except (ValueError, KeyError, TypeError) as exc:
            # The last entry to go is unreadable: the kept chain starts where its first
            # entry says (or at the head when nothing is kept); verify saw the damage.
            log.warning(
                "audit trim: entry %s unreadable (%s); anchoring on the next", stream_id, exc
            )
            anchor_seq, anchor = await self._anchor_after(stream_id)
        async with translated("audit trim"):
            count = await self._trim(
                keys=[log_key, self.keys.audit_anchor(), self.keys.audit_ids()],
                args=[str(cutoff_ms), anchor, str(anchor_seq), repr(cutoff)],
            )
        return int(count)

    async def _anchor_after(self, stream_id: str) -> tuple[int, str]:
        async with translated("audit trim"):
            after = _page(
                await self.redis.xrange(self.keys.audit_log(), f"({stream_id}", "+", count=1)
            )
            head = _opt(await self.redis.get(self.keys.audit_head()))
        if after:
            try:
                with_seq = json.loads(after[0][1].get("e", "{}"))
                seq = int(with_seq["seq"]) - 1
                return seq, f"{seq}:{with_seq['prev']}"
            except (ValueError, KeyError, TypeError) as exc:
                raise StoreError(
                    f"audit trim: the entries around {stream_id} are unreadable "
                    "(opsloop audit verify names them); nothing trimmed"
                ) from exc
        seq, digest = parse_head(head)
        return seq, f"{seq}:{digest}"

    # -- reading -------------------------------------------------------------------------
    async def records(
        self, *, since: float | None = None, until: float | None = None
    ) -> AsyncGenerator[Stored, None]:
        """Chained entries in chain order whose stream id may fall in [since, until]
        (widened: an entry is chained after its ``at``); callers filter on ``at``."""
        start = "-" if since is None else str(max(int((since - SKEW_S) * 1000), 0))
        end = "+" if until is None else str(max(int((until + LATE_MARGIN_S) * 1000), 0))
        log_key = self.keys.audit_log()
        while True:
            async with translated("audit read"):
                page = _page(await self.redis.xrange(log_key, start, end, count=PAGE))
            for stream_id, fields in page:
                yield _stored(stream_id, fields)
            if len(page) < PAGE:
                return
            start = f"({page[-1][0]}"

    async def entries(self, **query: Unpack[AuditQuery]) -> AsyncIterator[AuditEntry]:
        """The entries matching every filter given, oldest first."""
        found = self.matching(**query)
        async with aclosing(found):
            async for stored in found:
                yield stored.entry

    async def matching(self, **query: Unpack[AuditQuery]) -> AsyncGenerator[Stored, None]:
        """``entries`` with each one's stream id and exact JSON (for export)."""
        since, until, limit = query.get("since"), query.get("until"), query.get("limit")
        user = query.get("user")
        wanted = {
            "actor": bare_user(user) if user else None,
            "tool": query.get("tool"),
            "channel": query.get("channel"),
            "job_id": query.get("job"),
        }
        wanted = {k: v for k, v in wanted.items() if v is not None}
        found = 0
        async with aclosing(self.records(since=since, until=until)) as records:
            async for stored in records:
                entry = stored.entry
                if since is not None and entry.at < since:
                    continue
                if until is not None and entry.at > until:
                    continue
                if any(getattr(entry, k) != v for k, v in wanted.items()):
                    continue
                yield stored
                found += 1
                if limit is not None and found >= limit:
                    return

    # -- verifying -----------------------------------------------------------------------
    async def verify(self) -> VerifyReport:
        """Check every kept link, page by page (memory stays bounded). A trim running
        meanwhile moves the chain's start: the check then starts again (a few times)."""
        for _ in range(3):
            async with translated("audit verify"):
                anchor = _opt(await self.redis.get(self.keys.audit_anchor()))
                head = _opt(await self.redis.get(self.keys.audit_head()))
            report = await walk(self.records(), anchor, head)
            if report.ok:
                return report
            async with translated("audit verify"):
                if _opt(await self.redis.get(self.keys.audit_anchor())) == anchor:
                    return report
        return report

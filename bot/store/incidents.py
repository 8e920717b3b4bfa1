"""Past incidents: one record per ended job, kept for the retention period and
searchable by text (BM25) and by alert name.

The caller scrubs a record before ``add``; this module only bounds it (every text cut,
never refused). Plain redis-server has no search module, so the index is our own, kept
by one Lua script per change (``bot.store.incident_scripts``): a crash never leaves half
a record indexed, and adding the same job id again replaces its record and index
entries. Terms and ranking are ``bot.store.incident_index``.

Layout, every key under the ``{incidents}`` hash tag (one Redis Cluster slot); each
record gets a document number d (``meta.next``; a re-added id gets a new one):

    meta            HASH   n (records indexed), len (their lengths' sum), next, lo (no
                           record below lo is alive)
    ids             HASH   job id → d
    time            ZSET   d → started at: what retention prunes, oldest first
    a:<alertname>   ZSET   d → started at: the records of one alert
    r:<d>           STRING the record's compact JSON, with a TTL (the retention)
    x:<d // 128>    HASH   d % 128 → "id␟alertname␟length": what removal undoes
                           (shards of 128 stay listpacks)
    lens            STRING one byte per record (2 hex digits at 2·d): its length,
                           quantized as Lucene keeps norms; 00 once removed
    t:<term>        STRING the term's postings, 8 hex digits each (d in 6, the term
                           frequency in 2), appended, so in document order
    terms           ZSET   term → the first d of its postings (what compaction visits)

Postings are strings rather than sorted sets: at 10,000 records most postings belong to
terms in more than 128 records, where a sorted set is a skiplist (~100 bytes a member);
and a reply of one string per term is cheap to parse, where ZRANGE WITHSCORES is two
reply elements per posting (``benchmarks/knowledge.py`` has the figures). Removing a
record marks its length dead (its postings score nothing from then on) and advances lo;
compaction then cuts the postings below lo from the front of each term's string.

Retention is by the incident's start (``started_at``): a record's key expires
``retention_s`` after it, and ``add`` prunes up to ``PRUNE_PER_ADD`` older records
(``prune`` does the rest, for the scanner). A record whose key expired before it was
pruned is skipped by every read.

A search is two round trips: one script returns N, the total length, ``lens`` and the
postings of the query's terms, BM25 runs here; then the best records are fetched (MGET)
a page at a time and kept when ``visible(channel)`` says so, looking at
``MAX_CANDIDATES`` at most.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Literal, cast

from pydantic import BaseModel, ConfigDict, field_validator

from bot.errors import StoreError
from bot.store.connection import translated
from bot.store.incident_index import (
    MAX_QUERY_CHARS,
    bm25,
    doc_terms,
    length_byte,
    posting,
    query_terms,
)
from bot.store.incident_scripts import ADD, GET, PRUNE, SEARCH, SWAP
from bot.store.redis_store import Lua, RedisStore

DAY_S = 86_400.0
DEFAULT_RETENTION_S = 180 * DAY_S  # OPSLOOP_INCIDENT_RETENTION_DAYS' default
PRUNE_PER_ADD = 8  # old records each add prunes (the scanner's ``prune`` does the rest)
COMPACT_PER_ADD = 64  # terms whose postings each add compacts
PRUNE_BATCH = 200  # records (and terms compacted) per ``prune`` script
MAX_CANDIDATES = 200  # ranked records a search looks at, visible or not
MAX_LIMIT = 20
PAGE = 20  # records fetched per round trip while filtering by visibility
SWAP_TRIES = 20

REQUEST_CHARS = 500
ANSWER_CHARS = 1_200
ARGUMENTS_CHARS = 200
TEXT_CHARS = 200  # names, labels, people, reasons
PERMALINK_CHARS = 500
MAX_TOOLS = 20
MAX_APPROVALS = 10
MAX_WRITES = 10
MAX_LABELS = 30
MAX_FEEDBACK = 50

Vote = Literal["+1", "-1"]


def cut(text: str, most: int) -> str:
    """``text`` at most ``most`` characters, ending in "…" when it was cut."""
    return text if len(text) <= most else text[: most - 1] + "…"


def _name(text: str) -> str:
    """A short one-line name (an alert name, a tool, a label): no control characters,
    which the index uses as separators."""
    if not text.isprintable():
        text = "".join(ch if ch.isprintable() else " " for ch in text)
    return cut(text.strip(), TEXT_CHARS)


class IncidentApproval(BaseModel):
    """A card of the job and how it was decided."""

    model_config = ConfigDict(extra="forbid")

    tool: str
    decision: str  # approved | denied | expired | pending
    by: str | None = None
    arguments: str = ""  # a short summary

    @field_validator("tool", "decision", "by")
    @classmethod
    def _short(cls, value: str | None) -> str | None:
        return None if value is None else _name(value)

    @field_validator("arguments")
    @classmethod
    def _arguments(cls, value: str) -> str:
        return cut(value, ARGUMENTS_CHARS)


class IncidentWrite(BaseModel):
    """A write the job ran and how it ended."""

    model_config = ConfigDict(extra="forbid")

    tool: str
    outcome: str  # done | failed | unknown
    confirmed_by: str | None = None

    @field_validator("tool", "outcome", "confirmed_by")
    @classmethod
    def _short(cls, value: str | None) -> str | None:
        return None if value is None else _name(value)


class IncidentRecord(BaseModel):
    """What an ended job leaves for later incidents (scrubbed by the caller)."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = 1
    id: str  # the job id (C123:1700000000.000100:j3), which embeds channel and thread
    channel: str
    thread_ts: str
    permalink: str | None = None
    started_at: float
    ended_at: float
    requester: str  # a Slack user id, or "alertmanager"
    alertname: str | None = None
    alert_labels: dict[str, str] = {}
    request: str
    answer: str
    tools: list[str] = []  # distinct names
    approvals: list[IncidentApproval] = []
    writes: list[IncidentWrite] = []
    feedback: dict[str, str] = {}  # Slack user id → "+1" | "-1"
    stop_reason: str
    cost_usd: float | None = None

    @field_validator("id", "channel", "thread_ts", "requester", "stop_reason")
    @classmethod
    def _short(cls, value: str) -> str:
        return _name(value)

    @field_validator("alertname")
    @classmethod
    def _alertname(cls, value: str | None) -> str | None:
        return _name(value) or None if value is not None else None

    @field_validator("permalink")
    @classmethod
    def _permalink(cls, value: str | None) -> str | None:
        return None if value is None else cut(value, PERMALINK_CHARS)

    @field_validator("request")
    @classmethod
    def _request(cls, value: str) -> str:
        return cut(value, REQUEST_CHARS)

    @field_validator("answer")
    @classmethod
    def _answer(cls, value: str) -> str:
        return cut(value, ANSWER_CHARS)

    @field_validator("alert_labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        return {_name(k): _name(v) for k, v in list(value.items())[:MAX_LABELS]}

    @field_validator("tools")
    @classmethod
    def _tools(cls, value: list[str]) -> list[str]:
        return list(dict.fromkeys(_name(t) for t in value))[:MAX_TOOLS]

    @field_validator("approvals")
    @classmethod
    def _approvals(cls, value: list[IncidentApproval]) -> list[IncidentApproval]:
        return value[:MAX_APPROVALS]

    @field_validator("writes")
    @classmethod
    def _writes(cls, value: list[IncidentWrite]) -> list[IncidentWrite]:
        return value[:MAX_WRITES]

    @field_validator("feedback")
    @classmethod
    def _feedback(cls, value: dict[str, str]) -> dict[str, str]:
        votes = {_name(k): v for k, v in value.items() if v in ("+1", "-1")}
        return dict(list(votes.items())[-MAX_FEEDBACK:])  # the latest voters


@dataclass(frozen=True, slots=True)
class IncidentHit:
    """A search result: the record and its BM25 score."""

    record: IncidentRecord
    score: float


Visible = Callable[[str], Awaitable[bool]]


def _dump(record: IncidentRecord) -> str:
    return record.model_dump_json(exclude_defaults=True)


def _load(raw: object) -> IncidentRecord | None:
    if not raw:
        return None
    try:
        return IncidentRecord.model_validate_json(cast(str, raw))
    except ValueError:
        return None  # another schema's record: not ours to show


def _terms_of(record: IncidentRecord) -> tuple[list[str], int]:
    """The record's index terms and tfs flattened for the script, and its length."""
    fields = [
        record.alertname or "",
        *record.alert_labels.values(),
        *record.tools,
        record.channel,
    ]
    found = doc_terms(fields, [record.request, record.answer])
    flat: list[str] = []
    for term, tf in found.tf.items():
        flat += [term, posting(tf)]
    return flat, max(1, found.length)


@dataclass(eq=False, kw_only=True)
class Incidents(RedisStore):
    """Add, search, list by alert, vote on and prune past-incident records."""

    retention_s: float = DEFAULT_RETENTION_S  # what ``prune`` keeps when not told
    now: Callable[[], float] = time.time

    _add = Lua(ADD)
    _prune = Lua(PRUNE)
    _search = Lua(SEARCH)
    _get = Lua(GET)
    _swap = Lua(SWAP)

    def _fixed(self) -> list[str]:
        return [self.keys.incidents(n) for n in ("meta", "ids", "time", "lens", "terms")]

    def _record_key(self, doc: int | str) -> str:
        return self.keys.incidents(f"r:{doc}")

    # -- writing -------------------------------------------------------------------------
    async def add(
        self, record: IncidentRecord, *, retention_s: float, now: float | None = None
    ) -> None:
        """Store ``record`` (replacing one of the same id) for ``retention_s`` from its
        start, indexed, and prune a few records older than that. A record already older
        than the retention is not stored."""
        now = self.now() if now is None else now
        ttl_ms = math.ceil((record.started_at + retention_s - now) * 1000)
        if ttl_ms <= 0:
            await self.prune(now, retention_s=retention_s, most=PRUNE_PER_ADD)
            return
        flat, length = _terms_of(record)
        args = [
            self.keys.incidents(""),
            record.id,
            _dump(record),
            str(ttl_ms),
            repr(record.started_at),
            record.alertname or "",
            str(length),
            f"{length_byte(length):02x}",
            repr(now - retention_s),
            str(PRUNE_PER_ADD),
            str(COMPACT_PER_ADD),
            *flat,
        ]
        async with translated("incident add"):
            await self._add(keys=self._fixed(), args=args)

    async def prune(
        self, now: float | None = None, *, retention_s: float | None = None, most: int = 0
    ) -> int:
        """Remove the records that started more than the retention before ``now`` from
        every index (all of them, or ``most``); how many were removed."""
        now = self.now() if now is None else now
        cutoff = repr(now - (self.retention_s if retention_s is None else retention_s))
        removed = 0
        while True:
            batch = PRUNE_BATCH if not most else min(PRUNE_BATCH, most - removed)
            async with translated("incident prune"):
                reply = await self._prune(
                    keys=self._fixed(),
                    args=[self.keys.incidents(""), cutoff, str(batch), str(PRUNE_BATCH)],
                )
            count, compacted = int(reply[0]), int(reply[1])
            removed += count
            if most and removed >= most:
                return removed
            if count < batch and compacted < batch:
                return removed

    async def set_feedback(self, id: str, user: str, value: Vote) -> IncidentRecord | None:
        """Record ``user``'s vote on a record (replacing their earlier one, keeping the
        record's TTL); the record as it now is, or ``None`` when there is none."""
        if value not in ("+1", "-1"):
            raise ValueError(f"a vote is +1 or -1, not {value!r}")
        for _ in range(SWAP_TRIES):
            found = await self._read(id)
            if found is None:
                return None
            doc, raw, record = found
            votes = {k: v for k, v in record.feedback.items() if k != user}
            votes[user] = value
            updated = record.model_copy(update={"feedback": votes})
            updated = IncidentRecord.model_validate(updated.model_dump())  # bounds again
            async with translated("incident feedback"):
                swapped = await self._swap(keys=[self._record_key(doc)], args=[raw, _dump(updated)])
            if swapped:
                return updated
        raise StoreError(f"incident feedback: {id} kept changing ({SWAP_TRIES} tries)")

    # -- reading -------------------------------------------------------------------------
    async def _read(self, id: str) -> tuple[str, str, IncidentRecord] | None:
        async with translated("incident get"):
            reply = await self._get(
                keys=[self.keys.incidents("ids")], args=[self.keys.incidents(""), id]
            )
        if not reply:
            return None
        doc, raw = str(reply[0]), str(reply[1])
        record = _load(raw)
        return None if record is None else (doc, raw, record)

    async def get(self, id: str) -> IncidentRecord | None:
        """The record of job ``id``, if it is kept."""
        found = await self._read(id)
        return None if found is None else found[2]

    async def count(self) -> int:
        """How many records are indexed (expired ones count until they are pruned)."""
        async with translated("incident count"):
            n = await self.redis.hget(self.keys.incidents("meta"), "n")
        return int(n or 0)

    async def search(self, query: str, *, limit: int = 5, visible: Visible) -> list[IncidentHit]:
        """The records most similar to ``query`` that ``visible`` lets this reader see,
        best first (at most ``limit``, 1 to 20)."""
        limit = max(1, min(limit, MAX_LIMIT))
        asked = query_terms(query[:MAX_QUERY_CHARS])
        if not asked.terms:
            return []
        term_keys = [self.keys.incidents(f"t:{term}") for term in asked.terms]
        async with translated("incident search"):
            reply = await self._search(
                keys=[self.keys.incidents("meta"), self.keys.incidents("lens"), *term_keys]
            )
        n_docs, total, lo, lens = int(reply[0]), int(reply[1]), int(reply[2]), str(reply[3])
        if n_docs <= 0:
            return []
        postings = dict(zip(asked.terms, map(str, reply[4:]), strict=True))
        ranked = bm25(
            asked.ranked(postings),
            lens,
            lo=lo,
            n_docs=n_docs,
            avg_length=total / n_docs,
            top=MAX_CANDIDATES,
        )
        scores = dict(ranked)
        found = await self._visible([doc for doc, _ in ranked], limit, visible)
        return [IncidentHit(record, scores[doc]) for doc, record in found]

    async def by_alert(
        self, alertname: str, *, limit: int = 3, visible: Visible, before: float | None = None
    ) -> list[IncidentRecord]:
        """The newest records of ``alertname`` (that started before ``before``, if
        given) that ``visible`` lets this reader see, newest first."""
        limit = max(1, min(limit, MAX_LIMIT))
        name = _name(alertname)
        if not name:
            return []
        top = "+inf" if before is None else f"({before!r}"
        async with translated("incident by alert"):
            docs = await self.redis.zrevrangebyscore(
                self.keys.incidents(f"a:{name}"), top, "-inf", start=0, num=MAX_CANDIDATES
            )
        found = await self._visible([int(cast(str, d)) for d in docs], limit, visible)
        return [record for _, record in found]

    async def _visible(
        self, docs: Sequence[int], limit: int, visible: Visible
    ) -> list[tuple[int, IncidentRecord]]:
        """The first ``limit`` records of ``docs`` (in order) that still exist and are
        visible, fetched a page at a time; each channel is asked about once."""
        seen: dict[str, bool] = {}
        out: list[tuple[int, IncidentRecord]] = []
        for start in range(0, len(docs), PAGE):
            page = docs[start : start + PAGE]
            async with translated("incident records"):
                raws = await self.redis.mget([self._record_key(d) for d in page])
            for doc, raw in zip(page, raws, strict=True):
                record = _load(raw)
                if record is None:
                    continue  # expired, not pruned yet
                if record.channel not in seen:
                    seen[record.channel] = await visible(record.channel)
                if seen[record.channel]:
                    out.append((doc, record))
                    if len(out) >= limit:
                        return out
        return out

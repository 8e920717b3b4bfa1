"""Approvals: one record per call waiting for a human, and its one-time decision.

An approval is a HASH under the job's thread tag::

    status      pending | approved | denied | expired | cancelled
    args_hash   the canonical-arguments hash the card was made for
    expires_at  epoch seconds (``repr`` of a float)
    data        JSON of the parts fixed at creation (``ApprovalRecord`` minus the fields below)
    card_ts     the card's message ts, once posted
    decided_by  the raw Slack user id of whoever decided (absent for a decision by no one)
    decided_at  epoch seconds
    card_owed   "1" from the decision until its card was edited to show it
    replies_seq the thread's receipt count when the card was last edited to show the
                replies sent since it was asked (``bot.store.card_replies``)

The fields that change are plain hash fields and ``data`` never changes, so the Lua
that decides reads and writes strings only (no cjson, no float re-encoding) and a
card-ts write can never be lost to a concurrent decision. ``get`` merges the two.

``decide`` is the atomic pending → decided transition: of any number of concurrent
calls exactly one wins; the others get the record as it is (so the clicker can be told
who was first). With ``OPSLOOP_REDIS_MIN_REPLICAS``, a decision no replica confirmed in
time was still made — the record on the master is decided, its card owed its edit — so
``decide`` returns it as won with ``replicated=False`` (and so for the decider's own
click again) rather than raising as if nothing had changed; only a click that changed
nothing raises ``NotReplicated``. Whatever the decision lets run waits for replicas
itself (the ledger's claim: replication is in order, so a confirmed claim confirms the
decision written before it). The workspace-wide expiry index (a ZSET of ``job_id|call_id``, sharded
into buckets by thread, ``bot.store.keys``) is kept with separate commands, never in a
script with thread keys (Redis Cluster slots): it is a hint that may hold stale members,
which ``decide`` removes when it meets them.

A decided card's edit is owed until done: the deciding script sets ``card_owed`` with the
decision, and a process-wide hint (``card_edits``, added before the decision so a crash
between the two leaves a hint, not a lost edit) lets any process's scanner redo an edit
the deciding process never made (it died after the acknowledgement, or Slack refused).
``take_card_edits`` hands each due edit to one scanner for a while; ``card_edited``
settles it.

Who may decide (approver policy, two-person rule) is the Slack layer's business, not
this module's; it only guarantees one decision, bound to the card's arguments hash.
``ApprovalRecord`` and its ``Status``/``Outcome`` are in ``bot.records`` (the Slack edge
renders them), re-exported here.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import redis.asyncio as aioredis
from redis.commands.core import AsyncScript

from bot.agent.ports import Approved, Denied
from bot.errors import StoreError
from bot.records import ApprovalRecord as ApprovalRecord
from bot.records import Outcome as Outcome
from bot.records import Status as Status
from bot.store.audit import ACTOR_BOT, OUTBOX_TTL_S, AuditEntry, bound_result, staged_json
from bot.store.buckets import due_in_buckets
from bot.store.connection import translated
from bot.store.failover import retried
from bot.store.keys import BUCKETS, Keys, bucket_of, job_bucket, thread_of
from bot.store.replicas import NONE, NotReplicated, Replication, replicated_reply
from bot.store.staging import AuditNotify, head_json

log = logging.getLogger(__name__)

APPROVAL_RETENTION_S = 30 * 24 * 3600
"""How long a record outlives its expiry (traces and late clicks can still name it)."""

REFUSED_EXPIRED = "this approval has expired"
REFUSED_STALE = "the card no longer matches the call"
REFUSED_EARLY = "this approval has not expired yet"

# Slack user ids (``U…``, ``W…`` on Enterprise Grid): ``confirmed_by`` is always the raw
# id, never a mention such as ``<@U123>``.
_USER_ID = re.compile(r"^[UW][A-Z0-9]+$")
_MUTABLE = frozenset({"status", "card_ts", "decided_by", "decided_at", "card_owed", "replies_seq"})
_INDEX_SEP = "|"  # job ids contain ':' but never '|'
POSTING = "posting:"  # card_ts while a process posts the card (claim_card)
CARD_CLAIM_S = 30.0
CARD_EDIT_GRACE_S = 3.0  # the deciding process edits the card at once; others wait this long
CARD_EDIT_RETRY_S = 30.0  # a taken edit that was not settled is offered again after this


@dataclass(frozen=True, slots=True, kw_only=True)
class DecideResult:
    """What ``decide`` did: ``won`` the transition, or was refused and why.

    ``record`` is the stored record after the attempt: the new decision when won, the
    earlier one (naming who decided) when refused.
    """

    won: bool
    record: ApprovalRecord
    refusal: str | None = None
    # False: the decision stands on the master, but no replica confirmed it in time
    # (OPSLOOP_REDIS_MIN_REPLICAS); a failover before they do could still lose it.
    replicated: bool = True


# KEYS[1] a ZSET of index members. ARGV: now, limit. Removes and returns the members due.
_TAKE_DUE = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
if #due > 0 then
  redis.call('ZREM', KEYS[1], unpack(due))
end
return due
"""

# KEYS[1] a ZSET of index members. ARGV: due by, offer again at, limit. Returns the members
# due and pushes them to ``offer again at`` (each taken by one caller at a time).
_TAKE_FOR = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))
for _, member in ipairs(due) do
  redis.call('ZADD', KEYS[1], ARGV[2], member)
end
return due
"""

# KEYS[1] approval hash, KEYS[2] the thread's audit outbox. ARGV: args_hash, expires_at,
# data, ttl seconds, card ts ('' = none), the audit entry, the outbox's ttl.
# Returns 1 if created (and its audit entry staged), else the existing hash as a flat
# field/value list.
_CREATE = """
if redis.call('EXISTS', KEYS[1]) == 1 then
  return redis.call('HGETALL', KEYS[1])
end
redis.call('HSET', KEYS[1], 'status', 'pending', 'args_hash', ARGV[1],
           'expires_at', ARGV[2], 'data', ARGV[3])
if ARGV[5] ~= '' then
  redis.call('HSET', KEYS[1], 'card_ts', ARGV[5])
end
redis.call('EXPIRE', KEYS[1], ARGV[4])
redis.call('RPUSH', KEYS[2], ARGV[6])
redis.call('EXPIRE', KEYS[2], ARGV[7])
return 1
"""

# KEYS[1] approval hash, KEYS[2] the thread's audit outbox. ARGV: outcome, decided_by
# ('' = none), args_hash ('' = any), now, the audit entry's JSON without its closing brace,
# the outbox's ttl, touch a decided record ('1' when replication is asked for). A won
# decision stages its audit entry, completed with what only the record knows (the tool,
# the arguments hash, the card), in the same script.
# Returns {verdict, field, value, ...}; verdict is won | decided | expired | stale | early,
# or {'missing'} when there is no record.
_DECIDE = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {'missing'}
end
local outcome, by, want, now = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local verdict = 'won'
local expires_at = tonumber(redis.call('HGET', KEYS[1], 'expires_at'))
local current = redis.call('HGET', KEYS[1], 'status')
if current ~= 'pending' then
  verdict = 'decided'
  if ARGV[7] == '1' then  -- replication asked for: the WAIT behind must cover the decision
    redis.call('HSET', KEYS[1], 'status', current)
  end
elseif (outcome == 'approved' or outcome == 'denied') and now >= expires_at then
  verdict = 'expired'
elseif want ~= '' and want ~= redis.call('HGET', KEYS[1], 'args_hash') then
  verdict = 'stale'
elseif outcome == 'expired' and now < expires_at then
  verdict = 'early'
else
  -- The entry first: a script that fails half-way is not rolled back, so every read
  -- that could fail comes before the first write.
  local data = cjson.decode(redis.call('HGET', KEYS[1], 'data'))
  local card = redis.call('HGET', KEYS[1], 'card_ts')
  if not card or string.sub(card, 1, 8) == 'posting:' then card = '' end
  local entry = ARGV[5] .. ',"tool":' .. cjson.encode(data['tool'])
    .. ',"args_hash":' .. cjson.encode(redis.call('HGET', KEYS[1], 'args_hash'))
    .. ',"detail":{"card_ts":' .. cjson.encode(card)
    .. ',"requester":' .. cjson.encode(data['requester']) .. '}}'
  redis.call('HSET', KEYS[1], 'status', outcome, 'decided_at', ARGV[4], 'card_owed', '1')
  if by ~= '' then
    redis.call('HSET', KEYS[1], 'decided_by', by)
  end
  redis.call('RPUSH', KEYS[2], entry)
  redis.call('EXPIRE', KEYS[2], ARGV[6])
end
local out = redis.call('HGETALL', KEYS[1])
table.insert(out, 1, verdict)
return out
"""

# KEYS[1] approval hash. ARGV: marker ("posting:<epoch>"), now, stale after (s).
# Returns 1 if the caller may post the card now: no card yet and nobody posting it, or a
# poster that went quiet for longer than ``stale after`` (it died between claim and post).
_CLAIM_CARD = """
local status = redis.call('HGET', KEYS[1], 'status')
if status ~= 'pending' then return 0 end
local card = redis.call('HGET', KEYS[1], 'card_ts')
if card then
  if string.sub(card, 1, 8) ~= 'posting:' then return 0 end
  if tonumber(ARGV[2]) - tonumber(string.sub(card, 9)) < tonumber(ARGV[3]) then return 0 end
end
redis.call('HSET', KEYS[1], 'card_ts', ARGV[1])
return 1
"""

# KEYS[1] approval hash. ARGV: card ts. Returns 1 if the record exists.
_SET_CARD = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
redis.call('HSET', KEYS[1], 'card_ts', ARGV[1])
return 1
"""


# KEYS: 1 approval. ARGV: 1 receipt count. Only forward, only on an existing record.
_SET_REPLIES_SEQ = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
if tonumber(redis.call('HGET', KEYS[1], 'replies_seq') or '0') >= tonumber(ARGV[1]) then
  return 0
end
redis.call('HSET', KEYS[1], 'replies_seq', ARGV[1])
return 1
"""


def _pairs(flat: list[str]) -> dict[str, str]:
    return dict(zip(flat[::2], flat[1::2], strict=True))


def _from_hash(fields: dict[str, str]) -> ApprovalRecord:
    """The record from its hash: ``data`` plus the fields that change. A card being
    posted (a claim, not yet a message ts) reads as no card."""
    try:
        data = json.loads(fields["data"])
        data["status"] = fields["status"]
        card = fields.get("card_ts") or None
        data["card_ts"] = None if card is not None and card.startswith(POSTING) else card
        data["decided_by"] = fields.get("decided_by") or None
        data["card_owed"] = fields.get("card_owed") == "1"
        data["replies_seq"] = int(fields.get("replies_seq") or 0)
        raw_at = fields.get("decided_at")
        data["decided_at"] = float(raw_at) if raw_at else None
        return ApprovalRecord.model_validate(data)
    except (KeyError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
        raise StoreError(f"corrupt approval record: {exc}") from exc


def _own(fields: dict[str, str], outcome: Outcome, by: str | None, at: str) -> bool:
    """Whether a decided record is the decision this call made (same outcome, same
    decider, same moment): how a retried ``decide`` knows its own won decision."""
    return (
        fields.get("status") == outcome
        and (fields.get("decided_by") or "") == (by or "")
        and fields.get("decided_at") == at
    )


def _mine(fields: dict[str, str], outcome: Outcome, by: str | None) -> bool:
    """Whether a decided record is this decider's same decision (made by an earlier
    click of theirs): their click again, which stands as that decision."""
    return (
        bool(by)
        and fields.get("status") == outcome
        and (fields.get("decided_by") or "") == (by or "")
    )


def _check_user(by: str) -> None:
    if not _USER_ID.match(by):
        raise ValueError(f"not a raw Slack user id: {by!r}")


def refusal_text(record: ApprovalRecord) -> str:
    """Why a decided record takes no further decision, e.g. ``already approved by <@U1>``."""
    by = f" by <@{record.decided_by}>" if record.decided_by else ""
    if record.status == "expired":
        return "already expired"
    return f"already {record.status}{by}"


def index_member(job_id: str, call_id: str) -> str:
    return f"{job_id}{_INDEX_SEP}{call_id}"


def parse_index_member(member: str) -> tuple[str, str]:
    job_id, _, call_id = member.partition(_INDEX_SEP)
    return job_id, call_id


class Approvals:
    """Create, read and decide approvals; list the ones past their expiry."""

    def __init__(
        self,
        redis: aioredis.Redis,
        keys: Keys,
        *,
        on_audit: AuditNotify | None = None,
        replication: Replication = NONE,
    ) -> None:
        """``replication``: the replicas a decision waits for (``bot.store.replicas``)."""
        self._redis = redis
        self._keys = keys
        self._on_audit = on_audit
        self._replication = replication
        self._create = redis.register_script(_CREATE)
        self._decide = redis.register_script(_DECIDE)
        self._set_card = redis.register_script(_SET_CARD)
        self._set_replies_seq = redis.register_script(_SET_REPLIES_SEQ)
        self._claim_card = redis.register_script(_CLAIM_CARD)
        self._take = redis.register_script(_TAKE_DUE)
        self._take_for = redis.register_script(_TAKE_FOR)

    @staticmethod
    def _keys_thread_tag(job_id: str) -> str:
        return thread_of(job_id).tag

    def _staged(self, tag: str) -> None:
        if self._on_audit is not None:
            self._on_audit(tag)

    async def create(
        self, record: ApprovalRecord, *, remind_at: float | None = None
    ) -> ApprovalRecord:
        """Store a pending approval, unless one exists for the call; return the stored one.

        A second create for the same call changes nothing and returns the first record
        (a resumed job asking again gets the card it already has). ``remind_at``: when
        to remind people of it if still pending (``take_reminders``).
        """
        if record.status != "pending" or record.decided_by or record.decided_at is not None:
            raise ValueError("a new approval must be pending and undecided")
        key = self._keys.approval(record.job_id, record.call_id)
        member = index_member(record.job_id, record.call_id)
        data = record.model_dump_json(exclude=set(_MUTABLE))
        ttl = max(1, math.ceil(record.expires_at - record.requested_at)) + APPROVAL_RETENTION_S
        tag = self._keys_thread_tag(record.job_id)
        bucket = bucket_of(tag)
        async with translated("approval create"):
            # The hints first: a crash before the record leaves a stale member, which the
            # scanner drops; the other order could leave a card nobody ever expires (or an
            # audit entry nobody chains).
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.zadd(
                    self._keys.approval_expiries(bucket), {member: record.expires_at}, nx=True
                )
                if remind_at is not None and remind_at < record.expires_at:
                    pipe.zadd(self._keys.approval_reminders(bucket), {member: remind_at}, nx=True)
                pipe.zadd(self._keys.audit_pending_of(tag), {tag: record.requested_at})
                await pipe.execute()
            stored = await self._create(
                keys=[key, self._keys.audit_outbox(tag)],
                args=[
                    record.args_hash,
                    repr(record.expires_at),
                    data,
                    ttl,
                    record.card_ts or "",
                    requested_entry(record),
                    OUTBOX_TTL_S,
                ],
            )
        if not isinstance(stored, list):
            self._staged(tag)
            return record
        existing = _from_hash(_pairs(stored))
        await self._reindex(existing)
        return existing

    async def get(self, job_id: str, call_id: str) -> ApprovalRecord | None:
        async def attempt() -> dict[str, str]:
            async with translated("approval get"):
                got = await self._redis.hgetall(self._keys.approval(job_id, call_id))
            return {str(k): str(v) for k, v in got.items()}

        fields = await retried("approval get", attempt)
        return _from_hash({str(k): str(v) for k, v in fields.items()}) if fields else None

    async def of_calls(self, job_id: str, call_ids: Sequence[str]) -> list[ApprovalRecord]:
        """The approvals of ``call_ids`` that exist, in that order (one round trip)."""
        if not call_ids:
            return []
        async with translated("approval get"):
            async with self._redis.pipeline(transaction=False) as pipe:
                for call_id in call_ids:
                    pipe.hgetall(self._keys.approval(job_id, call_id))
                replies = await pipe.execute()
        return [
            _from_hash({str(k): str(v) for k, v in fields.items()}) for fields in replies if fields
        ]

    async def claim_card(
        self, job_id: str, call_id: str, *, now: float, stale_after_s: float = CARD_CLAIM_S
    ) -> bool:
        """Whether the caller should post the card of this pending approval now; at most
        one caller at a time (a claim older than ``stale_after_s`` with no card is taken
        over: its poster died). The caller then posts and calls ``set_card``."""
        async with translated("approval claim card"):
            won = await self._claim_card(
                keys=[self._keys.approval(job_id, call_id)],
                args=[f"{POSTING}{now!r}", repr(now), stale_after_s],
            )
        return bool(won)

    async def set_card(self, job_id: str, call_id: str, ts: str) -> bool:
        """Remember the card's message ts; ``False`` if there is no such approval."""
        async with translated("approval set card"):
            done = await self._set_card(keys=[self._keys.approval(job_id, call_id)], args=[ts])
        return bool(done)

    async def replies_shown(self, job_id: str, call_id: str, seq: int) -> None:
        """The card shows the replies its thread had received up to ``seq`` (its
        receipt count): a scan refreshes it only once the thread received more."""
        async with translated("approval replies shown"):
            await self._set_replies_seq(keys=[self._keys.approval(job_id, call_id)], args=[seq])

    async def decide(
        self,
        job_id: str,
        call_id: str,
        *,
        outcome: Outcome,
        by: str | None,
        args_hash: str | None,
        now: float,
    ) -> DecideResult | None:
        """Move a pending approval to ``outcome``; exactly one concurrent caller wins.

        ``by`` is the deciding user's raw Slack id (required to approve or deny).
        ``args_hash``, when given, must equal the stored one (the card binds to the
        call). Approve and deny are refused from ``expires_at`` on; ``expired`` only
        from then. ``None`` when there is no such approval (a forged or very old card).
        """
        if outcome in ("approved", "denied") and not by:
            raise ValueError(f"{outcome} needs the deciding user")
        if by:
            _check_user(by)
        tag = self._keys_thread_tag(job_id)
        bucket = bucket_of(tag)
        at = repr(float(now))

        # The last reply whose WAIT was refused: the script ran on the master all the same.
        unconfirmed: list[tuple[list[str], NotReplicated]] = []

        async def attempt() -> list[str]:
            async with translated("approval decide"):
                # The hints first (see the module docstring): a won decision always has one.
                async with self._redis.pipeline(transaction=False) as pipe:
                    pipe.zadd(
                        self._keys.card_edits(bucket), {index_member(job_id, call_id): now}, nx=True
                    )
                    pipe.zadd(self._keys.audit_pending_of(tag), {tag: now})
                    await pipe.execute()
            reply, refused = await replicated_reply(
                self._redis,
                self._replication,
                "approval decide",
                self._decide,
                keys=[self._keys.approval(job_id, call_id), self._keys.audit_outbox(tag)],
                args=[
                    outcome,
                    by or "",
                    args_hash or "",
                    at,
                    decided_entry_head(job_id, call_id, outcome=outcome, by=by, at=now),
                    OUTBOX_TTL_S,
                    self._replication.touch,
                ],
            )
            if refused is not None:
                unconfirmed.append(([str(r) for r in reply], refused))
                raise refused  # asked again: during a failover the replicas reattach
            return [str(r) for r in reply]

        replicated = True
        try:
            reply = await retried("approval decide", attempt)  # bot.store.failover
        except NotReplicated as exc:
            if not unconfirmed or unconfirmed[-1][1] is not exc:
                raise
            reply, replicated = unconfirmed[-1][0], False
        verdict, fields = reply[0], _pairs(reply[1:])
        if verdict == "decided" and _own(fields, outcome, by, at):
            verdict = "won"  # a retry of this very decision, whose first reply was lost
        if not replicated and not (verdict == "won" or _mine(fields, outcome, by)):
            raise unconfirmed[-1][1]  # this click changed nothing: "try again" stands
        if verdict == "won":
            self._staged(tag)
        if verdict == "missing":
            await self._unindex(job_id, call_id)
            return None
        record = _from_hash(fields)
        if record.status != "pending":
            await self._unindex(job_id, call_id)
        match verdict:
            case "won":
                return DecideResult(won=True, record=record, replicated=replicated)
            case "decided":
                return DecideResult(
                    won=False, record=record, refusal=refusal_text(record), replicated=replicated
                )
            case "expired":
                return DecideResult(won=False, record=record, refusal=REFUSED_EXPIRED)
            case "stale":
                return DecideResult(won=False, record=record, refusal=REFUSED_STALE)
            case "early":
                return DecideResult(won=False, record=record, refusal=REFUSED_EARLY)
        raise StoreError(f"approval decide: unexpected verdict {verdict!r}")

    async def due(self, now: float, limit: int = 100) -> list[tuple[str, str]]:
        """``(job_id, call_id)`` of approvals whose expiry has come, oldest first.

        A hint: the scanner calls ``decide(outcome="expired")``, which refuses (and
        drops the hint) if the approval was decided meanwhile.
        """
        members = await due_in_buckets(
            self._redis, "approval due", self._keys.approval_expiries, now, limit
        )
        return [parse_index_member(m) for m in members]

    async def take_reminders(self, now: float, limit: int = 100) -> list[tuple[str, str]]:
        """``(job_id, call_id)`` of approvals whose reminder time has come, each handed
        to exactly one caller (taken out of the index in the same script). A hint: the
        caller checks the approval is still pending."""
        members = await self._take_each(
            "approval reminders", self._take, self._keys.approval_reminders, [repr(now), limit]
        )
        return [parse_index_member(m) for m in members]

    async def take_card_edits(
        self,
        now: float,
        *,
        grace_s: float = CARD_EDIT_GRACE_S,
        retry_s: float = CARD_EDIT_RETRY_S,
        limit: int = 100,
    ) -> list[tuple[str, str]]:
        """``(job_id, call_id)`` of cards whose edit may still be owed, decided at least
        ``grace_s`` ago, each handed to one caller until ``retry_s`` from now. A hint:
        the caller reads the record; ``card_edited`` settles it (or drops a stale hint)."""
        members = await self._take_each(
            "approval card edits",
            self._take_for,
            self._keys.card_edits,
            [repr(now - grace_s), repr(now + retry_s), limit],
        )
        return [parse_index_member(m) for m in members]

    async def _take_each(
        self, what: str, script: AsyncScript, key_of: Callable[[int], str], args: list[str | int]
    ) -> list[str]:
        """``script`` (a take-out script of one index key) on every bucket at once; the
        members all of them handed out (up to ``limit`` from each)."""

        async def one(bucket: int) -> list[object]:
            async with translated(what):
                return list(await script(keys=[key_of(bucket)], args=args))

        taken = await asyncio.gather(*(one(b) for b in BUCKETS), return_exceptions=True)
        failed = [t for t in taken if isinstance(t, BaseException)]
        members = [str(m) for t in taken if not isinstance(t, BaseException) for m in t]
        if failed and not members:
            raise failed[0]
        return members

    async def card_edited(self, job_id: str, call_id: str) -> None:
        """The decided card shows its decision: nothing is owed any more."""
        async with (
            translated("approval card edited"),
            self._redis.pipeline(transaction=False) as pipe,
        ):
            pipe.hdel(self._keys.approval(job_id, call_id), "card_owed")
            pipe.zrem(self._keys.card_edits(job_bucket(job_id)), index_member(job_id, call_id))
            await pipe.execute()

    async def _reindex(self, record: ApprovalRecord) -> None:
        """Make the index agree with a record found by a repeated ``create``."""
        member = index_member(record.job_id, record.call_id)
        if record.status != "pending":
            await self._unindex(record.job_id, record.call_id)
            return
        async with translated("approval index"):
            await self._redis.zadd(
                self._keys.approval_expiries(job_bucket(record.job_id)),
                {member: record.expires_at},
            )

    async def _unindex(self, job_id: str, call_id: str) -> None:
        """Best effort: the decision already stands; a leftover hint is dropped later."""
        try:
            async with translated("approval unindex"):
                member, bucket = index_member(job_id, call_id), job_bucket(job_id)
                async with self._redis.pipeline(transaction=False) as pipe:
                    pipe.zrem(self._keys.approval_expiries(bucket), member)
                    pipe.zrem(self._keys.approval_reminders(bucket), member)
                    await pipe.execute()
        except StoreError:
            log.warning("could not drop the expiry hint of %s/%s", job_id, call_id, exc_info=True)


MAX_AUDIT_TEXT = 2000  # the dry run and the reason, in the audit log


def requested_entry(record: ApprovalRecord) -> str:
    """The audit entry of a new approval (staged by the create script)."""
    detail: dict[str, object] = {
        "category": record.category,
        "requester": record.requester,
        "expires_at": record.expires_at,
    }
    for name in ("dry_run_output", "preview", "reason"):
        value = getattr(record, name)
        if value:
            detail[name] = bound_result(value, MAX_AUDIT_TEXT)
    return staged_json(
        AuditEntry(
            id=f"approval_requested:{record.job_id}:{record.call_id}",
            kind="approval_requested",
            at=record.requested_at,
            actor=ACTOR_BOT,
            job_id=record.job_id,
            channel=record.channel,
            thread_ts=record.thread_ts,
            tool=record.tool,
            call_id=record.call_id,
            args_hash=record.args_hash,
            arguments=record.arguments,
            detail=detail,
        )
    )


def decided_entry_head(
    job_id: str, call_id: str, *, outcome: Outcome, by: str | None, at: float
) -> str:
    """The audit entry of a decision without its closing brace: the deciding script adds
    the tool, the arguments hash and the card, which only the stored record knows."""
    thread = thread_of(job_id)
    entry = AuditEntry(
        id=f"approval_decided:{job_id}:{call_id}",
        kind="approval_decided",
        at=at,
        actor=by or ACTOR_BOT,
        job_id=job_id,
        channel=thread.channel,
        thread_ts=thread.thread_ts,
        call_id=call_id,
        outcome=outcome,
    )
    return head_json(entry, completed_with=("tool", "args_hash", "detail"))


def to_decision(record: ApprovalRecord) -> Approved | Denied:
    """The core's view of a decided approval; ``ValueError`` while it is still pending."""
    by = record.decided_by
    asked, at = record.requested_at, record.decided_at
    match record.status:
        case "approved":
            if not by:
                raise ValueError("an approval without an approver")
            return Approved(
                confirmed_by=by,
                tool=record.tool,
                args_hash=record.args_hash,
                asked_at=asked,
                decided_at=at,
            )
        case "denied":
            reason = f"denied by <@{by}>" if by else "denied"
            return Denied(reason=reason, by=by, asked_at=asked, decided_at=at)
        case "expired":
            reason = "approval expired"
            return Denied(reason=reason, outcome="expired", asked_at=asked, decided_at=at)
        case "cancelled":
            reason = f"cancelled by <@{by}>" if by else "cancelled"
            return Denied(reason=reason, outcome="cancelled", by=by, asked_at=asked, decided_at=at)
        case "pending":
            raise ValueError("the approval is still pending")

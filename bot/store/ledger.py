"""The mutating-call ledger: the core's ``Ledger`` port on Redis.

One HASH per job (``keys.ledger(job_id)``), field = idempotency key
``{job_id}:{call_id}``, value = ``LedgerRecord`` JSON (the record is in ``bot.records``,
re-exported here). ``begin`` claims the key with HSETNX before a write runs
(``started``); ``finish`` records ``done`` with the output.
A key found ``started`` on a later run means the process died during the write: the
core reports "outcome unknown" and never runs it again. A key found ``done`` returns the
recorded output instead of running the write twice.

With ``OPSLOOP_REDIS_MIN_REPLICAS`` a claim counts only once replicas confirm it
(``bot.store.replicas``). One they did not confirm is withdrawn before ``begin`` raises
(``ClaimWithdrawn``): a compare-and-set script turns exactly that claim — still the
bytes this call wrote, not ``done`` — into ``withdrawn`` with its audit entry
(``write_withdrawn``), so the tool did not start and no later run reads the entry as
"started, outcome unknown" (DESIGN, "Approvals"). A ``withdrawn`` entry is claimed again
by the next ``begin`` like a missing one (its ``write_started`` then has an id of its
own, ``write_started:{key}:{at}``, which the chain does not dedupe away). The gap this
leaves is a process dying between the refused WAIT and the withdrawal: its claim stays
``started`` and is reported unknown, as any claim of a process that died.

Key parsing: a job id is ``channel:thread_ts:jN`` (two colons, see ``bot.records.Thread``), so
the call id is everything after the third colon. Call ids come from model providers and
are not ours to constrain, so a call id containing a colon still parses correctly.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from pydantic import ValidationError

from bot.agent.observe import ERROR_PREFIX
from bot.agent.ports import LedgerEntry
from bot.errors import StoreError
from bot.records import LedgerRecord as LedgerRecord
from bot.store.audit import (
    ACTOR_BOT,
    OUTBOX_TTL_S,
    AuditEntry,
    AuditKind,
    bound_result,
    job_fields,
)
from bot.store.connection import translated
from bot.store.failover import RUN_RETRY_BUDGET_S, retried
from bot.store.keys import thread_of
from bot.store.redis_store import Lua
from bot.store.replicas import (
    NotReplicated,
    ReplicatedStore,
    master_offset,
    replicas_caught_up,
    replicated_reply,
)
from bot.store.staging import AuditNotify, head_json

log = logging.getLogger(__name__)

LEDGER_TTL_S = 30 * 24 * 3600  # as long as the job and its history
MAX_OUTPUT_BYTES = 64 * 1024  # the full output, if longer, lives in the artifacts


class ClaimWithdrawn(NotReplicated):
    """No replica confirmed a ledger claim in time, and the claim was withdrawn: the call
    did not start, and a later ``begin`` may claim it again."""


MAX_AUDIT_RESULT = 2000  # a write's result, in the audit log

# Who the audit log names for a write: ARGV's actor when given, else the approval's decider
# (KEYS[3], the call's approval hash, when there is one), else the bot.
_ACTOR = """
local actor = ARGV[#ARGV]
if actor == '' then
  actor = redis.call('HGET', KEYS[3], 'decided_by') or 'opsloop'
end
"""

# KEYS: ledger hash, the thread's audit outbox, the call's approval. ARGV: key, entry,
# ttl, audit head when claimed, audit head when found started, outbox ttl, audit head
# when claimed over a withdrawn claim, actor.
# Returns {created, entry}: the entry as it stands (the earlier one when not created).
_BEGIN = (
    _ACTOR
    + """
local created = redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[3])
local raw = redis.call('HGET', KEYS[1], ARGV[1])
local again = false
if created == 0 and raw == ARGV[2] then
  created = 1  -- this very claim, sent again after its reply was lost (bot.store.failover)
elseif created == 0 and cjson.decode(raw)['state'] == 'withdrawn' then
  -- An earlier claim no replica confirmed, taken back: the call never started.
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
  raw, created, again = ARGV[2], 1, true
end
local head = ''
if again then
  head = ARGV[7]
elseif created == 1 then
  head = ARGV[4]
elseif cjson.decode(raw)['state'] == 'started' then
  head = ARGV[5]
end
if head ~= '' then
  redis.call('RPUSH', KEYS[2], head .. ',"actor":' .. cjson.encode(actor) .. '}')
  redis.call('EXPIRE', KEYS[2], ARGV[6])
end
return {created, raw}
"""
)

# KEYS: ledger hash, the thread's audit outbox, the call's approval. ARGV: key, entry,
# ttl, audit head, outbox ttl, actor.
_FINISH = (
    _ACTOR
    + """
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[3])
redis.call('RPUSH', KEYS[2], ARGV[4] .. ',"actor":' .. cjson.encode(actor) .. '}')
redis.call('EXPIRE', KEYS[2], ARGV[5])
return 1
"""
)


# KEYS: ledger hash, the thread's audit outbox, the call's approval. ARGV: key, the claim
# as written, the withdrawn entry, the audit head, outbox ttl, actor. Withdraws only the
# claim this call wrote (the same bytes: never a ``done``, never another run's claim).
# Returns 1 if withdrawn, 0 if the claim was not there (lost with a master, or changed).
_WITHDRAW = (
    _ACTOR
    + """
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('RPUSH', KEYS[2], ARGV[4] .. ',"actor":' .. cjson.encode(actor) .. '}')
redis.call('EXPIRE', KEYS[2], ARGV[5])
return 1
"""
)


def split_key(key: str) -> tuple[str, str]:
    """``(job_id, call_id)`` of an idempotency key ``{job_id}:{call_id}``."""
    parts = key.split(":", 3)
    if len(parts) != 4 or not all(parts):
        raise ValueError(f"not an idempotency key (job_id:call_id): {key!r}")
    return ":".join(parts[:3]), parts[3]


def bound_output(output: str) -> tuple[str, int | None]:
    """The output cut to ``MAX_OUTPUT_BYTES`` (UTF-8) with a note, and its full size if cut."""
    raw = output.encode("utf-8", "surrogatepass")
    if len(raw) <= MAX_OUTPUT_BYTES:
        return output, None
    head = raw[:MAX_OUTPUT_BYTES].decode("utf-8", "ignore")  # never split a character
    return f"{head}\n… [cut: {len(raw)} bytes in all, first {MAX_OUTPUT_BYTES} kept]", len(raw)


def _write_entry(
    kind: AuditKind,
    key: str,
    record: LedgerRecord,
    *,
    at: float,
    outcome: str | None = None,
    detail: dict[str, object] | None = None,
) -> AuditEntry:
    """The audit entry of the write ``record`` is the ledger's entry of (its actor is set
    by the script)."""
    job_id, call_id = split_key(key)
    return AuditEntry(
        id=f"{kind}:{key}",
        kind=kind,
        at=at,
        actor=ACTOR_BOT,
        **job_fields(job_id),
        tool=record.tool,
        call_id=call_id,
        args_hash=record.args_hash,
        outcome=outcome,
        detail={"idempotency_key": key, **(detail or {})},
    )


def _parse(key: str, raw: str) -> LedgerRecord:
    try:
        return LedgerRecord.model_validate_json(raw)
    except ValidationError as exc:
        raise StoreError(f"corrupt ledger entry {key!r}: {exc}") from exc


@dataclass(eq=False, kw_only=True)
class RedisLedger(ReplicatedStore):
    """Records mutating calls so that a crash never re-runs a write blindly (``started``
    and ``done`` wait for the ``replication`` asked for)."""

    now: Callable[[], float] = time.time
    on_audit: AuditNotify | None = None
    # Who the audit log names for the writes (``cli:<user>``); by default the approval's
    # decider, else the bot.
    actor: str | None = None

    _begin = Lua(_BEGIN)
    _finish = Lua(_FINISH)
    _withdraw = Lua(_WITHDRAW)

    async def stream_offset(self, key: str) -> int:
        """Where the replication stream of the master holding ``key``'s entry is now."""
        return await master_offset(self.redis, self.keys.ledger(split_key(key)[0]))

    async def replicas_caught_up(self, key: str, *, since: int) -> bool:
        """Whether enough replicas (``replication``) of the master holding ``key``'s entry
        have its stream up to ``since``: a claim now may be confirmed (no write)."""
        hash_key = self.keys.ledger(split_key(key)[0])
        return await replicas_caught_up(self.redis, self.replication, hash_key, since=since)

    async def begin(self, key: str, tool: str, args_hash: str) -> LedgerEntry | None:
        """Record ``started``; return the earlier entry if the key was seen before.

        The audit entry goes with the ledger's in one script: ``write_started`` when the
        key is claimed, ``write_unknown`` when it was found ``started`` (a write that
        began and was never seen to end). A claim no replica confirmed is withdrawn and
        ``ClaimWithdrawn`` raised: the call must not run (see the module docstring)."""
        job_id, call_id = split_key(key)
        hash_key = self.keys.ledger(job_id)
        now = self.now()
        record = LedgerRecord(state="started", tool=tool, args_hash=args_hash, started_at=now)
        claim = record.model_dump_json(exclude_none=True)
        tag = thread_of(job_id).tag
        started = _write_entry("write_started", key, record, at=now)
        again = started.model_copy(update={"id": f"{started.id}:{now!r}"})
        unknown = _write_entry("write_unknown", key, record, at=now, outcome="unknown")
        keys = [hash_key, self.keys.audit_outbox(tag), self.keys.approval(job_id, call_id)]

        async def attempt() -> tuple[int, str, NotReplicated | None]:
            (created, raw), refused = await replicated_reply(
                self.redis,
                self.replication,
                "ledger begin",
                self._begin,
                keys=keys,
                args=[
                    key,
                    claim,
                    LEDGER_TTL_S,
                    head_json(started, completed_with=("actor",)),
                    head_json(unknown, completed_with=("actor",)),
                    OUTBOX_TTL_S,
                    head_json(again, completed_with=("actor",)),
                    self.actor or "",
                ],
            )
            if refused is not None and not int(created):
                raise refused  # an entry found, unconfirmed: asked again (bot.store.failover)
            return int(created), str(raw), refused

        await retried("ledger begin", lambda: self._hint(tag, now))
        # The same claim twice is one claim (see _BEGIN).
        created, raw, refused = await retried("ledger begin", attempt)
        if created or _parse(key, raw).state == "started":
            self._notify(tag)
        if refused is not None:
            await self._withdraw_claim(key, keys, record, claim, tag)
            raise ClaimWithdrawn(f"{refused}; the claim was withdrawn: the call did not start")
        if int(created):
            return None
        prior = _parse(key, str(raw))
        if prior.tool != tool or prior.args_hash != args_hash:
            # Same idempotency key, different call: the provider reused a call id. The
            # recorded result belongs to another call, so it must not stand for this one,
            # and running the write could still repeat something: report it as unknown.
            log.warning(
                "ledger key %s reused: recorded %s/%s, now %s/%s",
                key,
                prior.tool,
                prior.args_hash,
                tool,
                args_hash,
            )
            return LedgerEntry(state="started")
        return prior.entry()

    async def _withdraw_claim(
        self, key: str, keys: list[str], record: LedgerRecord, claim: str, tag: str
    ) -> None:
        """Take back a claim no replica confirmed (``_WITHDRAW``). Retried across a
        failover for as long as a running job's writes are: a claim the new master never
        got needs nothing, one it got is withdrawn there. Failing that, the store's error is
        raised and the claim may stand as ``started`` (reported unknown, as after a crash)."""
        now = self.now()
        withdrawn = record.model_copy(update={"state": "withdrawn", "withdrawn_at": now})
        entry = _write_entry(
            "write_withdrawn",
            key,
            record,
            at=now,
            outcome="not_started",
            detail={"started_at": record.started_at},
        ).model_copy(update={"id": f"write_withdrawn:{key}:{record.started_at!r}"})

        async def attempt() -> object:
            async with translated("ledger withdraw"):
                return await self._withdraw(
                    keys=keys,
                    args=[
                        key,
                        claim,
                        withdrawn.model_dump_json(exclude_none=True),
                        head_json(entry, completed_with=("actor",)),
                        OUTBOX_TTL_S,
                        self.actor or "",
                    ],
                )

        await retried("ledger withdraw", lambda: self._hint(tag, now), budget_s=RUN_RETRY_BUDGET_S)
        done = await retried("ledger withdraw", attempt, budget_s=RUN_RETRY_BUDGET_S)
        if int(done):  # type: ignore[call-overload]
            self._notify(tag)
        log.warning("ledger %s: no replica confirmed the claim; withdrawn, not started", key)

    async def finish(self, key: str, output: str) -> None:
        """Record ``done`` with the (bounded) output, keeping what ``begin`` wrote; its
        audit entry (``write_finished``, the outcome and a bounded result) in the same
        script."""
        job_id, call_id = split_key(key)
        hash_key = self.keys.ledger(job_id)
        async with translated("ledger finish"):
            raw = await self.redis.hget(hash_key, key)
        prior = _parse(key, str(raw)) if raw else LedgerRecord(state="started")
        shown, full = bound_output(output)
        now = self.now()
        record = prior.model_copy(
            update={
                "state": "done",
                "finished_at": now,
                "output": shown,
                "output_bytes": full,
            }
        )
        tag = thread_of(job_id).tag
        detail: dict[str, object] = {"result": bound_result(output, MAX_AUDIT_RESULT)}
        if prior.started_at is not None:
            detail["started_at"] = prior.started_at
        finished = _write_entry(
            "write_finished",
            key,
            prior,
            at=now,
            outcome="error" if output.startswith(ERROR_PREFIX) else "ok",
            detail=detail,
        )
        await retried("ledger finish", lambda: self._hint(tag, now))
        await self.acknowledged(  # the same entry written twice is one entry
            "ledger finish",
            self._finish,
            keys=[hash_key, self.keys.audit_outbox(tag), self.keys.approval(job_id, call_id)],
            args=[
                key,
                record.model_dump_json(exclude_none=True),
                LEDGER_TTL_S,
                head_json(finished, completed_with=("actor",)),
                OUTBOX_TTL_S,
                self.actor or "",
            ],
        )
        self._notify(tag)

    async def _hint(self, tag: str, now: float) -> None:
        """The audit outbox's pending hint, before the fact (``bot.store.staging``)."""
        async with translated("audit hint"):
            await self.redis.zadd(self.keys.audit_pending_of(tag), {tag: now})

    def _notify(self, tag: str) -> None:
        if self.on_audit is not None:
            self.on_audit(tag)

    async def entries(self, job_id: str) -> dict[str, LedgerRecord]:
        """Every entry of a job, by idempotency key (traces, tests)."""
        async with translated("ledger entries"):
            raw = await self.redis.hgetall(self.keys.ledger(job_id))
        return {str(k): _parse(str(k), str(v)) for k, v in raw.items()}

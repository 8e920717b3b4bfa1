"""Job state: one business task in a thread, its status and the loop's progress.

A job is a HASH ``{status, fence, data}`` (``data`` is the ``JobRecord`` JSON), so Lua
can check status and fencing token without parsing JSON; beside them ``owed`` (an
ended job's answer and ending not yet shown) and ``tools`` (``KeptTools``: the per-tool
lines its status message shows, kept as calls end for an ending another process shows,
read with the record by ``get``). Every write is a
compare-and-set script: the status must still be what the writer read, and its fencing
token must not be older than the last writer's, so a process that lost its lease cannot
overwrite newer state. Which transitions are allowed is decided here, in Python, before
the script runs:

    queued ──► running ──► awaiting_approval ──(decision)──► running
                  │                 │
                  ▼                 ▼
            completed, incomplete, loop, stalled, no_action, failed, cancelled  (final)
            limit_iterations, limit_tokens, limit_deadline ──(recorded raise)──► running

Ending a job is atomic with a look at the thread's inject counter: if a reply arrived
after the loop's last read, the job is not ended and the caller takes the reply in.

The scanner's index (a sorted set: job id → when to look at it next, in the bucket of
the job's thread, ``bot.store.keys``) holds every live job: a created job is due at
once, an ended one leaves it, and a job that becomes ``running`` (started, resumed after
its approval, continued after a limit) is due at once again, whatever look its earlier
state had scheduled: a paused job's next look is 30 s away and an ended one has none,
and a process that dies running it must be found within its lease.

Stop is a flag on the job (``cancel``), read by its loop every step, and a signal on the
bucket's sharded pub/sub channel that cancels an in-flight call at once wherever the job
runs (``Turns.listen_for_stops`` subscribes to every bucket's).

The record and its status (``JobRecord``, ``JobStatus``, ``JobLimits``, ``LimitRaise``)
are in ``bot.records``, which the Slack edge reads too; they are re-exported here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from bot.errors import StoreError
from bot.records import JobLimits as JobLimits
from bot.records import JobRecord as JobRecord
from bot.records import JobStatus as JobStatus
from bot.records import KeptTools as KeptTools
from bot.records import LimitRaise as LimitRaise
from bot.store.audit import OUTBOX_TTL_S, AuditEntry, job_fields, staged_json
from bot.store.buckets import due_in_buckets
from bot.store.connection import StoreConflict, translated
from bot.store.failover import RUN_RETRY_BUDGET_S, retried
from bot.store.keys import JOB_TTL_S, TRACE_TTL_S, Keys, Thread, bucket_of, job_bucket, thread_of
from bot.store.redis_store import Lua, RedisStore
from bot.store.staging import AuditNotify
from bot.store.trace import MAX_TRACE_ENTRIES

log = logging.getLogger(__name__)


Via = Literal["decision", "raise"]


def check_transition(old: JobStatus, new: JobStatus, via: Via | None = None) -> None:
    """Raise ``StoreConflict`` unless ``old → new`` is allowed (``via`` says how)."""
    ok = False
    if old is JobStatus.QUEUED:
        ok = new in (JobStatus.RUNNING, JobStatus.CANCELLED, JobStatus.FAILED)
    elif old is JobStatus.RUNNING:
        ok = new is not JobStatus.QUEUED
    elif old is JobStatus.AWAITING_APPROVAL:
        ok = (new is JobStatus.RUNNING and via == "decision") or new in (
            JobStatus.CANCELLED,
            JobStatus.FAILED,
            JobStatus.AWAITING_APPROVAL,
        )
    elif old.limit:
        ok = new is JobStatus.RUNNING and via == "raise"
    if not ok:
        how = f" via {via}" if via else ""
        raise StoreConflict(f"job status {old.value} → {new.value}{how} is not allowed")


JOB_ID_PLACEHOLDER = "__JOB_ID__"  # the creating script puts the job's id here


def new_job(
    thread: Thread,
    *,
    requester: str,
    limits: JobLimits,
    now: float,
    request_ts: str | None = None,
    meta: dict[str, str] | None = None,
) -> JobRecord:
    """A queued job's record before Redis numbers it (its id is a placeholder the
    creating script fills in: ``Jobs.create``, and the ack path's receipt)."""
    return JobRecord(
        id=JOB_ID_PLACEHOLDER,
        channel=thread.channel,
        thread_ts=thread.thread_ts,
        requester=requester,
        request_ts=request_ts,
        created_at=now,
        updated_at=now,
        limits=limits,
        meta=meta or {},
    )


def job_prefixes(keys: Keys, thread: Thread) -> tuple[str, str]:
    """What a script prepends to a job number to get its id (``C…:ts:j``) and to a job id
    to get its hash key."""
    first = thread.job_id(0)
    return first[:-1], keys.job(first)[: -len(first)]


# KEYS[1] job hash, KEYS[2] (optional) the thread's audit outbox; ARGV: expected status,
# fence, new status, data, ttl, and with KEYS[2] the audit entry and the outbox's ttl.
# Returns 1, or an error string naming what did not match.
_CAS = """
local cur = redis.call('HMGET', KEYS[1], 'status', 'fence')
if not cur[1] then return 'missing' end
if cur[1] ~= ARGV[1] then return 'status:' .. cur[1] end
if tonumber(ARGV[2]) < tonumber(cur[2] or '0') then return 'fence:' .. cur[2] end
redis.call('HSET', KEYS[1], 'status', ARGV[3], 'fence', ARGV[2], 'data', ARGV[4])
redis.call('EXPIRE', KEYS[1], ARGV[5])
if KEYS[2] then
  redis.call('RPUSH', KEYS[2], ARGV[6])
  redis.call('EXPIRE', KEYS[2], ARGV[7])
end
return 1
"""

# KEYS[1] job hash, KEYS[2] the thread's audit outbox; ARGV: who, the channel, its
# message, the audit entry, the outbox's ttl. The first Stop sets the flag and stages
# its audit entry; every Stop is published (a process resuming the job reads the flag).
_CANCEL = """
if redis.call('HSETNX', KEYS[1], 'cancel', ARGV[1]) == 1 then
  redis.call('RPUSH', KEYS[2], ARGV[2])
  redis.call('EXPIRE', KEYS[2], ARGV[3])
end
return 1
"""

# Like _CAS, and only if no reply arrived after the loop's last read. The ending is then
# owed to the thread (``owed``: how many times another process tried to deliver it).
# KEYS[2] inject counter, KEYS[3] the job's trace; ARGV[6] the counter value the loop
# has seen, ARGV[7] the trace's ttl, ARGV[8] its max entries, ARGV[9…] trace entries
# appended with the ending (the run's last events: one round trip for both).
_FINISH = """
local cur = redis.call('HMGET', KEYS[1], 'status', 'fence')
if cur[1] == ARGV[3] and redis.call('HGET', KEYS[1], 'data') == ARGV[4] then
  return 1  -- this very ending, retried after its reply was lost: written once
end
local seq = tonumber(redis.call('GET', KEYS[2]) or '0')
if seq > tonumber(ARGV[6]) then return 'replies:' .. seq end
if not cur[1] then return 'missing' end
if cur[1] ~= ARGV[1] then return 'status:' .. cur[1] end
if tonumber(ARGV[2]) < tonumber(cur[2] or '0') then return 'fence:' .. cur[2] end
redis.call('HSET', KEYS[1], 'status', ARGV[3], 'fence', ARGV[2], 'data', ARGV[4], 'owed', '0')
redis.call('EXPIRE', KEYS[1], ARGV[5])
if #ARGV > 8 then
  redis.call('RPUSH', KEYS[3], unpack(ARGV, 9, #ARGV))
  redis.call('LTRIM', KEYS[3], -tonumber(ARGV[8]), -1)
  redis.call('EXPIRE', KEYS[3], ARGV[7])
end
return 1
"""

# One more try at delivering an owed ending: its count, or -1 when nothing is owed.
_ATTEMPT = """
if redis.call('HEXISTS', KEYS[1], 'owed') == 0 then return -1 end
return redis.call('HINCRBY', KEYS[1], 'owed', 1)
"""

# The per-tool lines a job's status message showed (``KeptTools`` JSON), beside its
# record: only while the job exists (an expired job's hash is never made again).
_KEEP_TOOLS = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'tools', ARGV[1])
return 1
"""

# KEYS: jobs counter, current-job pointer; ARGV: thread prefix of job keys, data template
# parts. Returns the new job number; the caller builds the id from it.
_CREATE = """
local n = redis.call('INCR', KEYS[1])
redis.call('EXPIRE', KEYS[1], ARGV[3])
local id = ARGV[1] .. n
local key = ARGV[2] .. id
local data = string.gsub(ARGV[4], '__JOB_ID__', id, 1)
redis.call('HSET', key, 'status', 'queued', 'fence', '0', 'data', data)
redis.call('EXPIRE', key, ARGV[3])
redis.call('SET', KEYS[2], id, 'EX', ARGV[3])
return n
"""


@dataclass(eq=False, kw_only=True)
class Jobs(RedisStore):
    """Create, read and change jobs; keep the scanner's index of live jobs."""

    now: Callable[[], float] = time.time
    on_audit: AuditNotify | None = None

    _cas = Lua(_CAS)
    _finish = Lua(_FINISH)
    _attempt = Lua(_ATTEMPT)
    _keep_tools = Lua(_KEEP_TOOLS)
    _create = Lua(_CREATE)
    _cancel = Lua(_CANCEL)

    async def create(
        self,
        thread: Thread,
        *,
        requester: str,
        limits: JobLimits,
        request_ts: str | None = None,
        meta: dict[str, str] | None = None,
    ) -> JobRecord:
        """A new ``queued`` job in the thread, indexed for the scanner."""
        now = self.now()
        template = new_job(
            thread, requester=requester, limits=limits, now=now, request_ts=request_ts, meta=meta
        )
        id_prefix, key_prefix = job_prefixes(self.keys, thread)
        async with translated("job create"):
            n = await self._create(
                keys=[self.keys.jobs_counter(thread), self.keys.current_job(thread)],
                args=[id_prefix, key_prefix, JOB_TTL_S, template.model_dump_json()],
            )
            record = template.model_copy(update={"id": thread.job_id(int(n))})
            await self.redis.zadd(self.keys.active_jobs(job_bucket(record.id)), {record.id: now})
        return record

    async def get(self, job_id: str) -> JobRecord | None:
        """The job's record, with the tool lines kept beside it (``keep_tools``)."""

        async def attempt() -> list[object]:
            async with translated("job get"):
                return list(await self.redis.hmget(self.keys.job(job_id), ["data", "tools"]))

        raw, tools = await retried("job get", attempt)  # a read: safe to retry (failover)
        if not raw:
            return None
        record = JobRecord.model_validate_json(str(raw))
        if tools:
            try:
                kept = KeptTools.model_validate_json(str(tools))
            except ValueError:
                log.warning("job %s: its kept tool lines are unreadable; left out", job_id)
            else:
                record = record.model_copy(update={"tools": kept})
        return record

    async def keep_tools(self, job_id: str, tools: KeptTools) -> None:
        """Keep what the job's status message shows of its tool calls beside its record,
        for an ending another process shows; the newest write wins (one writer: the
        process running the job)."""
        async with translated("job tools"):
            await self._keep_tools(keys=[self.keys.job(job_id)], args=[tools.model_dump_json()])

    async def current(self, thread: Thread) -> JobRecord | None:
        """The thread's latest job, if any."""
        async with translated("job current"):
            job_id = await self.redis.get(self.keys.current_job(thread))
        return await self.get(str(job_id)) if job_id else None

    def _next(
        self, record: JobRecord, status: JobStatus, fence: int, **update: object
    ) -> JobRecord:
        return record.model_copy(
            update={"status": status, "fence": fence, "updated_at": self.now(), **update}
        )

    async def save(
        self,
        record: JobRecord,
        status: JobStatus | None = None,
        *,
        fence: int,
        via: Via | None = None,
        audit: AuditEntry | None = None,
        **update: object,
    ) -> JobRecord:
        """Write ``record`` (with ``update``) as ``status``; atomic compare-and-set on the
        status the caller read and on the fencing token. A job that becomes ``running``
        is due in the scanner's index at once (see the module docstring). ``audit``: the
        entry that records this change (a limit raised, a stop), staged with it."""
        new_status = status or record.status
        if new_status is not record.status:
            check_transition(record.status, new_status, via)
        new = self._next(record, new_status, fence, **update)
        keys = [self.keys.job(record.id)]
        args: list[str | int | float] = [
            record.status.value,
            fence,
            new_status.value,
            new.model_dump_json(),
            JOB_TTL_S,
        ]
        tag = record.thread.tag
        async with translated("job save"):
            if audit is not None:
                await self.redis.zadd(self.keys.audit_pending_of(tag), {tag: self.now()})
                keys.append(self.keys.audit_outbox(tag))
                args += [staged_json(audit), OUTBOX_TTL_S]
            outcome = await self._cas(keys=keys, args=args)
        _raise_unless_ok(outcome, record)
        if audit is not None and self.on_audit is not None:
            self.on_audit(tag)
        if new_status.final:
            await self._unindex(record.id)
        elif new_status is JobStatus.RUNNING and record.status is not JobStatus.RUNNING:
            await self.index(record.id, new.updated_at)
        return new

    async def finish(
        self,
        record: JobRecord,
        status: JobStatus,
        *,
        fence: int,
        inject_seen: int,
        trace: Sequence[str] = (),
        **update: object,
    ) -> JobRecord | None:
        """End the job unless a reply arrived after the loop's last read
        (``inject_seen``); ``None`` means it did and the job is still ``record.status``.
        ``trace``: entries appended to the job's trace in the same script, when it ends
        the job (on ``None`` they are not written).

        The ended job's answer and ending are then *owed* to its thread: it stays in the
        scanner's index until ``delivered`` (its process showed them), so a process
        that dies before Slack has them leaves the job for another to deliver
        (``delivery_attempt``, see ``bot.turns.scanner``)."""
        check_transition(record.status, status)
        new = self._next(record, status, fence, **update)
        data = new.model_dump_json()

        async def attempt() -> object:
            async with translated("job finish"):
                return await self._finish(
                    keys=[
                        self.keys.job(record.id),
                        self.keys.inject_seq(record.thread),
                        self.keys.trace(record.id),
                    ],
                    args=[
                        record.status.value,
                        fence,
                        status.value,
                        data,
                        JOB_TTL_S,
                        inject_seen,
                        TRACE_TTL_S,
                        MAX_TRACE_ENTRIES,
                        *trace,
                    ],
                )

        # A failover must not turn an answered job into a resumed one that answers again
        # (the answer is in the thread): the ending is retried, recognised as its own.
        outcome = await retried("job finish", attempt, budget_s=RUN_RETRY_BUDGET_S)
        if isinstance(outcome, str) and outcome.startswith("replies:"):
            return None
        _raise_unless_ok(outcome, record)
        return new

    async def owed(self, job_id: str) -> int | None:
        """How many deliveries of an ended job's answer and ending were tried elsewhere,
        or None when nothing is owed (delivered, or not ended by ``finish``)."""
        async with translated("job owed"):
            tries = await self.redis.hget(self.keys.job(job_id), "owed")
        return None if tries is None else int(tries)

    async def delivery_attempt(self, job_id: str) -> int | None:
        """Count one more try at delivering the job's ending: the count, or None when
        it was delivered meanwhile."""
        async with translated("job delivery"):
            n = int(await self._attempt(keys=[self.keys.job(job_id)]))
        return None if n < 0 else n

    async def delivered(self, job_id: str) -> None:
        """The ended job's answer and ending are in its thread: nothing is owed, and the
        scanner need not look at it again (one round trip)."""
        async with translated("job delivered"), self.redis.pipeline(transaction=False) as pipe:
            pipe.hdel(self.keys.job(job_id), "owed")
            pipe.zrem(self.keys.active_jobs(job_bucket(job_id)), job_id)
            await pipe.execute()

    async def request_cancel(self, job_id: str, by: str) -> None:
        """Stop a running job: the flag its loop reads every step (kept with the job,
        so a process resuming it after a crash sees it too), and a message that
        cancels an in-flight call at once in whichever process runs it."""
        thread = thread_of(job_id)
        now = self.now()
        entry = AuditEntry(
            id=f"job_stopped:{job_id}",
            kind="job_stopped",
            at=now,
            actor=by,
            **job_fields(job_id),
            detail={"while": "running"},
        )
        bucket = bucket_of(thread.tag)
        async with translated("job cancel"):
            await self.redis.zadd(self.keys.audit_pending_of(thread.tag), {thread.tag: now})
            await self._cancel(
                keys=[self.keys.job(job_id), self.keys.audit_outbox(thread.tag)],
                args=[by, staged_json(entry), OUTBOX_TTL_S],
            )
        if self.on_audit is not None:
            self.on_audit(thread.tag)
        # The flag is the record; the signal only saves the loop the wait for its next
        # step. Sharded pub/sub: only the bucket channel's shard carries it (a script
        # may not publish to a channel outside its keys' slot, so it goes on its own).
        try:
            async with translated("job cancel signal"):
                await self.redis.spublish(self.keys.cancel_channel(bucket), f"{job_id}|{by}")
        except StoreError:
            log.warning("Stop of %s: the signal was not sent (the flag stands)", job_id)

    async def cancel_requested(self, job_id: str) -> str | None:
        """Who pressed Stop on the job, if anyone."""

        async def attempt() -> object:
            async with translated("job cancel flag"):
                return await self.redis.hget(self.keys.job(job_id), "cancel")

        by = await retried("job cancel flag", attempt)  # a read: safe to retry
        return str(by) if by else None

    async def unindex(self, job_id: str) -> None:
        """Drop a job from the scanner's index (it ended, or the hint is stale)."""
        await self._unindex(job_id)

    async def _unindex(self, job_id: str) -> None:
        async with translated("job unindex"):
            await self.redis.zrem(self.keys.active_jobs(job_bucket(job_id)), job_id)

    async def index(self, job_id: str, when: float) -> None:
        """(Re)schedule the scanner's next look at a live job."""
        async with translated("job index"):
            await self.redis.zadd(self.keys.active_jobs(job_bucket(job_id)), {job_id: when})

    async def index_many(self, when: dict[str, float]) -> None:
        """``index`` for many jobs in one command."""
        by_bucket: dict[int, dict[str, float]] = {}
        for job_id, at in when.items():
            by_bucket.setdefault(job_bucket(job_id), {})[job_id] = at
        if by_bucket:
            async with translated("job index"), self.redis.pipeline(transaction=False) as pipe:
                for bucket, entries in by_bucket.items():
                    pipe.zadd(self.keys.active_jobs(bucket), entries)
                await pipe.execute()

    async def due(self, now: float, limit: int = 100) -> list[str]:
        """Live jobs the scanner should look at (their next-check time has passed), the
        longest due first, from every bucket of the index."""
        return await due_in_buckets(self.redis, "job due", self.keys.active_jobs, now, limit)


def _raise_unless_ok(outcome: object, record: JobRecord) -> None:
    if outcome == 1:
        return
    raise StoreConflict(f"job {record.id} not written: {outcome} (read {record.status.value})")

"""Receipts: the writing side of every thread's inject stream, on the ack path.

``Receipts.receive`` takes in one human message in one round trip. A Slack message that
the bot must take in (a mention, or a reply in a thread that holds a conversation) is
persisted by one Lua script over the thread's keys (one hash tag, so it also runs on
Redis Cluster), before Slack gets its answer:

1. already received (its ``ts`` is in the thread's ``inject:seen``): a duplicate —
   Slack's retry, or the ``app_mention``/``message`` twin of one post — changes
   nothing; the thread's current job is returned so a retry of a delivery whose job was
   never scheduled (the process died before answering) can schedule it;
2. a reply (not a mention) in a thread that holds no conversation (no history and no
   job yet: a reply right after the mention, before its job wrote any history, counts)
   is ignored, nothing written;
3. otherwise the message is XADDed to the thread's inject stream (``inject.py``'s
   ``APPEND_STEPS``, idempotent by ``ts``) and, unless the thread's current job is live
   (``queued``, ``running``, ``awaiting_approval``: it takes the message in at its next
   iteration boundary), a new ``queued`` job is created in the same step.

With ``OPSLOOP_REDIS_MIN_REPLICAS`` the receipt is followed by ``WAIT`` on its connection
(``bot.store.replicas``): too few replicas, and it raises, so Slack gets no 200.

The scanner's process-wide index of live jobs is a separate key (not thread-tagged), so
the caller adds a created job to it in a second command (``Jobs.index``); a crash
between the two leaves a queued job that Slack's retry (a duplicate, case 1) indexes.

``Receipts.append`` adds an entry that starts no job (a thread's earlier messages, the
context of a mention in a thread the bot was not part of): the same steps, idempotent by
``ts``, with no job and no conversation check. ``count`` is the thread's receipt count.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from bot.store.connection import reply_text, translated
from bot.store.inject import APPEND_STEPS, GROUP
from bot.store.jobs import JobLimits, JobRecord, JobStatus, job_prefixes, new_job
from bot.store.keys import HISTORY_TTL_S, JOB_TTL_S, Thread
from bot.store.redis_store import Lua
from bot.store.replicas import ReplicatedStore

Outcome = Literal["created", "joined", "duplicate", "ignored"]

# KEYS: 1 inject stream, 2 inject:seen, 3 inject:seq, 4 jobs counter, 5 current job,
#       6 history.
# ARGV: 1 ts, 2 text, 3 author, 4 history ttl, 5 group, 6 needs conversation ('1'/'0'),
#       7 job id prefix, 8 job key prefix, 9 job ttl, 10 job JSON with __JOB_ID__,
#       11 touch a duplicate ('1' when replication is asked for, ``bot.store.replicas``).
# Returns {outcome, job id or '', job status or ''}.
_RECEIVE = (
    """
local function current()
  local id = redis.call('GET', KEYS[5])
  if not id then return '', '' end
  return id, (redis.call('HGET', ARGV[8] .. id, 'status') or '')
end
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then
  if ARGV[11] == '1' then  -- replication asked for: the WAIT behind must cover the first write
    redis.call('HSET', KEYS[2], ARGV[1], redis.call('HGET', KEYS[2], ARGV[1]))
  end
  local id, status = current()
  return {'duplicate', id, status}
end
if ARGV[6] == '1' and redis.call('EXISTS', KEYS[6], KEYS[5]) == 0 then
  return {'ignored', '', ''}
end
"""
    + APPEND_STEPS
    + """
local id, status = current()
if status == 'queued' or status == 'running' or status == 'awaiting_approval' then
  return {'joined', id, status}
end
local n = redis.call('INCR', KEYS[4])
redis.call('EXPIRE', KEYS[4], ARGV[9])
id = ARGV[7] .. n
local key = ARGV[8] .. id
local data = string.gsub(ARGV[10], '__JOB_ID__', id, 1)
redis.call('HSET', key, 'status', 'queued', 'fence', '0', 'data', data)
redis.call('EXPIRE', key, ARGV[9])
redis.call('SET', KEYS[5], id, 'EX', ARGV[9])
return {'created', id, 'queued'}
"""
)


# KEYS: 1 inject stream, 2 inject:seen, 3 inject:seq. ARGV: 1 ts, 2 text, 3 author ('' for
# none), 4 ttl (s), 5 group. Returns 1, or 0 for a message received before.
_APPEND = (
    """
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then
  return 0
end
"""
    + APPEND_STEPS
    + """
return 1
"""
)


@dataclass(frozen=True, slots=True)
class Receipt:
    outcome: Outcome
    job_id: str | None  # the job that takes the message in (the current one if duplicate)
    status: JobStatus | None
    record: JobRecord | None = None  # the new job, when one was created

    @property
    def needs_run(self) -> bool:
        """Whether the caller should (re)schedule ``job_id``: a new job, or a duplicate
        delivery whose job is still ``queued`` (its first delivery may never have been
        answered)."""
        return self.outcome == "created" or (
            self.outcome == "duplicate" and self.status is JobStatus.QUEUED
        )


@dataclass(eq=False, kw_only=True)
class Receipts(ReplicatedStore):
    """Everything written to the threads' inject streams (see the module docstring)."""

    now: Callable[[], float] = time.time

    _script = Lua(_RECEIVE)
    _append = Lua(_APPEND)

    async def receive(
        self,
        thread: Thread,
        *,
        ts: str,
        user: str,
        text: str,
        limits: JobLimits,
        needs_conversation: bool = False,
        meta: dict[str, str] | None = None,
    ) -> Receipt:
        """Persist a human message and start a job for it unless one is live
        (see the module docstring). ``meta``: what a job it creates starts with (an
        alert's investigation offered only read-only tools)."""
        keys = self.keys
        now = self.now()
        template = new_job(thread, requester=user, limits=limits, now=now, request_ts=ts, meta=meta)
        id_prefix, key_prefix = job_prefixes(keys, thread)
        outcome, job_id, status = await self.acknowledged(  # idempotent by ts
            "message receipt",
            self._script,
            keys=[
                keys.inject(thread),
                keys.inject_seen(thread),
                keys.inject_seq(thread),
                keys.jobs_counter(thread),
                keys.current_job(thread),
                keys.history(thread),
            ],
            args=[
                ts,
                text,
                user,
                HISTORY_TTL_S,
                GROUP,
                "1" if needs_conversation else "0",
                id_prefix,
                key_prefix,
                JOB_TTL_S,
                template.model_dump_json(),
                self.replication.touch,
            ],
        )
        outcome = reply_text(outcome)
        job_id = reply_text(job_id) or None
        record = None
        if outcome == "created" and job_id is not None:
            record = template.model_copy(update={"id": job_id})
        return Receipt(
            outcome=outcome,  # type: ignore[arg-type]  # the script's closed set
            job_id=job_id,
            status=JobStatus(reply_text(status)) if reply_text(status) else None,
            record=record,
        )

    async def append(self, thread: Thread, *, ts: str, text: str, author: str | None) -> bool:
        """Add an entry that starts no job; False when ``ts`` was received before."""
        keys = self.keys
        async with translated("inject receive"):
            added = await self._append(
                keys=[keys.inject(thread), keys.inject_seen(thread), keys.inject_seq(thread)],
                args=[ts, text, author or "", HISTORY_TTL_S, GROUP],
            )
        return bool(added)

    async def count(self, thread: Thread) -> int:
        """How many entries this thread's stream has received (within the keys' TTL)."""
        async with translated("inject seq"):
            value = await self.redis.get(self.keys.inject_seq(thread))
        return int(value or 0)

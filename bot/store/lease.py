"""The per-thread lease: who runs the thread's job right now.

``SET NX PX`` with a random owner and a fencing token from an ``INCR`` in the same
script; the value is ``owner:fence``. Renewing and releasing compare the whole value,
so only the holder can extend or drop it. A running job's lease lives 15 s and is
renewed every 5 s: a crashed process's job is taken over within 15 s. A job awaiting
approval holds no lease.

``acquire_job`` is how a runner starts: one script reads the job (its record and cancel
flag) and takes the lease only when the job is runnable (live; awaiting approval only
once its decision was read), and with the lease the thread's history (only the
lease holder writes it): one round trip instead of a read, the lease, a read again, the
cancel flag and the history. The same owner's retry finds its own lease, so it is
retried like a read.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from dataclasses import dataclass, field

from bot.errors import StoreError
from bot.store.connection import translated
from bot.store.failover import retried
from bot.store.jobs import JobRecord
from bot.store.keys import LEASE_RENEW_S, LEASE_TTL_MS, Thread, thread_of
from bot.store.redis_store import Lua, RedisStore

log = logging.getLogger(__name__)

_ACQUIRE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return false end
local fence = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. fence, 'PX', ARGV[2])
return fence
"""
# KEYS: 1 lease, 2 fence, 3 job hash, 4 history, 5 history view. ARGV: 1 owner, 2 ttl
# (ms), 3 '1' when a job awaiting approval may be taken (its decision was read).
# Returns {outcome, data, cancel}: outcome 'gone', 'final', 'held', 'undecided'
# (awaiting approval, no lease taken) or the new fencing token, then (with the lease)
# the history's view ('' for none) and its messages. With the lease the job may be
# anything (a retry finds the lease it took): the caller looks at the record.
_ACQUIRE_JOB = """
local function taken(fence, job)
  local out = {fence, job[2] or '', job[3] or '', redis.call('GET', KEYS[5]) or ''}
  for _, message in ipairs(redis.call('LRANGE', KEYS[4], 0, -1)) do
    out[#out + 1] = message
  end
  return out
end
local job = redis.call('HMGET', KEYS[3], 'status', 'data', 'cancel')
local held = redis.call('GET', KEYS[1])
local mine = ARGV[1] .. ':'
if held and string.sub(held, 1, #mine) == mine then  -- our own, retried: whatever it holds
  return taken(string.sub(held, #mine + 1), job)
end
local status = job[1]
if not status or not job[2] then return {'gone', '', ''} end
if status ~= 'queued' and status ~= 'running' and status ~= 'awaiting_approval' then
  return {'final', job[2], ''}
end
if status == 'awaiting_approval' and ARGV[3] ~= '1' then
  return {'undecided', job[2], ''}
end
if held then return {'held', '', ''} end
local fence = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. fence, 'PX', ARGV[2])
return taken(tostring(fence), job)
"""
_RENEW = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
return 1
"""


def new_owner() -> str:
    return secrets.token_hex(8)


@dataclass(frozen=True, slots=True)
class Lease:
    thread: Thread
    owner: str
    fence: int

    @property
    def value(self) -> str:
        return f"{self.owner}:{self.fence}"


@dataclass(frozen=True, slots=True)
class TakenJob:
    """What ``acquire_job`` found: the job's record (``None``: no such job, or someone
    else holds the lease), the lease (``None``: not taken) and who pressed Stop on the
    job, if anyone (read with the lease)."""

    record: JobRecord | None
    lease: Lease | None
    cancel_by: str | None = None
    # With the lease: the thread's history as ``RedisHistory.preload`` takes it.
    history: list[str] = field(default_factory=list)
    history_view: str | None = None


@dataclass(eq=False, kw_only=True)
class Leases(RedisStore):
    """Take, renew and give back threads' leases (see the module docstring)."""

    ttl_ms: int = LEASE_TTL_MS

    _acquire = Lua(_ACQUIRE)
    _renew = Lua(_RENEW)
    _release = Lua(_RELEASE)
    _acquire_job = Lua(_ACQUIRE_JOB)

    async def acquire(self, thread: Thread, owner: str | None = None) -> Lease | None:
        """The lease with a new, higher fencing token, or ``None`` if someone holds it."""
        owner = owner or new_owner()
        async with translated("lease acquire"):
            fence = await self._acquire(
                keys=[self.keys.lease(thread), self.keys.fence(thread)],
                args=[owner, self.ttl_ms],
            )
        return Lease(thread, owner, int(fence)) if fence is not None else None

    async def acquire_job(self, job_id: str, *, decided: bool = False) -> TakenJob:
        """The job's record and, if it is runnable, its thread's lease (see the module
        docstring); ``decided``: a job awaiting approval is runnable (its decision was
        read). One round trip."""
        thread = thread_of(job_id)
        owner = new_owner()

        keys = [
            self.keys.lease(thread),
            self.keys.fence(thread),
            self.keys.job(job_id),
            self.keys.history(thread),
            self.keys.history_view(thread),
        ]

        async def attempt() -> list[str]:
            async with translated("lease acquire"):
                reply = await self._acquire_job(
                    keys=keys, args=[owner, self.ttl_ms, "1" if decided else "0"]
                )
            return [str(part) for part in reply]

        reply = await retried("lease acquire", attempt)  # see _ACQUIRE_JOB
        outcome, data, cancel = reply[:3]
        record = JobRecord.model_validate_json(data) if data else None
        if not outcome.isdigit():
            return TakenJob(record, None)
        lease = Lease(thread, owner, int(outcome))
        return TakenJob(record, lease, cancel or None, reply[4:], reply[3] or None)

    async def renew(self, lease: Lease) -> bool:
        async with translated("lease renew"):
            ok = await self._renew(
                keys=[self.keys.lease(lease.thread)], args=[lease.value, self.ttl_ms]
            )
        return bool(ok == 1)

    async def release(self, lease: Lease) -> bool:
        async with translated("lease release"):
            ok = await self._release(keys=[self.keys.lease(lease.thread)], args=[lease.value])
        return bool(ok == 1)

    async def expires_in(self, thread: Thread) -> float | None:
        """Seconds until the thread's lease expires; ``None`` if nobody holds it."""
        async with translated("lease ttl"):
            ms = await self.redis.pttl(self.keys.lease(thread))
        return int(ms) / 1000 if int(ms) > 0 else None

    async def holder(self, thread: Thread) -> str | None:
        async with translated("lease holder"):
            value = await self.redis.get(self.keys.lease(thread))
        return str(value) if value is not None else None


class LeaseKeeper:
    """Renews a held lease every ``LEASE_RENEW_S`` until stopped; ``lost`` is set when a
    renewal finds the lease gone or taken (the job must stop writing).

    Stopping never cancels a renewal in flight (redis-py does not survive being
    cancelled mid-command on Python 3.11): it asks the loop to end and waits for it,
    which takes at most one command's socket timeout.
    """

    def __init__(self, leases: Leases, lease: Lease, *, every_s: float = LEASE_RENEW_S) -> None:
        self.leases = leases
        self.lease = lease
        self.every_s = every_s
        self.lost = asyncio.Event()
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> LeaseKeeper:
        self._task = asyncio.create_task(self._run(), name=f"lease {self.lease.thread}")
        return self

    async def __aexit__(self, *_: object) -> None:
        self._stopping.set()
        if self._task is not None:
            await self._task
        with contextlib.suppress(StoreError):
            await self.leases.release(self.lease)

    async def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                async with asyncio.timeout(self.every_s):
                    await self._stopping.wait()
                return
            except TimeoutError:
                pass
            try:
                still = await self.leases.renew(self.lease)
            except StoreError:
                log.warning("lease renewal failed for %s", self.lease.thread, exc_info=True)
                continue  # the lease lives 3 renewals; a later one may still succeed
            if not still:
                self.lost.set()
                return

"""The per-thread lease: who runs the thread's job right now.

``SET NX PX`` with a random owner and a fencing token from an ``INCR`` in the same
script; the value is ``owner:fence``. Renewing and releasing compare the whole value,
so only the holder can extend or drop it. A running job's lease lives 15 s and is
renewed every 5 s: a crashed process's job is taken over within 15 s. A job awaiting
approval holds no lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from dataclasses import dataclass

import redis.asyncio as aioredis

from bot.errors import StoreError
from bot.store.connection import translated
from bot.store.keys import LEASE_RENEW_S, LEASE_TTL_MS, Keys, Thread

log = logging.getLogger(__name__)

_ACQUIRE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return false end
local fence = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. fence, 'PX', ARGV[2])
return fence
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


class Leases:
    def __init__(self, redis: aioredis.Redis, keys: Keys, *, ttl_ms: int = LEASE_TTL_MS) -> None:
        self._redis = redis
        self._keys = keys
        self._ttl_ms = ttl_ms
        self._acquire = redis.register_script(_ACQUIRE)
        self._renew = redis.register_script(_RENEW)
        self._release = redis.register_script(_RELEASE)

    async def acquire(self, thread: Thread, owner: str | None = None) -> Lease | None:
        """The lease with a new, higher fencing token, or ``None`` if someone holds it."""
        owner = owner or new_owner()
        async with translated("lease acquire"):
            fence = await self._acquire(
                keys=[self._keys.lease(thread), self._keys.fence(thread)],
                args=[owner, self._ttl_ms],
            )
        return Lease(thread, owner, int(fence)) if fence is not None else None

    async def renew(self, lease: Lease) -> bool:
        async with translated("lease renew"):
            ok = await self._renew(
                keys=[self._keys.lease(lease.thread)], args=[lease.value, self._ttl_ms]
            )
        return bool(ok == 1)

    async def release(self, lease: Lease) -> bool:
        async with translated("lease release"):
            ok = await self._release(keys=[self._keys.lease(lease.thread)], args=[lease.value])
        return bool(ok == 1)

    async def expires_in(self, thread: Thread) -> float | None:
        """Seconds until the thread's lease expires; ``None`` if nobody holds it."""
        async with translated("lease ttl"):
            ms = await self._redis.pttl(self._keys.lease(thread))
        return int(ms) / 1000 if int(ms) > 0 else None

    async def holder(self, thread: Thread) -> str | None:
        async with translated("lease holder"):
            value = await self._redis.get(self._keys.lease(thread))
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

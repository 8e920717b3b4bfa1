"""Connecting to Redis, and the one place its errors become ``StoreError``.

Every command has a bounded socket timeout, so an unreachable or stuck Redis raises
``StoreUnavailable`` within a known time instead of hanging (the Slack layer then
answers 5xx and Slack retries). Blocking reads are kept well below that timeout.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.maint_notifications import MaintNotificationsConfig

from bot.errors import StoreError

DEFAULT_SOCKET_TIMEOUT_S = 2.0
DEFAULT_CONNECT_TIMEOUT_S = 2.0


class StoreUnavailable(StoreError):
    """Redis could not be reached or did not answer in time."""


class StoreConflict(StoreError):
    """A write was refused: a stale fencing token or a transition not allowed."""


def connect(
    url: str,
    *,
    socket_timeout_s: float = DEFAULT_SOCKET_TIMEOUT_S,
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
    max_connections: int = 64,
) -> aioredis.Redis:
    """A client with bounded timeouts and no automatic retries (callers decide).

    The pool blocks (up to ``socket_timeout_s``) when all ``max_connections`` are busy, so
    a burst queues for a connection instead of failing at once."""
    pool = aioredis.BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=socket_timeout_s,
        decode_responses=True,
        socket_timeout=socket_timeout_s,
        socket_connect_timeout=connect_timeout_s,
        retry_on_timeout=False,
        retry=None,
        health_check_interval=0,
        # redis-py 8 with RESP3 enables maintenance notifications by default, and the
        # pool then skips its check for connections the server closed: after a Redis
        # restart it hands out dead sockets ("Connection closed by server").
        maint_notifications_config=MaintNotificationsConfig(enabled=False),
    )
    return aioredis.Redis.from_pool(pool)


@asynccontextmanager
async def translated(what: str) -> AsyncIterator[None]:
    """Turn redis-py's errors into ours, naming the operation."""
    try:
        yield
    except (RedisConnectionError, RedisTimeoutError, OSError, TimeoutError) as exc:
        raise StoreUnavailable(f"redis unavailable during {what}: {exc}") from exc
    except ResponseError as exc:
        raise StoreError(f"redis refused {what}: {exc}") from exc
    except RedisError as exc:
        raise StoreError(f"redis error during {what}: {exc}") from exc


@dataclass(frozen=True, slots=True)
class Durability:
    appendonly: bool
    appendfsync: str | None

    @property
    def every_write(self) -> bool:
        """Each acknowledged write survives a crash of Redis and its machine."""
        return self.appendonly and self.appendfsync == "always"

    def describe(self) -> str:
        if not self.appendonly:
            return "AOF off: a Redis restart loses everything since the last RDB snapshot"
        if self.appendfsync == "always":
            return "AOF appendfsync always: every acknowledged write survives a crash"
        if self.appendfsync == "everysec":
            return "AOF appendfsync everysec: a crash of the machine may lose about 1 s of writes"
        return f"AOF appendfsync {self.appendfsync}: the OS decides when writes reach disk"


async def durability(redis: aioredis.Redis) -> Durability | None:
    """The server's persistence settings, or ``None`` if CONFIG is not allowed."""
    try:
        async with translated("CONFIG GET"):
            aof = await redis.config_get("appendonly")
            fsync = await redis.config_get("appendfsync")
    except StoreError:
        return None
    return Durability(
        appendonly=str(aof.get("appendonly", "no")).lower() == "yes",
        appendfsync=fsync.get("appendfsync"),
    )

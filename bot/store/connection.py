"""Connecting to Redis by topology, and the one place its errors become ``StoreError``.

Three topologies (``OPSLOOP_REDIS_MODE``), each with redis-py's own client: standalone
(``Redis`` on a blocking pool), Redis Cluster (``RedisCluster``, ``REDIS_URL`` any seed
node: it discovers the rest and follows MOVED/ASK redirections) and Sentinel (the
``Redis`` that ``Sentinel.master_for`` gives, which asks the sentinels where the master is
on every new connection). The URL carries TLS (``rediss://``), the user and the password
in every mode; in sentinel mode its host is not used (the sentinels name the master), and
the sentinels themselves are reached with the URL's TLS setting and no password.

Every command has a bounded socket timeout, so an unreachable or stuck Redis raises
``StoreUnavailable`` within a known time instead of hanging (the Slack layer then
answers 5xx and Slack retries). Blocking reads are kept well below that timeout. No
client retries a command on its own (a retried write whose first attempt was applied
would be applied twice): the cluster client is built with zero retries, so a node that
fails raises at once and the client re-reads the cluster's layout before the next
command; redirections (MOVED, ASK, TRYAGAIN), which mean the command did not run, are
still followed. Retrying across a failover is the callers' decision.

The rest of the store is typed with ``redis.asyncio.Redis``. ``RedisCluster`` is not a
subclass but answers the same commands, scripts and pipelines the store uses (each
script's keys in one slot; a ``transaction=True`` pipeline's keys in one slot, which
redis-py 8 runs as MULTI/EXEC on that slot's node); ``connect`` returns it cast to
``Redis`` (one cast, here), and the few places that differ ask ``is_cluster`` or use
``subscriber`` (pub/sub) and ``durability`` (every node).

Three things of redis-py 8.1's async cluster client are worked around here, each proven by
``tests/store/test_on_cluster.py``: its pool fails a burst at once when a node's
connections are busy (``_Cluster`` bounds the commands in flight, so a burst queues as on
the standalone pool); its transaction pipeline finds slots and re-reads the layout on an
event loop of its own, which breaks the MULTI after a failover and any MULTI holding
XREADGROUP (``_Transaction`` and ``_StreamKeysParser``); its pub/sub fails on a client
that has not read the layout yet (``subscriber``).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal, Protocol, cast
from urllib.parse import urlsplit

import redis.asyncio as aioredis
from redis._parsers.commands import AsyncCommandsParser
from redis.asyncio.client import PubSub
from redis.asyncio.cluster import (
    AbstractStrategy,
    ClusterPipeline,
    ClusterPubSub,
    RedisCluster,
    TransactionStrategy,
)
from redis.asyncio.connection import SSLConnection, parse_url
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool
from redis.backoff import NoBackoff
from redis.exceptions import (
    ClusterDownError,
    ClusterError,
    CrossSlotTransactionError,
    ReadOnlyError,
    RedisClusterException,
    RedisError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.maint_notifications import MaintNotificationsConfig

from bot.errors import StoreError

DEFAULT_SOCKET_TIMEOUT_S = 2.0
DEFAULT_CONNECT_TIMEOUT_S = 2.0
DEFAULT_SENTINEL_PORT = 26379

Mode = Literal["standalone", "cluster", "sentinel"]
MODES: tuple[Mode, ...] = ("standalone", "cluster", "sentinel")


class StoreUnavailable(StoreError):
    """Redis could not be reached or did not answer in time."""


class StoreConflict(StoreError):
    """A write was refused: a stale fencing token or a transition not allowed."""


def parse_sentinels(text: str | Sequence[str]) -> list[tuple[str, int]]:
    """``host:port,host:port`` (or a list of ``host:port``) as addresses; a missing port is
    26379. ``ValueError`` names the entry that is not ``host:port``."""
    entries = text.split(",") if isinstance(text, str) else list(text)
    out: list[tuple[str, int]] = []
    for raw in entries:
        entry = raw.strip()
        if not entry:
            continue
        host, sep, port = entry.rpartition(":")
        if not sep:
            host, port = entry, str(DEFAULT_SENTINEL_PORT)
        host = host.strip("[]")  # [::1]:26379
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{entry!r} is not host:port")
        out.append((host, int(port)))
    return out


def _no_retries() -> Retry:
    return Retry(NoBackoff(), 0)


class _StreamKeysParser(AsyncCommandsParser):
    """Finds the keys of ``XREAD``/``XREADGROUP`` (the streams after ``STREAMS``) itself.

    redis-py asks the server (``COMMAND GETKEYS``, one more round trip) for commands
    whose keys move; inside a ``transaction=True`` cluster pipeline it does so from a
    thread with an event loop of its own, on a connection of the caller's loop, which
    fails ("attached to a different loop"): the inject reader's MULTI could not run."""

    async def _get_moveable_keys(self, *args: Any) -> Any:
        name = reply_text(args[0]).upper() if args else ""
        if name in ("XREAD", "XREADGROUP"):
            words = [reply_text(a).upper() for a in args]
            if "STREAMS" in words:
                rest = args[words.index("STREAMS") + 1 :]
                return list(rest[: len(rest) // 2])
        return await super()._get_moveable_keys(*args)


def reply_text(value: object) -> str:
    """A value of a Redis reply as text: a client built by ``connect`` decodes replies,
    a raw one (tests, tools) gives bytes."""
    return value.decode() if isinstance(value, bytes) else str(value)


def hash_reply(flat: Sequence[object]) -> dict[str, str]:
    """A hash as a script returns it (``HGETALL``'s flat field/value list), as text."""
    return {reply_text(k): reply_text(v) for k, v in zip(flat[::2], flat[1::2], strict=True)}


class _Cluster(RedisCluster):
    """``RedisCluster`` that queues a burst instead of failing it: at most ``slots``
    commands in flight (each node's pool holds twice that, room for pipelines and
    pub/sub), a command waiting for its turn at most ``wait_s``. redis-py's cluster pool
    raises ``MaxConnectionsError`` at once when a node's connections are all busy."""

    def bound(self, slots: int, wait_s: float) -> _Cluster:
        self._opsloop_slots = asyncio.Semaphore(slots)
        self._opsloop_wait_s = wait_s
        return self

    def pipeline(self, transaction: Any | None = None, shard_hint: Any | None = None) -> Any:
        if transaction:
            return _Transaction(self)
        return super().pipeline(transaction, shard_hint)

    async def relayout(self) -> None:
        """Re-read the cluster's layout now, on this loop, if a failure asked for it
        (best effort: if the cluster does not answer, the pipeline's own command fails)."""
        if self._initialize:
            try:
                await self.initialize()
            except (RedisError, OSError):
                pass

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        slots: asyncio.Semaphore = self._opsloop_slots
        try:
            async with asyncio.timeout(self._opsloop_wait_s):
                await slots.acquire()
        except TimeoutError:
            raise RedisConnectionError("every connection to the cluster stayed busy") from None
        try:
            return await super().execute_command(*args, **kwargs)
        finally:
            slots.release()


class _Queued(ClusterPipeline):
    """redis-py's transaction pipeline, whose commands are only recorded as they are
    queued (their slots are found by ``_Transaction.execute``, on the caller's loop)."""

    __slots__ = ("captured",)
    captured: list[tuple[tuple[Any, ...], dict[str, Any]]]

    def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        self.captured.append((args, kwargs))
        return self


class _Transaction:
    """A ``transaction=True`` pipeline on a cluster: commands are recorded, then queued on
    redis-py's own transaction pipeline at ``execute``, once the cluster's layout has been
    read on the caller's loop. redis-py 8.1 finds each queued command's slot from a new
    thread running a loop of its own (``TransactionStrategy.execute_command``): ~0.4 ms of
    CPU per command with the event loop blocked meanwhile (a MULTI of four cost ~2 ms
    against 0.37 ms for the same commands unpipelined), and, when a failure asked for
    it, the layout re-read there on connections of the caller's loop ("attached to a
    different loop": after a failover the first MULTI failed instead of running). So
    each command's slot is found here, on the caller's loop, and the command queued
    as redis-py's strategy would queue it; the MULTI…EXEC itself is redis-py's."""

    def __init__(self, cluster: _Cluster) -> None:
        self._cluster = cluster
        self._calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Any:
        def record(*args: Any, **kwargs: Any) -> _Transaction:
            self._calls.append((name, args, kwargs))
            return self

        return record

    async def __aenter__(self) -> _Transaction:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._calls.clear()

    def __len__(self) -> int:
        return len(self._calls)

    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        cluster = self._cluster
        await cluster.relayout()
        pipe = _Queued(cluster, transaction=True)  # type: ignore[abstract]  # untyped
        pipe.captured = []
        for name, args, kwargs in self._calls:
            getattr(pipe, name)(*args, **kwargs)
        self._calls.clear()
        strategy = pipe._execution_strategy
        assert isinstance(strategy, TransactionStrategy)
        try:
            for args, kwargs in pipe.captured:
                if args[0] not in TransactionStrategy.NO_SLOTS_COMMANDS:
                    strategy._pipeline_slots.add(await cluster._determine_slot(*args))
                AbstractStrategy.execute_command(strategy, *args, **kwargs)
            if len(strategy._pipeline_slots) > 1:
                raise CrossSlotTransactionError("a transaction's keys must share one slot")
            return list(await ClusterPipeline.execute(pipe, raise_on_error=raise_on_error))
        except (RedisConnectionError, RedisTimeoutError, OSError, *_FAILING_OVER):
            # As redis-py does after a failed command: the next one re-reads the layout
            # first (by then a replica may have taken over), on the caller's loop.
            cluster._initialize = True
            raise


class _SentinelMaster(aioredis.Redis):
    """The master's client; closing it also closes its clients of the sentinels."""

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        try:
            await super().aclose(close_connection_pool)
        finally:
            manager = getattr(self.connection_pool, "sentinel_manager", None)
            for sentinel in getattr(manager, "sentinels", ()):
                await sentinel.aclose()


class _BlockingSentinelPool(SentinelConnectionPool, aioredis.BlockingConnectionPool):
    """The sentinel-managed pool, blocking (up to its ``timeout``) when every connection
    is busy, like the standalone pool, instead of failing at once."""


class RedisSettings(Protocol):
    """The settings ``RedisTarget.of`` reads (``bot.settings.BotSettings`` has them; the
    store does not import the settings)."""

    @property
    def redis_url(self) -> str | None: ...
    @property
    def redis_mode(self) -> Mode: ...
    @property
    def redis_sentinels(self) -> str: ...
    @property
    def redis_sentinel_master(self) -> str | None: ...


@dataclass(frozen=True, slots=True)
class RedisTarget:
    """Where Redis is: a URL and its topology (``connect``'s arguments, carried as one)."""

    url: str
    mode: Mode = "standalone"
    sentinels: str = ""
    master: str | None = None

    @classmethod
    def of(cls, settings: RedisSettings) -> RedisTarget:
        return cls(
            url=settings.redis_url or "",
            mode=settings.redis_mode,
            sentinels=settings.redis_sentinels,
            master=settings.redis_sentinel_master,
        )

    def where(self) -> str:
        """What to name in messages: the sentinels and master, or the URL's address
        (never its password)."""
        if self.mode == "sentinel":
            return f"master {self.master} via sentinels {self.sentinels}"
        parts = urlsplit(self.url)
        if parts.scheme == "unix":
            return parts.path
        return f"{parts.hostname or 'localhost'}:{parts.port or 6379}"


def connect(
    url: str | RedisTarget,
    *,
    mode: Mode = "standalone",
    sentinels: str | Sequence[str] = (),
    master: str | None = None,
    socket_timeout_s: float = DEFAULT_SOCKET_TIMEOUT_S,
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
    max_connections: int = 64,
) -> aioredis.Redis:
    """A client for the topology with bounded timeouts and no automatic retries
    (callers decide): ``url`` a URL or a ``RedisTarget`` (which then gives the rest);
    ``mode`` ``standalone`` or ``cluster`` (``url`` any seed node) or
    ``sentinel`` (``sentinels`` ``host:port,…``, ``master`` the monitored name; ``url``
    gives TLS, user, password and database).

    The pool blocks (up to ``socket_timeout_s``) when all ``max_connections`` are busy, so
    a burst queues for a connection instead of failing at once (on a cluster the limit is
    per node and a burst past it fails as ``StoreUnavailable``: redis-py's cluster pool
    does not queue)."""
    if isinstance(url, RedisTarget):
        mode, sentinels, master, url = url.mode, url.sentinels, url.master, url.url
    common: dict[str, Any] = {
        "decode_responses": True,
        "socket_timeout": socket_timeout_s,
        "socket_connect_timeout": connect_timeout_s,
        "health_check_interval": 0,
        # redis-py 8 with RESP3 enables maintenance notifications by default, and the
        # pool then skips its check for connections the server closed: after a Redis
        # restart it hands out dead sockets ("Connection closed by server").
        "maint_notifications_config": MaintNotificationsConfig(enabled=False),
    }
    if mode == "cluster":
        cluster = cast(
            _Cluster,
            _Cluster.from_url(
                url, max_connections=2 * max_connections, retry=_no_retries(), **common
            ),
        ).bound(max_connections, socket_timeout_s)
        cluster.commands_parser = _StreamKeysParser()
        # The store uses only what both clients answer alike (see the module docstring).
        return cast(aioredis.Redis, cluster)
    if mode == "sentinel":
        return _sentinel_master(url, sentinels, master, max_connections, common)
    if mode != "standalone":
        raise StoreError(f"unknown Redis mode {mode!r} (one of {', '.join(MODES)})")
    pool = aioredis.BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=socket_timeout_s,
        retry_on_timeout=False,
        retry=None,
        **common,
    )
    return aioredis.Redis.from_pool(pool)


def _sentinel_master(
    url: str,
    sentinels: str | Sequence[str],
    master: str | None,
    max_connections: int,
    common: dict[str, Any],
) -> aioredis.Redis:
    addresses = parse_sentinels(sentinels)
    if not addresses or not master:
        raise StoreError("sentinel mode needs the sentinels' addresses and the master's name")
    options = parse_url(url) if url else {}
    tls = options.pop("connection_class", None) is SSLConnection
    options.pop("host", None)
    options.pop("port", None)
    socket = {k: v for k, v in common.items() if k.startswith("socket_")}
    sentinel = Sentinel(
        addresses,
        sentinel_kwargs={**socket, "ssl": tls, "retry": _no_retries()},
        **common,
    )
    client = sentinel.master_for(
        master,
        redis_class=_SentinelMaster,
        connection_pool_class=_BlockingSentinelPool,
        max_connections=max_connections,
        timeout=common["socket_timeout"],
        ssl=tls,
        retry=None,
        retry_on_timeout=False,
        **options,
    )
    return cast(aioredis.Redis, client)


async def subscriber(redis: aioredis.Redis) -> PubSub:
    """A pub/sub connection (subscribe confirmations ignored). On a cluster, the layout
    is (re)read first: redis-py picks the node for a channel from it and fails on an
    empty one (a client that has sent nothing yet), and a listener reconnecting after a
    failover should find the node that serves now. Sharded channels (SSUBSCRIBE) are
    served by the node of their slot: a cluster's pub/sub holds one connection per node
    its channels live on (read them with ``sharded_message``)."""
    if isinstance(redis, _Cluster):
        async with translated("subscribe"):
            if redis._initialize:
                await redis.initialize()
            else:
                await redis.nodes_manager.initialize()
    return redis.pubsub(ignore_subscribe_messages=True)


SHARDED_POLL_S = 0.2
"""How long ``sharded_message`` waits on each node's connection of a cluster."""


async def sharded_message(pubsub: PubSub, wait_s: float = 1.0) -> dict[str, Any] | None:
    """The next message of a sharded subscription (``ssubscribe``), or None after about
    ``wait_s`` (a cluster: ``SHARDED_POLL_S`` per node it listens on). Subscription
    confirmations are not messages."""
    if isinstance(pubsub, ClusterPubSub):
        message = await pubsub.get_sharded_message(
            ignore_subscribe_messages=True, timeout=SHARDED_POLL_S
        )
    else:
        message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=wait_s)
    if message is None or message.get("type") not in ("smessage", "message"):
        return None
    return message


def is_cluster(redis: aioredis.Redis) -> bool:
    """Whether ``redis`` is a Redis Cluster client (see the module docstring)."""
    return isinstance(redis, RedisCluster)


# What a cluster or a demoted master answers while a failover is under way (CLUSTERDOWN,
# MASTERDOWN, TRYAGAIN past redis-py's redirections, READONLY, a slot no node serves).
_FAILING_OVER = (
    ClusterDownError,
    TryAgainError,
    ReadOnlyError,
    ClusterError,
    RedisClusterException,
)


@asynccontextmanager
async def translated(what: str) -> AsyncIterator[None]:
    """Turn redis-py's errors into ours, naming the operation."""
    try:
        yield
    except (RedisConnectionError, RedisTimeoutError, OSError, TimeoutError) as exc:
        raise StoreUnavailable(f"redis unavailable during {what}: {exc}") from exc
    except _FAILING_OVER as exc:  # a failover under way: the same command may work soon
        raise StoreUnavailable(f"redis unavailable during {what}: {exc}") from exc
    except ResponseError as exc:
        raise StoreError(f"redis refused {what}: {exc}") from exc
    except RedisError as exc:
        raise StoreError(f"redis error during {what}: {exc}") from exc
    except AttributeError as exc:
        if not _raised_in_redis_py(exc):
            raise  # ours: a bug, not Redis
        # redis-py 8.1 on a connection a failover closed under it ("'NoneType' object has
        # no attribute 'writelines'"): the connection is gone, as in a ConnectionError
        raise StoreUnavailable(f"redis unavailable during {what}: {exc!r}") from exc


def _raised_in_redis_py(exc: BaseException) -> bool:
    """Whether ``exc`` was raised inside the redis package (its innermost frame)."""
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    return f"{os.sep}redis{os.sep}" in tb.tb_frame.f_code.co_filename


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
    """The server's persistence settings (on a cluster: the weakest node's), or ``None``
    if CONFIG is not allowed."""
    if isinstance(redis, RedisCluster):
        found = []
        for node in redis.get_nodes():
            found.append(await _durability_of(redis, target_nodes=node))
        known = [d for d in found if d is not None]
        if not known:
            return None
        return min(known, key=lambda d: (d.every_write, d.appendonly))
    return await _durability_of(redis)


async def _durability_of(redis: aioredis.Redis | RedisCluster, **route: Any) -> Durability | None:
    try:
        async with translated("CONFIG GET"):
            aof = await redis.config_get("appendonly", **route)
            fsync = await redis.config_get("appendfsync", **route)
    except StoreError:
        return None
    return Durability(
        appendonly=str(aof.get("appendonly", "no")).lower() == "yes",
        appendfsync=fsync.get("appendfsync"),
    )

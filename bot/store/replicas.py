"""Acknowledged means replicated, when asked: ``OPSLOOP_REDIS_MIN_REPLICAS``.

Redis replicates asynchronously: a master that dies right after a write may take it
with it, and a replica promoted in its place never saw it. The writes an acknowledgement
rests on — the receipt of a mention or reply (before the HTTP 200 / Socket Mode ack), a
decision (before its card is edited), the ledger's ``started`` and ``done`` — are
therefore sent with ``WAIT N timeout`` right behind them on the same connection (one
pipeline, one round trip): if fewer than N replicas confirm within the timeout, the write
raises ``NotReplicated`` (a ``StoreUnavailable``), so the acknowledgement is refused as
when Redis is down (Slack gets a 503 and retries; a click gets "try again"; a tool is not
run) instead of being given on a write a failover may lose.

``WAIT`` counts the replicas that have the connection's writes up to its latest one. A
repeated delivery that finds its fact already written writes nothing of its own, so its
WAIT would prove nothing about the first delivery's write: the scripts that can answer
"already done" rewrite a field they read (``touch``, only when replication is asked
for), which puts the earlier write behind this connection's latest one.

On a Redis Cluster the script and the WAIT cannot share a pipeline (``_cluster_wait``).

``ReplicatedStore.acknowledged`` runs such a write (and retries it). A refusal is not
always "nothing happened": the write is on the master all the same. ``replicated_reply``
hands the caller the script's reply with the refusal, for the writers that must act on
what they wrote (the ledger withdraws a claim no replica confirmed; a decision that did
decide the card says so). ``replicas_caught_up`` (ROLE: no write, no
WAIT) tells a writer waiting to try again when enough replicas have the master's stream.

With N = 0 (the default) nothing changes: no WAIT, no touch. Replicas confirm receipt in
memory, not on their disk (see the durability table in docs/operations.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.commands.core import AsyncScript
from redis.exceptions import ConnectionError as RedisConnectionError

from bot.store.connection import StoreUnavailable, translated
from bot.store.failover import retried
from bot.store.redis_store import RedisStore

DEFAULT_WAIT_MS = 1000  # well inside Slack's 3 s and the client's 2 s socket timeout
TOUCH_TTL_MS = 10_000


class NotReplicated(StoreUnavailable):
    """Fewer replicas than asked confirmed a write in time: it was not acknowledged."""


@dataclass(frozen=True, slots=True)
class Replication:
    """How many replicas must confirm an acknowledged write, and how long to wait."""

    min_replicas: int = 0
    timeout_ms: int = DEFAULT_WAIT_MS

    def __post_init__(self) -> None:
        if self.min_replicas < 0 or self.timeout_ms <= 0:
            raise ValueError("min_replicas must be >= 0 and timeout_ms > 0")

    @property
    def asked(self) -> bool:
        return self.min_replicas > 0

    @property
    def touch(self) -> str:
        """The scripts' ARGV flag: rewrite what a repeated delivery found ('1'/'0')."""
        return "1" if self.asked else "0"


NONE = Replication()


@dataclass(eq=False, kw_only=True)
class ReplicatedStore(RedisStore):
    """A store that writes what an acknowledgement rests on (``acknowledged``)."""

    replication: Replication = NONE

    async def acknowledged(
        self, what: str, script: AsyncScript, *, keys: Sequence[str], args: Sequence[Any]
    ) -> Any:
        """Run ``script`` as an acknowledged write: ``WAIT`` behind it when replication
        is asked for, and the whole retried across a failover (``bot.store.failover``)
        while Redis is unavailable or too few replicas confirm; the script's reply. Only
        for scripts a second run finds done (a receipt by its ts, an entry written
        twice)."""

        async def attempt() -> Any:
            reply, refused = await replicated_reply(
                self.redis, self.replication, what, script, keys=keys, args=args
            )
            if refused is not None:
                raise refused
            return reply

        return await retried(what, attempt)


async def replicated_reply(
    redis: aioredis.Redis,
    replication: Replication,
    what: str,
    script: AsyncScript,
    *,
    keys: Sequence[str],
    args: Sequence[Any],
) -> tuple[Any, NotReplicated | None]:
    """Run ``script`` and, when replication is asked for, ``WAIT`` behind it on the same
    connection; the script's reply with the refusal (``NotReplicated``, else ``None``):
    the script ran on the master either way, and some writers must act on what it wrote
    (``bot.store.ledger`` withdraws its claim; ``bot.store.approvals`` reports a decision
    it made). Transport failures raise."""
    if not replication.asked:
        async with translated(what):
            return await script(keys=list(keys), args=list(args)), None
    if isinstance(redis, RedisCluster):
        async with translated(what):
            reply = await script(keys=list(keys), args=list(args))
            confirmed = await _cluster_wait(redis, keys[0], replication)
        return reply, refusal(replication, what, confirmed)
    async with translated(what):
        async with redis.pipeline(transaction=False) as pipe:
            await script(keys=list(keys), args=list(args), client=pipe)
            pipe.execute_command("WAIT", replication.min_replicas, replication.timeout_ms)
            reply, confirmed = await pipe.execute()
    return reply, refusal(replication, what, confirmed)


async def master_offset(redis: aioredis.Redis, key: str) -> int:
    """The replication offset of the master serving ``key`` now (ROLE: no write)."""
    role = await _role(redis, key)
    return int(role[1])


async def replicas_caught_up(
    redis: aioredis.Redis, replication: Replication, key: str, *, since: int
) -> bool:
    """Whether at least ``min_replicas`` replicas of the master serving ``key`` are online
    and have confirmed its stream up to offset ``since`` (ROLE: no write, no WAIT). A
    frozen or missing replica says no; one that reattached says yes once it has synced.
    Replicas confirm about once a second, so this lags the truth by up to that."""
    role = await _role(redis, key)
    acked = [int(r[2]) for r in role[2] if len(r) >= 3]
    return sum(off >= since for off in acked) >= replication.min_replicas


async def _role(redis: aioredis.Redis, key: str) -> list[Any]:
    """ROLE of the master serving ``key`` (on a cluster: its slot's master)."""
    async with translated("replicas"):
        if isinstance(redis, RedisCluster):
            node = redis.get_node_from_key(key, replica=False)
            if node is None:
                raise RedisConnectionError(f"no master serves the slot of {key!r} now")
            role = await redis.execute_command("ROLE", target_nodes=node)
        else:
            role = await redis.role()
    if not isinstance(role, list) or not role or str(role[0]) != "master":
        raise StoreUnavailable(f"replicas: the server for {key!r} is not a master now")
    return role


async def _cluster_wait(redis: RedisCluster, key: str, replication: Replication) -> object:
    """``WAIT`` for a write to ``key``'s slot on a Redis Cluster.

    redis-py's cluster client sends ``WAIT`` to every master on connections of its
    choosing, and refuses scripts in pipelines, so the script goes through the client
    (which follows the slot to its master) and then, on one connection to that master,
    a small write in the same slot (``<key>:replicated``, kept 10 s) and ``WAIT``: the
    replication stream is in order, so replicas that confirm the later write have the
    script's too."""
    node = redis.get_node_from_key(key, replica=False)
    if node is None:
        raise RedisConnectionError(f"no master serves the slot of {key!r} now")
    connection = node.acquire_connection()
    try:
        await connection.send_packed_command(
            connection.pack_commands(
                [
                    ("SET", f"{key}:replicated", "1", "PX", TOUCH_TTL_MS),
                    ("WAIT", replication.min_replicas, replication.timeout_ms),
                ]
            )
        )
        await connection.read_response()
        return await connection.read_response()
    except BaseException:
        await connection.disconnect()  # a reply may still be in flight on it
        raise
    finally:
        node.release(connection)


def check(replication: Replication, what: str, confirmed: object) -> None:
    """Raise ``NotReplicated`` unless ``confirmed`` (WAIT's reply) is enough."""
    refused = refusal(replication, what, confirmed)
    if refused is not None:
        raise refused


def refusal(replication: Replication, what: str, confirmed: object) -> NotReplicated | None:
    """``NotReplicated`` if ``confirmed`` (WAIT's reply) is not enough, else ``None``."""
    got = int(confirmed)  # type: ignore[call-overload]
    if got >= replication.min_replicas:
        return None
    return NotReplicated(
        f"{what}: {got} of {replication.min_replicas} replicas confirmed the write "
        f"within {replication.timeout_ms} ms (OPSLOOP_REDIS_MIN_REPLICAS); not acknowledged"
    )

"""Reading the sharded workspace-wide indexes, and moving the unbucketed ones.

Each index is ``INDEX_BUCKETS`` sorted sets, one per hash tag (``bot.store.keys``). A
reader that wants the whole index reads every bucket in one pipeline (on a cluster
redis-py sends each node its buckets' commands; a node's share goes in one round trip)
and merges by score; a writer touches the one bucket of the thread.

Earlier versions kept each index in one key (``Keys.unbucketed``). ``move_unbucketed``
moves whatever such a key still holds into the buckets — the members read, then those
same members removed, so an entry an older process adds meanwhile is moved on a later
pass, never lost. The scanner calls it on every scan while a rolling upgrade may still
have older processes writing; once the keys are gone it costs one pipelined EXISTS.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any, cast

import redis.asyncio as aioredis

from bot.store.connection import translated
from bot.store.keys import BUCKETS, JOB_TTL_S, UNBUCKETED, Keys, bucket_of, job_bucket

log = logging.getLogger(__name__)

MOVE_BATCH = 500  # members moved per unbucketed key per pass

Scored = tuple[str, float]


async def read_buckets(
    redis: aioredis.Redis,
    what: str,
    key_of: Callable[[int], str],
    read: Callable[[Any, str], object],
) -> list[Any]:
    """``read(pipe, key)`` queued for every bucket's key in one pipeline; the replies
    in bucket order."""
    async with translated(what), redis.pipeline(transaction=False) as pipe:
        for bucket in BUCKETS:
            read(pipe, key_of(bucket))
        return list(await pipe.execute())


def merged(replies: Iterable[Sequence[Any]], limit: int, *, reverse: bool = False) -> list[Scored]:
    """The ``limit`` lowest-scored (``reverse``: highest) of buckets' ``WITHSCORES``
    replies, in score order."""
    pairs = ((str(member), float(score)) for reply in replies for member, score in reply)
    pick = heapq.nlargest if reverse else heapq.nsmallest
    return pick(limit, pairs, key=lambda pair: pair[1])


async def due_in_buckets(
    redis: aioredis.Redis, what: str, key_of: Callable[[int], str], now: float, limit: int
) -> list[str]:
    """Members scored at most ``now`` across the buckets, the earliest ``limit``."""

    def read(pipe: Any, key: str) -> None:
        pipe.zrangebyscore(key, "-inf", now, start=0, num=limit, withscores=True)

    replies = await read_buckets(redis, what, key_of, read)
    return [member for member, _ in merged(replies, limit)]


async def count_buckets(redis: aioredis.Redis, what: str, key_of: Callable[[int], str]) -> int:
    """How many members all the buckets hold."""
    counts = await read_buckets(redis, what, key_of, lambda pipe, key: pipe.zcard(key))
    return sum(int(n) for n in counts)


def _job_of(member: str) -> int:
    return job_bucket(member.partition("|")[0])


# unbucketed index name → (its buckets' key, the bucket of a member)
def _targets(keys: Keys) -> dict[str, tuple[Callable[[int], str], Callable[[str], int]]]:
    return {
        "active": (keys.active_jobs, job_bucket),
        "recent": (keys.recent_jobs, job_bucket),
        "approvals": (keys.approval_expiries, _job_of),
        "approval-reminders": (keys.approval_reminders, _job_of),
        "card-edits": (keys.card_edits, _job_of),
        "audit-outbox": (keys.audit_pending, bucket_of),
    }


async def move_unbucketed(redis: aioredis.Redis, keys: Keys) -> int:
    """Move the members of the unbucketed index keys into their buckets (see the
    module docstring); how many were moved. A member that names no job is dropped."""
    targets = _targets(keys)
    async with translated("index move"), redis.pipeline(transaction=False) as pipe:
        for name in UNBUCKETED:
            pipe.exists(keys.unbucketed(name))
        present = [name for name, n in zip(UNBUCKETED, await pipe.execute(), strict=True) if n]
    moved = 0
    for name in present:
        old = keys.unbucketed(name)
        key_of, bucket = targets[name]
        async with translated("index move"):
            members = cast(
                list[tuple[str, float]], await redis.zrange(old, 0, MOVE_BATCH - 1, withscores=True)
            )
        by_bucket: dict[int, dict[str, float]] = {}
        for member, score in members:
            try:
                by_bucket.setdefault(bucket(str(member)), {})[str(member)] = float(score)
            except ValueError:
                log.warning("dropping %r from %s: it names no job", member, old)
        async with translated("index move"), redis.pipeline(transaction=False) as pipe:
            for b, entries in by_bucket.items():
                pipe.zadd(key_of(b), entries)
                if name == "recent":  # the index lives as long as the jobs it names
                    pipe.expire(key_of(b), JOB_TTL_S)
            pipe.zrem(old, *[str(m) for m, _ in members])
            await pipe.execute()
        moved += sum(len(entries) for entries in by_bucket.values())
        log.info("moved %d entries of %s into its buckets", len(members), old)
    return moved

"""The newest jobs, for App Home: one workspace-wide index and one per requester.

Two sorted sets (job id → when it was created; the workspace's sharded into buckets by
thread, ``bot.store.keys``, and read across them), written where a job is created
(``bot.turns.runner``: the ack path's receipt and a follow-up job) and trimmed to
``RECENT_JOBS_MAX`` (each bucket) in the same round trip, so a workspace with thousands
of jobs keeps a bounded index; each lives as long as the jobs it names (``JOB_TTL_S``, renewed with
every write). Like the other process-wide indexes they are hints: a reader looks the
jobs up and skips one that is gone. ``records`` reads many jobs in one round trip.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bot.store.buckets import merged, read_buckets
from bot.store.connection import translated
from bot.store.jobs import JobRecord
from bot.store.keys import JOB_TTL_S, RECENT_JOBS_MAX, job_bucket
from bot.store.redis_store import RedisStore


class RecentJobs(RedisStore):
    """Write and read the newest-jobs indexes."""

    async def add(self, job_id: str, *, requester: str, at: float) -> None:
        """Record a created job in the workspace's and its requester's index."""
        async with translated("recent jobs"):
            async with self.redis.pipeline(transaction=False) as pipe:
                everyone = self.keys.recent_jobs(job_bucket(job_id))
                for key in (everyone, self.keys.recent_jobs_of(requester)):
                    pipe.zadd(key, {job_id: at})
                    pipe.zremrangebyrank(key, 0, -(RECENT_JOBS_MAX + 1))
                    pipe.expire(key, JOB_TTL_S)
                await pipe.execute()

    async def newest(self, user: str | None = None, *, limit: int = RECENT_JOBS_MAX) -> list[str]:
        """The newest job ids (of ``user``, or of everyone), newest first."""
        limit = max(0, min(limit, RECENT_JOBS_MAX))
        if limit == 0:
            return []
        if user:
            async with translated("recent jobs"):
                ids = await self.redis.zrevrange(self.keys.recent_jobs_of(user), 0, limit - 1)
            return [str(i) for i in ids]

        def read(pipe: Any, key: str) -> None:
            pipe.zrevrange(key, 0, limit - 1, withscores=True)

        replies = await read_buckets(self.redis, "recent jobs", self.keys.recent_jobs, read)
        return [job_id for job_id, _ in merged(replies, limit, reverse=True)]

    async def records(self, job_ids: Sequence[str]) -> list[JobRecord]:
        """The records of the jobs that still exist, in the order given (one round trip)."""
        if not job_ids:
            return []
        async with translated("recent jobs"):
            async with self.redis.pipeline(transaction=False) as pipe:
                for job_id in job_ids:
                    pipe.hget(self.keys.job(job_id), "data")
                raws = await pipe.execute()
        out = []
        for raw in raws:
            if raw:
                try:
                    out.append(JobRecord.model_validate_json(raw))
                except ValueError:
                    continue  # a record of another schema: not ours to show
        return out

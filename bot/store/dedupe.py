"""Dropping Slack deliveries that were already seen.

Slack sends the same event again when an answer is late or fails (same ``event_id``
each time), and a message that @-mentions the bot arrives twice: as ``app_mention`` and
as ``message``, with different event ids but the same ``channel`` + ``ts``. Each seen id
is a key set with ``SET NX EX``: whoever sets it first owns the delivery, for at least
``EVENT_DEDUPE_TTL_S`` (Slack's retries end within minutes).

The keys are process-wide, not thread-tagged, so they are never touched by one script
together; ``first_delivery`` sends its two ``SET NX`` in one pipeline (one round trip,
and on Redis Cluster the client splits it by slot).

What happens after a delivery is claimed (persisting the job, answering Slack) is the
caller's: a process that crashes between the two has claimed a delivery it never
handled, and Slack's retry of it is then dropped as a duplicate.
"""

from __future__ import annotations

import redis.asyncio as aioredis

from bot.store.connection import translated
from bot.store.keys import EVENT_DEDUPE_TTL_S, Keys


class Dedupe:
    """``first_*`` answer True exactly once per id within the TTL, across processes."""

    def __init__(self, redis: aioredis.Redis, keys: Keys, *, ttl_s: int = EVENT_DEDUPE_TTL_S):
        self._redis = redis
        self._keys = keys
        self._ttl_s = ttl_s

    async def first_event(self, event_id: str) -> bool:
        """True the first time this Slack ``event_id`` is seen (False on Slack's retries)."""
        async with translated("event dedupe"):
            claimed = await self._redis.set(
                self._keys.event(event_id), "1", nx=True, ex=self._ttl_s
            )
        return bool(claimed)

    async def first_message(self, channel: str, ts: str) -> bool:
        """True the first time the message ``channel`` + ``ts`` is seen, whatever event
        carried it (``app_mention`` or ``message``)."""
        async with translated("message dedupe"):
            claimed = await self._redis.set(
                self._keys.message(channel, ts), "1", nx=True, ex=self._ttl_s
            )
        return bool(claimed)

    async def first_delivery(self, event_id: str, channel: str, ts: str) -> bool:
        """True only for the first delivery of a message: a new ``event_id`` carrying a
        ``channel`` + ``ts`` never seen before. One round trip.

        Both ids are recorded either way. A retry has a seen event id; the twin
        (``app_mention`` and ``message`` of one post) has a seen ``channel`` + ``ts``;
        either one makes it a duplicate.
        """
        async with translated("delivery dedupe"):
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.set(self._keys.event(event_id), f"{channel}:{ts}", nx=True, ex=self._ttl_s)
                pipe.set(self._keys.message(channel, ts), event_id, nx=True, ex=self._ttl_s)
                new_event, new_message = await pipe.execute()
        return bool(new_event) and bool(new_message)

"""Stop signals: a Stop pressed in any process reaches the process that runs the job.

``Jobs.request_stop`` sets the job's cancel flag (read at every checkpoint) and publishes
``<job id>|<who>`` on the sharded pub/sub channel of the job's bucket
(``Keys.cancel_channel``). ``listen_for_stops`` subscribes to every bucket's channel, on
whichever node serves it, and hands each signal to ``on_stop``; it reconnects after Redis
failures and runs until cancelled. A signal missed while disconnected is not lost: the
flag stops the run at its next checkpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import redis.asyncio as aioredis
from redis.asyncio.client import PubSub
from redis.exceptions import RedisError

from bot.errors import StoreError
from bot.store.connection import sharded_message, subscriber
from bot.store.keys import BUCKETS, Keys

log = logging.getLogger(__name__)

RETRY_S = 1.0  # between reconnections while Redis does not answer


async def listen_for_stops(
    redis: aioredis.Redis,
    keys: Keys,
    on_stop: Callable[[str, str], None],
    ready: asyncio.Event | None = None,
) -> None:
    """Call ``on_stop(job_id, by)`` for every Stop signal (see the module docstring);
    ``ready`` is set once subscribed."""
    channels = [keys.cancel_channel(bucket) for bucket in BUCKETS]
    while True:
        pubsub: PubSub | None = None
        try:
            pubsub = await subscriber(redis)
            await pubsub.ssubscribe(*channels)
            if ready is not None:
                ready.set()
            while True:
                message = await sharded_message(pubsub)
                if message is None:
                    continue
                job_id, _, by = str(message.get("data") or "").partition("|")
                if job_id and by:
                    on_stop(job_id, by)
        except (RedisError, OSError, StoreError):
            log.warning("stop signals: Redis unavailable, retrying", exc_info=True)
            await asyncio.sleep(RETRY_S)
        finally:
            if pubsub is not None:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()

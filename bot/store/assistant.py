"""An assistant-pane thread's context: which channel its user is looking at.

Slack says so with ``assistant_thread_started`` and ``assistant_thread_context_changed``
(``assistant_thread.context``: ``channel_id``, ``team_id``, ``enterprise_id``); it is
kept in a HASH under the thread's hash tag for as long as the thread's history
(``HISTORY_TTL_S``), so whichever process takes the user's next message in reads it.
``claim_title`` lets exactly one message set the thread's title.
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.store.connection import translated
from bot.store.keys import HISTORY_TTL_S, Thread
from bot.store.redis_store import RedisStore

CONTEXT_FIELDS = ("channel_id", "team_id", "enterprise_id")
MAX_FIELD = 64  # Slack ids are short; anything longer is not one
TITLED = "titled"


@dataclass(frozen=True, slots=True)
class PaneContext:
    """What the pane's user is looking at (any field may be unknown)."""

    channel_id: str | None = None
    team_id: str | None = None
    enterprise_id: str | None = None


class AssistantThreads(RedisStore):
    """The pane threads' saved context."""

    async def save(self, thread: Thread, context: PaneContext) -> None:
        fields = {
            name: value
            for name in CONTEXT_FIELDS
            if isinstance(value := getattr(context, name), str) and 0 < len(value) <= MAX_FIELD
        }
        key = self.keys.assistant_thread(thread)
        async with translated("assistant context"):
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.hdel(key, *CONTEXT_FIELDS)
                if fields:
                    pipe.hset(key, mapping={name: value for name, value in fields.items()})
                pipe.expire(key, HISTORY_TTL_S)
                await pipe.execute()

    async def find(self, thread: Thread) -> PaneContext | None:
        async with translated("assistant context"):
            raw = await self.redis.hmget(self.keys.assistant_thread(thread), list(CONTEXT_FIELDS))
        values = [str(v) if v else None for v in raw]
        if not any(values):
            return None
        return PaneContext(*values)

    async def claim_title(self, thread: Thread) -> bool:
        """Whether the caller is the first to title the thread (then it does)."""
        key = self.keys.assistant_thread(thread)
        async with translated("assistant title"):
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.hsetnx(key, TITLED, "1")
                pipe.expire(key, HISTORY_TTL_S)
                won, _ = await pipe.execute()
        return bool(won)

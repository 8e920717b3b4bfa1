"""A thread's conversation history in Redis: the core's ``Memory`` protocol.

The originals are an append-only LIST of message JSON; condensing never removes them.
The effective history is ``[summary] + originals[covered:]`` when a condensed view
exists (a small JSON STRING beside the list). The history is loaded once per process
(or handed over as read with the job's lease: ``preload``) and then kept in memory;
appends are buffered and made durable by ``flush`` (one round trip) or, on the hot
path, by the job session's checkpoint script together with the job's state (``drain``
hands the buffer over) or the inject stream's XACK (``InjectReader.ack``).

Who approved a call is the record of its result: a call's stored arguments keep what the
model wrote, and the result appended after the decision carries ``confirmed_by``. Both
on load and on append, the call a result answers is rewritten in the local copy to name
its real approver (``bot.agent.memory.record_approver``), so the model, condensing and
everything reading the history through here see who approved. The LIST itself stays
append-only: the rewrite is derived from it, the same way by every process.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import redis.asyncio as aioredis
from pydantic import TypeAdapter
from redis.asyncio.client import Pipeline

from bot.agent.memory import record_approver_of, record_approvers
from bot.agent.messages import AnyMessage, Message, UserMessage
from bot.store.connection import translated
from bot.store.keys import HISTORY_TTL_S, Keys, Thread

_MESSAGE: TypeAdapter[AnyMessage] = TypeAdapter(Message)


def dump_message(message: AnyMessage) -> str:
    return message.model_dump_json(exclude_none=True)


def load_message(raw: str) -> AnyMessage:
    return _MESSAGE.validate_json(raw)


class RedisHistory:
    def __init__(self, redis: aioredis.Redis, keys: Keys, thread: Thread) -> None:
        self._redis = redis
        self._keys = keys
        self._thread = thread
        self._originals: list[AnyMessage] = []
        self._effective: list[AnyMessage] = []
        self._covered = 0  # originals replaced by the summary
        self._pending: list[str] = []
        self._source_ids: set[str] = set()
        self._loaded = False
        self._preloaded: tuple[Sequence[str], str | None] | None = None

    @property
    def thread(self) -> Thread:
        return self._thread

    def preload(self, raw_list: Sequence[str], raw_view: str | None) -> None:
        """The history as someone else read it (the LIST and the view, as ``load`` reads
        them: ``Leases.acquire_job`` reads them with the lease); ``load`` reads nothing."""
        if not self._loaded:
            self._preloaded = (raw_list, raw_view)

    async def load(self) -> None:
        """Read the thread's history (one round trip); later calls use the local copy."""
        if self._loaded:
            return
        if self._preloaded is not None:
            raw_list, raw_view = self._preloaded
            self._preloaded = None
        else:
            key = self._keys.history(self._thread)
            async with translated("history load"):
                async with self._redis.pipeline(transaction=True) as pipe:
                    pipe.lrange(key, 0, -1)
                    pipe.get(self._keys.history_view(self._thread))
                    raw_list, raw_view = await pipe.execute()
        self._originals = [load_message(r) for r in raw_list]
        record_approvers(self._originals)
        for message in self._originals:
            self._note(message)
        self._effective = list(self._originals)
        if raw_view:
            view = json.loads(raw_view)
            self._covered = int(view["covered"])
            summary = load_message(view["summary"])
            self._effective = [summary, *self._originals[self._covered :]]
        self._loaded = True

    def _note(self, message: AnyMessage) -> None:
        if isinstance(message, UserMessage) and message.source_id:
            self._source_ids.add(message.source_id)

    # -- the Memory protocol ----------------------------------------------------

    async def history(self) -> Sequence[AnyMessage]:
        await self.load()
        return self._effective

    def append(self, message: AnyMessage) -> None:
        if not self._loaded:
            raise RuntimeError("RedisHistory.append before load(): call history() first")
        record_approver_of(message, self._originals, also=self._effective)
        self._originals.append(message)
        self._effective.append(message)
        self._note(message)
        self._pending.append(dump_message(message))

    async def flush(self) -> None:
        items = self.drain()
        if not items:
            return
        try:
            async with translated("history flush"):
                async with self._redis.pipeline(transaction=True) as pipe:
                    self.queue_append(pipe, items)
                    await pipe.execute()
        except BaseException:
            self.restore(items)
            raise

    def queue_append(self, pipe: Pipeline, items: Sequence[str]) -> None:
        """Queue on ``pipe`` what ``flush`` sends for drained ``items`` (RPUSH, EXPIRE)."""
        key = self._keys.history(self._thread)
        pipe.rpush(key, *items)
        pipe.expire(key, HISTORY_TTL_S)

    async def condense(self, upto: int, summary: str) -> None:
        await self.load()
        if not 0 < upto <= len(self._effective):
            raise ValueError(f"cannot condense {upto} of {len(self._effective)} messages")
        # With a view, effective[0] is the old summary and effective[1:] are
        # originals[covered:]; the new summary replaces both.
        covered = self._covered + upto - 1 if self._covered else upto
        message = UserMessage(content=summary, summary=True)
        view = json.dumps({"covered": covered, "summary": dump_message(message)})
        items = self.drain()
        key = self._keys.history(self._thread)
        view_key = self._keys.history_view(self._thread)
        try:
            async with translated("history condense"):
                async with self._redis.pipeline(transaction=True) as pipe:
                    if items:
                        pipe.rpush(key, *items)
                    pipe.set(view_key, view, ex=HISTORY_TTL_S)
                    pipe.expire(key, HISTORY_TTL_S)
                    await pipe.execute()
        except BaseException:
            self.restore(items)
            raise
        self._covered = covered
        self._effective = [message, *self._originals[covered:]]

    # -- for the job session and the inject consumer ----------------------------

    def drain(self) -> list[str]:
        """Hand the buffered appends over (the caller makes them durable)."""
        items, self._pending = self._pending, []
        return items

    def restore(self, items: list[str]) -> None:
        """Put drained appends back after a failed write (they stay in order)."""
        self._pending = items + self._pending

    def source_ids(self) -> set[str]:
        """Slack message ts of every injected reply in the history (for dedupe)."""
        return self._source_ids

    @property
    def originals(self) -> Sequence[AnyMessage]:
        return self._originals


async def holds_conversation(redis: aioredis.Redis, keys: Keys, thread: Thread) -> bool:
    """Whether the bot holds a conversation in this thread: its history exists, or a
    job was started there (its first message may not be in the history yet)."""
    async with translated("history exists"):
        return bool(await redis.exists(keys.history(thread), keys.current_job(thread)))

"""What a thread's conversation already holds of the thread's Slack messages.

Before a message that may start a job is received, ``bot.turns.context`` asks here
whether a job would start at all and, if so, which Slack messages of the thread the
conversation has taken in. One read-only script over the thread's keys (one hash tag,
so it also runs on Redis Cluster), one round trip:

1. the thread's current job is live (``queued``, ``running``, ``awaiting_approval``):
   the message joins it, nothing starts — ``live``;
2. the message's ts was received before (a Slack retry): ``duplicate``;
3. otherwise whether the thread holds a conversation (its history or a job exists, as
   ``holds_conversation`` says) — ``conversation`` or ``new`` — with every ts in its
   ``inject:seen`` (the messages the inject stream took in, on their way into the
   history or already there; a context entry is ``<request ts>:context``).

A job that ends or starts between this look and the receipt is the receipt's business
(``bot.store.receipt``); the look only decides whether the thread is read from Slack.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, cast

from bot.store.connection import reply_text, translated
from bot.store.jobs import job_prefixes
from bot.store.keys import Thread
from bot.store.redis_store import Lua, RedisStore

LookKind = Literal["live", "duplicate", "new", "conversation"]

# KEYS: 1 history, 2 current job, 3 inject:seen. ARGV: 1 job key prefix, 2 the ts.
# Returns {kind} or {kind, {seen ts…}}.
_LOOK = """
local id = redis.call('GET', KEYS[2])
if id then
  local status = redis.call('HGET', ARGV[1] .. id, 'status')
  if status == 'queued' or status == 'running' or status == 'awaiting_approval' then
    return {'live'}
  end
end
if redis.call('HEXISTS', KEYS[3], ARGV[2]) == 1 then
  return {'duplicate'}
end
local kind = 'new'
if id or redis.call('EXISTS', KEYS[1]) == 1 then
  kind = 'conversation'
end
return {kind, redis.call('HKEYS', KEYS[3])}
"""


@dataclass(frozen=True, slots=True)
class Look:
    kind: LookKind
    received: frozenset[str] = frozenset()  # the thread's ``inject:seen`` (kind new/conversation)


class HeldMessages(RedisStore):
    """The look at a thread before a message is received (see the module docstring)."""

    _script = Lua(_LOOK)

    async def look(self, thread: Thread, *, ts: str) -> Look:
        keys = self.keys
        _, key_prefix = job_prefixes(keys, thread)
        async with translated("thread look"):
            reply = await self._script(
                keys=[keys.history(thread), keys.current_job(thread), keys.inject_seen(thread)],
                args=[key_prefix, ts],
            )
        kind = cast(LookKind, reply_text(reply[0]))  # the script's closed set
        seen = reply[1] if len(reply) > 1 else []
        return Look(kind=kind, received=frozenset(reply_text(s) for s in seen))

"""One running job's durable step: history, state and trace in one atomic round trip.

The agent core calls ``checkpoint(state)`` at the end of every step (its
``on_checkpoint``). One Lua script checks the job's status and the writer's fencing
token, appends the buffered history messages and trace entries, and saves the job
record with the loop's progress: a process that lost its lease writes nothing at all.
The same script reads the job's cancel flag (set by ``Stop``), so the flag is read
every step at no extra cost; ``on_cancel`` hears who set it.
With the inject check at the start of the iteration, that is two round trips per
iteration on the hot path.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import redis.asyncio as aioredis

from bot.agent.state import RunState
from bot.store.connection import StoreConflict, translated
from bot.store.history import RedisHistory
from bot.store.jobs import JobRecord
from bot.store.keys import HISTORY_TTL_S, JOB_TTL_S, TRACE_TTL_S, Keys
from bot.store.lease import Lease
from bot.store.trace import MAX_TRACE_ENTRIES, TraceRecorder

# KEYS: job hash, history list, trace list.
# ARGV: expected status, fence, data, job ttl, history ttl, trace ttl, max trace,
#       n history items, history items…, trace items…
_CHECKPOINT = """
local cur = redis.call('HMGET', KEYS[1], 'status', 'fence')
if not cur[1] then return 'missing' end
if cur[1] ~= ARGV[1] then return 'status:' .. cur[1] end
if tonumber(ARGV[2]) < tonumber(cur[2] or '0') then return 'fence:' .. cur[2] end
local n = tonumber(ARGV[8])
if n > 0 then
  redis.call('RPUSH', KEYS[2], unpack(ARGV, 9, 8 + n))
  redis.call('EXPIRE', KEYS[2], ARGV[5])
end
if #ARGV > 8 + n then
  redis.call('RPUSH', KEYS[3], unpack(ARGV, 9 + n, #ARGV))
  redis.call('LTRIM', KEYS[3], -tonumber(ARGV[7]), -1)
  redis.call('EXPIRE', KEYS[3], ARGV[6])
end
redis.call('HSET', KEYS[1], 'fence', ARGV[2], 'data', ARGV[3])
redis.call('EXPIRE', KEYS[1], ARGV[4])
local stop = redis.call('HGET', KEYS[1], 'cancel')
if stop then return 'cancel:' .. stop end
return 1
"""


class JobSession:
    """The store's side of one run of one job, under a held lease."""

    def __init__(
        self,
        redis: aioredis.Redis,
        keys: Keys,
        record: JobRecord,
        lease: Lease,
        history: RedisHistory,
        *,
        trace: TraceRecorder | None = None,
        on_cancel: Callable[[str], None] | None = None,
        now: Callable[[], float] = time.time,
    ) -> None:
        self._redis = redis
        self._keys = keys
        self.record = record
        self.lease = lease
        self.history = history
        self._trace = trace
        self._on_cancel = on_cancel
        self._now = now
        self._script = redis.register_script(_CHECKPOINT)

    async def checkpoint(self, state: RunState) -> None:
        """Make the step durable (the core's ``on_checkpoint``)."""
        items = self.history.drain()
        traces = self._trace.drain() if self._trace is not None else []
        record = self.record.model_copy(
            update={"progress": state, "updated_at": self._now(), "fence": self.lease.fence}
        )
        try:
            async with translated("job checkpoint"):
                outcome = await self._script(
                    keys=[
                        self._keys.job(record.id),
                        self._keys.history(record.thread),
                        self._keys.trace(record.id),
                    ],
                    args=[
                        self.record.status.value,
                        self.lease.fence,
                        record.model_dump_json(),
                        JOB_TTL_S,
                        HISTORY_TTL_S,
                        TRACE_TTL_S,
                        MAX_TRACE_ENTRIES,
                        len(items),
                        *items,
                        *traces,
                    ],
                )
        except BaseException:
            self._put_back(items, traces)
            raise
        stopped_by = None
        if isinstance(outcome, str) and outcome.startswith("cancel:"):
            stopped_by, outcome = outcome.removeprefix("cancel:"), 1
        if outcome != 1:
            self._put_back(items, traces)
            raise StoreConflict(f"job {record.id} checkpoint refused: {outcome}")
        self.record = record
        if stopped_by is not None and self._on_cancel is not None:
            self._on_cancel(stopped_by)

    def _put_back(self, items: list[str], traces: list[str]) -> None:
        self.history.restore(items)
        if self._trace is not None:
            self._trace.put_back(traces)

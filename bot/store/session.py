"""One running job's durable step: history, state and trace in one atomic round trip.

The agent core calls ``checkpoint(state)`` at the end of every step (its
``on_checkpoint``). One Lua script checks the job's status and the writer's fencing
token, appends the buffered history messages and trace entries, and saves the job
record with the loop's progress: a process that lost its lease writes nothing at all.
The same script reads the job's cancel flag (set by ``Stop``), so the flag is read
every step at no extra cost; ``on_cancel`` hears who set it.
The save that ends an iteration (its tools' results) goes with the next iteration's
inject fetch in one MULTI (``checkpoint_and_fetch``); with the save before the tools
run, that is two round trips per iteration on the hot path.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import redis.asyncio as aioredis
from redis.exceptions import NoScriptError

from bot.agent.ports import Injected
from bot.agent.state import RunState
from bot.store.connection import StoreConflict, StoreUnavailable, translated
from bot.store.failover import RUN_RETRY_BUDGET_S, retried
from bot.store.history import RedisHistory
from bot.store.inject import InjectReader
from bot.store.jobs import JobRecord
from bot.store.keys import HISTORY_TTL_S, JOB_TTL_S, TRACE_TTL_S, Keys
from bot.store.lease import Lease
from bot.store.redis_store import Lua, RedisStore
from bot.store.trace import MAX_TRACE_ENTRIES, TraceRecorder

# KEYS: job hash, history list, trace list.
# ARGV: expected status, fence, data, job ttl, history ttl, trace ttl, max trace,
#       n history items, history items…, trace items…
_CHECKPOINT = """
if redis.call('HGET', KEYS[1], 'data') == ARGV[3] then  -- this very step, retried
  local stop = redis.call('HGET', KEYS[1], 'cancel')
  if stop then return 'cancel:' .. stop end
  return 1
end
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


class JobSession(RedisStore):
    """The store's side of one run of one job, under a held lease."""

    _script = Lua(_CHECKPOINT)

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
        super().__init__(redis, keys)
        self.record = record
        self.lease = lease
        self.history = history
        self._trace = trace
        self._on_cancel = on_cancel
        self._now = now

    async def checkpoint(self, state: RunState) -> None:
        """Make the step durable (the core's ``on_checkpoint``)."""
        step = self._step(state)
        self._settle(step, await self._write(step))

    async def _write(self, step: _Step) -> object:
        """The step's script, retried across a failover (``RUN_RETRY_BUDGET_S``): the
        script knows its own step (the record it writes is unique to it), so a retry
        whose first reply was lost appends nothing twice. Without the retry a failover
        left the job for takeover from the step before, which asked the model again
        and could answer twice."""

        async def attempt() -> object:
            async with translated("job checkpoint"):
                return await self._script(keys=step.keys, args=step.args)

        try:
            return await retried("job checkpoint", attempt, budget_s=RUN_RETRY_BUDGET_S)
        except BaseException:
            self._put_back(step)
            raise

    async def checkpoint_and_fetch(
        self, state: RunState, inject: InjectReader
    ) -> Sequence[Injected]:
        """``checkpoint`` and ``inject.fetch()`` in one MULTI, one round trip (the core's
        ``on_checkpoint_and_fetch``): the checkpoint script first, so a Stop it reads is
        heard before the replies are taken in; a refused checkpoint raises as in
        ``checkpoint`` (the replies read stay unacknowledged, for whoever runs the job)."""
        step = self._step(state)
        try:
            async with translated("job checkpoint"):
                pipe = self.redis.pipeline(transaction=True)
                # Not ``pipe.evalsha``: redis-py's cluster pipeline refuses that name
                # (the command itself runs there, on the slot of its keys).
                pipe.execute_command(
                    "EVALSHA", self._script.sha, len(step.keys), *step.keys, *step.args
                )
                plan = inject.queue(pipe)
                replies = list(await pipe.execute(raise_on_error=False))
                outcome = replies.pop(0)
                if isinstance(outcome, NoScriptError):
                    # The server lost its scripts (a restart, SCRIPT FLUSH): the
                    # checkpoint again on its own, which loads the script first.
                    outcome = await self._script(keys=step.keys, args=step.args)
                elif isinstance(outcome, BaseException):
                    raise outcome
        except StoreUnavailable:
            # The MULTI may or may not have run: the step again on its own (a retry
            # finds it if it was written), the replies at the next fetch (those the
            # lost reply delivered are this consumer's pending entries, read first).
            inject.reread_own()
            self._settle(step, await self._write(step))
            return []
        except BaseException:
            self._put_back(step)
            raise
        self._settle(step, outcome)
        return await inject.take(plan, replies)

    def _step(self, state: RunState) -> _Step:
        items = self.history.drain()
        traces = self._trace.drain() if self._trace is not None else []
        record = self.record.model_copy(
            update={"progress": state, "updated_at": self._now(), "fence": self.lease.fence}
        )
        return _Step(
            record=record,
            items=items,
            traces=traces,
            keys=[
                self.keys.job(record.id),
                self.keys.history(record.thread),
                self.keys.trace(record.id),
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

    def _settle(self, step: _Step, outcome: object) -> None:
        stopped_by = None
        if isinstance(outcome, str) and outcome.startswith("cancel:"):
            stopped_by, outcome = outcome.removeprefix("cancel:"), 1
        if outcome != 1:
            self._put_back(step)
            raise StoreConflict(f"job {step.record.id} checkpoint refused: {outcome}")
        self.record = step.record
        if stopped_by is not None and self._on_cancel is not None:
            self._on_cancel(stopped_by)

    def _put_back(self, step: _Step) -> None:
        self.history.restore(step.items)
        if self._trace is not None:
            self._trace.put_back(step.traces)


@dataclass(frozen=True, slots=True)
class _Step:
    """One checkpoint's script call and what to put back if it is not written."""

    record: JobRecord
    items: list[str]
    traces: list[str]
    keys: list[str]
    args: list[str | int]

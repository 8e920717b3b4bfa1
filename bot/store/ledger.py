"""The mutating-call ledger: the core's ``Ledger`` port on Redis.

One HASH per job (``keys.ledger(job_id)``), field = idempotency key
``{job_id}:{call_id}``, value = ``LedgerRecord`` JSON. ``begin`` claims the key with
HSETNX before a write runs (``started``); ``finish`` records ``done`` with the output.
A key found ``started`` on a later run means the process died during the write: the
core reports "outcome unknown" and never runs it again. A key found ``done`` returns the
recorded output instead of running the write twice.

Key parsing: a job id is ``channel:thread_ts:jN`` (two colons, see ``keys.Thread``), so
the call id is everything after the third colon. Call ids come from model providers and
are not ours to constrain, so a call id containing a colon still parses correctly.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Literal

import redis.asyncio as aioredis
from pydantic import BaseModel, ConfigDict, ValidationError

from bot.agent.ports import LedgerEntry
from bot.errors import StoreError
from bot.store.connection import translated
from bot.store.keys import Keys

log = logging.getLogger(__name__)

LEDGER_TTL_S = 30 * 24 * 3600  # as long as the job and its history
MAX_OUTPUT_BYTES = 64 * 1024  # the full output, if longer, lives in the artifacts


class LedgerRecord(BaseModel):
    """One mutating call's ledger entry, as stored."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = 1
    state: Literal["started", "done"]
    tool: str | None = None
    args_hash: str | None = None
    started_at: float | None = None
    finished_at: float | None = None
    output: str | None = None
    output_bytes: int | None = None  # the output's full size, when it was cut

    def entry(self) -> LedgerEntry:
        return LedgerEntry(state=self.state, output=self.output)


def split_key(key: str) -> tuple[str, str]:
    """``(job_id, call_id)`` of an idempotency key ``{job_id}:{call_id}``."""
    parts = key.split(":", 3)
    if len(parts) != 4 or not all(parts):
        raise ValueError(f"not an idempotency key (job_id:call_id): {key!r}")
    return ":".join(parts[:3]), parts[3]


def bound_output(output: str) -> tuple[str, int | None]:
    """The output cut to ``MAX_OUTPUT_BYTES`` (UTF-8) with a note, and its full size if cut."""
    raw = output.encode("utf-8", "surrogatepass")
    if len(raw) <= MAX_OUTPUT_BYTES:
        return output, None
    head = raw[:MAX_OUTPUT_BYTES].decode("utf-8", "ignore")  # never split a character
    return f"{head}\n… [cut: {len(raw)} bytes in all, first {MAX_OUTPUT_BYTES} kept]", len(raw)


def _parse(key: str, raw: str) -> LedgerRecord:
    try:
        return LedgerRecord.model_validate_json(raw)
    except ValidationError as exc:
        raise StoreError(f"corrupt ledger entry {key!r}: {exc}") from exc


class RedisLedger:
    """Records mutating calls so that a crash never re-runs a write blindly."""

    def __init__(
        self, redis: aioredis.Redis, keys: Keys, *, now: Callable[[], float] = time.time
    ) -> None:
        self._redis = redis
        self._keys = keys
        self._now = now

    async def begin(self, key: str, tool: str, args_hash: str) -> LedgerEntry | None:
        """Record ``started``; return the earlier entry if the key was seen before."""
        job_id, _ = split_key(key)
        hash_key = self._keys.ledger(job_id)
        record = LedgerRecord(
            state="started", tool=tool, args_hash=args_hash, started_at=self._now()
        )
        async with translated("ledger begin"):
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.hsetnx(hash_key, key, record.model_dump_json(exclude_none=True))
                pipe.hget(hash_key, key)
                pipe.expire(hash_key, LEDGER_TTL_S)
                created, raw, _ = await pipe.execute()
        if created:
            return None
        prior = _parse(key, str(raw))
        if prior.tool != tool or prior.args_hash != args_hash:
            # Same idempotency key, different call: the provider reused a call id. The
            # recorded result belongs to another call, so it must not stand for this one,
            # and running the write could still repeat something: report it as unknown.
            log.warning(
                "ledger key %s reused: recorded %s/%s, now %s/%s",
                key,
                prior.tool,
                prior.args_hash,
                tool,
                args_hash,
            )
            return LedgerEntry(state="started")
        return prior.entry()

    async def finish(self, key: str, output: str) -> None:
        """Record ``done`` with the (bounded) output, keeping what ``begin`` wrote."""
        job_id, _ = split_key(key)
        hash_key = self._keys.ledger(job_id)
        async with translated("ledger finish"):
            raw = await self._redis.hget(hash_key, key)
        prior = _parse(key, str(raw)) if raw else LedgerRecord(state="started")
        shown, full = bound_output(output)
        record = prior.model_copy(
            update={
                "state": "done",
                "finished_at": self._now(),
                "output": shown,
                "output_bytes": full,
            }
        )
        async with translated("ledger finish"):
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.hset(hash_key, key, record.model_dump_json(exclude_none=True))
                pipe.expire(hash_key, LEDGER_TTL_S)
                await pipe.execute()

    async def entries(self, job_id: str) -> dict[str, LedgerRecord]:
        """Every entry of a job, by idempotency key (traces, tests)."""
        async with translated("ledger entries"):
            raw = await self._redis.hgetall(self._keys.ledger(job_id))
        return {str(k): _parse(str(k), str(v)) for k, v in raw.items()}

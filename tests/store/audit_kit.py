"""What the audit log's tests share: a clock, entries, and a writer that stages them
the way the stores do (the hint first, then the entry in the fact's own MULTI)."""

from __future__ import annotations

import redis.asyncio as aioredis

from bot.store.audit import OUTBOX_TTL_S, AuditEntry, AuditLog, staged_json
from bot.store.keys import Keys

T0 = 1_780_000_000.0  # 2026-05-28 20:26:40 UTC
JOB = "C0INC:1780000000.000100:j1"
TAG = "{C0INC:1780000000.000100}"
OTHER_TAG = "{C0OPS:1780000500.000200}"


class Clock:
    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def entry(n: int, *, at: float | None = None, **update: object) -> AuditEntry:
    base = AuditEntry(
        id=f"write_finished:{JOB}:call_{n}",
        kind="write_finished",
        at=T0 + n if at is None else at,
        actor="U0APPROVER",
        job_id=JOB,
        channel="C0INC",
        thread_ts="1780000000.000100",
        tool="restart_service",
        call_id=f"call_{n}",
        args_hash="ab" * 32,
        arguments={"host": "web-03", "service": "nginx"},
        outcome="ok",
        detail={"result": f"restarted nginx ({n})", "idempotency_key": f"{JOB}:call_{n}"},
    )
    return base.model_copy(update=update)


async def stage(
    redis: aioredis.Redis, log: AuditLog, tag: str, *entries: AuditEntry, hint: bool = True
) -> None:
    """A writer: the hint before the fact, then the entries with the fact (one MULTI)."""
    if hint:
        await log.hint(tag)
    async with redis.pipeline(transaction=True) as pipe:
        for one in entries:
            pipe.rpush(log.outbox_key(tag), staged_json(one))
        pipe.expire(log.outbox_key(tag), OUTBOX_TTL_S)
        await pipe.execute()


async def stream(redis: aioredis.Redis, keys: Keys) -> list[tuple[str, str]]:
    """The log as (stream id, JSON) pairs."""
    return [(sid, fields["e"]) for sid, fields in await redis.xrange(keys.audit_log())]

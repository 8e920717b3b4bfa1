"""The first of two approvals (``Approvals.first_approval``): recorded once, only while
the approval is pending, by whoever was first of concurrent clicks; the record stays
pending; the decision that follows names the first approver in its audit entry."""

from __future__ import annotations

import asyncio
import json

import redis.asyncio as aioredis

from bot.store.approvals import Approvals
from bot.store.keys import Keys, Thread

from .approval_kit import NOW, pending_approval

HASH = "f" * 64


async def test_the_first_approver_is_set_once_and_stays_pending(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    approvals = Approvals(redis, keys)
    record = await approvals.create(pending_approval(thread, args_hash=HASH))

    first = await approvals.first_approval(record.job_id, record.call_id, "U0FIRST1")
    other = await approvals.first_approval(record.job_id, record.call_id, "U0OTHER1")

    assert first is not None and other is not None
    assert (first.status, first.first_approver) == ("pending", "U0FIRST1")
    assert (other.status, other.first_approver) == ("pending", "U0FIRST1")
    assert other.decided_by is None and other.decided_at is None


async def test_a_decided_or_missing_approval_gets_no_first_approver(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    approvals = Approvals(redis, keys)
    record = await approvals.create(pending_approval(thread, args_hash=HASH))
    await approvals.decide(
        record.job_id, record.call_id, outcome="denied", by="U0DENIER", args_hash=None, now=NOW
    )

    late = await approvals.first_approval(record.job_id, record.call_id, "U0FIRST1")
    missing = await approvals.first_approval(record.job_id, "call_9", "U0FIRST1")

    assert late is not None and late.status == "denied" and late.first_approver is None
    assert missing is None
    assert not await redis.exists(keys.approval(record.job_id, "call_9"))


async def test_of_concurrent_first_clicks_one_is_first(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    # Ten processes' stores over the test's client (its pool: one connection each, on
    # any topology the store suite runs on).
    record = await Approvals(redis, keys).create(pending_approval(thread, args_hash=HASH))
    clicks = [f"U0CLICK{n:02d}" for n in range(10)]
    seen = await asyncio.gather(
        *(Approvals(redis, keys).first_approval(record.job_id, record.call_id, by) for by in clicks)
    )

    firsts = {s.first_approver for s in seen if s is not None}
    assert len(firsts) == 1 and firsts <= set(clicks)


async def test_the_decision_names_the_first_approver_in_its_audit_entry(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    approvals = Approvals(redis, keys)
    record = await approvals.create(pending_approval(thread, args_hash=HASH))
    await approvals.first_approval(record.job_id, record.call_id, "U0FIRST1")

    result = await approvals.decide(
        record.job_id, record.call_id, outcome="approved", by="U0SECOND", args_hash=HASH, now=NOW
    )

    assert result is not None and result.won
    assert (result.record.decided_by, result.record.first_approver) == ("U0SECOND", "U0FIRST1")
    entries = [json.loads(e) for e in await redis.lrange(keys.audit_outbox(thread.tag), 0, -1)]
    [decided] = [e for e in entries if e["kind"] == "approval_decided"]
    assert decided["actor"] == "U0SECOND"
    assert decided["detail"] == {
        "card_ts": "",
        "requester": record.requester,
        "first_approver": "U0FIRST1",
    }

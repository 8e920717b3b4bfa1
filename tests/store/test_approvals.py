"""Approvals in Redis: one record per pending call, one decision, bound to the card.

Every test passes ``now`` explicitly; nothing reads the wall clock.
"""

from __future__ import annotations

import asyncio
from typing import Literal

import pytest
import redis.asyncio as aioredis

from bot.agent import Approved, Denied
from bot.emulator.redis_server import ManagedRedis
from bot.store.approvals import (
    APPROVAL_RETENTION_S,
    REFUSED_EARLY,
    REFUSED_EXPIRED,
    REFUSED_STALE,
    ApprovalRecord,
    Approvals,
    to_decision,
)
from bot.store.connection import StoreUnavailable, connect
from bot.store.keys import Keys, Thread, job_bucket

NOW = 1_700_000_000.0
TTL = 3600.0
HASH = "a" * 64
ALICE, BOB, CAROL = "U0ALICE1", "U0BOB222", "U0CAROL3"


def pending(thread: Thread, call_id: str = "call_1", **update: object) -> ApprovalRecord:
    record = ApprovalRecord(
        job_id=thread.job_id(3),
        call_id=call_id,
        tool="restart_service",
        category="mutating",
        args_hash=HASH,
        arguments={"host": "web-03", "service": "nginx"},
        reason="nginx is wedged; a restart should clear it",
        requester=CAROL,
        channel=thread.channel,
        thread_ts=thread.thread_ts,
        requested_at=NOW,
        expires_at=NOW + TTL,
    )
    return record.model_copy(update=update)


@pytest.fixture
def approvals(redis: aioredis.Redis, keys: Keys) -> Approvals:
    return Approvals(redis, keys)


async def test_a_created_approval_reads_back_the_same(approvals: Approvals, thread: Thread) -> None:
    record = pending(thread, dry_run_output="would restart nginx", category="destructive")

    stored = await approvals.create(record)

    assert stored == record
    assert await approvals.get(record.job_id, record.call_id) == record
    assert await approvals.get(record.job_id, "call_other") is None


async def test_a_second_create_keeps_the_first_record(approvals: Approvals, thread: Thread) -> None:
    first = pending(thread)
    await approvals.create(first)
    await approvals.set_card(first.job_id, first.call_id, "1700000001.000200")

    again = await approvals.create(pending(thread, reason="asked again", expires_at=NOW + 60))

    expected = first.model_copy(update={"card_ts": "1700000001.000200"})
    assert again == expected
    assert await approvals.get(first.job_id, first.call_id) == expected
    assert await approvals.due(NOW + 60) == []  # the expiry stays the first one's
    assert await approvals.due(NOW + TTL) == [(first.job_id, first.call_id)]


async def test_what_a_card_shows_of_its_replies_only_moves_forward(
    approvals: Approvals, redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    record = await approvals.create(pending(thread))
    assert record.replies_seq == 0
    await approvals.replies_shown(record.job_id, record.call_id, 4)
    await approvals.replies_shown(record.job_id, record.call_id, 2)  # a slower process
    got = await approvals.get(record.job_id, record.call_id)
    assert got is not None and got.replies_seq == 4
    # No record, no partial hash made by the write.
    await approvals.replies_shown(record.job_id, "call_none", 3)
    assert not await redis.exists(keys.approval(record.job_id, "call_none"))


async def test_the_card_ts_is_remembered(approvals: Approvals, thread: Thread) -> None:
    record = await approvals.create(pending(thread))

    assert await approvals.set_card(record.job_id, record.call_id, "1700000001.000200")
    assert not await approvals.set_card(record.job_id, "call_missing", "1700000001.000300")

    stored = await approvals.get(record.job_id, record.call_id)
    assert stored is not None and stored.card_ts == "1700000001.000200"
    assert await approvals.get(record.job_id, "call_missing") is None


async def test_the_record_outlives_its_expiry_by_the_retention(
    approvals: Approvals, redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    record = await approvals.create(pending(thread))

    ttl = await redis.ttl(keys.approval(record.job_id, record.call_id))

    assert TTL + APPROVAL_RETENTION_S - 5 <= ttl <= TTL + APPROVAL_RETENTION_S


async def test_a_pending_approval_is_in_the_expiry_index(
    approvals: Approvals, redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    record = await approvals.create(pending(thread))

    index = await redis.zrange(
        keys.approval_expiries(job_bucket(record.job_id)), 0, -1, withscores=True
    )

    assert index == [(f"{record.job_id}|{record.call_id}", NOW + TTL)]


async def test_only_a_pending_record_can_be_created(approvals: Approvals, thread: Thread) -> None:
    with pytest.raises(ValueError):
        await approvals.create(pending(thread, status="approved", decided_by=ALICE))


async def test_an_approval_is_won_once_and_names_its_approver(
    approvals: Approvals, thread: Thread
) -> None:
    record = await approvals.create(pending(thread))

    result = await approvals.decide(
        record.job_id, record.call_id, outcome="approved", by=ALICE, args_hash=HASH, now=NOW + 5
    )

    assert result is not None and result.won and result.refusal is None
    assert result.record.status == "approved"
    assert result.record.decided_by == ALICE
    assert result.record.decided_at == NOW + 5
    assert await approvals.get(record.job_id, record.call_id) == result.record


async def test_a_second_approve_is_refused_naming_the_first(
    approvals: Approvals, thread: Thread
) -> None:
    record = await approvals.create(pending(thread))
    await approvals.decide(
        record.job_id, record.call_id, outcome="approved", by=ALICE, args_hash=HASH, now=NOW + 5
    )

    again = await approvals.decide(
        record.job_id, record.call_id, outcome="approved", by=BOB, args_hash=HASH, now=NOW + 6
    )

    assert again is not None and not again.won
    assert again.refusal == f"already approved by <@{ALICE}>"
    assert again.record.decided_by == ALICE and again.record.decided_at == NOW + 5


async def test_a_deny_after_an_approve_changes_nothing(
    approvals: Approvals, thread: Thread
) -> None:
    record = await approvals.create(pending(thread))
    await approvals.decide(
        record.job_id, record.call_id, outcome="approved", by=ALICE, args_hash=HASH, now=NOW + 5
    )

    deny = await approvals.decide(
        record.job_id, record.call_id, outcome="denied", by=BOB, args_hash=HASH, now=NOW + 6
    )

    assert deny is not None and not deny.won
    assert deny.refusal == f"already approved by <@{ALICE}>"
    stored = await approvals.get(record.job_id, record.call_id)
    assert stored is not None and stored.status == "approved" and stored.decided_by == ALICE


async def test_a_deny_wins_and_later_clicks_are_told(approvals: Approvals, thread: Thread) -> None:
    record = await approvals.create(pending(thread))

    deny = await approvals.decide(
        record.job_id, record.call_id, outcome="denied", by=BOB, args_hash=HASH, now=NOW + 5
    )
    late = await approvals.decide(
        record.job_id, record.call_id, outcome="approved", by=ALICE, args_hash=HASH, now=NOW + 6
    )

    assert deny is not None and deny.won and deny.record.status == "denied"
    assert late is not None and not late.won
    assert late.refusal == f"already denied by <@{BOB}>"


async def test_an_approve_at_or_after_expiry_is_refused(
    approvals: Approvals, thread: Thread
) -> None:
    record = await approvals.create(pending(thread))

    late = await approvals.decide(
        record.job_id,
        record.call_id,
        outcome="approved",
        by=ALICE,
        args_hash=HASH,
        now=record.expires_at,
    )

    assert late is not None and not late.won
    assert late.refusal == REFUSED_EXPIRED
    assert late.record.status == "pending"  # the scanner expires it


async def test_a_card_for_other_arguments_is_refused(approvals: Approvals, thread: Thread) -> None:
    record = await approvals.create(pending(thread))

    stale = await approvals.decide(
        record.job_id, record.call_id, outcome="approved", by=ALICE, args_hash="b" * 64, now=NOW
    )

    assert stale is not None and not stale.won
    assert stale.refusal == REFUSED_STALE
    still = await approvals.get(record.job_id, record.call_id)
    assert still is not None and still.status == "pending" and still.decided_by is None


async def test_expiry_is_found_by_due_and_decided_once(
    approvals: Approvals, thread: Thread
) -> None:
    soon = await approvals.create(pending(thread, "call_soon", expires_at=NOW + 60))
    later = await approvals.create(pending(thread, "call_later", expires_at=NOW + 600))

    assert await approvals.due(NOW + 59) == []
    assert await approvals.due(NOW + 60) == [(soon.job_id, soon.call_id)]
    assert await approvals.due(NOW + 600) == [
        (soon.job_id, soon.call_id),
        (later.job_id, later.call_id),
    ]
    assert await approvals.due(NOW + 600, limit=1) == [(soon.job_id, soon.call_id)]

    expired = await approvals.decide(
        soon.job_id, soon.call_id, outcome="expired", by=None, args_hash=None, now=NOW + 61
    )

    assert expired is not None and expired.won
    assert expired.record.status == "expired" and expired.record.decided_by is None
    assert await approvals.due(NOW + 600) == [(later.job_id, later.call_id)]
    click = await approvals.decide(
        soon.job_id, soon.call_id, outcome="approved", by=ALICE, args_hash=HASH, now=NOW + 62
    )
    assert click is not None and not click.won and click.refusal == "already expired"


async def test_expiring_before_the_expiry_is_refused(approvals: Approvals, thread: Thread) -> None:
    record = await approvals.create(pending(thread))

    early = await approvals.decide(
        record.job_id, record.call_id, outcome="expired", by=None, args_hash=None, now=NOW + 1
    )

    assert early is not None and not early.won and early.refusal == REFUSED_EARLY
    assert await approvals.due(record.expires_at) == [(record.job_id, record.call_id)]


async def test_a_decision_removes_the_expiry_hint(approvals: Approvals, thread: Thread) -> None:
    record = await approvals.create(pending(thread))

    await approvals.decide(
        record.job_id, record.call_id, outcome="approved", by=ALICE, args_hash=HASH, now=NOW
    )

    assert await approvals.due(record.expires_at + 1) == []


async def test_a_stale_hint_is_dropped_when_met(
    approvals: Approvals, redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    """A hint left by a crash (no record, or a decided one) goes away at the scan."""
    job_id = thread.job_id(3)
    await redis.zadd(keys.approval_expiries(job_bucket(job_id)), {f"{job_id}|call_gone": NOW})

    [(found_job, found_call)] = await approvals.due(NOW)
    gone = await approvals.decide(
        found_job, found_call, outcome="expired", by=None, args_hash=None, now=NOW
    )

    assert (found_job, found_call) == (job_id, "call_gone")
    assert gone is None
    assert await approvals.due(NOW) == []


async def test_a_pending_card_of_a_cancelled_job_is_cancelled(
    approvals: Approvals, thread: Thread
) -> None:
    record = await approvals.create(pending(thread))

    # Cancelling is allowed even past the expiry: the job's Stop names who stopped it.
    cancelled = await approvals.decide(
        record.job_id,
        record.call_id,
        outcome="cancelled",
        by=CAROL,
        args_hash=None,
        now=record.expires_at + 1,
    )

    assert cancelled is not None and cancelled.won
    assert cancelled.record.status == "cancelled" and cancelled.record.decided_by == CAROL
    late = await approvals.decide(
        record.job_id, record.call_id, outcome="approved", by=ALICE, args_hash=HASH, now=NOW
    )
    assert late is not None and late.refusal == f"already cancelled by <@{CAROL}>"


async def test_a_decision_needs_a_raw_user_id(approvals: Approvals, thread: Thread) -> None:
    record = await approvals.create(pending(thread))

    with pytest.raises(ValueError):
        await approvals.decide(
            record.job_id, record.call_id, outcome="approved", by=None, args_hash=HASH, now=NOW
        )
    with pytest.raises(ValueError):
        await approvals.decide(
            record.job_id,
            record.call_id,
            outcome="approved",
            by=f"<@{ALICE}>",
            args_hash=HASH,
            now=NOW,
        )
    stored = await approvals.get(record.job_id, record.call_id)
    assert stored is not None and stored.status == "pending"


async def test_deciding_an_unknown_approval_gives_none(
    approvals: Approvals, thread: Thread
) -> None:
    result = await approvals.decide(
        thread.job_id(9), "call_1", outcome="approved", by=ALICE, args_hash=HASH, now=NOW
    )

    assert result is None


async def test_redis_down_is_a_store_unavailable_error(
    fresh_server: ManagedRedis, keys: Keys, thread: Thread
) -> None:
    client = connect(fresh_server.url)
    try:
        approvals = Approvals(client, keys)
        record = await approvals.create(pending(thread))
        fresh_server.kill()

        with pytest.raises(StoreUnavailable):
            await approvals.decide(
                record.job_id, record.call_id, outcome="approved", by=ALICE, args_hash=HASH, now=NOW
            )
        with pytest.raises(StoreUnavailable):
            await approvals.get(record.job_id, record.call_id)
    finally:
        await client.aclose()


def decided(thread: Thread, status: str, by: str | None) -> ApprovalRecord:
    return pending(thread, status=status, decided_by=by, decided_at=NOW + 5)


def test_an_approval_becomes_the_cores_approved_with_the_raw_user_id(thread: Thread) -> None:
    record = decided(thread, "approved", ALICE)
    decision = to_decision(record)

    assert decision == Approved(
        confirmed_by=ALICE,
        tool="restart_service",
        args_hash=HASH,
        asked_at=record.requested_at,
        decided_at=NOW + 5,
    )
    assert isinstance(decision, Approved) and not decision.confirmed_by.startswith("<@")


@pytest.mark.parametrize(
    ("status", "by", "reason"),
    [
        ("denied", BOB, f"denied by <@{BOB}>"),
        ("expired", None, "approval expired"),
        ("cancelled", CAROL, f"cancelled by <@{CAROL}>"),
    ],
)
def test_other_outcomes_become_the_cores_denied(
    thread: Thread, status: Literal["denied", "expired", "cancelled"], by: str | None, reason: str
) -> None:
    record = decided(thread, status, by)
    assert to_decision(record) == Denied(
        reason=reason,
        outcome=status,
        by=by,
        asked_at=record.requested_at,
        decided_at=NOW + 5,
    )


def test_a_pending_approval_is_no_decision(thread: Thread) -> None:
    with pytest.raises(ValueError):
        to_decision(pending(thread))


async def test_one_poster_at_a_time_claims_a_card_and_a_dead_ones_claim_expires(
    approvals: Approvals, thread: Thread
) -> None:
    record = await approvals.create(pending(thread))
    now = record.requested_at

    assert await approvals.claim_card(record.job_id, record.call_id, now=now)
    assert not await approvals.claim_card(record.job_id, record.call_id, now=now + 1)
    stored = await approvals.get(record.job_id, record.call_id)
    assert stored is not None and stored.card_ts is None  # a claim is not a card
    assert await approvals.claim_card(record.job_id, record.call_id, now=now + 31)
    await approvals.set_card(record.job_id, record.call_id, "1700000000.000500")
    assert not await approvals.claim_card(record.job_id, record.call_id, now=now + 999)


async def test_each_reminder_is_taken_once_and_a_decision_drops_it(
    redis: aioredis.Redis, server: ManagedRedis, keys: Keys, thread: Thread
) -> None:
    approvals = Approvals(redis, keys)
    for n in range(20):
        await approvals.create(pending(thread, f"call_{n}"), remind_at=NOW + 600)
    await approvals.create(pending(thread, "late"), remind_at=NOW + 900)
    await approvals.create(pending(thread, "never"))  # no reminder asked
    await approvals.create(pending(thread, "past_expiry"), remind_at=NOW + TTL + 1)
    decided = await approvals.decide(
        thread.job_id(3), "call_0", outcome="approved", by=BOB, args_hash=HASH, now=NOW + 1
    )
    assert decided is not None and decided.won

    assert await approvals.take_reminders(NOW + 599) == []
    # Two processes scanning at once: every due reminder goes to exactly one of them.
    other_client = connect(server.url)  # another process's view
    try:
        first, second = await asyncio.gather(
            approvals.take_reminders(NOW + 600),
            Approvals(other_client, keys).take_reminders(NOW + 600),
        )
    finally:
        await other_client.aclose()
    taken = sorted(c for _, c in first + second)
    assert taken == sorted(f"call_{n}" for n in range(1, 20))
    assert not set(first) & set(second)
    assert await approvals.take_reminders(NOW + 10_000) == [(thread.job_id(3), "late")]

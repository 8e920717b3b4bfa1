"""A decided card's edit is owed from the decision until settled: recorded by the deciding
script, offered to one scanner at a time after a grace period, settled once edited."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from bot.store.approvals import CARD_EDIT_GRACE_S, CARD_EDIT_RETRY_S, Approvals
from bot.store.keys import Keys, Thread

from .test_approvals import ALICE, NOW, pending


@pytest.fixture
def approvals(redis: aioredis.Redis, keys: Keys) -> Approvals:
    return Approvals(redis, keys)


async def test_a_decision_owes_its_card_edit_until_settled(
    approvals: Approvals, thread: Thread
) -> None:
    record = await approvals.create(pending(thread, card_ts="1700000000.000900"))
    assert not record.card_owed
    result = await approvals.decide(
        record.job_id, "call_1", outcome="approved", by=ALICE, args_hash=None, now=NOW
    )
    assert result is not None and result.won and result.record.card_owed

    # Not before the grace: the deciding process is editing it right now.
    assert await approvals.take_card_edits(NOW + CARD_EDIT_GRACE_S / 2) == []
    later = NOW + CARD_EDIT_GRACE_S + 1
    assert await approvals.take_card_edits(later) == [(record.job_id, "call_1")]
    # Taken: no other scanner gets it until the retry time.
    assert await approvals.take_card_edits(later + 1) == []
    assert await approvals.take_card_edits(later + CARD_EDIT_RETRY_S + CARD_EDIT_GRACE_S) == [
        (record.job_id, "call_1")
    ]

    await approvals.card_edited(record.job_id, "call_1")
    stored = await approvals.get(record.job_id, "call_1")
    assert stored is not None and not stored.card_owed and stored.status == "approved"
    assert await approvals.take_card_edits(later + 10 * CARD_EDIT_RETRY_S) == []


async def test_a_refused_decision_owes_nothing(approvals: Approvals, thread: Thread) -> None:
    record = await approvals.create(pending(thread))
    await approvals.decide(
        record.job_id, "call_1", outcome="denied", by=ALICE, args_hash=None, now=NOW
    )
    again = await approvals.decide(
        record.job_id, "call_1", outcome="approved", by=ALICE, args_hash=None, now=NOW + 1
    )
    assert again is not None and not again.won
    # One hint for the card (denied), whatever the number of clicks.
    assert await approvals.take_card_edits(NOW + 100) == [(record.job_id, "call_1")]

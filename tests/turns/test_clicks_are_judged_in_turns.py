"""An Approve or Deny click is judged by ``Turns.decide``: the edge gets an acceptance,
or a refusal with its reason (unknown card, out of date, already decided, expired, no
longer matching the job's call, not allowed), and renders only that. The clicker's
permission is asked last, once every other check passed."""

from __future__ import annotations

import redis.asyncio as aioredis

from bot.agent.testing import ScriptedModel, call, calls
from bot.store.approvals import REFUSED_EXPIRED, REFUSED_STALE, ApprovalRecord
from bot.store.jobs import JobStatus
from bot.store.keys import Keys, Thread
from bot.turns.controls import OUT_OF_DATE, UNKNOWN_CARD, Accepted, Refused
from bot.turns.parts import Turns

from .notifier import card_ts
from .test_approvals_stop_continue import make_turns, start


async def allowed(approval: ApprovalRecord) -> str | None:
    return None


async def never_asked(approval: ApprovalRecord) -> str | None:
    raise AssertionError("the clicker's permission is asked only once all else passed")


async def paused(
    redis: aioredis.Redis, keys: Keys, thread: Thread, *, ttl: float = 3600
) -> tuple[Turns, str]:
    model = ScriptedModel([calls(call("restart", "c1", host="web-03"))])
    turns, cards = make_turns(redis, keys, model, ttl=ttl)
    job_id = await start(turns, thread)
    await turns.runner.run_job(job_id)
    assert [c.call_id for c in cards] == ["c1"]
    return turns, job_id


async def test_a_click_on_the_pending_card_is_accepted_once(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    turns, job_id = await paused(redis, keys, thread)

    first = await turns.controls.decide(
        job_id, "c1", outcome="approved", by="UAPPROVER", card_ts=card_ts(1), authorize=allowed
    )
    assert isinstance(first, Accepted)
    assert first.record.status == "approved" and first.record.decided_by == "UAPPROVER"

    again = await turns.controls.decide(
        job_id, "c1", outcome="denied", by="UOTHER", card_ts=card_ts(1), authorize=never_asked
    )
    assert again == Refused("decided", "already approved by <@UAPPROVER>")


async def test_an_unknown_or_out_of_date_card_is_refused(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    turns, job_id = await paused(redis, keys, thread)

    unknown = await turns.controls.decide(
        job_id, "c9", outcome="approved", by="U1", card_ts=None, authorize=never_asked
    )
    no_call = await turns.controls.decide(
        job_id, "", outcome="approved", by="U1", card_ts=None, authorize=never_asked
    )
    other_card = await turns.controls.decide(
        job_id, "c1", outcome="approved", by="U1", card_ts="1.2", authorize=never_asked
    )

    assert unknown == no_call == Refused("unknown", UNKNOWN_CARD)
    assert other_card == Refused("out_of_date", OUT_OF_DATE)


async def test_an_expired_card_is_refused(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    turns, job_id = await paused(redis, keys, thread, ttl=1e-6)

    verdict = await turns.controls.decide(
        job_id, "c1", outcome="approved", by="U1", card_ts=None, authorize=never_asked
    )

    assert verdict == Refused("expired", REFUSED_EXPIRED)


async def test_a_card_that_no_longer_matches_the_job_is_refused(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    turns, job_id = await paused(redis, keys, thread)
    record = await turns.stores.jobs.get(job_id)
    assert record is not None
    await turns.stores.jobs.save(record, JobStatus.FAILED, fence=record.fence)  # it ended meanwhile

    verdict = await turns.controls.decide(
        job_id, "c1", outcome="approved", by="U1", card_ts=None, authorize=never_asked
    )

    assert verdict == Refused("stale", REFUSED_STALE)


async def test_a_clicker_the_policy_refuses_changes_nothing(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    turns, job_id = await paused(redis, keys, thread)

    async def not_an_approver(approval: ApprovalRecord) -> str | None:
        assert approval.requester == "UREQ" and approval.tool == "restart"
        return "you are not on this bot's approver list"

    verdict = await turns.controls.decide(
        job_id, "c1", outcome="approved", by="U1", card_ts=None, authorize=not_an_approver
    )

    assert verdict == Refused("not_allowed", "you are not on this bot's approver list")
    still = await turns.stores.approvals.get(job_id, "c1")
    assert still is not None and still.status == "pending"


async def test_the_deciders_second_click_stands_as_the_same_decision(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    """A click whose answer was lost after its decision was written (a timeout, too few
    replicas) is clicked again: it stands, so its card is edited and its job resumed."""
    turns, job_id = await paused(redis, keys, thread)
    first = await turns.controls.decide(
        job_id, "c1", outcome="approved", by="UAPPROVER", card_ts=card_ts(1), authorize=allowed
    )
    again = await turns.controls.decide(
        job_id, "c1", outcome="approved", by="UAPPROVER", card_ts=card_ts(1), authorize=allowed
    )
    other_button = await turns.controls.decide(
        job_id, "c1", outcome="denied", by="UAPPROVER", card_ts=card_ts(1), authorize=allowed
    )

    assert isinstance(first, Accepted) and isinstance(again, Accepted)
    assert again.record.status == "approved" and again.record.decided_at == first.record.decided_at
    assert other_button == Refused("decided", "already approved by <@UAPPROVER>")

"""Turns on the real store: a mutating call pauses the job and resumes with the
decision; Stop ends a job nobody runs at once; Continue raises a limit by its original
value; the scanner expires cards and resumes their jobs."""

from __future__ import annotations

import time

import redis.asyncio as aioredis

from bot.agent import StopReason, ToolMessage
from bot.agent.testing import ScriptedModel, call, calls, text
from bot.service import build_turns
from bot.store.approvals import ApprovalRecord
from bot.store.jobs import JobLimits, JobStatus
from bot.store.keys import Keys, Thread, job_bucket
from bot.store.parts import Stores
from bot.store.quota import JobAdmission
from bot.turns.parts import Turns
from bot.turns.run import TurnSettings
from bot.turns.scanner import Scanner
from tests.agent.conftest import echo_tool
from tools.registry import Catalog

from .notifier import Notes, card_ts

LIMITS = JobLimits(max_iterations=2, deadline_s=600, token_budget=100_000)
TS = "1700000000.000100"


def make_turns(
    redis: aioredis.Redis,
    keys: Keys,
    model: ScriptedModel,
    *,
    ttl: float = 3600,
    notes: Notes | None = None,
    limits: JobLimits = LIMITS,
    admission: JobAdmission | None = None,
) -> tuple[Turns, list[ApprovalRecord]]:
    notes = notes or Notes()
    read = echo_tool()
    write = echo_tool("restart", category="mutating")
    turns = build_turns(
        Stores.build(redis, keys, admission=admission),
        resolver=model,
        catalog=Catalog(
            tools={read.name: read, write.name: write},
            sources={read.name: "test", write.name: "test"},
        ),
        system_prompt="You are opsloop.",
        settings=TurnSettings(limits=limits, approval_ttl_s=ttl),
        notifier=notes,
        consumer="test-process",
    )
    return turns, notes.cards


async def start(turns: Turns, thread: Thread) -> str:
    receipt = await turns.receiver.receive(thread, ts=TS, user="UREQ", text="restart web-03")
    assert receipt.job_id is not None
    return receipt.job_id


async def test_a_mutating_call_pauses_and_the_approval_resumes_it_once(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    # The restart is checked in the same batch, so the answer ends the job completed.
    restart_and_check = calls(call("restart", "c1", host="web-03"), call("check", host="web-03"))
    model = ScriptedModel([restart_and_check, text("restarted")])
    turns, cards = make_turns(redis, keys, model)
    job_id = await start(turns, thread)

    paused = await turns.runner.run_job(job_id)
    assert paused is not None and paused.stop_reason is StopReason.AWAITING_APPROVAL
    assert len(cards) == 1 and cards[0].requester == "UREQ" and cards[0].tool == "restart"
    assert await turns.runner.run_job(job_id) is None  # still pending: nothing to resume
    decided = await turns.stores.approvals.decide(
        job_id,
        cards[0].call_id,
        outcome="approved",
        by="UAPPROVER",
        args_hash=None,
        now=time.time(),
    )
    assert decided is not None and decided.won

    result = await turns.runner.run_job(job_id)
    assert result is not None and result.stop_reason is StopReason.COMPLETED
    stored = await turns.stores.jobs.get(job_id)
    assert stored is not None and stored.status is JobStatus.COMPLETED
    tool = [m for m in model.requests[-1].messages if isinstance(m, ToolMessage)]
    assert tool[-1].content == "ok web-03"
    assert await turns.runner.run_job(job_id) is None  # finished: never again


async def test_stop_cancels_a_paused_job_and_its_card_at_once(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    model = ScriptedModel([calls(call("restart", "c1", host="web-03"))])
    turns, cards = make_turns(redis, keys, model)
    job_id = await start(turns, thread)
    await turns.runner.run_job(job_id)

    outcome = await turns.controls.stop(job_id, "UREQ")
    assert outcome.kind == "cancelled"
    assert outcome.record is not None and outcome.record.status is JobStatus.CANCELLED
    assert outcome.approval is not None and outcome.approval.status == "cancelled"
    assert outcome.approval.decided_by == "UREQ"
    assert (await turns.controls.stop(job_id, "UREQ")).kind == "ended"


async def test_stop_of_a_queued_job_ends_it_before_it_runs(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    model = ScriptedModel([])
    turns, _ = make_turns(redis, keys, model)
    job_id = await start(turns, thread)

    assert (await turns.controls.stop(job_id, "UREQ")).kind == "cancelled"
    assert await turns.runner.run_job(job_id) is None
    assert model.requests == []


async def test_stop_of_a_running_job_is_a_flag_the_next_checkpoint_reads(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    turns: Turns

    async def first(request: object) -> object:
        outcome = await turns.controls.stop(job_id, "UREQ")
        assert outcome.kind == "signalled"
        return calls(call("check", "c1", host="web-03"))

    model = ScriptedModel([first, text("never")])  # type: ignore[list-item]
    turns, _ = make_turns(redis, keys, model)
    job_id = await start(turns, thread)

    result = await turns.runner.run_job(job_id)
    assert result is not None and result.stop_reason is StopReason.CANCELLED
    assert result.error == "stopped by <@UREQ>"
    assert len(model.requests) == 1


async def test_continue_raises_the_limit_by_its_original_value_each_time(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    looping = [calls(call("check", f"c{i}", host=f"web-{i}")) for i in range(6)]
    model = ScriptedModel([*looping, text("done")])
    turns, _ = make_turns(redis, keys, model)
    job_id = await start(turns, thread)

    first = await turns.runner.run_job(job_id)
    assert first is not None and first.stop_reason is StopReason.LIMIT_ITERATIONS
    raised = await turns.controls.raise_limit(job_id, "UREQ")
    assert not isinstance(raised, str) and raised.limits.max_iterations == 4
    assert raised.status is JobStatus.RUNNING and raised.raises[-1].by == "UREQ"
    assert isinstance(await turns.controls.raise_limit(job_id, "UREQ"), str)  # not at a limit now

    second = await turns.runner.run_job(job_id)
    assert second is not None and second.stop_reason is StopReason.LIMIT_ITERATIONS
    again = await turns.controls.raise_limit(job_id, "UOTHER")
    assert not isinstance(again, str) and again.limits.max_iterations == 6  # +2, not +4
    assert [r.by for r in again.raises] == ["UREQ", "UOTHER"]
    third = await turns.runner.run_job(job_id)
    assert third is not None and third.stop_reason is StopReason.LIMIT_ITERATIONS
    assert third.state.iterations == 6  # the same job's progress, carried on


async def test_the_scanner_expires_a_card_and_resumes_its_job(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    model = ScriptedModel([calls(call("restart", "c1", host="web-03")), text("skipped it")])
    turns, cards = make_turns(redis, keys, model, ttl=60)
    job_id = await start(turns, thread)
    await turns.runner.run_job(job_id)
    expired: list[ApprovalRecord] = []
    scheduled: list[str] = []

    async def on_expired(approval: ApprovalRecord) -> None:
        expired.append(approval)

    early = Scanner(turns, schedule=scheduled.append, on_expired=on_expired)
    await early.scan()
    assert expired == [] and scheduled == []  # not yet
    later = Scanner(
        turns, schedule=scheduled.append, on_expired=on_expired, now=lambda: time.time() + 61
    )
    await later.scan()

    assert [a.status for a in expired] == ["expired"] and job_id in scheduled
    result = await turns.runner.run_job(job_id)
    assert result is not None and result.stop_reason is StopReason.COMPLETED
    tool = [m for m in model.requests[-1].messages if isinstance(m, ToolMessage)]
    assert tool[-1].content == "Error: declined: approval expired"


async def test_the_scanner_resumes_a_running_job_whose_lease_is_gone(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    model = ScriptedModel([text("all good")])
    turns, _ = make_turns(redis, keys, model)
    job_id = await start(turns, thread)
    record = await turns.stores.jobs.get(job_id)
    assert record is not None
    await turns.stores.jobs.save(record, JobStatus.RUNNING, fence=1)  # its process died
    scheduled: list[str] = []

    async def on_expired(approval: ApprovalRecord) -> None:
        raise AssertionError("no card here")

    await Scanner(turns, schedule=scheduled.append, on_expired=on_expired).scan()
    assert scheduled == [job_id]
    result = await turns.runner.run_job(job_id)
    assert result is not None and result.output == "all good"


async def test_a_job_an_earlier_version_indexed_in_the_unbucketed_key_is_taken_over(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    """A rolling upgrade: the job's process (an older version) died with the job
    running, its index entry in the single ``index:active`` key; the new scanner moves
    it into its bucket and takes the job over."""
    model = ScriptedModel([text("all good")])
    turns, _ = make_turns(redis, keys, model)
    job_id = await start(turns, thread)
    record = await turns.stores.jobs.get(job_id)
    assert record is not None
    await turns.stores.jobs.save(record, JobStatus.RUNNING, fence=1)
    bucket = keys.active_jobs(job_bucket(job_id))
    score = await redis.zscore(bucket, job_id)
    assert score is not None
    await redis.zrem(bucket, job_id)
    await redis.zadd(keys.unbucketed("active"), {job_id: score})
    scheduled: list[str] = []

    async def on_expired(approval: ApprovalRecord) -> None:
        raise AssertionError("no card here")

    await Scanner(turns, schedule=scheduled.append, on_expired=on_expired).scan()
    assert scheduled == [job_id]
    assert not await redis.exists(keys.unbucketed("active"))
    result = await turns.runner.run_job(job_id)
    assert result is not None and result.output == "all good"


async def test_the_scanner_posts_a_card_that_never_reached_the_thread(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    model = ScriptedModel([calls(call("restart", "c1", host="web-03"))])
    notes = Notes(cards_fail=True)
    turns, cards = make_turns(redis, keys, model, notes=notes)
    job_id = await start(turns, thread)
    try:
        await turns.runner.run_job(job_id)
    except RuntimeError:
        pass  # the pause is saved; only the card is missing
    stored = await turns.stores.jobs.get(job_id)
    assert stored is not None and stored.status is JobStatus.AWAITING_APPROVAL and cards == []

    notes.cards_fail = False

    async def on_expired(approval: ApprovalRecord) -> None:
        raise AssertionError("not expired")

    scanner = Scanner(turns, schedule=lambda _: None, on_expired=on_expired)
    await scanner.scan()
    assert cards == []  # a poster claimed it moments ago: not yet taken over
    await redis.hset(
        keys.approval(job_id, "c1"), "card_ts", f"posting:{time.time() - 60!r}"
    )  # the claim of a poster that died a minute ago
    await turns.stores.jobs.index(job_id, time.time())
    await scanner.scan()
    assert len(cards) == 1 and cards[0].call_id == "c1"
    posted = await turns.stores.approvals.get(job_id, "c1")
    assert posted is not None and posted.card_ts == card_ts(1)  # recorded with the approval
    await turns.stores.jobs.index(job_id, time.time())
    await scanner.scan()
    assert len(cards) == 1  # posted once


async def test_the_scanner_shows_replies_a_dead_process_left_off_the_card(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    """A reply was persisted while the card waited, and the process that received it died
    before editing the card: the next look at the paused job shows it, once."""
    model = ScriptedModel([calls(call("restart", "c1", host="web-03"))])
    turns, cards = make_turns(redis, keys, model)
    job_id = await start(turns, thread)
    paused = await turns.runner.run_job(job_id)
    assert paused is not None and paused.stop_reason is StopReason.AWAITING_APPROVAL
    shown: list[ApprovalRecord] = []

    async def on_replies(approval: ApprovalRecord) -> None:
        shown.append(approval)
        seq = await turns.stores.receipts.count(thread)
        await turns.stores.approvals.replies_shown(approval.job_id, approval.call_id, seq)

    async def on_expired(approval: ApprovalRecord) -> None:
        raise AssertionError("not expired")

    scanner = Scanner(turns, schedule=lambda _: None, on_expired=on_expired, on_replies=on_replies)
    await turns.stores.jobs.index(job_id, time.time())
    await scanner.scan()
    assert len(shown) == 1  # the card never recorded what it shows: looked at once
    assert shown[0].call_id == "c1"

    await turns.stores.jobs.index(job_id, time.time())
    await scanner.scan()
    assert len(shown) == 1  # nothing new in the thread

    reply_ts = f"{time.time():.6f}"
    receipt = await turns.receiver.receive(
        thread, ts=reply_ts, user="UALICE", text="don't", reply=True
    )
    assert receipt.outcome == "joined"  # persisted; its process "dies" here
    await turns.stores.jobs.index(job_id, time.time())
    await scanner.scan()
    assert len(shown) == 2
    replies = await turns.stores.card_replies.of(shown[1])
    assert [(r.author, r.text) for r in replies] == [("UALICE", "don't")]

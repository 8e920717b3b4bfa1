"""Every fact that carries authority stages its audit entry in the same script as the fact.

Approvals requested and decided, writes started, finished and found unknown, limits
raised, jobs stopped and hand-run calls: each leaves exactly one entry in its thread's
outbox with the fact, none without it (a refused or failed fact stages nothing), and the
outbox chains into a log that verifies.
"""

from __future__ import annotations

import json

import pytest
import redis.asyncio as aioredis

from bot.emulator.redis_server import ManagedRedis
from bot.store.approvals import ApprovalRecord, Approvals
from bot.store.audit import AuditLog
from bot.store.cli_calls import CliCalls
from bot.store.connection import StoreError, StoreUnavailable, connect
from bot.store.jobs import JobLimits, Jobs, JobStatus
from bot.store.keys import Keys, Thread
from bot.store.ledger import RedisLedger
from bot.turns.controls import Controls
from tests.store.approval_kit import pending_approval

NOW = 1_700_000_000.0
HASH = "b" * 64
APPROVER, REQUESTER = "U0APPROV1", "U0REQUES1"


def pending(thread: Thread, call_id: str = "call_1", **update: object) -> ApprovalRecord:
    return pending_approval(
        thread,
        args_hash=HASH,
        call_id=call_id,
        requested_at=NOW,
        arguments={"service": "nginx", "host": "web-03"},
        reason="nginx is wedged",
        dry_run_output="would restart nginx on web-03",
        requester=REQUESTER,
        **update,
    )


async def outbox(redis: aioredis.Redis, keys: Keys, thread: Thread) -> list[dict[str, object]]:
    raw = await redis.lrange(keys.audit_outbox(thread.tag), 0, -1)
    return [json.loads(r) for r in raw]


async def test_a_new_approval_stages_its_request_once(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    approvals = Approvals(redis, keys)
    await approvals.create(pending(thread))
    await approvals.create(pending(thread))  # a resumed job asking again: nothing new

    (entry,) = await outbox(redis, keys, thread)
    assert entry["kind"] == "approval_requested"
    assert entry["id"] == f"approval_requested:{thread.job_id(1)}:call_1"
    assert entry["tool"] == "restart_service" and entry["args_hash"] == HASH
    assert entry["arguments"] == {"service": "nginx", "host": "web-03"}
    detail = entry["detail"]
    assert isinstance(detail, dict)
    assert detail["dry_run_output"] == "would restart nginx on web-03"
    assert detail["requester"] == REQUESTER
    assert await redis.zscore(keys.audit_pending_of(thread.tag), thread.tag) is not None


async def test_the_winning_decision_is_staged_with_its_card_and_a_losing_one_is_not(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    approvals = Approvals(redis, keys)
    job_id = thread.job_id(1)
    await approvals.create(pending(thread))
    await approvals.set_card(job_id, "call_1", "1700000001.000200")

    won = await approvals.decide(
        job_id, "call_1", outcome="approved", by=APPROVER, args_hash=HASH, now=NOW + 5
    )
    lost = await approvals.decide(
        job_id, "call_1", outcome="denied", by="U0OTHER11", args_hash=HASH, now=NOW + 6
    )

    assert won is not None and won.won and lost is not None and not lost.won
    entries = await outbox(redis, keys, thread)
    assert [e["kind"] for e in entries] == ["approval_requested", "approval_decided"]
    decided = entries[1]
    assert decided["actor"] == APPROVER and decided["outcome"] == "approved"
    assert decided["tool"] == "restart_service" and decided["args_hash"] == HASH
    assert decided["detail"] == {"card_ts": "1700000001.000200", "requester": REQUESTER}
    assert decided["at"] == NOW + 5


async def test_a_decision_that_fails_half_way_records_neither_decision_nor_entry(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    """A script is not rolled back when it fails: every read that can fail comes first."""
    approvals = Approvals(redis, keys)
    job_id = thread.job_id(1)
    await approvals.create(pending(thread))
    await redis.hset(keys.approval(job_id, "call_1"), "data", "{not json")

    with pytest.raises(StoreError):
        await approvals.decide(
            job_id, "call_1", outcome="approved", by=APPROVER, args_hash=HASH, now=NOW + 5
        )

    assert await redis.hget(keys.approval(job_id, "call_1"), "status") == "pending"
    assert [e["kind"] for e in await outbox(redis, keys, thread)] == ["approval_requested"]


async def test_with_redis_down_a_decision_is_refused_and_nothing_is_half_recorded(
    fresh_server: ManagedRedis, keys: Keys, thread: Thread
) -> None:
    client = connect(fresh_server.url, socket_timeout_s=0.5, connect_timeout_s=0.5)
    try:
        approvals = Approvals(client, keys)
        job_id = thread.job_id(1)
        await approvals.create(pending(thread))
        fresh_server.stop()
        with pytest.raises(StoreUnavailable):
            await approvals.decide(
                job_id, "call_1", outcome="approved", by=APPROVER, args_hash=HASH, now=NOW + 5
            )
        fresh_server.start()
        record = await approvals.get(job_id, "call_1")
        assert record is not None and record.status == "pending"
        assert [e["kind"] for e in await outbox(client, keys, thread)] == ["approval_requested"]
    finally:
        await client.aclose()


async def test_writes_stage_started_finished_and_unknown_with_the_approver(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    approvals = Approvals(redis, keys)
    ledger = RedisLedger(redis, keys, now=lambda: NOW + 10)
    job_id = thread.job_id(1)
    await approvals.create(pending(thread))
    await approvals.decide(
        job_id, "call_1", outcome="approved", by=APPROVER, args_hash=HASH, now=NOW + 5
    )
    await approvals.create(pending(thread, call_id="call_2"))
    await approvals.decide(
        job_id, "call_2", outcome="approved", by=APPROVER, args_hash=HASH, now=NOW + 6
    )

    assert await ledger.begin(f"{job_id}:call_1", "restart_service", HASH) is None
    await ledger.finish(f"{job_id}:call_1", "restarted nginx\n" + "x" * 10_000)
    assert await ledger.begin(f"{job_id}:call_1", "restart_service", HASH) is not None
    assert await ledger.begin(f"{job_id}:call_2", "restart_service", HASH) is None
    resumed = RedisLedger(redis, keys, now=lambda: NOW + 20)  # a crash, resumed later
    found = await resumed.begin(f"{job_id}:call_2", "restart_service", HASH)

    assert found is not None and found.state == "started"
    writes = [e for e in await outbox(redis, keys, thread) if str(e["kind"]).startswith("write")]
    assert [(e["kind"], e["call_id"]) for e in writes] == [
        ("write_started", "call_1"),
        ("write_finished", "call_1"),  # the replay answered by the ledger adds nothing
        ("write_started", "call_2"),
        ("write_unknown", "call_2"),
    ]
    assert {e["actor"] for e in writes} == {APPROVER}
    finished = writes[1]
    assert finished["outcome"] == "ok" and finished["tool"] == "restart_service"
    detail = finished["detail"]
    assert isinstance(detail, dict)
    assert detail["idempotency_key"] == f"{job_id}:call_1"
    assert (
        str(detail["result"]).startswith("restarted nginx") and len(str(detail["result"])) < 2_200
    )


async def test_a_stop_and_a_limit_raise_are_staged_with_who_did_them(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    jobs = Jobs(redis, keys)
    approvals = Approvals(redis, keys)
    limits = JobLimits(max_iterations=3, deadline_s=60, token_budget=1000)
    record = await jobs.create(thread, requester=REQUESTER, limits=limits)
    running = await jobs.save(record, JobStatus.RUNNING, fence=1)
    ended = await jobs.save(running, JobStatus.LIMIT_ITERATIONS, fence=1)

    raised = await Controls(approvals, jobs).raise_limit(ended.id, APPROVER, seq=0)
    assert not isinstance(raised, str)
    outcome = await Controls(approvals, jobs).stop(ended.id, REQUESTER)  # running: by flag
    again = await Controls(approvals, jobs).stop(ended.id, REQUESTER)  # a second Stop: none

    assert outcome.kind == "signalled" and again.kind == "signalled"
    entries = await outbox(redis, keys, thread)
    assert [(e["kind"], e["actor"]) for e in entries] == [
        ("limit_raised", APPROVER),
        ("job_stopped", REQUESTER),
    ]
    assert entries[0]["detail"] == {"limit": "iterations", "amount": 3, "from": 3, "to": 6}

    other = await jobs.create(Thread("C9", "1700000000.000900"), requester=REQUESTER, limits=limits)
    cancelled = await Controls(approvals, jobs).stop(other.id, APPROVER)  # queued: ended at once
    assert cancelled.kind == "cancelled"
    (entry,) = await outbox(redis, keys, Thread("C9", "1700000000.000900"))
    assert entry["kind"] == "job_stopped" and entry["detail"] == {"while": "queued"}


async def test_a_refused_save_stages_nothing(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    jobs = Jobs(redis, keys)
    limits = JobLimits(max_iterations=3, deadline_s=60, token_budget=1000)
    record = await jobs.create(thread, requester=REQUESTER, limits=limits)
    await jobs.save(record, JobStatus.RUNNING, fence=1)
    controls = Controls(Approvals(redis, keys), jobs)
    stale = await controls.raise_limit(record.id, APPROVER, seq=0)  # not stopped by a limit
    assert isinstance(stale, str)
    assert await outbox(redis, keys, thread) == []


async def test_a_hand_run_call_is_audited_as_its_shell_user(
    redis: aioredis.Redis, keys: Keys
) -> None:
    calls = CliCalls(redis, keys, now=lambda: NOW)
    job = await calls.begin(
        user="alice",
        tool="restart_service",
        call_id="cli_1",
        args_hash=HASH,
        confirmed_by="U0APPROV1",
        timeout_s=30,
        arguments={"service": "nginx"},
        category="mutating",
    )
    await calls.finish(
        job,
        call_id="cli_1",
        tool="restart_service",
        ok=True,
        output="restarted",
        active_s=0.1,
        trace=[],
    )
    raw = await redis.lrange(keys.audit_outbox(job.thread.tag), 0, -1)
    entries = [json.loads(r) for r in raw]
    assert [(e["kind"], e["actor"]) for e in entries] == [
        ("cli_run", "cli:alice"),
        ("write_finished", "cli:alice"),
    ]
    assert entries[0]["arguments"] == {"service": "nginx"}


async def test_staged_entries_chain_into_a_log_that_verifies(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    approvals = Approvals(redis, keys)
    ledger = RedisLedger(redis, keys, now=lambda: NOW + 10)
    job_id = thread.job_id(1)
    await approvals.create(pending(thread))
    await approvals.decide(
        job_id, "call_1", outcome="approved", by=APPROVER, args_hash=HASH, now=NOW + 5
    )
    await ledger.begin(f"{job_id}:call_1", "restart_service", HASH)
    await ledger.finish(f"{job_id}:call_1", "restarted")

    log = AuditLog(redis, keys)
    chained = await log.publish(thread.tag)

    assert [e.kind for e in chained] == [
        "approval_requested",
        "approval_decided",
        "write_started",
        "write_finished",
    ]
    assert await outbox(redis, keys, thread) == []
    assert (await log.verify()).ok
    listed = [e async for e in log.entries(user=APPROVER)]
    assert {e.kind for e in listed} >= {"approval_decided", "write_started", "write_finished"}

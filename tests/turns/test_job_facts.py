"""The job's facts block, rendered by code from what Redis holds: the request and who
asked, every approval and who decided it, every write with its outcome, the limits
raised and by whom, the corrections people typed (``bot.turns.facts``)."""

from __future__ import annotations

import time

import redis.asyncio as aioredis

from bot.agent import AssistantMessage, RunState, ToolCall, UserMessage
from bot.store.approvals import ApprovalRecord, Approvals
from bot.store.history import RedisHistory
from bot.store.jobs import JobLimits, Jobs, LimitRaise
from bot.store.keys import Keys, Thread
from bot.store.ledger import RedisLedger
from bot.turns.facts import HEADING, job_facts

LIMITS = JobLimits(max_iterations=10, deadline_s=600, token_budget=100_000)
REQUEST_TS = "1700000000.000100"


def approval(job_id: str, call_id: str, tool: str, **arguments: object) -> ApprovalRecord:
    now = time.time()
    return ApprovalRecord(
        job_id=job_id,
        call_id=call_id,
        tool=tool,
        category="mutating",
        args_hash=f"h-{call_id}",
        arguments=arguments,
        requester="UREQ",
        channel="C123",
        thread_ts=REQUEST_TS,
        requested_at=now,
        expires_at=now + 600,
    )


async def test_the_facts_come_from_the_records_not_from_the_conversation(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    jobs = Jobs(redis, keys)
    record = await jobs.create(thread, requester="UREQ", limits=LIMITS, request_ts=REQUEST_TS)
    job = record.id
    history = RedisHistory(redis, keys, thread)
    await history.history()
    history.append(
        UserMessage(content="<@UALERT>: [FIRING] HighCPU", source_id=f"{REQUEST_TS}:context")
    )
    history.append(
        UserMessage(content="<@UREQ>: web-03 is at 95% CPU, look into it", source_id=REQUEST_TS)
    )
    history.append(
        AssistantMessage(
            content=None,
            tool_calls=(
                ToolCall(id="w1", name="restart_service", arguments='{"service":"nginx"}'),
            ),
        )
    )
    history.append(
        UserMessage(
            content="<@UOPS>: it's the db, not nginx — token=abcd1234efgh5678",
            source_id="1700000000.000300",
        )
    )
    await history.flush()

    approvals = Approvals(redis, keys)
    ledger = RedisLedger(redis, keys)
    now = time.time()
    for call_id, tool, outcome, by in (
        ("w1", "restart_service", "approved", "UAPPROVER"),
        ("w2", "scale", "denied", "UDENIER"),
        ("w3", "restart_service", "approved", "UAPPROVER"),
    ):
        await approvals.create(approval(job, call_id, tool, service="nginx", confirmed_by="UMODEL"))
        await approvals.decide(job, call_id, outcome=outcome, by=by, args_hash=None, now=now)  # type: ignore[arg-type]
    await approvals.create(approval(job, "w4", "delete_pod", name="web-7"))
    await ledger.begin(f"{job}:w1", "restart_service", "h-w1")
    await ledger.finish(f"{job}:w1", "restarted nginx on web-03\nunit active")
    await ledger.begin(f"{job}:w3", "restart_service", "h-w3")  # the process died here

    record = record.model_copy(
        update={
            "progress": RunState(call_ids=["r0", "w1", "w2", "w3", "w4"]),
            "raises": [LimitRaise(limit="iterations", amount=10, by="ULEAD", at=now)],
        }
    )
    text = await job_facts(record, history.originals, approvals, ledger)
    lines = text.splitlines()

    assert lines[0] == HEADING
    assert lines[1] == '- Request by <@UREQ>: "<@UREQ>: web-03 is at 95% CPU, look into it"'
    assert '  - restart_service {"service": "nginx"}: approved by <@UAPPROVER>' in lines
    assert '  - scale {"service": "nginx"}: denied by <@UDENIER>' in lines
    assert '  - delete_pod {"name": "web-7"}: waiting for a decision' in lines
    done = [line for line in lines if ": done" in line]
    assert done == [
        '  - restart_service {"service": "nginx"}: done, it said "restarted nginx on web-03 …"'
    ]
    unknown = [line for line in lines if "outcome unknown" in line]
    assert len(unknown) == 1 and unknown[0].startswith("  - restart_service")
    assert "  - iterations +10 by <@ULEAD>" in lines
    corrections = lines[lines.index("- Corrections people typed in the thread:") + 1 :]
    # The correction, its credential scrubbed; not the alert read as context, not the request.
    assert len(corrections) == 1 and corrections[0].startswith("  - \"<@UOPS>: it's the db")
    assert "abcd1234efgh5678" not in text and "HighCPU" not in text


async def test_a_job_with_nothing_decided_says_so(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    record = await Jobs(redis, keys).create(thread, requester="UREQ", limits=LIMITS)
    text = await job_facts(record, [], Approvals(redis, keys), RedisLedger(redis, keys))
    assert text.splitlines()[1:] == [
        "- Request by <@UREQ>: (the thread's replies that started this job)",
        "- Approvals (decided by the person named): none asked.",
        "- Changes run (approved writes): none.",
        "- Limits raised: none.",
        "- Corrections people typed in the thread: none.",
    ]

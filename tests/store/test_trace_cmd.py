"""``opsloop trace``'s pieces: which targets it reads, and how a job's record and trace
read to a person (limits raised, a Stop, a fallback, an expired card, a dry run)."""

from __future__ import annotations

import pytest

from bot.agent.messages import Usage
from bot.agent.state import RunState, StopReason
from bot.cli.trace import ARGS_CHARS, JobTrace, Target, parse_target, render
from bot.store.approvals import ApprovalRecord
from bot.store.jobs import JobLimits, JobRecord, JobStatus, LimitRaise
from bot.store.keys import Thread
from bot.store.trace import (
    ApprovalEntry,
    CondenseEntry,
    EndEntry,
    FallbackEntry,
    LimitEntry,
    ModelCallEntry,
    ToolEntry,
)

T0 = 1_780_000_000.0  # 2026-05-28 20:26:40 UTC
THREAD = Thread("C0INC", "1780000000.000100")


@pytest.mark.parametrize(
    ("text", "target"),
    [
        ("C0INC:1780000000.000100:j3", Target(THREAD, 3)),
        ("C0INC:1780000000.000100", Target(THREAD)),
        (" G01:1780000000.000100:j1 \n", Target(Thread("G01", "1780000000.000100"), 1)),
        ("https://acme.slack.com/archives/C0INC/p1780000000000100", Target(THREAD)),
        (  # a reply's link names its thread
            "https://acme.slack.com/archives/C0INC/p1780000055000200"
            "?thread_ts=1780000000.000100&cid=C0INC",
            Target(THREAD),
        ),
    ],
)
def test_targets_it_reads(text: str, target: Target) -> None:
    assert parse_target(text) == target


@pytest.mark.parametrize(
    "text",
    [
        "",
        "web-03",
        "C0INC:1780000000.000100:j0",
        "C0INC:1780000000:j1",
        "c0inc:1780000000.000100",
        "https://acme.slack.com/archives/C0INC",
        "https://acme.slack.com/archives/C0INC/p178000000000010x",
        "file:///archives/C0INC/p1780000000000100",
    ],
)
def test_anything_else_is_refused_saying_what_is_accepted(text: str) -> None:
    with pytest.raises(ValueError, match="give a job id .* or a Slack message link"):
        parse_target(text)


def test_a_link_with_a_bad_thread_ts_says_so() -> None:
    with pytest.raises(ValueError, match="thread_ts 'x' is not a Slack timestamp"):
        parse_target("https://a.slack.com/archives/C1/p1780000000000100?thread_ts=x")


def job(**update: object) -> JobRecord:
    record = JobRecord(
        id=THREAD.job_id(2),
        channel=THREAD.channel,
        thread_ts=THREAD.thread_ts,
        requester="UALICE",
        created_at=T0,
        updated_at=T0 + 90,
        limits=JobLimits(max_iterations=20, deadline_s=3600, token_budget=200_000),
    )
    return record.model_copy(update=update)


def test_a_stopped_job_after_a_continue_reads_as_what_happened() -> None:
    usage = Usage(prompt_tokens=30_000, completion_tokens=1_200, cached_tokens=10_000)
    record = job(
        status=JobStatus.CANCELLED,
        error="stopped by <@UBOB>",
        raises=[LimitRaise(limit="iterations", amount=20, by="UBOB", at=T0 + 40)],
        progress=RunState(
            iterations=21,
            model_calls=22,
            tool_executions=19,
            usage=usage,
            active_time_s=61.25,
            model="gpt-big",
            switches=["gpt-small -> gpt-big: 503"],
            tools_used=["host_cpu", "delete_pod"],
        ),
    )
    approval = ApprovalRecord(
        job_id=record.id,
        call_id="c9",
        tool="delete_pod",
        category="destructive",
        args_hash="h",
        arguments={"pod": "web-7"},
        requester="UALICE",
        channel=THREAD.channel,
        thread_ts=THREAD.thread_ts,
        requested_at=T0 + 50,
        expires_at=T0 + 80,
        status="expired",
        decided_at=T0 + 81,
    )
    entries = [
        FallbackEntry(at=T0 + 1, model="gpt-small", to_model="gpt-big", error="HTTP 503"),
        ModelCallEntry(
            at=T0 + 2.5, iteration=1, model="gpt-big", attempt=2, duration_s=1.5, usage=usage
        ),
        ModelCallEntry(at=T0 + 3, iteration=2, model="gpt-big", duration_s=30, error="timeout"),
        ToolEntry(
            at=T0 + 4,
            call_id="c1",
            tool="host_cpu",
            ran=True,
            is_error=False,
            duration_s=0.5,
            output_chars=1_234,
            arguments='{"q": "' + "x" * 500 + '"}',
        ),
        LimitEntry(at=T0 + 39, stop_reason=StopReason.LIMIT_ITERATIONS, detail="20 of 20"),
        CondenseEntry(at=T0 + 45, replaced=40),
        ToolEntry(
            at=T0 + 49,
            call_id="c9",
            tool="delete_pod",
            ran=True,
            is_error=False,
            duration_s=0.2,
            output_chars=80,
            dry_run=True,
        ),
        ApprovalEntry(at=T0 + 50, call_id="c9", tool="delete_pod", args_hash="h"),
        ApprovalEntry(at=T0 + 51, call_id="c10", tool="delete_pod", args_hash="h2"),
        EndEntry(
            at=T0 + 90,
            stop_reason=StopReason.CANCELLED,
            error="stopped by <@UBOB>",
            iterations=21,
            model_calls=22,
            tool_executions=19,
            usage=usage,
        ),
    ]
    text = render(JobTrace(record, list(entries), {"c9": approval}))
    lines = text.splitlines()
    assert lines[:6] == [
        "Job C0INC:1780000000.000100:j2 — cancelled",
        "  thread C0INC 1780000000.000100 · started by UALICE · 2026-05-28 20:26:40 UTC",
        "  21 of 20 iterations · 21,200 of 200,000 tokens · 61.2 s of 3600 s active · "
        "19 tool runs (host_cpu, delete_pod)",
        "  model gpt-big (switched: gpt-small -> gpt-big: 503)",
        "  Continue: iterations +20 by UBOB at 20:27:20.0",
        "  stopped: stopped by <@UBOB>",
    ]
    timeline = lines[7:]
    assert timeline == [
        "  20:26:41.0     +1.0s  fallback  gpt-small → gpt-big: HTTP 503",
        "  20:26:42.5     +2.5s  model     iteration 1 · gpt-big · 1.50 s · attempt 2 · "
        "30,000 in (10,000 cached) / 1,200 out tokens",
        "  20:26:43.0     +3.0s  model     iteration 2 · gpt-big · 30.0 s · failed: timeout",
        f'  20:26:44.0     +4.0s  tool      host_cpu {{"q": "{"x" * (ARGS_CHARS - 8)}… · '
        "ran 0.50 s · 1,234 chars out",
        "  20:27:19.0    +39.0s  limit     limit_iterations: 20 of 20",
        "  20:27:25.0    +45.0s  condense  40 messages condensed into a summary",
        "  20:27:29.0    +49.0s  tool      delete_pod · dry run, ran 0.20 s · 80 chars out",
        "  20:27:30.0    +50.0s  approval  delete_pod (destructive, call c9) · "
        "expired at 20:28:01.0",
        "  20:27:31.0    +51.0s  approval  delete_pod (call c10) · its record is gone",
        "  20:28:10.0    +90.0s  end       cancelled · 21 iterations · 22 model calls · "
        "19 tool runs · 21,200 tokens · stopped by <@UBOB>",
    ]


def test_the_answer_closes_the_story_and_a_long_one_is_cut() -> None:
    text = render(JobTrace(job(status=JobStatus.COMPLETED, output="web is fine.\nNo action."), []))
    assert text.splitlines()[-3:] == ["  answer:", "    web is fine.", "    No action."]
    long = render(JobTrace(job(output="x" * 5_000), []))
    assert long.splitlines()[-1].endswith("… [5,000 chars; --json has it all]")


def test_a_queued_job_has_no_timeline_yet() -> None:
    text = render(JobTrace(job(), []))
    assert text.splitlines()[0] == "Job C0INC:1780000000.000100:j2 — queued"
    assert text.splitlines()[-1] == (
        "  (no trace entries: the job has not run yet, or its trace expired)"
    )

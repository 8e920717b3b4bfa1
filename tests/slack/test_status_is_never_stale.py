"""The status message tells the truth to the end: the job's active time (across runs, not
wall time since posting), its ending really edited before the job lets go (a shutdown right
after cannot leave "Working…"), "Resuming…" when this process lets the job go, and a
cancelled ending that says "cancelled" once where people read it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from bot.agent.events import ModelRequestEnd, ModelRequestStart, RunEnd, ToolStart
from bot.agent.messages import Usage
from bot.agent.state import RunResult, RunState, StopReason
from bot.agent.testing import FakeClock
from bot.emulator.slack import FakeSlack
from bot.slack.progress import JobProgress, budget_sender
from bot.slack.status_blocks import ending_message
from bot.slack.updates import UpdateBudget
from bot.store.jobs import JobLimits, JobRecord

CHANNEL = "C1"
THREAD = "1700000000.000001"


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as fake:
        yield fake


@pytest.fixture
def client(slack: FakeSlack) -> AsyncWebClient:
    return AsyncWebClient(token="xoxb-test", base_url=slack.api_url)


def record(active_s: float = 0.0) -> JobRecord:
    return JobRecord(
        id="C1:1700000000.000001:j1",
        channel=CHANNEL,
        thread_ts=THREAD,
        requester="U1",
        created_at=0.0,
        updated_at=0.0,
        limits=JobLimits(max_iterations=10, deadline_s=3600, token_budget=100_000),
        progress=RunState(active_time_s=active_s),
    )


def done(active_s: float) -> RunResult:
    return RunResult(
        stop_reason=StopReason.COMPLETED,
        output=None,
        iterations=1,
        model_calls=1,
        tool_executions=0,
        usage=Usage(prompt_tokens=10, completion_tokens=5),
        tools_used=[],
        state=RunState(active_time_s=active_s),
    )


async def test_the_status_shows_the_jobs_active_time_across_runs(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    budget = UpdateBudget(budget_sender(client), per_minute=6_000, burst=50)
    clock = FakeClock()
    # A resumed run: the job was active 2 minutes before its card waited (any length).
    progress = JobProgress(client, budget, record(active_s=120), team_id=None, clock=clock)
    await progress.start()
    progress(ModelRequestStart(iteration=2, model="m", attempt=1))
    progress(ModelRequestEnd(2, "m", 1.0, Usage(prompt_tokens=1, completion_tokens=1)))
    clock.advance(30)  # a tool runs for 30 s: active time, though no model call
    progress(ToolStart(call_id="c1", tool="check_host", arguments={}))
    await budget.drain(CHANNEL, str(progress.status_ts))
    assert "2m 30s" in slack.message(CHANNEL, str(progress.status_ts)).text
    progress(RunEnd(done(active_s=175)))  # the run state's own count wins at the end
    await asyncio.wait_for(progress.done.wait(), 10)
    await budget.aclose()


async def test_the_ending_is_edited_before_the_job_lets_go(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    # A workspace budget with no token to spare: the ending waits its turn.
    budget = UpdateBudget(budget_sender(client), per_minute=60, burst=1)
    progress = JobProgress(client, budget, record(), team_id=None, clock=FakeClock())
    await progress.start()
    progress(ToolStart(call_id="c1", tool="check_host", arguments={}))  # takes the token
    progress(RunEnd(done(active_s=3)))
    await asyncio.wait_for(progress.done.wait(), 10)
    assert progress.delivered
    await budget.aclose()  # the process stops right after (a deploy's SIGTERM)
    assert slack.message(CHANNEL, str(progress.status_ts)).text.startswith("Done")


async def test_a_run_this_process_lets_go_leaves_resuming_not_working(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    budget = UpdateBudget(budget_sender(client), per_minute=6_000, burst=50)
    progress = JobProgress(client, budget, record(), team_id=None, clock=FakeClock())
    await progress.start()
    progress(ToolStart(call_id="c1", tool="check_host", arguments={}))
    await progress.abandon()  # handed over at a shutdown
    await budget.aclose()
    status = slack.message(CHANNEL, str(progress.status_ts))
    assert status.text.startswith("Resuming…") and "Working" not in status.text
    assert "running" not in status.text  # no tool is shown running in this process


def test_a_cancelled_ending_says_cancelled_once_where_people_read_it() -> None:
    message = ending_message(
        StopReason.CANCELLED,
        job_id="C1:1.0:j1",
        iterations=1,
        max_iterations=10,
        tokens=10,
        token_budget=100,
        tools_run=0,
        by="UALICE",
    )
    headline = message.blocks[0]["text"]["text"]
    assert headline == "Cancelled by <@UALICE>"
    shown = " ".join(str(b) for b in message.blocks).lower()
    assert shown.count("cancelled") == 1
    assert "`cancelled`" in message.text  # the code stays in text (DESIGN)

"""At a shutdown nobody waits for the paced ``chat.update`` budget (``hand_over``): an
ended job whose ending (or the final edit of its streamed answer) is still queued there
lets go at once, its ending left owed for another process, never half-shown here; what
is queued is still sent while the process lives."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from bot.agent.events import ModelRequestEnd, ModelRequestStart, RunEnd, StreamDelta, ToolStart
from bot.agent.messages import Usage
from bot.agent.state import RunResult, RunState, StopReason
from bot.agent.testing import FakeClock
from bot.emulator.slack import FakeSlack
from bot.slack.blockkit import Message
from bot.slack.progress import JobProgress, budget_sender
from bot.slack.updates import HandedOver, Tracked, UpdateBudget, edit_urgently
from bot.store.jobs import JobLimits, JobRecord

CHANNEL = "C1"
THREAD = "1700000000.000001"
STREAMED = "Result: " + " ".join(f"check {i} passed" for i in range(40))  # past start_chars


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as fake:
        yield fake


@pytest.fixture
def client(slack: FakeSlack) -> AsyncWebClient:
    return AsyncWebClient(token="xoxb-test", base_url=slack.api_url)


class FullBudget(UpdateBudget):
    """A budget minutes behind (no token now, the next in a minute) that says when an
    urgent edit someone waits for (``Tracked``) is queued."""

    def __init__(self, client: AsyncWebClient) -> None:
        super().__init__(budget_sender(client), per_minute=1, burst=1)
        self._tokens = 0.0  # the burst spent (by other jobs' edits)
        self.queued = asyncio.Event()

    def submit(self, channel: str, ts: str, payload: Any, *, urgent: bool = False) -> asyncio.Event:
        done = super().submit(channel, ts, payload, urgent=urgent)
        if isinstance(payload, Tracked):
            self.queued.set()
        return done


async def ending_queued(budget: FullBudget) -> None:
    await asyncio.wait_for(budget.queued.wait(), 5)


def record() -> JobRecord:
    return JobRecord(
        id="C1:1700000000.000001:j1",
        channel=CHANNEL,
        thread_ts=THREAD,
        requester="U1",
        created_at=0.0,
        updated_at=0.0,
        limits=JobLimits(max_iterations=10, deadline_s=3600, token_budget=100_000),
    )


def answered(output: str | None) -> RunResult:
    return RunResult(
        stop_reason=StopReason.COMPLETED,
        output=output,
        iterations=1,
        model_calls=1,
        tool_executions=0,
        usage=Usage(prompt_tokens=10, completion_tokens=5),
        tools_used=[],
        state=RunState(active_time_s=3),
    )


async def test_a_waiting_edit_is_released_and_still_sent(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    ts = slack.add_message(CHANNEL, None, "U1", "hello")  # the budget edits any ts given
    budget = FullBudget(client)
    waiting = asyncio.create_task(edit_urgently(budget, CHANNEL, ts, Message("edited", [])))
    await ending_queued(budget)
    assert not waiting.done()
    budget.hand_over()
    with pytest.raises(HandedOver):
        await asyncio.wait_for(waiting, 5)
    with pytest.raises(HandedOver):  # a later one is not waited for either
        await asyncio.wait_for(edit_urgently(budget, CHANNEL, ts, Message("again", [])), 5)
    assert budget._pending  # still queued: sent while the process lives
    await budget.aclose()


async def test_an_ending_queued_at_the_shutdown_is_left_owed_at_once(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    budget = FullBudget(client)
    progress = JobProgress(client, budget, record(), team_id=None, clock=FakeClock())
    await progress.start()
    progress(ToolStart(call_id="c1", tool="check_host", arguments={}))
    progress(RunEnd(answered(None)))
    await ending_queued(budget)
    assert not progress.done.is_set()  # the ending waits its turn in the budget
    budget.hand_over()  # SIGTERM
    await asyncio.wait_for(progress.done.wait(), 5)
    assert not progress.delivered  # owed: another process's scanner shows it
    await budget.aclose()


async def test_a_streamed_answer_left_queued_is_not_posted_again(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    """Its final edit is queued when the shutdown begins: the answer is not posted as a
    new message beside its stream (the redelivery completes that message in place)."""
    budget = FullBudget(client)
    progress = JobProgress(client, budget, record(), team_id="T1", clock=FakeClock())
    await progress.start()
    progress(ModelRequestStart(iteration=1, model="m", attempt=1))
    progress(StreamDelta(STREAMED))
    await slack.wait_for(lambda: bool(slack.calls_of("chat.startStream")), timeout=5)
    progress(ModelRequestEnd(1, "m", 1.0, Usage(prompt_tokens=1, completion_tokens=1)))
    progress(RunEnd(answered(STREAMED)))
    await ending_queued(budget)  # the answer's final edit, first
    budget.hand_over()
    await asyncio.wait_for(progress.done.wait(), 5)
    assert not progress.delivered
    posted = [p for p in slack.calls_of("chat.postMessage") if STREAMED in str(p.get("text"))]
    assert posted == []
    assert len([m for m in slack.messages(CHANNEL, THREAD) if STREAMED in m.text]) == 1
    await budget.aclose()


async def test_a_run_let_go_at_the_shutdown_still_winds_its_streams_up(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    """The "Resuming…" edit is not waited for once the budget is handed over, and the
    stream the run had open is stopped all the same."""
    budget = FullBudget(client)
    progress = JobProgress(client, budget, record(), team_id="T1", clock=FakeClock())
    await progress.start()
    progress(ModelRequestStart(iteration=1, model="m", attempt=1))
    progress(StreamDelta(STREAMED))
    await slack.wait_for(lambda: bool(slack.calls_of("chat.startStream")), timeout=5)
    budget.hand_over()
    await asyncio.wait_for(progress.abandon(), 5)
    assert slack.calls_of("chat.stopStream")  # wound up, not left open
    await budget.aclose()

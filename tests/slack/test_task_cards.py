"""Tool steps as task cards: one job stream per run, its steps and text interleaved.

slack-sdk's real client against ``FakeSlack`` (which checks chunks like Slack and holds what
a chunk stream shows); time is a ``FakeClock``, and ``quiet()`` says when a stream's worker
has done all it can, so nothing sleeps.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.agent.events import (
    ApprovalRequested,
    Event,
    InjectedMessages,
    ModelRequestEnd,
    ModelRequestStart,
    RunEnd,
    StreamDelta,
    ToolEnd,
    ToolStart,
)
from bot.agent.messages import AssistantMessage, ToolCall, Usage
from bot.agent.state import PendingApproval, PendingBatch, RunResult, RunState, StopReason
from bot.agent.testing import FakeClock
from bot.emulator.slack import BOT_ID, TEAM_ID, FakeSlack
from bot.emulator.slack_chunks import tasks_of
from bot.slack.names import Names
from bot.slack.progress import JobProgress, budget_sender
from bot.slack.task_cards import TASK_CARDS, Timeline, task_chunk
from bot.slack.updates import UpdateBudget
from bot.store.jobs import JobLimits, JobRecord, JobStatus

CHANNEL = "C1"
THREAD = "1700000000.000001"
WAIT_S = 10.0
ANSWER = "web-03 is healthy again: the restart cleared the stuck workers."


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as fake:
        yield fake


@pytest.fixture
def client(slack: FakeSlack) -> AsyncWebClient:
    return AsyncWebClient(token="xoxb-test", base_url=slack.api_url)


@pytest.fixture
async def budget(client: AsyncWebClient) -> AsyncIterator[UpdateBudget]:
    budget = UpdateBudget(budget_sender(client), per_minute=6_000, burst=50)
    yield budget
    await budget.aclose()


@pytest.fixture(autouse=True)
def cards() -> Iterator[None]:
    TASK_CARDS.configure("timeline")
    yield
    TASK_CARDS.configure("timeline")


def record() -> JobRecord:
    return JobRecord(
        id="C1:1700000000.000001:j1",
        channel=CHANNEL,
        thread_ts=THREAD,
        requester="U1",
        created_at=0.0,
        updated_at=0.0,
        limits=JobLimits(max_iterations=10, deadline_s=600, token_budget=100_000),
    )


def result(output: str | None, reason: StopReason = StopReason.COMPLETED) -> RunResult:
    return RunResult(
        stop_reason=reason,
        output=output,
        iterations=3,
        model_calls=3,
        tool_executions=2,
        usage=Usage(prompt_tokens=10, completion_tokens=5),
        tools_used=[],
        state=RunState(),
    )


def response(iteration: int, *deltas: str, tool_calls: int = 0) -> list[Event]:
    events: list[Event] = [ModelRequestStart(iteration=iteration, model="m", attempt=1)]
    events += [StreamDelta(text=d) for d in deltas]
    usage = Usage(prompt_tokens=10, completion_tokens=5)
    events.append(ModelRequestEnd(iteration, "m", 0.1, usage, tool_calls=tool_calls))
    return events


def tool(call: str, name: str, summary: str, *, error: bool = False) -> list[Event]:
    return [
        ToolStart(call_id=call, tool=name, arguments={"host": "web-03"}),
        ToolEnd(call, name, True, error, 0.1, 40, summary=summary),
    ]


class Job:
    def __init__(
        self,
        client: AsyncWebClient,
        budget: UpdateBudget,
        clock: FakeClock,
        *,
        display: str | None = None,
    ) -> None:
        self.progress = JobProgress(
            client, budget, record(), team_id=TEAM_ID, clock=clock, task_display=display
        )
        self.clock = clock

    @classmethod
    def of(cls, progress: JobProgress) -> Job:
        job = cls.__new__(cls)
        job.progress = progress
        job.clock = FakeClock()
        return job

    async def events(self, *events: Event) -> None:
        for event in events:
            self.progress(event)
        await self.quiet()

    async def quiet(self) -> None:
        for stream in self.progress.streams:
            await stream.quiet()
        if self.progress.job_stream is not None:
            await self.progress.job_stream.quiet()

    async def tick(self) -> None:
        self.clock.advance(1.0)
        await self.quiet()

    async def end(self, run: RunResult) -> None:
        self.progress(RunEnd(run))
        await asyncio.wait_for(self.progress.done.wait(), WAIT_S)


def bot_messages(slack: FakeSlack) -> list[str]:
    return [m.ts for m in slack.messages(CHANNEL, THREAD) if m.bot_id == BOT_ID]


async def two_tool_job(job: Job) -> None:
    await job.progress.start()
    await job.events(*response(1, "Checking the host first.", tool_calls=1))
    start, end = tool("c1", "check_host", "load 0.4, 2 workers stuck")
    await job.events(start)  # the first card shows at once, running
    await job.events(end)
    await job.tick()
    await job.events(*response(2, tool_calls=1), *tool("c2", "tail_log", "3 OOM kills at 14:01"))
    await job.tick()
    await job.events(*response(3, ANSWER))
    await job.tick()


async def test_each_tool_call_is_a_task_card_between_the_notes_and_the_answer_follows(
    slack: FakeSlack, client: AsyncWebClient, budget: UpdateBudget
) -> None:
    job = Job(client, budget, FakeClock())
    await two_tool_job(job)
    await job.end(result(ANSWER))

    [start] = slack.calls_of("chat.startStream")
    assert start["task_display_mode"] == "timeline"
    assert start["recipient_user_id"] == "U1" and start["recipient_team_id"] == TEAM_ID
    assert "markdown_text" not in start
    assert start["chunks"] == [
        {"type": "markdown_text", "text": "Checking the host first.\n\n"},
        {
            "type": "task_update",
            "id": "c1",
            "title": "check_host host=web-03",
            "status": "in_progress",
        },
    ]
    steps_ts = str(job.progress.job_stream.ts)  # type: ignore[union-attr]
    stream = slack.message(CHANNEL, steps_ts)
    assert [(t["id"], t["status"], t["output"]) for t in tasks_of(stream)] == [
        ("c1", "complete", "load 0.4, 2 workers stuck"),
        ("c2", "complete", "3 OOM kills at 14:01"),
    ]
    assert [i["type"] for i in stream.extra["stream"]["items"]] == ["text", "task", "task"]
    assert not stream.streaming and len(slack.calls_of("chat.stopStream")) == 1
    # The answer is a message of its own after the steps: whole in its text, with feedback.
    [answer] = [m for m in slack.messages(CHANNEL, THREAD) if m.text == ANSWER]
    assert answer.ts > steps_ts and answer.ts not in (job.progress.status_ts,)
    assert any(b.get("type") == "context_actions" for b in answer.blocks or [])
    # The status message with Stop stays and becomes the ending.
    assert slack.message(CHANNEL, str(job.progress.status_ts)).text.startswith("Done")


NOTE = "Restarting web to clear the stuck workers."
WAITING = PendingApproval(
    call_id="c9", tool="restart_service", args_hash="h", arguments={"service": "web"}
)


def paused_record() -> JobRecord:
    """The job as Redis holds it while its card waits (what a resuming process reads)."""
    call = ToolCall(id="c9", name="restart_service", arguments='{"service": "web"}')
    batch = PendingBatch(
        message=AssistantMessage(content=NOTE, tool_calls=(call,)),
        remaining=[call],
        approval=WAITING,
    )
    return record().model_copy(
        update={"status": JobStatus.AWAITING_APPROVAL, "progress": RunState(pending=batch)}
    )


def every_card(slack: FakeSlack) -> list[dict[str, Any]]:
    return [t for m in slack.messages(CHANNEL, THREAD) for t in tasks_of(m)]


async def test_a_call_waiting_for_approval_leaves_no_pending_card_and_its_reason_is_said_once(
    slack: FakeSlack, client: AsyncWebClient, budget: UpdateBudget
) -> None:
    job = Job(client, budget, FakeClock())
    await job.progress.start()
    await job.events(*response(1, "Checking first.", tool_calls=1))
    await job.events(*tool("c1", "check_host", "2 workers stuck"))
    await job.events(*response(2, NOTE, tool_calls=1))
    await job.events(ApprovalRequested(WAITING))
    await job.end(result(None, StopReason.AWAITING_APPROVAL))

    # The run's stream is stopped at the pause with every card final: nothing is left
    # "pending" above the approval card for a process that may never come back to it.
    assert len(slack.calls_of("chat.stopStream")) == 1
    assert [(t["id"], t["status"]) for t in every_card(slack)] == [("c1", "complete")]
    # The note that came with the call is the card's reason: not also in the thread.
    shown = [json.dumps(c) for c in slack.calls if c.method.startswith("chat.")]
    assert not [c for c in shown if "Restarting web" in c]


@pytest.mark.parametrize(
    ("summary", "output"),
    [
        ("Error: declined: denied by <@UBOB>", "declined: denied by @bob"),
        ("Error: declined: approval expired", "declined: approval expired"),
        ("", "declined: see the approval card"),
    ],
)
async def test_a_declined_call_resumed_anywhere_ends_as_an_error_card(
    client: AsyncWebClient, budget: UpdateBudget, summary: str, output: str
) -> None:
    async with FakeSlack(users={"UBOB": "bob"}) as slack:
        client = AsyncWebClient(token="xoxb-test", base_url=slack.api_url)
        budget = UpdateBudget(budget_sender(client), per_minute=6_000, burst=50)
        progress = JobProgress(
            client,
            budget,
            paused_record(),
            team_id=TEAM_ID,
            clock=FakeClock(),
            names=Names.of(client),
        )
        job = Job.of(progress)
        await progress.start()
        await job.events(ToolEnd("c9", "restart_service", False, True, 0.0, 40, summary=summary))
        await job.events(*response(3, tool_calls=1), *tool("c2", "check_host", "still stuck"))
        await job.end(result(ANSWER))
        await budget.aclose()
        cards = every_card(slack)
        assert [(t["id"], t["status"]) for t in cards] == [("c9", "error"), ("c2", "complete")]
        assert cards[0]["title"] == "restart_service service=web"
        assert cards[0]["output"] == output


async def test_an_approved_call_resumed_runs_and_completes_its_card(
    slack: FakeSlack, client: AsyncWebClient, budget: UpdateBudget
) -> None:
    progress = JobProgress(client, budget, paused_record(), team_id=TEAM_ID, clock=FakeClock())
    job = Job.of(progress)
    await progress.start()
    await job.events(
        ToolStart(call_id="c9", tool="restart_service", arguments={"service": "web"}),
        ToolEnd("c9", "restart_service", True, False, 0.5, 20, summary="restarted web"),
    )
    await job.end(result(ANSWER))
    assert [(t["id"], t["status"], t["output"]) for t in every_card(slack)] == [
        ("c9", "complete", "restarted web")
    ]


async def test_a_note_after_a_persons_message_goes_below_it_not_into_the_stream_above(
    slack: FakeSlack, client: AsyncWebClient, budget: UpdateBudget
) -> None:
    job = Job(client, budget, FakeClock())
    await job.progress.start()
    await job.events(*response(1, "Checking the host first.", tool_calls=1))
    await job.events(*tool("c1", "check_host", "load 0.4"))
    first = str(job.progress.job_stream.ts)  # type: ignore[union-attr]
    person = slack.add_message(CHANNEL, None, "U2", "it is the db, not web", thread_ts=THREAD)
    await job.events(InjectedMessages(ids=(person,)))
    await job.events(*response(2, "Looking at the db then.", tool_calls=1))
    await job.events(*tool("c2", "check_db", "replication lag 40s"))
    await job.end(result(ANSWER))

    above = slack.message(CHANNEL, first)
    assert "Looking at the db" not in above.text and [t["id"] for t in tasks_of(above)] == ["c1"]
    [below] = [m for m in slack.messages(CHANNEL, THREAD) if "Looking at the db then." in m.text]
    assert below.ts > person > first
    assert [t["id"] for t in tasks_of(below)] == ["c2"]


async def test_plan_mode_groups_the_steps_under_a_plan_title(
    slack: FakeSlack, client: AsyncWebClient, budget: UpdateBudget
) -> None:
    job = Job(client, budget, FakeClock(), display="plan")
    await two_tool_job(job)
    await job.end(result(ANSWER))
    [start] = slack.calls_of("chat.startStream")
    assert start["task_display_mode"] == "plan"
    assert start["chunks"][0] == {"type": "plan_update", "title": "Investigating"}
    stream = slack.message(CHANNEL, str(job.progress.job_stream.ts))  # type: ignore[union-attr]
    assert stream.extra["stream"]["title"] == "Done"
    assert len(tasks_of(stream)) == 2


async def test_refused_chunks_fall_back_once_and_later_jobs_stream_as_before(
    slack: FakeSlack, client: AsyncWebClient, budget: UpdateBudget
) -> None:
    slack.fail_next("chat.startStream", status=200, error="invalid_chunks")
    job = Job(client, budget, FakeClock())
    await two_tool_job(job)
    await job.end(result(ANSWER))
    assert not TASK_CARDS.on and "invalid_chunks" in str(TASK_CARDS.reason)
    # This job's steps went into a plain message it edits; the answer was posted.
    steps_ts = str(job.progress.job_stream.ts)  # type: ignore[union-attr]
    await budget.drain(CHANNEL, steps_ts)
    steps = slack.message(CHANNEL, steps_ts)
    assert "check_host host=web-03" in steps.text and "tail_log" in steps.text
    answers = [m for m in slack.messages(CHANNEL, THREAD) if m.text == ANSWER]
    assert len(answers) == 1

    # The next job streams as today: no chunks, no job stream.
    later = Job(client, budget, FakeClock())
    await two_tool_job(later)
    await later.end(result(ANSWER))
    assert later.progress.job_stream is None
    assert all("chunks" not in p for p in slack.calls_of("chat.startStream")[1:])


async def test_an_expired_stream_goes_on_as_an_edited_message_with_every_step(
    slack: FakeSlack, client: AsyncWebClient, budget: UpdateBudget
) -> None:
    job = Job(client, budget, FakeClock())
    await job.progress.start()
    await job.events(*response(1, tool_calls=1), *tool("c1", "check_host", "load 0.4"))
    ts = str(job.progress.job_stream.ts)  # type: ignore[union-attr]
    slack.expire_stream(CHANNEL, ts)
    await job.tick()
    await job.events(*response(2, tool_calls=1), *tool("c2", "tail_log", "3 OOM kills"))
    await job.tick()
    await job.events(*response(3, ANSWER))
    await job.tick()
    await job.end(result(ANSWER))
    await budget.drain(CHANNEL, ts)
    shown = slack.message(CHANNEL, ts)
    assert "`check_host host=web-03` — load 0.4" in shown.text
    assert "`tail_log host=web-03` — 3 OOM kills" in shown.text
    assert len([m for m in slack.messages(CHANNEL, THREAD) if m.text == ANSWER]) == 1


async def test_a_job_without_tools_streams_exactly_as_before(
    slack: FakeSlack, client: AsyncWebClient, budget: UpdateBudget
) -> None:
    job = Job(client, budget, FakeClock())
    await job.progress.start()
    await job.events(*response(1, ANSWER * 5))
    await job.end(result(ANSWER * 5))
    assert job.progress.job_stream is None
    [start] = slack.calls_of("chat.startStream")
    assert "chunks" not in start and start["markdown_text"]


def test_a_steps_newest_state_replaces_its_unsent_one() -> None:
    timeline = Timeline()
    timeline.step("c1", title="check_host", status="in_progress")
    timeline.add_text("so far ")
    timeline.step("c1", status="complete", output="ok")
    assert timeline.take() == [
        task_chunk("c1", "check_host", "complete", output="ok"),
        {"type": "markdown_text", "text": "so far "},
    ]
    assert timeline.take() == []


# ---- the fake refuses malformed chunks like Slack ---------------------------------------


async def refused(call: object) -> str:
    with pytest.raises(SlackApiError) as caught:
        await call  # type: ignore[misc]
    return str(caught.value.response["error"])


async def test_the_fake_refuses_malformed_chunk_calls_like_slack(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    start = client.chat_startStream
    kw: dict[str, Any] = {"channel": CHANNEL, "thread_ts": THREAD}
    bad = [{"type": "sparkles", "text": "x"}]
    assert await refused(start(**kw, chunks=bad)) == "invalid_chunks"
    no_status = [{"type": "task_update", "id": "c1", "title": "t"}]
    assert await refused(start(**kw, chunks=no_status)) == "invalid_chunks"
    long = [task_chunk("c1", "t", "complete") | {"output": "x" * 300}]
    assert await refused(start(**kw, chunks=long)) == "invalid_chunks"
    ok = [task_chunk("c1", "t", "in_progress")]
    assert await refused(start(**kw, chunks=ok, task_display_mode="grid")) == "invalid_arguments"

    chunked = await start(**kw, chunks=ok)
    ts = str(chunked["ts"])
    append = client.chat_appendStream
    assert await refused(append(channel=CHANNEL, ts=ts, markdown_text="x")) == (
        "streaming_mode_mismatch"
    )
    both = append(channel=CHANNEL, ts=ts, markdown_text="x", chunks=ok)
    assert await refused(both) == "cannot_provide_both_markdown_text_and_chunks"
    assert await refused(append(channel=CHANNEL, ts=ts)) == "markdown_text_or_chunks_required"
    await append(channel=CHANNEL, ts=ts, chunks=[task_chunk("c1", "t", "complete")])
    await client.chat_stopStream(channel=CHANNEL, ts=ts)
    assert [t["status"] for t in tasks_of(slack.message(CHANNEL, ts))] == ["complete"]

    plain = await start(**kw, markdown_text="hello")
    mixed = append(channel=CHANNEL, ts=str(plain["ts"]), chunks=ok)
    assert await refused(mixed) == "streaming_mode_mismatch"

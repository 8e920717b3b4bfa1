"""The model's text while it streams: Slack chat streaming, paced, with its fallbacks.

Every test runs slack-sdk's real ``AsyncWebClient`` against ``FakeSlack`` on loopback; time
is a ``FakeClock`` the test steps, and ``AnswerStream.quiet()`` says when the stream's worker
has done everything it can until the next news, so nothing waits on a sleep.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from bot.agent.events import (
    Event,
    InjectedMessages,
    ModelRequestEnd,
    ModelRequestStart,
    RunEnd,
    StreamDelta,
    ToolEnd,
    ToolStart,
)
from bot.agent.messages import Usage
from bot.agent.state import RunResult, RunState, StopReason
from bot.agent.testing import FakeClock
from bot.emulator.slack import BOT_ID, TEAM_ID, FakeSlack
from bot.emulator.slack import Message as HeldMessage
from bot.metrics import Metrics
from bot.slack.answers import answer_messages, partial_answer
from bot.slack.blockkit import unescape, validate
from bot.slack.notifier import Reporter
from bot.slack.progress import JobProgress, budget_sender
from bot.slack.streaming import AnswerStream, Mode, Pacing, StatusSwitch, ThreadStatus
from bot.slack.updates import UpdateBudget
from bot.store.jobs import JobLimits, JobRecord

CHANNEL = "C1"
THREAD = "1700000000.000001"
REQUESTER = "U1"
LIMITS = JobLimits(max_iterations=10, deadline_s=600, token_budget=100_000)
WAIT_S = 10.0  # a hang guard only


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


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def make_stream(
    client: AsyncWebClient, budget: UpdateBudget, clock: FakeClock, *, team: str | None = TEAM_ID
) -> AnswerStream:
    return AnswerStream(
        client,
        budget,
        channel=CHANNEL,
        thread_ts=THREAD,
        recipient_user_id=REQUESTER,
        recipient_team_id=team,
        clock=clock,
    )


async def feed(stream: AnswerStream, *texts: str) -> None:
    for text in texts:
        stream.feed(text)
    await stream.quiet()


async def advance(stream: AnswerStream, clock: FakeClock, seconds: float) -> None:
    clock.advance(seconds)
    await stream.quiet()


def count(slack: FakeSlack, method: str) -> int:
    return len(slack.calls_of(method))


def bot_messages(slack: FakeSlack) -> list[HeldMessage]:
    return [m for m in slack.messages(CHANNEL, THREAD) if m.bot_id == BOT_ID]


# ---- AnswerStream ------------------------------------------------------------------------


async def test_streamed_text_reaches_the_message_in_order(
    slack: FakeSlack, client: AsyncWebClient, budget: UpdateBudget, clock: FakeClock
) -> None:
    stream = make_stream(client, budget, clock)
    await feed(stream, "a" * 120)
    assert slack.calls == []  # too little text to start a message
    await feed(stream, "b" * 100)
    start = slack.calls_of("chat.startStream")
    assert len(start) == 1
    assert start[0]["markdown_text"] == "a" * 120 + "b" * 100
    assert start[0]["thread_ts"] == THREAD
    assert (start[0]["recipient_user_id"], start[0]["recipient_team_id"]) == (REQUESTER, TEAM_ID)

    await feed(stream, "c1 ", "c2 ")
    assert count(slack, "chat.appendStream") == 0  # paced: not within a second of the start
    await advance(stream, clock, 1.0)
    await feed(stream, "d1 ", "d2")
    await advance(stream, clock, 1.0)
    appends = [p["markdown_text"] for p in slack.calls_of("chat.appendStream")]
    assert appends == ["c1 c2 ", "d1 d2"]

    ts = await stream.settle()
    assert ts is not None and ts == stream.ts
    held = slack.message(CHANNEL, str(ts))
    assert held.text == "a" * 120 + "b" * 100 + "c1 c2 d1 d2"
    assert not held.streaming
    assert count(slack, "chat.stopStream") == 1


async def test_short_text_starts_only_after_a_while_and_only_while_streaming(
    slack: FakeSlack, client: AsyncWebClient, budget: UpdateBudget, clock: FakeClock
) -> None:
    slow = make_stream(client, budget, clock)
    await feed(slow, "Looking at the logs")
    await advance(slow, clock, 1.4)
    assert slack.calls == []
    await advance(slow, clock, 0.2)
    assert [p["markdown_text"] for p in slack.calls_of("chat.startStream")] == [
        "Looking at the logs"
    ]

    done = make_stream(client, budget, clock)
    await feed(done, "Checking web-03.")
    done.end_response()  # a short note before tool calls: never a message of its own
    await advance(done, clock, 10.0)
    assert count(slack, "chat.startStream") == 1
    assert done.unshown() == "Checking web-03."
    assert await done.settle() is None
    assert count(slack, "chat.startStream") == 1


async def test_many_small_deltas_make_few_appends(
    slack: FakeSlack, client: AsyncWebClient, budget: UpdateBudget, clock: FakeClock
) -> None:
    stream = make_stream(client, budget, clock)
    pieces = [f"w{n:03d} " for n in range(600)]  # 3,000 chars over 12 s
    for piece in pieces:
        await feed(stream, piece)
        await advance(stream, clock, 0.02)
    await stream.settle()
    assert count(slack, "chat.startStream") == 1
    assert count(slack, "chat.appendStream") <= 12 + 1  # at most one per second
    assert count(slack, "chat.stopStream") == 1
    assert slack.message(CHANNEL, str(stream.ts)).text == "".join(pieces)


async def test_memory_is_bounded_to_one_message(
    slack: FakeSlack, client: AsyncWebClient, budget: UpdateBudget, clock: FakeClock
) -> None:
    stream = AnswerStream(
        client,
        budget,
        channel=CHANNEL,
        thread_ts=THREAD,
        recipient_user_id=REQUESTER,
        recipient_team_id=TEAM_ID,
        clock=clock,
        pacing=Pacing(max_chars=1_000),
    )
    await feed(stream, *(["x" * 100] * 25))
    assert len(stream.text) == 1_000 and stream.dropped == 1_500
    await stream.settle()
    assert slack.message(CHANNEL, str(stream.ts)).text == "x" * 1_000


async def test_unsupported_streaming_falls_back_to_a_message_edited_through_the_budget(
    slack: FakeSlack, client: AsyncWebClient, budget: UpdateBudget, clock: FakeClock
) -> None:
    slack.fail_next("chat.startStream", status=200, error="unknown_method")
    stream = make_stream(client, budget, clock)
    await feed(stream, "p" * 250)
    assert stream.mode is Mode.UPDATE
    assert stream.fallback == "chat.startStream: unknown_method"
    post = slack.calls_of("chat.postMessage")[0]
    assert post["text"] == "p" * 250 and post["thread_ts"] == THREAD
    await feed(stream, "q" * 10)
    assert count(slack, "chat.update") == 0  # paced like appends
    await advance(stream, clock, 1.0)
    await budget.drain(CHANNEL, str(stream.ts))
    held = slack.message(CHANNEL, str(stream.ts))
    assert held.text == "p" * 250 + "q" * 10
    assert held.blocks == [{"type": "markdown", "text": "p" * 250 + "q" * 10}]
    await stream.settle()
    assert count(slack, "chat.appendStream") == count(slack, "chat.stopStream") == 0


async def test_no_team_id_means_no_streaming_calls(
    slack: FakeSlack, client: AsyncWebClient, budget: UpdateBudget, clock: FakeClock
) -> None:
    stream = make_stream(client, budget, clock, team=None)
    await feed(stream, "n" * 300)
    await stream.settle()
    assert count(slack, "chat.startStream") == 0
    assert stream.mode is Mode.UPDATE and stream.fallback is None
    assert slack.message(CHANNEL, str(stream.ts)).text == "n" * 300


async def test_an_expired_stream_goes_on_with_chat_update_on_its_ts(
    slack: FakeSlack, client: AsyncWebClient, budget: UpdateBudget, clock: FakeClock
) -> None:
    stream = make_stream(client, budget, clock)
    await feed(stream, "e" * 250)
    ts = str(stream.ts)
    slack.expire_stream(CHANNEL, ts)
    await feed(stream, "f" * 20)
    await advance(stream, clock, 1.0)
    assert slack.calls_of("chat.appendStream")[0]["markdown_text"] == "f" * 20
    assert stream.mode is Mode.UPDATE
    assert stream.fallback == "chat.appendStream: message_not_in_streaming_state"
    await feed(stream, "g" * 5)
    await advance(stream, clock, 1.0)
    await stream.settle()
    await budget.drain(CHANNEL, ts)
    assert slack.message(CHANNEL, ts).text == "e" * 250 + "f" * 20 + "g" * 5
    assert [m.ts for m in bot_messages(slack)] == [ts]  # no second message


async def test_an_empty_delta_after_text_was_shown_rewrites_the_message(
    slack: FakeSlack, client: AsyncWebClient, budget: UpdateBudget, clock: FakeClock
) -> None:
    stream = make_stream(client, budget, clock)
    await feed(stream, "old " * 60)
    ts = str(stream.ts)
    await feed(stream, "")  # the model call is retried: what was shown is void
    assert count(slack, "chat.stopStream") == 1
    assert stream.mode is Mode.UPDATE
    await feed(stream, "new answer")
    await advance(stream, clock, 1.0)
    await stream.settle()
    await budget.drain(CHANNEL, ts)
    assert slack.message(CHANNEL, ts).text == "new answer"
    assert count(slack, "chat.appendStream") == 0


async def test_an_empty_delta_before_anything_was_shown_just_drops_the_text(
    slack: FakeSlack, client: AsyncWebClient, budget: UpdateBudget, clock: FakeClock
) -> None:
    stream = make_stream(client, budget, clock)
    await feed(stream, "void " * 10, "", "fresh " * 40)
    await stream.settle()
    assert [p["markdown_text"] for p in slack.calls_of("chat.startStream")] == ["fresh " * 40]
    assert slack.message(CHANNEL, str(stream.ts)).text == "fresh " * 40


# ---- JobProgress: the final answer -------------------------------------------------------


def record() -> JobRecord:
    return JobRecord(
        id="job-1",
        channel=CHANNEL,
        thread_ts=THREAD,
        requester=REQUESTER,
        created_at=0.0,
        updated_at=0.0,
        limits=LIMITS,
    )


def result(output: str | None, reason: StopReason = StopReason.COMPLETED) -> RunResult:
    return RunResult(
        stop_reason=reason,
        output=output,
        iterations=1,
        model_calls=1,
        tool_executions=0,
        usage=Usage(prompt_tokens=10, completion_tokens=5),
        tools_used=[],
        state=RunState(),
    )


def response(iteration: int, *deltas: str, tool_calls: int = 0, attempt: int = 1) -> list[Event]:
    events: list[Event] = [ModelRequestStart(iteration=iteration, model="m", attempt=attempt)]
    events += [StreamDelta(text=d) for d in deltas]
    usage = Usage(prompt_tokens=10, completion_tokens=5)
    events.append(ModelRequestEnd(iteration, "m", 0.1, usage, tool_calls=tool_calls))
    return events


def tool(name: str = "check_host") -> list[Event]:
    return [
        ToolStart(call_id="c1", tool=name, arguments={}),
        ToolEnd(call_id="c1", tool=name, ran=True, is_error=False, duration_s=0.1, output_chars=9),
    ]


class Job:
    """A JobProgress fed events by hand, on the fake Slack."""

    def __init__(
        self,
        client: AsyncWebClient,
        budget: UpdateBudget,
        clock: FakeClock,
        *,
        team_id: str | None = TEAM_ID,
        switch: StatusSwitch | None = None,
    ) -> None:
        self.switch = switch or StatusSwitch()
        self.progress = JobProgress(
            client,
            budget,
            record(),
            team_id=team_id,
            clock=clock,
            status_switch=self.switch,
            task_display="off",  # steps as task cards: tests/slack/test_task_cards.py
        )
        self.budget = budget

    async def start(self) -> None:
        await self.progress.start()

    async def events(self, *events: Event) -> None:
        for event in events:
            self.progress(event)
        for stream in self.progress.streams:
            await stream.quiet()

    async def end(self, run: RunResult) -> None:
        self.progress(RunEnd(run))
        await asyncio.wait_for(self.progress.done.wait(), WAIT_S)


def answer_of(messages: list[HeldMessage]) -> str:
    return "".join(unescape(m.text) for m in messages)


def answers(slack: FakeSlack, status_ts: str | None) -> list[HeldMessage]:
    return [m for m in bot_messages(slack) if m.ts != status_ts]


PARAGRAPH = "The service restarted cleanly at 14:02 and the error rate is back to 0.1%. "


async def test_a_streamed_final_answer_becomes_its_message(
    slack: FakeSlack, client: AsyncWebClient, budget: UpdateBudget, clock: FakeClock
) -> None:
    job = Job(client, budget, clock)
    await job.start()
    answer = PARAGRAPH * 4 + "\n\n| host | state |\n|---|---|\n| web-03 | ok & fine |"
    chunks = [answer[i : i + 90] for i in range(0, len(answer), 90)]
    await job.events(*response(1, *chunks))
    assert count(slack, "chat.startStream") == 1
    stream_ts = job.progress.streams[0].ts
    await job.end(result(answer))

    held = answers(slack, job.progress.status_ts)
    assert [m.ts for m in held] == [stream_ts]
    assert unescape(held[0].text) == answer
    assert (held[0].blocks or [])[:1] == [{"type": "markdown", "text": answer}]  # then feedback
    assert count(slack, "chat.stopStream") == 1
    assert not any(p.get("text") == answer for p in slack.calls_of("chat.postMessage"))
    status = slack.message(CHANNEL, str(job.progress.status_ts))
    assert status.text.startswith("Done")


async def test_a_long_final_answer_is_split_with_its_first_part_in_the_streamed_message(
    slack: FakeSlack, client: AsyncWebClient, budget: UpdateBudget, clock: FakeClock
) -> None:
    job = Job(client, budget, clock)
    await job.start()
    answer = "\n\n".join(f"## Part {n}\n" + PARAGRAPH * 20 for n in range(20))  # ~30k chars
    expected = answer_messages(answer, job_id="job-1")
    assert len(expected) >= 3
    chunks = [answer[i : i + 1_000] for i in range(0, len(answer), 1_000)]
    await job.events(*response(1, *chunks))
    stream_ts = job.progress.streams[0].ts
    await job.end(result(answer))

    held = answers(slack, job.progress.status_ts)
    assert held[0].ts == stream_ts
    assert [m.text for m in held] == [m.text for m in expected]
    assert [m.blocks for m in held] == [m.blocks for m in expected]
    assert answer_of(held) == answer  # every part once, in order: nothing lost or doubled


async def test_a_short_final_answer_is_posted_as_before(
    slack: FakeSlack, client: AsyncWebClient, budget: UpdateBudget, clock: FakeClock
) -> None:
    job = Job(client, budget, clock)
    await job.start()
    await job.events(*response(1, "All ", "good."))
    await job.end(result("All good."))
    assert count(slack, "chat.startStream") == 0
    held = answers(slack, job.progress.status_ts)
    assert [m.text for m in held] == ["All good."]
    assert (held[0].blocks or [])[:1] == [{"type": "markdown", "text": "All good."}]


async def test_without_streaming_support_the_final_answer_is_complete_and_single(
    slack: FakeSlack, client: AsyncWebClient, budget: UpdateBudget, clock: FakeClock
) -> None:
    slack.fail_next("chat.startStream", status=200, error="not_allowed_token_type")
    job = Job(client, budget, clock)
    await job.start()
    answer = PARAGRAPH * 6
    await job.events(*response(1, answer[:300]))
    await job.events(StreamDelta(text=answer[300:]))
    await job.end(result(answer))

    held = answers(slack, job.progress.status_ts)
    assert len(held) == 1 and unescape(held[0].text) == answer
    assert (held[0].blocks or [])[:1] == [{"type": "markdown", "text": answer}]  # then feedback
    assert count(slack, "chat.appendStream") == 0


async def test_an_expired_stream_still_ends_with_the_whole_answer(
    slack: FakeSlack, client: AsyncWebClient, budget: UpdateBudget, clock: FakeClock
) -> None:
    job = Job(client, budget, clock)
    await job.start()
    answer = PARAGRAPH * 8
    job.progress(ModelRequestStart(iteration=1, model="m", attempt=1))
    await job.events(StreamDelta(text=answer[:250]))
    ts = str(job.progress.streams[0].ts)
    slack.expire_stream(CHANNEL, ts)
    await job.events(StreamDelta(text=answer[250:400]))
    clock.advance(1.0)
    await job.events(StreamDelta(text=answer[400:]))
    await job.events(ModelRequestEnd(1, "m", 0.1, Usage()))
    await job.end(result(answer))

    held = answers(slack, job.progress.status_ts)
    assert [m.ts for m in held] == [ts]
    assert unescape(held[0].text) == answer


async def test_a_refused_final_edit_posts_the_answer_instead(
    slack: FakeSlack, client: AsyncWebClient, budget: UpdateBudget, clock: FakeClock
) -> None:
    job = Job(client, budget, clock)
    await job.start()
    answer = PARAGRAPH * 5
    await job.events(*response(1, answer))
    ts = str(job.progress.streams[0].ts)
    await budget.drain(CHANNEL, str(job.progress.status_ts))
    slack.fail_next("chat.update", status=200, error="message_not_found")
    await job.end(result(answer))

    posted = [p for p in slack.calls_of("chat.postMessage") if unescape(p["text"]) == answer]
    assert len(posted) == 1  # the answer is not lost
    assert slack.calls_of("chat.update")[-1]["ts"] == job.progress.status_ts  # the ending
    assert ts != posted[0].get("ts")


async def test_a_retried_response_starts_over_in_the_same_message(
    slack: FakeSlack, client: AsyncWebClient, budget: UpdateBudget, clock: FakeClock
) -> None:
    job = Job(client, budget, clock)
    await job.start()
    job.progress(ModelRequestStart(iteration=1, model="m", attempt=1))
    await job.events(StreamDelta(text="half an answer " * 20))
    job.progress(ModelRequestEnd(1, "m", 0.1, None, error="connection reset"))
    answer = "The whole answer. " * 20
    await job.events(*response(1, answer, attempt=2))
    clock.advance(1.0)
    await job.events()
    await job.end(result(answer))

    held = answers(slack, job.progress.status_ts)
    assert len(job.progress.streams) == 1
    assert [m.ts for m in held] == [job.progress.streams[0].ts]
    assert unescape(held[0].text) == answer


async def test_a_note_before_tool_calls_is_left_and_the_answer_gets_its_own_message(
    slack: FakeSlack, client: AsyncWebClient, budget: UpdateBudget, clock: FakeClock
) -> None:
    job = Job(client, budget, clock)
    await job.start()
    note = "I will check the load balancer first, then the app servers one by one. " * 3
    await job.events(*response(1, note, tool_calls=1), *tool())
    await job.events(*response(2, "Checking web-03 next.", tool_calls=1), *tool())
    answer = PARAGRAPH * 4
    await job.events(*response(3, answer))
    await job.end(result(answer))

    held = answers(slack, job.progress.status_ts)
    assert len(held) == 2 and held[0].text == note
    assert held[0].ts == job.progress.streams[0].ts and not held[0].edited
    assert unescape(held[1].text) == answer and held[1].ts == job.progress.streams[2].ts
    assert count(slack, "chat.stopStream") == 2
    # The short note went on the status message while its tool ran.
    notes = [
        u for u in slack.calls_of("chat.update") if "Checking web-03 next." in str(u["blocks"])
    ]
    assert notes and "Checking web-03 next." not in notes[0]["text"]


async def test_nothing_slack_refuses_reaches_the_event_callback(
    slack: FakeSlack, client: AsyncWebClient, budget: UpdateBudget, clock: FakeClock
) -> None:
    job = Job(client, budget, clock)
    await job.start()
    slack.fail_next("chat.startStream", status=500)
    slack.fail_next("chat.postMessage", status=200, error="channel_not_found")
    answer = PARAGRAPH * 4
    await job.events(*response(1, answer))  # raises nothing
    assert job.progress.streams[0].mode is Mode.OFF
    await job.end(result(answer))
    held = answers(slack, job.progress.status_ts)
    assert len(held) == 1 and unescape(held[0].text) == answer


async def test_a_cancelled_job_leaves_the_partial_text_and_posts_no_answer(
    slack: FakeSlack, client: AsyncWebClient, budget: UpdateBudget, clock: FakeClock
) -> None:
    job = Job(client, budget, clock)
    await job.start()
    job.progress(ModelRequestStart(iteration=1, model="m", attempt=1))
    await job.events(StreamDelta(text="partial " * 40))
    await job.end(result("partial " * 40, StopReason.CANCELLED))
    held = answers(slack, job.progress.status_ts)
    assert [m.text for m in held] == ["partial " * 40]
    assert count(slack, "chat.stopStream") == 1
    assert "`cancelled`" in slack.message(CHANNEL, str(job.progress.status_ts)).text


# ---- the assistant thread status ---------------------------------------------------------


async def test_the_thread_status_is_set_paced_and_cleared(
    slack: FakeSlack, client: AsyncWebClient, budget: UpdateBudget, clock: FakeClock
) -> None:
    job = Job(client, budget, clock)
    await job.start()
    await slack.wait_for(lambda: slack.status(CHANNEL, THREAD) == "is looking into it…")
    await job.events(*response(1, tool_calls=1), *tool("check_host"))
    await job.events(*response(2, tool_calls=1), *tool("tail_logs"))
    assert count(slack, "assistant.threads.setStatus") == 1  # paced: within 3 s
    clock.advance(3.0)
    await slack.wait_for(lambda: slack.status(CHANNEL, THREAD) == "is running tail_logs…")
    await job.end(result("Done."))
    assert slack.status(CHANNEL, THREAD) == ""
    statuses = [p["status"] for p in slack.calls_of("assistant.threads.setStatus")]
    assert statuses == ["is looking into it…", "is running tail_logs…", ""]
    params = slack.calls_of("assistant.threads.setStatus")[0]
    assert (params["channel_id"], params["thread_ts"]) == (CHANNEL, THREAD)


async def test_a_failing_thread_status_is_never_called_again(
    slack: FakeSlack, client: AsyncWebClient, budget: UpdateBudget, clock: FakeClock
) -> None:
    switch = StatusSwitch()
    slack.fail_next("assistant.threads.setStatus", status=200, error="missing_scope")
    job = Job(client, budget, clock, switch=switch)
    await job.start()
    await slack.wait_for_call("assistant.threads.setStatus")
    await job.events(*response(1, tool_calls=1), *tool())
    clock.advance(5.0)
    await job.end(result("All good."))  # waits for the status worker: it failed and left
    assert not switch.on
    assert switch.reason is not None and "missing_scope" in switch.reason
    second = Job(client, budget, clock, switch=switch)
    await second.start()
    await second.end(result("Still good."))
    assert count(slack, "assistant.threads.setStatus") == 1
    # The answers were not held up by it.
    assert [m.text for m in answers(slack, None) if m.text.endswith("good.")] == [
        "All good.",
        "Still good.",
    ]


async def test_thread_status_alone_clears_only_what_it_set(
    slack: FakeSlack, client: AsyncWebClient, clock: FakeClock
) -> None:
    status = ThreadStatus(client, CHANNEL, THREAD, switch=StatusSwitch(), clock=clock)
    await status.clear()
    assert slack.calls == []
    status.show("is here")  # after the end: ignored
    assert slack.calls == []


def test_a_partial_answer_keeps_within_slack_limits() -> None:
    text = "a & b < c\n" * 2_000  # 20,000 chars, 35,000 once escaped
    message = partial_answer(text)
    validate(message)
    assert message.text.startswith("a &amp; b &lt; c")
    assert message.blocks[0]["text"].endswith("…")
    assert partial_answer("x <@U1>").text == "x &lt;@U1&gt;"  # never a mention


async def test_refresh_shows_progress_on_an_existing_status_message(
    slack: FakeSlack, client: AsyncWebClient, budget: UpdateBudget, clock: FakeClock
) -> None:
    old = await client.chat_postMessage(channel=CHANNEL, thread_ts=THREAD, text="Working: …")
    job = Job(client, budget, clock)
    job.progress.status_ts = str(old["ts"])
    job.progress.refresh()
    await budget.drain(CHANNEL, str(old["ts"]))
    assert slack.message(CHANNEL, str(old["ts"])).text.startswith("Working: iteration")
    assert count(slack, "chat.postMessage") == 1


def cut(iteration: int, *deltas: str) -> list[Event]:
    """A response without tool calls that stopped at the output limit."""
    events = response(iteration, *deltas)
    end = events[-1]
    assert isinstance(end, ModelRequestEnd)
    events[-1] = ModelRequestEnd(iteration, "m", 0.1, end.usage, cut_off=True)
    return events


async def test_the_rest_of_a_cut_off_answer_streams_on_into_the_same_message(
    slack: FakeSlack, client: AsyncWebClient, budget: UpdateBudget, clock: FakeClock
) -> None:
    job = Job(client, budget, clock)
    await job.start()
    first, rest = PARAGRAPH * 3 + "and the disk is at 4", "1% with nothing left to do."
    await job.events(*cut(1, first))
    await job.events(*response(2, rest))
    await job.end(result(first + rest))

    held = answers(slack, job.progress.status_ts)
    assert len(job.progress.streams) == 1
    assert [unescape(m.text) for m in held] == [first + rest]
    assert count(slack, "chat.startStream") == 1


async def test_a_reply_between_a_cut_answer_and_the_next_response_ends_the_cut_part(
    slack: FakeSlack, client: AsyncWebClient, budget: UpdateBudget, clock: FakeClock
) -> None:
    job = Job(client, budget, clock)
    await job.start()
    first = PARAGRAPH * 3 + "and the disk is at 4"
    await job.events(*cut(1, first), InjectedMessages(ids=("1.2",)))
    answer = PARAGRAPH * 2 + "About the database: it is fine."
    await job.events(*response(2, answer))
    await job.end(result(answer))

    held = answers(slack, job.progress.status_ts)
    assert [unescape(m.text) for m in held] == [first, answer]  # the person changed the subject


async def test_an_abandoned_run_winds_up_its_stream_and_status(
    slack: FakeSlack, client: AsyncWebClient, budget: UpdateBudget, clock: FakeClock
) -> None:
    """The store failed outside the loop (no ``RunEnd``): closing the reporter winds up
    the stream it started and clears the assistant status, so no worker is left pending
    (they were garbage-collected pending: "Task was destroyed but it is pending!")."""
    job = Job(client, budget, clock)
    await job.start()
    await job.events(*response(1, PARAGRAPH * 3)[:-1])  # streaming, never ended
    assert count(slack, "chat.startStream") == 1
    workers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    assert any(not t.done() for t in workers)

    await asyncio.wait_for(Reporter(job.progress, Metrics()).aclose(), WAIT_S)

    assert count(slack, "chat.stopStream") == 1
    pending = [t.get_name() for t in workers if not t.done()]
    assert not [n for n in pending if n.startswith(("stream", "status"))], pending

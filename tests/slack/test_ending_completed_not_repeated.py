"""``deliver_ending`` completes what the thread shows of an ended job's answer, never
repeats it: a streamed message whose final edit never came becomes the answer in place
(people by name in the stream included), an answer cut between its parts goes on from
the missing part, and the ending carries the per-tool lines and "Full output" buttons
kept beside the job's record. slack-sdk's real client against ``FakeSlack``."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from bot.agent.state import RunState, Usage
from bot.emulator.slack import BOT_USER_ID, FakeSlack
from bot.records import KEPT_TOOL_LINES, KeptToolLine, KeptTools
from bot.slack.answers import answer_messages
from bot.slack.names import Names
from bot.slack.redelivery import deliver_ending, has_feedback_for
from bot.slack.status_blocks import Progress, status_message
from bot.store.jobs import JobLimits, JobRecord, JobStatus, new_job
from bot.store.keys import Thread

LIMITS = JobLimits(max_iterations=20, deadline_s=600, token_budget=100_000)
STREAMED = "Result: web-03 is fine, <@UALICE> restarted nginx at 16:02 " + "and it stayed up " * 20
TWO_PARTS = "Result: web-03 is fine.\n\n" + "\n\n".join(
    f"Paragraph {i}: " + " ".join(["every check of web-03 passed"] * 12) for i in range(60)
)


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack(users={"UALICE": "alice"}) as fake:
        yield fake


@pytest.fixture
def client(slack: FakeSlack) -> AsyncWebClient:
    return AsyncWebClient(token="xoxb-test", base_url=slack.api_url)


async def ended_job(
    slack: FakeSlack, client: AsyncWebClient, answer: str, tools: KeptTools | None = None
) -> JobRecord:
    """A job that completed with ``answer`` in a thread holding its live status message."""
    parent = slack.add_message("C1", None, "UREQUESTER", "<@UBOT> web-03 is hot")
    thread = Thread("C1", parent)
    record = new_job(
        thread, requester="UREQUESTER", limits=LIMITS, now=time.time() - 5, request_ts=parent
    )
    record = record.model_copy(update={"id": thread.job_id(1)})
    live = status_message(
        Progress(
            job_id=record.id,
            iteration=2,
            max_iterations=20,
            tokens_used=1_350,
            token_budget=100_000,
            active_s=3.0,
        )
    )
    posted = await client.chat_postMessage(
        channel="C1", thread_ts=parent, text=live.text, blocks=live.blocks
    )
    return record.model_copy(
        update={
            "status": JobStatus.COMPLETED,
            "stop_reason": "completed",
            "output": answer,
            "meta": {"status_ts": str(posted["ts"])},
            "progress": RunState(iterations=2, tool_executions=1, usage=Usage(prompt_tokens=1_350)),
            "tools": tools,
        }
    )


def bot_messages(slack: FakeSlack, record: JobRecord) -> list[str]:
    return [m.text for m in slack.messages("C1", record.thread_ts) if m.user == BOT_USER_ID]


async def test_a_stream_whose_final_edit_never_came_becomes_the_answer_in_place(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    record = await ended_job(slack, client, STREAMED)
    names = Names.of(client)
    await names.prefetch(STREAMED)
    stream = await client.chat_startStream(  # the stream shows people by name
        channel="C1",
        thread_ts=record.thread_ts,
        markdown_text=names.render(STREAMED[:150]),
        recipient_user_id="UREQUESTER",
        recipient_team_id="T1",
    )
    await client.chat_appendStream(
        channel="C1", ts=stream["ts"], markdown_text=names.render(STREAMED[150:])
    )  # the process died here: the stream still open, no final edit

    assert await deliver_ending(client, record, bot_user=BOT_USER_ID, names=names)
    [answer] = [m for m in slack.messages("C1", record.thread_ts) if m.ts == stream["ts"]]
    assert has_feedback_for(answer.blocks or [], record.id)
    assert answer.text == answer_messages(STREAMED)[0].text  # the text keeps <@UALICE>
    assert not answer.streaming  # stopped first
    assert len(bot_messages(slack, record)) == 2  # the ending and the answer, nothing posted
    assert slack.message("C1", record.meta["status_ts"]).text.startswith("Done")


async def test_an_answer_cut_between_its_parts_goes_on_from_the_missing_part(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    record = await ended_job(slack, client, TWO_PARTS)
    first, second = answer_messages(TWO_PARTS, job_id=record.id)
    await client.chat_postMessage(
        channel="C1", thread_ts=record.thread_ts, text=first.text, blocks=first.blocks
    )

    assert await deliver_ending(client, record, bot_user=BOT_USER_ID)
    assert await deliver_ending(client, record, bot_user=BOT_USER_ID)  # again: nothing new
    said = bot_messages(slack, record)
    assert said.count(first.text) == 1 and said.count(second.text) == 1, said
    assert len(said) == 3


async def test_a_redelivered_ending_lists_the_tools_the_status_message_showed(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    lines = [
        KeptToolLine(tool=f"check_{i}", result=f"host {i} is fine", ok=True) for i in range(30)
    ]
    lines[-1] = KeptToolLine(tool="restart_service", result="failed: exit 1", ok=False)
    kept = KeptTools.of(lines, cut=[("call_9", "read_logs")])
    assert len(kept.lines) == KEPT_TOOL_LINES and kept.count == 30
    record = await ended_job(slack, client, "Result: done", tools=kept)

    assert await deliver_ending(client, record, bot_user=BOT_USER_ID)
    ending = slack.message("C1", record.meta["status_ts"])
    shown = str(ending.blocks)
    assert "`restart_service` failed: exit 1" in shown and ":x:" in shown
    assert "`check_28` host 28 is fine" in shown
    assert "22 earlier tool calls" in shown  # 30, of which the last 8 are shown
    assert "Full output" in shown and "call_9" in shown

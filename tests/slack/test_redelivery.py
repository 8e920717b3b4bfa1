"""``deliver_ending``: an ended job's answer and ending, shown by another process from
the job's record, with slack-sdk's real client against ``FakeSlack``. The answer is
posted only when the thread lacks it; the status message becomes the ending."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from bot.agent.state import RunState, Usage
from bot.emulator.slack import BOT_USER_ID, FakeSlack
from bot.slack.answers import answer_messages
from bot.slack.names import Names
from bot.slack.redelivery import deliver_ending
from bot.slack.status_blocks import Progress, status_message
from bot.store.jobs import JobLimits, JobRecord, JobStatus, new_job
from bot.store.keys import Thread

LIMITS = JobLimits(max_iterations=20, deadline_s=600, token_budget=100_000)
ANSWER = "web-03's CPU is back to 12 % after the nginx restart."


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as fake:
        yield fake


@pytest.fixture
def client(slack: FakeSlack) -> AsyncWebClient:
    return AsyncWebClient(token="xoxb-test", base_url=slack.api_url)


async def ended_job(
    slack: FakeSlack, client: AsyncWebClient, *, status_message_posted: bool = True
) -> JobRecord:
    """A job that completed with ``ANSWER`` in a thread holding its live status message."""
    now = time.time()
    parent = slack.add_message("C1", None, "UREQUESTER", "<@UBOT> web-03 is hot")
    thread = Thread("C1", parent)
    record = new_job(thread, requester="UREQUESTER", limits=LIMITS, now=now - 5, request_ts=parent)
    record = record.model_copy(update={"id": thread.job_id(1)})
    meta: dict[str, str] = {}
    if status_message_posted:
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
        meta["status_ts"] = str(posted["ts"])
    return record.model_copy(
        update={
            "status": JobStatus.COMPLETED,
            "stop_reason": "completed",
            "output": ANSWER,
            "meta": meta,
            "progress": RunState(iterations=2, tool_executions=1, usage=Usage(prompt_tokens=1_350)),
        }
    )


def thread_texts(slack: FakeSlack, record: JobRecord) -> list[str]:
    return [m.text for m in slack.messages("C1", record.thread_ts)][1:]


async def test_the_answer_the_thread_lacks_is_posted_and_the_status_becomes_the_ending(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    record = await ended_job(slack, client)

    assert await deliver_ending(client, record, bot_user=BOT_USER_ID)

    texts = thread_texts(slack, record)
    assert len(texts) == 2 and texts[1] == ANSWER  # the status message, then the answer
    status = slack.message("C1", record.meta["status_ts"])
    assert status.edited and "Working" not in status.text
    assert all(
        e.get("action_id") != "opsloop_stop"
        for b in status.blocks or []
        for e in b.get("elements") or []
        if isinstance(e, dict)
    )


async def test_an_answer_already_in_the_thread_is_not_posted_again(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    record = await ended_job(slack, client)
    [shown] = answer_messages(ANSWER, job_id=record.id)  # its process posted it, then died
    await client.chat_postMessage(
        channel="C1", thread_ts=record.thread_ts, text=shown.text, blocks=shown.blocks
    )

    assert await deliver_ending(client, record, bot_user=BOT_USER_ID)
    assert await deliver_ending(client, record, bot_user=BOT_USER_ID)  # and a second try

    assert thread_texts(slack, record).count(ANSWER) == 1
    assert slack.message("C1", record.meta["status_ts"]).edited


async def test_without_a_status_message_the_ending_is_posted(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    record = await ended_job(slack, client, status_message_posted=False)

    assert await deliver_ending(client, record, bot_user=BOT_USER_ID)

    texts = thread_texts(slack, record)
    assert texts[0] == ANSWER and len(texts) == 2  # the answer, then how the job ended


async def test_a_thread_slack_will_not_show_is_a_failed_try(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    record = await ended_job(slack, client)
    slack.fail_next("conversations.replies", status=500, times=5)
    assert not await deliver_ending(client, record, bot_user=BOT_USER_ID)
    slack.clear_faults()
    slack.fail_next("chat.postMessage", status=200, error="channel_not_found")
    assert not await deliver_ending(client, record, bot_user=BOT_USER_ID)
    assert thread_texts(slack, record) == [thread_texts(slack, record)[0]]  # nothing posted


async def test_a_redelivered_answer_names_people_in_its_markdown(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    slack.users["UALICE01"] = {
        "id": "UALICE01",
        "name": "alice",
        "profile": {"display_name": "alice"},
    }
    record = await ended_job(slack, client)
    record = record.model_copy(update={"output": "Done, as <@UALICE01> asked."})

    assert await deliver_ending(client, record, bot_user=BOT_USER_ID, names=Names.of(client))

    answer = [m for m in slack.messages("C1", record.thread_ts) if m.text.startswith("Done, as")]
    markdown = [b["text"] for b in answer[0].blocks or [] if b["type"] == "markdown"]
    assert markdown == ["Done, as @alice asked."]

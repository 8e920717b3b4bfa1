"""Long output as a file: the v2 upload on the fake Slack, and a long answer posted as one.

slack-sdk's real ``files_upload_v2`` (its three steps) against ``FakeSlack``; the job's
progress fed events by hand.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.agent.events import ModelRequestEnd, ModelRequestStart, RunEnd
from bot.agent.messages import Usage
from bot.agent.state import RunResult, RunState, StopReason
from bot.agent.testing import FakeClock
from bot.emulator.slack import BOT_ID, TEAM_ID, FakeSlack
from bot.scrub import Scrubber
from bot.slack.answers import answer_messages
from bot.slack.client import ScrubbingWebClient
from bot.slack.files import ANSWER_FILE_AFTER, post_file, summary
from bot.slack.progress import JobProgress, budget_sender
from bot.slack.updates import UpdateBudget
from bot.store.jobs import JobLimits, JobRecord

CHANNEL = "C1"
THREAD = "1700000000.000001"
SECRET = "xoxb-this-is-the-bot-token-0000"
PARAGRAPH = "The pool on db-2 was exhausted from 14:01; every worker waited on one lock. "


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as fake:
        yield fake


@pytest.fixture
def client(slack: FakeSlack) -> AsyncWebClient:
    return ScrubbingWebClient(
        scrubber=Scrubber([SECRET]), token="xoxb-test", base_url=slack.api_url
    )


def long_answer() -> str:
    return "\n\n".join(f"## Part {n}\n" + PARAGRAPH * 30 for n in range(30))  # ~70k chars


async def test_the_upload_goes_through_the_three_steps_and_shares_the_file_in_the_thread(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    content = "line one\n" + f"token {SECRET} leaked\n" * 3
    file_id = await post_file(
        client,
        channel=CHANNEL,
        thread_ts=THREAD,
        filename="output.txt",
        content=content,
        title="check_host: full output",
        comment="The full output",
    )
    assert file_id is not None
    [get] = slack.calls_of("files.getUploadURLExternal")
    assert get["filename"] == "output.txt" and int(get["length"]) > 0
    [complete] = slack.calls_of("files.completeUploadExternal")
    assert (complete["channel_id"], complete["thread_ts"]) == (CHANNEL, THREAD)
    assert slack.calls_of("files.upload") == []  # retired

    held = slack.files.file(file_id)
    assert held.data is not None and SECRET not in held.data.decode()  # scrubbed first
    [message] = [m for m in slack.messages(CHANNEL, THREAD) if m.extra.get("files")]
    assert message.thread_ts == THREAD and message.bot_id == BOT_ID
    assert message.text == "The full output"
    [shared] = message.extra["files"]
    assert shared["id"] == file_id and shared["title"] == "check_host: full output"
    async with aiohttp.ClientSession() as http:
        async with http.get(shared["permalink"]) as got:
            assert got.status == 200 and (await got.text()).startswith("line one")
        async with http.get(shared["url_private"], allow_redirects=False) as private:
            assert private.status == 302  # no token: Slack's login redirect


async def test_the_fake_refuses_bad_upload_calls_like_slack(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    async def error(call: object) -> str:
        with pytest.raises(SlackApiError) as caught:
            await call  # type: ignore[misc]
        return str(caught.value.response["error"])

    assert await error(client.files_getUploadURLExternal(filename="a.txt", length=0)) == (
        "missing_argument"
    )
    ticket = await client.files_getUploadURLExternal(filename="a.txt", length=3)
    # Completed before any bytes reached the upload URL: Slack finds no file.
    files: list[dict[str, str | None]] = [{"id": ticket["file_id"], "title": "a"}]
    assert await error(client.files_completeUploadExternal(files=files)) == "file_not_found"
    unknown: list[dict[str, str | None]] = [{"id": "FNOPE", "title": "x"}]
    assert await error(client.files_completeUploadExternal(files=unknown)) == "file_not_found"
    async with aiohttp.ClientSession() as http:
        async with http.post(slack.api_url + "../upload/v1/nope", data=b"abc") as got:
            assert got.status == 404


async def test_an_answer_beyond_a_few_messages_is_a_file_with_a_readable_summary(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    answer = long_answer()
    assert len(answer_messages(answer)) > ANSWER_FILE_AFTER
    budget = UpdateBudget(budget_sender(client), per_minute=6_000, burst=50)
    record = JobRecord(
        id="C1:1700000000.000001:j1",
        channel=CHANNEL,
        thread_ts=THREAD,
        requester="U1",
        created_at=0.0,
        updated_at=0.0,
        limits=JobLimits(max_iterations=10, deadline_s=600, token_budget=100_000),
    )
    progress = JobProgress(client, budget, record, team_id=TEAM_ID, clock=FakeClock())
    await progress.start()
    progress(ModelRequestStart(iteration=1, model="m", attempt=1))
    progress(ModelRequestEnd(1, "m", 0.1, Usage(prompt_tokens=1, completion_tokens=1)))
    result = RunResult(
        stop_reason=StopReason.COMPLETED,
        output=answer,
        iterations=1,
        model_calls=1,
        tool_executions=0,
        usage=Usage(prompt_tokens=1, completion_tokens=1),
        tools_used=[],
        state=RunState(),
    )
    progress(RunEnd(result))
    await asyncio.wait_for(progress.done.wait(), 10)
    await budget.aclose()

    mine = [m for m in slack.messages(CHANNEL, THREAD) if m.bot_id == BOT_ID]
    [file_message] = [m for m in mine if m.extra.get("files")]
    file_id = file_message.extra["files"][0]["id"]
    assert slack.files.file(file_id).data == answer.encode()
    answers = [m for m in mine if m.ts not in (progress.status_ts, file_message.ts)]
    assert len(answers) == 1  # one summary instead of six parts
    assert answers[0].text.startswith("## Part 0")
    assert "answer.md" in answers[0].text and len(answers[0].text) < 4_000


async def test_a_refused_upload_posts_the_answer_split_as_before(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    slack.fail_next("files.getUploadURLExternal", status=200, error="missing_scope")
    answer = long_answer()
    file_id = await post_file(
        client, channel=CHANNEL, thread_ts=THREAD, filename="a.md", content=answer, title="a"
    )
    assert file_id is None


def test_a_summary_opens_the_answer_and_names_the_file() -> None:
    answer = long_answer()
    text = summary(answer)
    assert text.startswith("## Part 0") and "answer.md" in text
    assert len(text) < 3_000
    fenced = "```\n" + "x = 1\n" * 2_000 + "```"
    assert summary(fenced).count("```") % 2 == 0

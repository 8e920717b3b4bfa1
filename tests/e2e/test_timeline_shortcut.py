""" "Incident timeline" end to end (``opsloop serve`` and ``opsloop socket`` against the fake
Slack, the scripted model and a real redis-server): someone mentions the bot, the job checks
a host and answers; then someone else uses the message shortcut on the answer, and the
thread gets ``incident-timeline-<ts>.md`` through Slack's v2 upload — the request, the job,
its tool call, the answer and its end, in order, people by name, no mention syntax. On a
thread the bot never worked in, the person is told so ephemerally and nothing is posted."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot.emulator import sender
from bot.emulator.scripted import Reply, ScriptedCall, ScriptedRequest
from bot.emulator.slack import FakeSlack, Message
from bot.emulator.slack_socket import FakeSocketMode
from bot.slack.timeline_shortcut import CALLBACK_TIMELINE, NO_RECORD

from .conftest import StartBot
from .harness import SERVE_ARGV, ScriptedModel, event_body, mention
from .test_mention_to_answer import tools_file

CHANNEL = "C0INCIDENT"
ANSWER = "web-03 answers again: its php-fpm pool was exhausted."
PEOPLE = {"UALICE": "alice", "UCAROL": "carol"}
APP_TOKEN = "xapp-1-A0OPSLOOP-1-0123456789abcdef"
SOCKET = {"SLACK_APP_TOKEN": APP_TOKEN, "SLACK_SIGNING_SECRET": None}
SOCKET_TEST = "test_the_timeline_over_socket_mode"


@pytest.fixture
async def fake() -> AsyncIterator[tuple[FakeSlack, FakeSocketMode]]:
    """The fake Slack knowing the people by name, with Socket Mode's routes."""
    slack = FakeSlack(users=PEOPLE)
    socket = FakeSocketMode(slack)
    async with slack:
        yield slack, socket
        await socket.close()


@pytest.fixture
def slack(fake: tuple[FakeSlack, FakeSocketMode]) -> FakeSlack:
    return fake[0]


@pytest.fixture
def bot_argv(request: pytest.FixtureRequest) -> tuple[str, ...]:
    if request.node.originalname == SOCKET_TEST:
        return (sys.executable, "-m", "bot", "socket")
    return SERVE_ARGV


def payload(slack: FakeSlack, ts: str, user: str = "UCAROL") -> dict[str, Any]:
    return sender.message_action(
        callback_id=CALLBACK_TIMELINE,
        user_id=user,
        user_name=user.lower(),
        channel=CHANNEL,
        channel_name="incident",
        message=slack.message(CHANNEL, ts).as_slack(),
        response_url=slack.api_url + "response",
    )


def body(slack: FakeSlack, ts: str, user: str = "UCAROL") -> bytes:
    return sender.form_body(payload(slack, ts, user))[0]


def answer(slack: FakeSlack, thread_ts: str) -> Message | None:
    found = [m for m in slack.messages(CHANNEL, thread_ts) if m.text == ANSWER]
    return found[0] if found else None


def timelines(slack: FakeSlack, thread_ts: str) -> list[Message]:
    return [m for m in slack.messages(CHANNEL, thread_ts) if m.extra.get("files")]


def content(slack: FakeSlack, message: Message) -> str:
    [shared] = message.extra["files"]
    return (slack.files.file(shared["id"]).data or b"").decode()


def check_then_answer(request: ScriptedRequest) -> Reply:
    if request.tool_results() == 0:
        return Reply(
            content="Checking web-03.",
            tool_calls=[ScriptedCall("check_host", {"host": "web-03"})],
        )
    return Reply(content=ANSWER)


async def answered_incident(slack: FakeSlack, model: ScriptedModel, send: Any) -> tuple[str, str]:
    """alice mentions the bot; the job checks web-03 and answers. The thread's ts and the
    answer's."""
    model.policy = check_then_answer
    event = mention(CHANNEL, "UALICE", "web-03 returns 502s, <!here> what is wrong?")
    await send(event)
    await slack.wait_for(lambda: answer(slack, event["ts"]) is not None, timeout=30)
    found = answer(slack, event["ts"])
    assert found is not None
    return str(event["ts"]), found.ts


def assert_the_timeline(slack: FakeSlack, thread_ts: str) -> None:
    [posted] = timelines(slack, thread_ts)
    [shared] = posted.extra["files"]
    assert shared["name"] == f"incident-timeline-{thread_ts}.md"
    text = content(slack, posted)
    events = [line for line in text.splitlines() if line.startswith("- ")]
    assert posted.text == f"Incident timeline, {len(events)} events, requested by <@UCAROL>"
    kinds = [line.split(" · ")[1].strip("*") for line in events]
    order = ["request", "job_started", "tool_call", "answer", "job_ended"]
    assert [kinds.index(kind) for kind in order] == sorted(kinds.index(kind) for kind in order)
    assert " · @alice · " in events[kinds.index("request")]
    assert "check_host host=web-03" in events[kinds.index("tool_call")]
    assert "<@" not in text and "<!" not in text
    assert "All times UTC" in text


async def test_the_shortcut_on_an_answer_posts_the_threads_timeline(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, tmp_path: Path
) -> None:
    serve = await bot(OPSLOOP_TOOLS=tools_file(tmp_path))

    async def send(event: dict[str, Any]) -> None:
        assert (await serve.send(event))[0] == 200

    thread_ts, answer_ts = await answered_incident(slack, model, send)

    status, _ = await serve.post_event(body(slack, answer_ts))

    assert status == 200
    await slack.wait_for(lambda: bool(timelines(slack, thread_ts)), timeout=30)
    assert_the_timeline(slack, thread_ts)
    assert slack.calls_of("response") == []
    assert len(model.requests) == 2  # reading the timeline asks the model nothing


async def test_a_thread_the_bot_never_worked_in_is_told_so(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel
) -> None:
    serve = await bot()
    root = slack.add_message(CHANNEL, None, "UALICE", "anyone seeing 502s on web-03?")

    assert (await serve.post_event(body(slack, root)))[0] == 200

    await slack.wait_for(lambda: bool(slack.calls_of("response")), timeout=15)
    [note] = slack.calls_of("response")
    assert note["response_type"] == "ephemeral" and note["text"] == NO_RECORD
    assert slack.calls_of("files.getUploadURLExternal") == []
    assert model.requests == []


async def test_the_timeline_over_socket_mode(
    bot: StartBot,
    fake: tuple[FakeSlack, FakeSocketMode],
    model: ScriptedModel,
    tmp_path: Path,
) -> None:
    slack, socket = fake
    await bot(OPSLOOP_TOOLS=tools_file(tmp_path), **SOCKET)
    await socket.wait_connected()

    async def send(event: dict[str, Any]) -> None:
        assert await socket.send_event(json.loads(event_body(event))) is not None

    thread_ts, answer_ts = await answered_incident(slack, model, send)

    assert await socket.send_interactive(payload(slack, answer_ts)) is not None

    await slack.wait_for(lambda: bool(timelines(slack, thread_ts)), timeout=30)
    assert_the_timeline(slack, thread_ts)

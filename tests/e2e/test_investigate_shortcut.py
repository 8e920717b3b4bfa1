""" "Investigate with opsloop" end to end (``opsloop serve`` and ``opsloop socket`` against the
fake Slack and the scripted model): Alertmanager posts an alert in a channel — which by itself
starts nothing — someone uses the message shortcut on it, and a job starts in the alert's
thread, requested by them, its first model request holding the alert's text and attachment
quoted as data, and its answer arrives in that thread. A duplicate delivery starts nothing new;
a channel the bot is not in gets an ephemeral (``response_url``) saying how to add it."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest

from bot.emulator import alert_posts, sender
from bot.emulator.scripted import Reply, ScriptedRequest
from bot.emulator.slack import FakeSlack
from bot.emulator.slack_socket import FakeSocketMode
from bot.slack.shortcut import CALLBACK_INVESTIGATE

from .conftest import StartBot
from .harness import SERVE_ARGV, ScriptedModel, steps

CHANNEL = "C0INCIDENT"
ANSWER = "web-03 is CPU bound: a runaway php-fpm worker since 14:02."


def shortcut_payload(slack: FakeSlack, channel: str, ts: str, user: str = "U7") -> dict[str, Any]:
    return sender.message_action(
        callback_id=CALLBACK_INVESTIGATE,
        user_id=user,
        user_name=user.lower(),
        channel=channel,
        channel_name="incidents",
        message=slack.message(channel, ts).as_slack(),
        response_url=slack.api_url + "response",
    )


def shortcut_body(slack: FakeSlack, channel: str, ts: str, user: str = "U7") -> bytes:
    return sender.form_body(shortcut_payload(slack, channel, ts, user))[0]


def users(request: ScriptedRequest) -> list[str]:
    return [str(m["content"]) for m in request.messages if m.get("role") == "user"]


def answered(slack: FakeSlack, channel: str, thread_ts: str) -> bool:
    return any(m.text == ANSWER for m in slack.messages(channel, thread_ts) if m.user == "UBOT")


async def test_the_shortcut_on_an_alert_starts_a_job_answered_in_its_thread(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel
) -> None:
    model.policy = steps(Reply(content=ANSWER))
    serve = await bot()
    alert = slack.add_post(CHANNEL, alert_posts.alertmanager_firing(host="web-03"))

    assert (await serve.post_event(shortcut_body(slack, CHANNEL, alert, "U7")))[0] == 200

    await slack.wait_for(lambda: answered(slack, CHANNEL, alert), timeout=30)
    [request] = model.requests
    first = users(request)[0]
    assert first.startswith(
        "<@U7>: Investigate this message (sent with the “Investigate with opsloop”"
    )
    assert "Alertmanager (bot):" in first
    assert "> [FIRING:1] HighCPU web-03" in first
    assert "web-03 has been at 97% CPU" in first
    assert "severity: critical" in first  # the attachment's fields
    assert "eyes" in slack.reactions(CHANNEL, alert)
    # The answer carries the feedback buttons; the status message names the requester's job.
    [answer] = [m for m in slack.messages(CHANNEL, alert) if m.text == ANSWER]
    assert answer.blocks is not None and answer.blocks[-1]["type"] == "context_actions"

    # The same shortcut delivered again (or used again on the alert) starts nothing new.
    assert (await serve.post_event(shortcut_body(slack, CHANNEL, alert, "U8")))[0] == 200
    await slack.wait_for(lambda: bool(slack.calls_of("response")), timeout=10)
    assert "already" in str(slack.calls_of("response")[0]["text"])
    assert len(model.requests) == 1


async def test_a_channel_the_bot_is_not_in_gets_told_how_to_add_it(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel
) -> None:
    model.policy = steps(Reply(content=ANSWER))
    serve = await bot()
    alert = slack.add_post("C0OUTSIDE", alert_posts.alertmanager_firing())
    slack.fail_next("conversations.replies", status=200, error="not_in_channel")

    assert (await serve.post_event(shortcut_body(slack, "C0OUTSIDE", alert)))[0] == 200

    await slack.wait_for(lambda: bool(slack.calls_of("response")), timeout=10)
    [note] = slack.calls_of("response")
    assert note["response_type"] == "ephemeral" and "/invite @opsloop" in str(note["text"])
    assert model.requests == []
    assert slack.calls_of("chat.postMessage") == []


# ---- over Socket Mode -------------------------------------------------------------------

APP_TOKEN = "xapp-1-A0OPSLOOP-1-0123456789abcdef"
SOCKET = {"SLACK_APP_TOKEN": APP_TOKEN, "SLACK_SIGNING_SECRET": None}
SOCKET_TEST = "test_the_shortcut_over_socket_mode"


@pytest.fixture
async def fake() -> AsyncIterator[tuple[FakeSlack, FakeSocketMode]]:
    """The fake Slack, with Socket Mode's routes (added before it starts)."""
    slack = FakeSlack(usergroups={"SOPS": ["UAPPROVER1", "UAPPROVER2"]})
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


async def test_the_shortcut_over_socket_mode(
    bot: StartBot, fake: tuple[FakeSlack, FakeSocketMode], model: ScriptedModel
) -> None:
    slack, socket = fake
    model.policy = steps(Reply(content=ANSWER))
    await bot(**SOCKET)
    await socket.wait_connected()
    alert = slack.add_post(CHANNEL, alert_posts.alertmanager_firing(host="web-03"))

    ack = await socket.send_interactive(shortcut_payload(slack, CHANNEL, alert))

    assert ack is not None
    await slack.wait_for(lambda: answered(slack, CHANNEL, alert), timeout=30)
    assert "HighCPU web-03" in users(model.requests[0])[0]

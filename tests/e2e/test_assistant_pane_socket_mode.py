"""The assistant pane and App Home over Socket Mode (``opsloop socket``): the same
greeting, prompts, job and home as over HTTP, the events arriving over the websocket."""

from __future__ import annotations

import json
from typing import Any

from bot.emulator import sender
from bot.emulator.scripted import Reply
from bot.emulator.slack import BOT_USER_ID, FakeSlack, Message
from bot.emulator.slack_socket import FakeSocketMode

from .conftest import StartBot
from .harness import ScriptedModel, new_ts, steps
from .test_socket_mode import SOCKET, bot_argv, fake, slack, socket

__all__ = ["bot_argv", "fake", "slack", "socket"]  # Socket Mode's fixtures

DM = "D0PANE2"
USER = "U0ALICE"


def enveloped(event: dict[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(sender.event_body(event))
    return body


async def test_the_pane_and_the_home_over_socket_mode(
    bot: StartBot, slack: FakeSlack, socket: FakeSocketMode, model: ScriptedModel
) -> None:
    model.policy = steps(Reply(content="web-03 is fine: CPU 12%."))  # type: ignore[arg-type]
    await bot(**SOCKET)
    await socket.wait_connected()
    thread_ts = new_ts()
    slack.add_message(DM, thread_ts, USER, "New Assistant Thread")
    started = sender.assistant_thread_event(
        "assistant_thread_started", user=USER, channel=DM, thread_ts=thread_ts, looking_at="C0INC7"
    )
    assert await socket.send_event(enveloped(started)) is not None
    await slack.wait_for(lambda: (DM, thread_ts) in slack.pane.prompts, timeout=10)

    ts = slack.add_message(DM, None, USER, "Is web-03 ok?", thread_ts)
    request = sender.im_event(Message(DM, ts, "Is web-03 ok?", USER, thread_ts=thread_ts))
    assert await socket.send_event(enveloped(request)) is not None
    await slack.wait_for(
        lambda: any(
            m.text.startswith("web-03 is fine")
            for m in slack.messages(DM, thread_ts)
            if m.user == BOT_USER_ID
        ),
        timeout=30,
    )
    assert "(the user is looking at <#C0INC7>)" in str(model.requests[0].messages)
    assert slack.pane.titles[(DM, thread_ts)] == "Is web-03 ok?"

    home = sender.app_home_opened(user=USER, channel=DM)
    assert await socket.send_event(enveloped(home)) is not None
    await slack.wait_for(lambda: USER in slack.pane.homes, timeout=10)
    blocks = str(slack.pane.homes[USER]["blocks"])
    assert "assistant pane (DM)" in blocks and "completed" in blocks

"""Events that are about no message — ``app_home_opened``, ``assistant_thread_started`` —
are delivered, recorded and retried like any other (they carry an ``event_ts`` but no
``ts``; the sender once raised ``KeyError: 'ts'`` after the first attempt, which the dev
process logged as "Task exception was never retrieved")."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from bot.dev.pane import DevPane
from bot.dev.workspace import Emulator
from bot.emulator.sender import MAX_RETRIES, Delivery, Sent, deliver_event
from tests.dev.test_emulator import SECRET, USERS, Received, RecordingBot


@pytest.fixture
async def bot() -> AsyncIterator[RecordingBot]:
    recording = RecordingBot()
    await recording.start()
    yield recording
    await recording.stop()


@pytest.fixture
async def emu(bot: RecordingBot) -> AsyncIterator[Emulator]:
    emulator = Emulator(signing_secret=SECRET, users=USERS, model_label="demo model")
    emulator.retry_delays = (0.01, 0.01, 0.01)
    await emulator.start()
    emulator.bot_url = bot.url
    yield emulator
    await emulator.stop()


async def test_home_opened_is_delivered_and_recorded(emu: Emulator, bot: RecordingBot) -> None:
    DevPane(emu).home("UALICE")
    await emu.idle()
    [received] = await bot.wait_for(1)
    assert received.json["event"]["type"] == "app_home_opened"
    [delivery] = [d for d in emu.deliveries if d.type == "app_home_opened"]
    assert delivery.ok and delivery.attempt == 0
    assert delivery.ts == received.json["event"]["event_ts"]


async def test_a_pane_opened_that_fails_is_retried_like_slack(
    emu: Emulator, bot: RecordingBot
) -> None:
    async def refuse(_: Received, __: int) -> web.StreamResponse:
        return web.Response(status=500)

    bot.answer = refuse
    DevPane(emu).open("UALICE")
    await emu.idle()
    started = [d for d in emu.deliveries if d.type == "assistant_thread_started"]
    assert [d.attempt for d in started] == list(range(MAX_RETRIES + 1))
    assert all(d.reason == "http_error" for d in started)


async def test_deliver_event_never_raises_for_an_event_without_ts() -> None:
    recorded: list[Delivery] = []

    async def send(_: bytes, __: object) -> Sent:
        return 200, None, False

    async def record(delivery: Delivery) -> None:
        recorded.append(delivery)

    event = {"type": "app_home_opened", "user": "UALICE", "tab": "home", "event_ts": "1.5"}
    await deliver_event(event, send=send, retry_delays=(), record=record, gone=lambda: False)
    assert [(d.type, d.ts, d.ok) for d in recorded] == [("app_home_opened", "1.5", True)]

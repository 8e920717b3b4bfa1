"""The dev emulator speaks Slack's protocols: signed events with Slack's retries, signed
``block_actions`` clicks with a working ``response_url``, the unchanged fake Web API, and a
server-sent-event stream for the page with ephemerals scoped to their user.

Everything runs over real HTTP on loopback: the "bot" is a small aiohttp server recording what
it receives (and, in one test, a real slack-bolt ``AsyncApp``), the page's side is an aiohttp
client reading ``/ui/stream``. Waits are on conditions, never on sleeps.
"""

from __future__ import annotations

import asyncio
import html
import json
import re
import shutil
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import aiohttp
import pytest
from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.async_app import AsyncApp
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient

import bot.dev.page as page_module
import bot.dev.workspace as emulator_module
from bot.dev.workspace import (
    ACK_TIMEOUT_S,
    MAX_RETRIES,
    NO_ANSWER,
    RETRY_DELAYS_S,
    STATIC_DIR,
    DevUser,
    Emulator,
    EmulatorError,
    html_safe_json,
)
from bot.emulator.slack import BOT_USER_ID, MAX_MESSAGE_TEXT
from tests.e2e import harness

SECRET = "dev-test-signing-secret"
TOKEN = "xoxb-test"
CHANNEL = "C0INCIDENT"
USERS = (
    DevUser("UALICE", "alice", "requester"),
    DevUser("UBOB", "bob", "approver"),
    DevUser("UMALLORY", "mallory", "stranger"),
)
GUARD_S = 10.0  # a hang guard: every wait below is on an event

# Slack's documented examples (api.slack.com: app_mention, message.channels, block_actions).
DOC_ENVELOPE = {"token", "team_id", "api_app_id", "event", "type", "event_id", "event_time"}
DOC_APP_MENTION = {"type", "user", "text", "ts", "channel", "event_ts"}
DOC_MESSAGE = {"type", "channel", "user", "text", "ts", "event_ts", "channel_type"}
DOC_BLOCK_ACTIONS = {
    "type",
    "team",
    "user",
    "api_app_id",
    "token",
    "container",
    "trigger_id",
    "channel",
    "message",
    "response_url",
    "actions",
}
DOC_ACTION = {"action_id", "block_id", "text", "value", "type", "action_ts"}
# What real deliveries of a typed message carry on top of the documented minimum.
EVENT_EXTRAS = {"team", "client_msg_id", "blocks", "thread_ts", "parent_user_id"}


# ---- a bot that records what reaches it ---------------------------------------------------


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes
    at: float

    @property
    def json(self) -> dict[str, Any]:
        return dict(json.loads(self.body))

    @property
    def payload(self) -> dict[str, Any]:
        fields = parse_qs(self.body.decode(), strict_parsing=True)
        assert list(fields) == ["payload"]
        return dict(json.loads(fields["payload"][0]))

    @property
    def retry(self) -> tuple[str | None, str | None]:
        return self.headers.get("X-Slack-Retry-Num"), self.headers.get("X-Slack-Retry-Reason")


Answer = Callable[[Received, int], Awaitable[web.StreamResponse]]


async def ok(_: Received, __: int) -> web.StreamResponse:
    return web.Response(status=200)


@dataclass
class RecordingBot:
    """A loopback HTTP server answering with ``answer(request, index)`` and recording all."""

    answer: Answer = ok
    requests: list[Received] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    _arrived: asyncio.Condition = field(default_factory=asyncio.Condition)
    _runner: web.AppRunner | None = None
    url: str = ""

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/slack/events", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}/slack/events"

    async def stop(self) -> None:
        self.release.set()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        received = Received(dict(request.headers), await request.read(), time.monotonic())
        self.requests.append(received)
        async with self._arrived:
            self._arrived.notify_all()
        return await self.answer(received, len(self.requests) - 1)

    async def hang(self, _: Received, __: int) -> web.StreamResponse:
        await self.release.wait()
        return web.Response(status=200)

    async def wait_for(self, count: int) -> list[Received]:
        async with asyncio.timeout(GUARD_S), self._arrived:
            await self._arrived.wait_for(lambda: len(self.requests) >= count)
        return self.requests


@pytest.fixture
async def bot() -> AsyncIterator[RecordingBot]:
    recording = RecordingBot()
    await recording.start()
    yield recording
    await recording.stop()


@pytest.fixture
async def emu(bot: RecordingBot) -> AsyncIterator[Emulator]:
    emulator = Emulator(signing_secret=SECRET, users=USERS, model_label="demo model")
    emulator.retry_delays = (0.01, 0.01, 0.01)  # local retries without the 1-2-4 s pauses
    await emulator.start()
    emulator.bot_url = bot.url
    yield emulator
    await emulator.stop()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


@pytest.fixture
def client(emu: Emulator) -> AsyncWebClient:
    return AsyncWebClient(token=TOKEN, base_url=emu.api_url)


def verified(received: Received, secret: str = SECRET) -> bool:
    return SignatureVerifier(secret).is_valid(
        body=received.body,
        timestamp=received.headers.get("X-Slack-Request-Timestamp"),
        signature=received.headers.get("X-Slack-Signature"),
    )


def card_blocks(value: str = "job1|call1") -> list[dict[str, Any]]:
    return [
        {"type": "header", "block_id": "title", "text": {"type": "plain_text", "text": "Card"}},
        {
            "type": "actions",
            "block_id": "opsloop_card_actions",
            "elements": [
                {
                    "type": "button",
                    "text": {"type": "plain_text", "text": "Approve"},
                    "action_id": "opsloop_approve",
                    "value": value,
                    "style": "primary",
                },
                {
                    "type": "button",
                    "text": {"type": "plain_text", "text": "Deny"},
                    "action_id": "opsloop_deny",
                    "value": value,
                    "style": "danger",
                },
            ],
        },
    ]


# ---- the page's event stream --------------------------------------------------------------


class Stream:
    """An open ``/ui/stream``: ``await next()`` → (event, data)."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self.response = response

    async def next(self) -> tuple[str, dict[str, Any]]:
        kind, data = "", ""
        async with asyncio.timeout(GUARD_S):
            while True:
                raw = await self.response.content.readline()
                if not raw:
                    raise EOFError("the stream ended")
                line = raw.decode().rstrip("\n")
                if not line:
                    if kind:
                        return kind, json.loads(data)
                    continue
                if line.startswith(":"):
                    continue
                name, _, value = line.partition(": ")
                if name == "event":
                    kind = value
                elif name == "data":
                    data += value

    async def next_of(self, *kinds: str) -> tuple[str, dict[str, Any]]:
        while True:
            kind, data = await self.next()
            if kind in kinds:
                return kind, data


@pytest.fixture
async def open_stream(
    emu: Emulator, http: aiohttp.ClientSession
) -> AsyncIterator[Callable[..., Awaitable[tuple[Stream, dict[str, Any]]]]]:
    opened: list[aiohttp.ClientResponse] = []

    async def open_(user: str | None = None) -> tuple[Stream, dict[str, Any]]:
        query = f"?user={user}" if user else ""
        response = await http.get(emu.page_url + "ui/stream" + query)
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/event-stream")
        opened.append(response)
        stream = Stream(response)
        kind, snapshot = await stream.next()
        assert kind == "snapshot"
        return stream, snapshot

    yield open_
    for response in opened:
        response.close()


# ---- events -------------------------------------------------------------------------------


def test_defaults_are_slacks_timeout_and_three_short_retries() -> None:
    emulator = Emulator(signing_secret=SECRET, users=USERS)
    assert emulator.ack_timeout == ACK_TIMEOUT_S == 3.0
    assert MAX_RETRIES == 3
    assert emulator.retry_delays == RETRY_DELAYS_S == (1.0, 2.0, 4.0)
    assert emulator.bot_url is None


async def test_events_are_signed_so_slack_sdks_verifier_accepts_them(
    emu: Emulator, bot: RecordingBot
) -> None:
    await emu.post_as("UALICE", "hello team")
    [received] = await bot.wait_for(1)
    assert verified(received)
    assert not verified(received, secret="another-secret")
    assert abs(int(received.headers["X-Slack-Request-Timestamp"]) - time.time()) < 60
    assert received.headers["Content-Type"] == "application/json"
    assert received.retry == (None, None)


async def test_a_mention_arrives_as_app_mention_and_message_twins(
    emu: Emulator, bot: RecordingBot
) -> None:
    ts = await emu.post_as("UALICE", "@opsloop is web down?")
    requests = await bot.wait_for(2)
    await emu.idle()
    assert len(bot.requests) == 2
    bodies = {r.json["event"]["type"]: r.json for r in requests}
    assert set(bodies) == {"app_mention", "message"}
    assert bodies["app_mention"]["event_id"] != bodies["message"]["event_id"]
    for body in bodies.values():
        assert DOC_ENVELOPE <= set(body)
        sample = json.loads(harness.event_body({"type": "message"}))
        assert set(body) == set(sample)
        assert body["type"] == "event_callback"
        assert body["authorizations"][0]["user_id"] == BOT_USER_ID
        event = body["event"]
        assert (event["channel"], event["ts"], event["user"]) == (CHANNEL, ts, "UALICE")
        assert event["text"] == f"<@{BOT_USER_ID}> is web down?"
        assert "thread_ts" not in event
    mention, message = bodies["app_mention"]["event"], bodies["message"]["event"]
    assert DOC_APP_MENTION <= set(mention) <= DOC_APP_MENTION | EVENT_EXTRAS
    assert DOC_MESSAGE <= set(message) <= DOC_MESSAGE | EVENT_EXTRAS
    # The shapes the end-to-end tests post (harness.mention / harness.twin), plus blocks.
    assert set(mention) == set(harness.mention(CHANNEL, "UALICE", "x")) | {"blocks"}
    assert set(message) == set(harness.twin(harness.mention(CHANNEL, "UALICE", "x"))) | {"blocks"}
    assert message["channel_type"] == "channel"
    assert mention["blocks"][0]["elements"][0]["elements"][0] == {
        "type": "user",
        "user_id": BOT_USER_ID,
    }


async def test_a_thread_reply_is_one_message_event_with_thread_ts(
    emu: Emulator, bot: RecordingBot
) -> None:
    parent = await emu.post_as("UALICE", "web is slow")
    reply = await emu.post_as("UBOB", "looking", thread_ts=parent)
    await bot.wait_for(2)
    await emu.idle()
    assert len(bot.requests) == 2
    first, second = (r.json["event"] for r in bot.requests)
    assert first["type"] == second["type"] == "message"
    assert "thread_ts" not in first
    assert (second["ts"], second["thread_ts"], second["parent_user_id"]) == (
        reply,
        parent,
        "UALICE",
    )
    assert DOC_MESSAGE <= set(second) <= DOC_MESSAGE | EVENT_EXTRAS
    # A reply to a reply lands in the same thread, as in Slack.
    again = await emu.post_as("UBOB", "@opsloop restart it", thread_ts=reply)
    await bot.wait_for(4)
    for received in bot.requests[2:]:
        assert received.json["event"]["thread_ts"] == parent
        assert received.json["event"]["ts"] == again
    assert {r.json["event"]["type"] for r in bot.requests[2:]} == {"app_mention", "message"}


def test_typing_becomes_what_slacks_client_sends() -> None:
    emulator = Emulator(signing_secret=SECRET, users=USERS)
    assert emulator.compose("@opsloop hi") == f"<@{BOT_USER_ID}> hi"
    assert emulator.compose("@OpsLoop, ask @bob") == f"<@{BOT_USER_ID}>, ask <@UBOB>"
    assert emulator.compose("<@UBOT> typed by hand") == "<@UBOT> typed by hand"
    assert emulator.compose("<@UNOBODY> & <b>") == "&lt;@UNOBODY&gt; &amp; &lt;b&gt;"
    assert emulator.compose("mail ops@opsloop.dev or @opsloopx") == (
        "mail ops@opsloop.dev or @opsloopx"
    )
    assert emulator.mentions_bot(emulator.compose("hey @opsloop"))
    assert not emulator.mentions_bot(emulator.compose("hey opsloop"))


async def test_post_as_refuses_what_slack_would_refuse(emu: Emulator) -> None:
    for user, text, thread, code in [
        ("UNOBODY", "hi", None, "user_not_found"),
        ("UALICE", "   ", None, "no_text"),
        ("UALICE", "x" * (MAX_MESSAGE_TEXT + 1), None, "msg_too_long"),
        ("UALICE", "hi", "1.000001", "thread_not_found"),
    ]:
        with pytest.raises(EmulatorError) as info:
            await emu.post_as(user, text, thread)
        assert info.value.code == code
    assert emu.messages(CHANNEL) == []


# ---- retries ------------------------------------------------------------------------------


async def test_no_ack_within_3s_is_retried_with_http_timeout(
    emu: Emulator, bot: RecordingBot
) -> None:
    async def hang_first(received: Received, index: int) -> web.StreamResponse:
        return await (bot.hang(received, index) if index == 0 else ok(received, index))

    bot.answer = hang_first
    await emu.post_as("UALICE", "anyone?")
    first, retry = await bot.wait_for(2)
    await emu.idle()
    assert len(bot.requests) == 2  # the retry got a 200: no more
    assert retry.at - first.at >= ACK_TIMEOUT_S - 0.5  # Slack's 3 s (give or take latency)
    assert retry.retry == ("1", "http_timeout")
    assert retry.json["event_id"] == first.json["event_id"]
    assert retry.json["event"] == first.json["event"]
    assert verified(retry)
    assert [(d.attempt, d.status, d.reason) for d in emu.deliveries] == [
        (0, NO_ANSWER, "http_timeout"),
        (1, 200, None),
    ]


async def test_a_bot_that_never_acks_gets_exactly_three_timeout_retries(
    emu: Emulator, bot: RecordingBot
) -> None:
    emu.ack_timeout = 0.2
    bot.answer = bot.hang
    await emu.post_as("UALICE", "anyone?")
    await bot.wait_for(MAX_RETRIES + 1)
    await emu.idle()
    assert [r.retry for r in bot.requests] == [
        (None, None),
        ("1", "http_timeout"),
        ("2", "http_timeout"),
        ("3", "http_timeout"),
    ]
    assert len({r.json["event_id"] for r in bot.requests}) == 1
    assert all(verified(r) for r in bot.requests)


async def test_errors_get_http_error_retries_and_a_200_gets_none(
    emu: Emulator, bot: RecordingBot
) -> None:
    async def fail(_: Received, __: int) -> web.StreamResponse:
        return web.Response(status=500)

    bot.answer = fail
    await emu.post_as("UALICE", "broken bot")
    await bot.wait_for(4)
    await emu.idle()
    assert [r.retry for r in bot.requests] == [
        (None, None),
        ("1", "http_error"),
        ("2", "http_error"),
        ("3", "http_error"),
    ]
    assert [d.status for d in emu.deliveries] == [500, 500, 500, 500]

    bot.requests.clear()
    bot.answer = ok
    await emu.post_as("UALICE", "fixed bot")
    await bot.wait_for(1)
    await emu.idle()
    assert [r.retry for r in bot.requests] == [(None, None)]


async def test_no_retry_header_stops_retries_and_a_dead_bot_is_connection_failed(
    emu: Emulator, bot: RecordingBot
) -> None:
    async def refuse(_: Received, __: int) -> web.StreamResponse:
        return web.Response(status=503, headers={"X-Slack-No-Retry": "1"})

    bot.answer = refuse
    await emu.post_as("UALICE", "once")
    await bot.wait_for(1)
    await emu.idle()
    assert len(bot.requests) == 1

    url = bot.url
    await bot.stop()
    emu.bot_url = url
    await emu.post_as("UALICE", "nobody home")
    await emu.idle()
    failed = list(emu.deliveries)[-(MAX_RETRIES + 1) :]
    assert [(d.attempt, d.reason) for d in failed] == [
        (n, "connection_failed") for n in range(MAX_RETRIES + 1)
    ]


# ---- clicks -------------------------------------------------------------------------------


async def test_a_click_is_a_signed_form_encoded_block_actions_with_the_current_message(
    emu: Emulator, bot: RecordingBot, client: AsyncWebClient
) -> None:
    parent = await emu.post_as("UALICE", "@opsloop restart web")
    await bot.wait_for(2)
    await emu.idle()
    posted = await client.chat_postMessage(
        channel=CHANNEL, thread_ts=parent, text="Approval needed", blocks=card_blocks()
    )
    card = str(posted["ts"])
    await client.chat_update(channel=CHANNEL, ts=card, text="Approval needed (edited)")

    status = await emu.click_as("UBOB", CHANNEL, card, "opsloop_approve", "job1|call1")
    assert status == 200
    received = bot.requests[2]
    assert verified(received)
    assert received.headers["Content-Type"] == "application/x-www-form-urlencoded"
    payload = received.payload
    assert DOC_BLOCK_ACTIONS <= set(payload)
    sample = harness.block_actions_body("U1", "a", "v", CHANNEL, "1.2", "http://x")
    assert set(payload) == set(json.loads(parse_qs(sample.decode())["payload"][0]))
    assert payload["type"] == "block_actions"
    assert payload["user"]["id"] == "UBOB" and payload["user"]["name"] == "bob"
    assert payload["container"] == {
        "type": "message",
        "message_ts": card,
        "channel_id": CHANNEL,
        "is_ephemeral": False,
        "thread_ts": parent,
    }
    assert payload["channel"] == {"id": CHANNEL, "name": "incident"}
    current = emu.message(CHANNEL, card).as_slack()
    assert payload["message"] == current
    assert payload["message"]["text"] == "Approval needed (edited)"
    [action] = payload["actions"]
    assert DOC_ACTION <= set(action)
    assert (action["action_id"], action["block_id"], action["value"]) == (
        "opsloop_approve",
        "opsloop_card_actions",
        "job1|call1",
    )
    assert action["text"]["text"] == "Approve" and action["style"] == "primary"
    assert payload["response_url"].startswith(emu.page_url + "actions/")

    with pytest.raises(EmulatorError) as info:
        await emu.click_as("UBOB", CHANNEL, card, "opsloop_approve", "another|value")
    assert info.value.code == "button_not_found"


async def test_a_click_is_not_retried_and_reports_no_answer(
    emu: Emulator, bot: RecordingBot, client: AsyncWebClient
) -> None:
    posted = await client.chat_postMessage(channel=CHANNEL, text="card", blocks=card_blocks())
    emu.ack_timeout = 0.2
    bot.answer = bot.hang
    status = await emu.click_as(
        "UMALLORY", CHANNEL, str(posted["ts"]), "opsloop_deny", "job1|call1"
    )
    assert status == NO_ANSWER
    await emu.idle()
    assert len(bot.requests) == 1
    assert emu.deliveries[-1].reason == "http_timeout"


async def test_response_url_replaces_answers_ephemerally_and_deletes_like_slack(
    emu: Emulator, bot: RecordingBot, client: AsyncWebClient, http: aiohttp.ClientSession
) -> None:
    posted = await client.chat_postMessage(channel=CHANNEL, text="card", blocks=card_blocks())
    card = str(posted["ts"])
    assert await emu.click_as("UMALLORY", CHANNEL, card, "opsloop_approve", "job1|call1") == 200
    url = bot.requests[0].payload["response_url"]

    async def respond(body: dict[str, Any]) -> int:
        async with http.post(url, json=body) as response:
            return response.status

    assert await respond({"text": "you may not approve this"}) == 200
    [note] = emu.ephemerals(CHANNEL, "UMALLORY")
    assert note.text == "you may not approve this"
    assert emu.ephemerals(CHANNEL, "UBOB") == []
    assert await respond({"replace_original": True, "text": "replaced"}) == 200
    replaced = emu.message(CHANNEL, card)
    assert (replaced.text, replaced.blocks) == ("replaced", None)
    assert await respond({"response_type": "in_channel", "text": "for all"}) == 200
    assert [m.text for m in emu.messages(CHANNEL)] == ["replaced", "for all"]
    assert await respond({"delete_original": True}) == 200
    assert [m.text for m in emu.messages(CHANNEL)] == ["for all"]
    assert await respond({"text": "a fifth use"}) == 200
    assert await respond({"text": "a sixth use"}) == 404  # five uses, as Slack's
    async with http.post(emu.page_url + "actions/unknown", json={"text": "x"}) as response:
        assert response.status == 404


# ---- the Web API, the state and the stream ------------------------------------------------


async def test_the_web_api_still_works_and_the_state_shows_edits(
    emu: Emulator, client: AsyncWebClient, http: aiohttp.ClientSession
) -> None:
    assert (await client.auth_test())["user_id"] == BOT_USER_ID
    posted = await client.chat_postMessage(channel=CHANNEL, text="Working: iteration 1")
    await client.chat_update(channel=CHANNEL, ts=posted["ts"], text="Finished")
    async with http.get(emu.page_url + "ui/state") as response:
        assert response.status == 200
        state = await response.json()
    [shown] = state["messages"]
    assert (shown["ts"], shown["text"], shown["bot_id"]) == (posted["ts"], "Finished", "BBOT")
    assert "edited" in shown
    assert [c.method for c in emu.calls] == ["auth.test", "chat.postMessage", "chat.update"]
    async with http.get(emu.page_url + "ui/info") as response:
        info = await response.json()
    assert info["model_label"] == "demo model"
    assert info["channel"] == {"id": CHANNEL, "name": "incident"}
    assert [(u["id"], u["role"]) for u in info["users"]] == [(u.id, u.role) for u in USERS]


async def test_the_stream_sends_every_change_in_order(
    emu: Emulator, client: AsyncWebClient, open_stream: Any
) -> None:
    stream, snapshot = await open_stream("UALICE")
    assert snapshot["messages"] == [] and snapshot["ephemerals"] == []
    human = await emu.post_as("UALICE", "@opsloop check web")
    posted = await client.chat_postMessage(channel=CHANNEL, thread_ts=human, text="Working")
    status_ts = str(posted["ts"])
    await client.chat_update(channel=CHANNEL, ts=status_ts, text="Working: iteration 2")
    await client.reactions_add(channel=CHANNEL, timestamp=human, name="eyes")
    await client.chat_postEphemeral(channel=CHANNEL, user="UALICE", text="only you")
    await client.assistant_threads_setStatus(
        channel_id=CHANNEL, thread_ts=human, status="is thinking…"
    )
    started = await client.chat_startStream(channel=CHANNEL, thread_ts=human, markdown_text="# Ans")
    stream_ts = str(started["ts"])
    await client.chat_appendStream(channel=CHANNEL, ts=stream_ts, markdown_text="wer")
    await client.chat_stopStream(channel=CHANNEL, ts=stream_ts)

    seen = []
    for _ in range(10):
        seen.append(await stream.next_of("message", "update", "reaction", "ephemeral", "status"))
    assert [kind for kind, _ in seen] == [
        "message",
        "message",
        "update",
        "reaction",
        "ephemeral",
        "status",
        "message",
        "status",  # the app replied in the thread: Slack clears the assistant status
        "update",
        "update",
    ]
    data = [d for _, d in seen]
    assert (data[0]["ts"], data[0]["user"]) == (human, "UALICE")
    assert (data[1]["ts"], data[1]["thread_ts"]) == (status_ts, human)
    assert data[2]["text"] == "Working: iteration 2"
    assert (data[3]["ts"], data[3]["name"]) == (human, "eyes")
    assert (data[4]["user"], data[4]["text"]) == ("UALICE", "only you")
    assert data[5] == {"channel": CHANNEL, "thread_ts": human, "status": "is thinking…"}
    assert data[6]["streaming"] and data[6]["streamed"] and data[6]["text"] == "# Ans"
    assert data[7] == {"channel": CHANNEL, "thread_ts": human, "status": ""}
    assert data[8]["text"] == "# Answer" and data[8]["streaming"]
    assert not data[9]["streaming"] and data[9]["streamed"]
    assert emu.state()["statuses"] == []


async def test_ephemerals_are_scoped_to_their_user_on_the_server(
    emu: Emulator, client: AsyncWebClient, open_stream: Any, http: aiohttp.ClientSession
) -> None:
    alice, _ = await open_stream("UALICE")
    bob, _ = await open_stream("UBOB")
    nobody, _ = await open_stream()
    posted = await client.chat_postMessage(channel=CHANNEL, text="card")
    await client.chat_postEphemeral(channel=CHANNEL, user="UALICE", text="not for bob")
    await client.reactions_add(channel=CHANNEL, timestamp=posted["ts"], name="eyes")
    kinds = ("message", "ephemeral", "reaction")
    assert [(await alice.next_of(*kinds))[0] for _ in range(3)] == list(kinds)
    assert [(await bob.next_of(*kinds))[0] for _ in range(2)] == ["message", "reaction"]
    assert [(await nobody.next_of(*kinds))[0] for _ in range(2)] == ["message", "reaction"]
    for user, count in (("UALICE", 1), ("UBOB", 0), (None, 0)):
        query = f"?user={user}" if user else ""
        async with http.get(emu.page_url + "ui/state" + query) as response:
            assert len((await response.json())["ephemerals"]) == count
    _, snapshot = await open_stream("UALICE")
    assert [e["text"] for e in snapshot["ephemerals"]] == ["not for bob"]
    _, snapshot = await open_stream("UBOB")
    assert snapshot["ephemerals"] == []


async def test_html_never_comes_back_unescaped(
    emu: Emulator, client: AsyncWebClient, open_stream: Any, http: aiohttp.ClientSession
) -> None:
    evil = '<img src=x onerror="alert(1)"><script>alert(2)</script>&amp;'
    blocks = [
        {"type": "section", "text": {"type": "mrkdwn", "text": evil}},
        {"type": "markdown", "text": evil},
    ]
    stream, _ = await open_stream("UALICE")
    await client.chat_postMessage(channel=CHANNEL, text=evil, blocks=blocks)
    await client.chat_postEphemeral(channel=CHANNEL, user="UALICE", text=evil)
    await emu.post_as("UALICE", evil)
    raw: dict[str, bytes] = {}
    for path in ("ui/state?user=UALICE", "ui/info", ""):
        async with http.get(emu.page_url + path) as response:
            assert response.headers["X-Content-Type-Options"] == "nosniff"
            raw[path] = await response.read()
            if path:
                assert response.content_type == "application/json"
            else:
                assert "script-src 'self'" in response.headers["Content-Security-Policy"]
    assert b"alert(" not in raw[""]  # the page itself is static: no data in it
    for path in ("ui/state?user=UALICE", "ui/info"):  # JSON holds no markup characters at all
        assert b"<" not in raw[path] and b">" not in raw[path] and b"&amp;" not in raw[path]
    state = json.loads(raw["ui/state?user=UALICE"])
    assert state["messages"][0]["text"] == evil  # intact once parsed: escaping is the page's
    assert state["messages"][0]["blocks"] == blocks
    assert state["ephemerals"][0]["text"] == evil
    assert state["messages"][1]["text"].startswith("&lt;img")  # typed, escaped as Slack does
    line = b""
    while not line.startswith(b"data: "):  # the raw stream frame of the bot's message
        line = await stream.response.content.readline()
    assert b"<img" not in line and b"<script" not in line and b"alert(" in line
    assert json.loads(line[len(b"data: ") :])["text"] == evil


async def test_the_page_and_its_assets_are_served(
    emu: Emulator, http: aiohttp.ClientSession
) -> None:
    async with http.get(emu.page_url) as response:
        assert response.status == 200
        page = await response.text()
    for testid in ("composer", "thread-composer", "user-switcher", "model-label"):
        assert f'data-testid="{testid}"' in page
    async with http.get(emu.page_url + "static/app.js") as response:
        assert response.status == 200
        assert "window.opsloopRender" in await response.text()
    async with http.get(emu.page_url + "static/style.css") as response:
        assert response.status == 200
    async with http.get(emu.page_url + "static/../emulator.py") as response:
        assert response.status in (403, 404)
    assert {p.name for p in STATIC_DIR.iterdir()} >= {"index.html", "app.js", "style.css"}


async def test_page_endpoints_post_and_click_as_the_chosen_user(
    emu: Emulator, bot: RecordingBot, client: AsyncWebClient, http: aiohttp.ClientSession
) -> None:
    async with http.post(
        emu.page_url + "ui/post", json={"user": "UALICE", "text": "@opsloop hi"}
    ) as response:
        assert response.status == 200
        ts = (await response.json())["ts"]
    assert emu.message(CHANNEL, ts).text == f"<@{BOT_USER_ID}> hi"
    await bot.wait_for(2)
    await emu.idle()
    posted = await client.chat_postMessage(
        channel=CHANNEL, thread_ts=ts, text="card", blocks=card_blocks()
    )
    click = {
        "user": "UBOB",
        "channel": CHANNEL,
        "message_ts": posted["ts"],
        "action_id": "opsloop_approve",
        "value": "job1|call1",
    }
    async with http.post(emu.page_url + "ui/click", json=click) as response:
        assert (await response.json()) == {"ok": True, "status": 200}
    assert bot.requests[-1].payload["user"]["id"] == "UBOB"
    async with http.post(emu.page_url + "ui/click", json={**click, "value": "x"}) as response:
        assert response.status == 404
    async with http.post(emu.page_url + "ui/post", json={"user": "UX", "text": "hi"}) as response:
        assert (response.status, (await response.json())["error"]) == (400, "user_not_found")


async def test_page_endpoints_refuse_foreign_hosts_origins_and_forms(
    emu: Emulator, http: aiohttp.ClientSession
) -> None:
    url = emu.page_url + "ui/post"
    body = {"user": "UALICE", "text": "hi"}
    async with http.post(url, data={"user": "UALICE", "text": "hi"}) as response:
        assert response.status == 415
    async with http.post(url, json=body, headers={"Origin": "http://evil.example"}) as response:
        assert response.status == 403
    async with http.get(emu.page_url + "ui/state", headers={"Host": "evil.example"}) as response:
        assert response.status == 403
    async with http.post(url, json=body, headers={"Origin": emu.page_url.rstrip("/")}) as response:
        assert response.status == 200
    assert [m.text for m in emu.messages(CHANNEL)] == ["hi"]


# ---- bounds -------------------------------------------------------------------------------


async def test_old_messages_are_dropped_and_the_page_is_told(
    emu: Emulator, open_stream: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(emulator_module, "MAX_MESSAGES", 3)
    emu.bot_url = None
    stream, _ = await open_stream()
    stamps = [await emu.post_as("UALICE", f"m{i}") for i in range(5)]
    assert [m.ts for m in emu.messages(CHANNEL)] == stamps[2:]
    deleted = [(await stream.next_of("delete"))[1]["ts"] for _ in range(2)]
    assert deleted == stamps[:2]


async def test_a_stream_client_that_falls_behind_is_dropped(
    emu: Emulator, open_stream: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(page_module, "STREAM_QUEUE", 2)
    stream, _ = await open_stream()
    # Five changes before the stream's writer gets a turn: its queue of two overflows.
    emu.bot_url = None
    await asyncio.gather(*(emu.post_as("UALICE", f"m{i}") for i in range(5)))
    with pytest.raises(EOFError):
        for _ in range(10):
            await stream.next()
    fresh, snapshot = await open_stream()  # the page reconnects and gets everything
    assert len(snapshot["messages"]) == 5
    del fresh


async def test_stream_clients_are_bounded(
    emu: Emulator, open_stream: Any, http: aiohttp.ClientSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(page_module, "MAX_STREAM_CLIENTS", 1)
    await open_stream()
    async with http.get(emu.page_url + "ui/stream") as response:
        assert response.status == 503


async def test_stop_ends_streams_and_deliveries_in_flight(
    bot: RecordingBot, http: aiohttp.ClientSession
) -> None:
    emulator = Emulator(signing_secret=SECRET, users=USERS)
    await emulator.start()
    emulator.bot_url = bot.url
    bot.answer = bot.hang
    response = await http.get(emulator.page_url + "ui/stream")
    stream = Stream(response)
    assert (await stream.next())[0] == "snapshot"
    await emulator.post_as("UALICE", "hello")
    await bot.wait_for(1)
    async with asyncio.timeout(GUARD_S):
        await emulator.stop()
    with pytest.raises((EOFError, aiohttp.ClientError)):
        while True:
            await stream.next()
    response.close()


# ---- a real bolt app on the other end -----------------------------------------------------


async def test_a_bolt_app_answers_a_mention_and_a_click_through_the_emulator(
    emu: Emulator,
) -> None:
    """slack-bolt verifies our signatures (a bad one would be a 401 and a retry), dispatches
    the mention and the click, and its Web API calls land back in the emulator."""
    web_client = AsyncWebClient(token=TOKEN, base_url=emu.api_url)
    app = AsyncApp(client=web_client, signing_secret=SECRET, process_before_response=True)

    @app.event("app_mention")
    async def on_mention(event: dict[str, Any], say: Any) -> None:
        await say(text="Approval needed", blocks=card_blocks(), thread_ts=event["ts"])

    @app.event("message")
    async def on_message() -> None:
        pass  # bolt answers 404 (a failure Slack retries) to an event nobody listens to

    @app.action("opsloop_approve")
    async def on_approve(ack: Any, body: dict[str, Any], client: AsyncWebClient) -> None:
        await ack()
        who = body["user"]["id"]
        await client.chat_update(
            channel=body["container"]["channel_id"],
            ts=body["container"]["message_ts"],
            text=f"Approved by <@{who}>",
            blocks=[],
        )

    async def events(request: web.Request) -> web.Response:
        return await to_aiohttp_response(await app.async_dispatch(await to_bolt_request(request)))

    server = web.Application()
    server.router.add_post("/slack/events", events)
    runner = web.AppRunner(server, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        emu.bot_url = f"http://127.0.0.1:{runner.addresses[0][1]}/slack/events"
        ts = await emu.post_as("UALICE", "@opsloop restart web")
        await emu.wait_for(lambda: len(emu.messages(CHANNEL, ts)) == 2, timeout=GUARD_S)
        await emu.idle()
        assert [(d.type, d.status) for d in emu.deliveries] in (
            [("app_mention", 200), ("message", 200)],
            [("message", 200), ("app_mention", 200)],
        )
        card = emu.messages(CHANNEL, ts)[1]
        assert card.user == BOT_USER_ID and card.thread_ts == ts
        assert await emu.click_as("UBOB", CHANNEL, card.ts, "opsloop_approve", "job1|call1") == 200
        await emu.wait_for(lambda: emu.message(CHANNEL, card.ts).text == "Approved by <@UBOB>")
        assert emu.message(CHANNEL, card.ts).blocks is None

        emu.signing_secret = "a-secret-the-bot-does-not-know"
        emu.ack_timeout = 1.0
        await emu.post_as("UALICE", "forged")
        await emu.idle()
        assert [d.status for d in list(emu.deliveries)[-4:]] == [401] * 4
    finally:
        await runner.cleanup()


# ---- the page's renderer, in the real browser ---------------------------------------------

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
)
HOSTILE = [
    "<script>alert(1)</script>",
    "&lt;script&gt;alert(1)&lt;/script&gt;",
    '<img src=x onerror="alert(1)">',
    "<javascript:alert(1)|click me>",
    '<https://ok.example/" onmouseover="alert(1)|x>',
    "[x](javascript:alert(1)) [y](data:text/html,<b>) ![i](https://img.example/a.png)",
    '**<b onclick="alert(1)">b</b>** `<i>` ```<svg onload=alert(1)>```',
    "| a | <b>b</b> |\n|---|---|\n| <iframe src=x> | `<x>` |",
    "- <img src=x>\n  - <a href=javascript:alert(1)>n</a>\n\n> <style>*{}</style>",
    "\u0001" + "0\u0002 <@U1|<img src=x>> <!subteam^S1|<b>g</b>> :eyes: \\<b\\>",
]
ALLOWED_TAGS = (
    "a b blockquote br button code del div em h1 h2 h3 h4 h5 h6 hr i li ol p pre s span"
    " strong table tbody td th thead tr ul"
)
SAMPLE_MRKDWN = "*b* _i_ ~s~ `c` <@UBOT> <https://ex.com/?a=1&amp;b=2|site> :eyes: &lt;x&gt;"
SAMPLE_MARKDOWN = "# T\n\n| a | b |\n|---|--:|\n| 1 | **2** |\n\n1. x\n2. y\n\n```\ncode\n```"
RENDER_PAGE = """<!doctype html><html><body><div id="box"></div><pre id="out"></pre>
<script src="APP"></script>
<script>
var DATA = CASES, ALLOWED = DATA.allowed.split(" ");
var box = document.getElementById("box"), render = window.opsloopRender, results = [];
function bad(html) {
  box.innerHTML = html;
  var found = [];
  box.querySelectorAll("*").forEach(function (el) {
    var tag = el.tagName.toLowerCase();
    if (ALLOWED.indexOf(tag) < 0) found.push("tag " + tag);
    Array.prototype.forEach.call(el.attributes, function (a) {
      if (/^on/i.test(a.name) || a.name === "style" || a.name === "src") {
        found.push("attr " + a.name);
      }
      if (a.name === "href" && !/^(https?:|mailto:)/i.test(a.value)) {
        found.push("href " + a.value);
      }
    });
  });
  return found;
}
DATA.hostile.forEach(function (text) {
  var plain = {type: "plain_text", text: text};
  var blocks = [
    {type: "section", text: {type: "mrkdwn", text: text}, fields: [plain],
     accessory: {type: "button", text: plain, action_id: text, value: text}},
    {type: "header", text: plain},
    {type: "context", elements: [{type: "mrkdwn", text: text}, {type: "image", alt_text: text}]},
    {type: "markdown", text: text},
    {type: text}
  ];
  [render(blocks, text), render(null, text), render.markdown(text)].forEach(function (html) {
    results.push({html: html, bad: bad(html), text: box.textContent});
  });
});
var samples = {
  mrkdwn: render(null, DATA.mrkdwn),
  markdown: render([{type: "markdown", text: DATA.markdown}], "")
};
document.getElementById("out").textContent = JSON.stringify({results: results, samples: samples});
</script></body></html>"""


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")
def test_the_page_renderer_never_lets_markup_through_in_chromium(tmp_path: Path) -> None:
    page = tmp_path / "render.html"
    script = (STATIC_DIR / "app.js").resolve().as_uri()
    data = {
        "hostile": HOSTILE,
        "allowed": ALLOWED_TAGS,
        "mrkdwn": SAMPLE_MRKDWN,
        "markdown": SAMPLE_MARKDOWN,
    }
    page.write_text(RENDER_PAGE.replace("APP", script).replace("CASES", html_safe_json(data)))
    assert CHROMIUM is not None
    done = subprocess.run(
        [
            CHROMIUM,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={tmp_path / 'profile'}",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        timeout=60,
        check=True,
    )
    dom = done.stdout.decode()
    found = re.search(r'<pre id="out">(.*?)</pre>', dom, re.DOTALL)
    assert found, dom[-2000:]
    out = json.loads(html.unescape(found.group(1)))
    assert len(out["results"]) == 3 * len(HOSTILE)
    for result in out["results"]:
        assert result["bad"] == [], result["html"]
    # Hostile text is shown as text, not dropped.
    assert any("<script>alert(1)</script>" in r["text"] for r in out["results"])
    samples = out["samples"]
    for part in (
        "<b>b</b>",
        "<i>i</i>",
        "<s>s</s>",
        "<code>c</code>",
        ">@opsloop</span>",
        '<a href="https://ex.com/?a=1&amp;b=2" target="_blank" rel="noopener noreferrer">site</a>',
        "\U0001f440",
        "&lt;x&gt;",
    ):
        assert part in samples["mrkdwn"]
    for part in ("<h1>T</h1>", "<table>", '<th class="al-right">b</th>', "<strong>2</strong>"):
        assert part in samples["markdown"]
    assert (
        "<ol><li>" in samples["markdown"]
        and '<pre class="code-block"><code>code' in (samples["markdown"])
    )

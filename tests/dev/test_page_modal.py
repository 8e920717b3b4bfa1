"""The dev page shows a modal the bot opens and relays its submission like Slack.

A card's button is clicked through the page's ``/ui/click``; the "bot" (a loopback aiohttp
server) opens a modal with the click's trigger id through the emulator's Web API; the
page's stream tells only the clicker; ``/ui/view/submit`` sends a signed
``view_submission`` and applies the bot's answer (errors under the inputs, then closed).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs

import aiohttp
import pytest
from aiohttp import web
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient

from bot.dev.workspace import DevUser, Emulator
from bot.emulator.sender import read_trigger

SECRET = "modal-test-secret"
CHANNEL = "C0INCIDENT"
USERS = (DevUser("UALICE", "alice", "requester"), DevUser("UBOB", "bob", "approver"))
GUARD_S = 10.0


def plain(text: str) -> dict[str, str]:
    return {"type": "plain_text", "text": text}


EDIT_VIEW: dict[str, Any] = {
    "type": "modal",
    "callback_id": "opsloop_edit",
    "private_metadata": '{"job": "j1"}',
    "title": plain("Edit before approving"),
    "submit": plain("Approve edited"),
    "close": plain("Cancel"),
    "blocks": [
        {"type": "section", "text": {"type": "mrkdwn", "text": "*scale* web"}},
        {
            "type": "input",
            "block_id": "arg:replicas",
            "label": plain("replicas"),
            "element": {
                "type": "number_input",
                "action_id": "value",
                "is_decimal_allowed": False,
                "initial_value": "5",
            },
        },
        {
            "type": "input",
            "block_id": "arg:mode",
            "label": plain("mode"),
            "element": {
                "type": "static_select",
                "action_id": "value",
                "options": [
                    {"text": plain("fast"), "value": "fast"},
                    {"text": plain("slow"), "value": "slow"},
                ],
            },
        },
    ],
}

CARD = [
    {
        "type": "actions",
        "block_id": "card",
        "elements": [
            {"type": "button", "text": plain("Edit"), "action_id": "opsloop_edit", "value": "c1"}
        ],
    }
]


class Bot:
    """Opens the edit modal on a click; answers a submission by its replicas."""

    def __init__(self) -> None:
        self.payloads: list[dict[str, Any]] = []
        self.bodies: list[tuple[bytes, dict[str, str]]] = []
        self.client: AsyncWebClient | None = None
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/slack/events", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}/slack/events"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.bodies.append((body, dict(request.headers)))
        payload = json.loads(parse_qs(body.decode())["payload"][0])
        self.payloads.append(payload)
        assert self.client is not None
        if payload["type"] == "block_actions":
            await self.client.views_open(trigger_id=payload["trigger_id"], view=EDIT_VIEW)
            return web.Response(status=200)
        replicas = payload["view"]["state"]["values"]["arg:replicas"]["value"]["value"]
        if replicas != "3":
            errors = {"arg:replicas": f"{replicas} is more than the 4 allowed"}
            return web.json_response({"response_action": "errors", "errors": errors})
        return web.Response(status=200)


@pytest.fixture
async def bot() -> AsyncIterator[Bot]:
    recording = Bot()
    await recording.start()
    yield recording
    await recording.stop()


@pytest.fixture
async def emu(bot: Bot) -> AsyncIterator[Emulator]:
    emulator = Emulator(signing_secret=SECRET, users=USERS)
    await emulator.start()
    emulator.bot_url = bot.url
    bot.client = AsyncWebClient(token="xoxb-test", base_url=emulator.api_url)
    yield emulator
    await emulator.stop()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


class Stream:
    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self.response = response

    async def next_of(self, kind: str) -> dict[str, Any]:
        event, data = "", ""
        async with asyncio.timeout(GUARD_S):
            while True:
                line = (await self.response.content.readline()).decode().rstrip("\n")
                if line.startswith("event: "):
                    event, data = line[7:], ""
                elif line.startswith("data: "):
                    data += line[6:]
                elif not line and event:
                    if event == kind:
                        return dict(json.loads(data))
                    event = ""


@pytest.fixture
async def stream(
    emu: Emulator, http: aiohttp.ClientSession
) -> AsyncIterator[Callable[[str], Awaitable[tuple[Stream, dict[str, Any]]]]]:
    opened: list[aiohttp.ClientResponse] = []

    async def open_(user: str) -> tuple[Stream, dict[str, Any]]:
        response = await http.get(f"{emu.page_url}ui/stream?user={user}")
        opened.append(response)
        reader = Stream(response)
        return reader, await reader.next_of("snapshot")

    yield open_
    for response in opened:
        response.close()


async def post(http: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> tuple[int, Any]:
    async with http.post(url, json=body) as response:
        return response.status, await response.json()


async def open_modal(emu: Emulator, http: aiohttp.ClientSession) -> str:
    card = emu.chat.post_as_bot(CHANNEL, "Approval needed", blocks=CARD)
    click = {
        "user": "UBOB",
        "channel": CHANNEL,
        "message_ts": card.ts,
        "action_id": "opsloop_edit",
        "value": "c1",
    }
    assert await post(http, emu.page_url + "ui/click", click) == (200, {"ok": True, "status": 200})
    held = await emu.views.wait_opened(user="UBOB")
    return held.id


async def test_a_modal_opens_for_the_clicker_and_its_submission_is_relayed_like_slack(
    emu: Emulator, bot: Bot, http: aiohttp.ClientSession, stream: Any
) -> None:
    bobs, snapshot = await stream("UBOB")
    _, alices = await stream("UALICE")
    assert snapshot["modal"] is None
    view_id = await open_modal(emu, http)
    click = bot.payloads[0]
    issued = read_trigger(click["trigger_id"])
    assert issued is not None and issued.user == "UBOB"
    shown = await bobs.next_of("modal")
    assert shown["view"]["id"] == view_id and shown["errors"] == {}
    assert shown["view"]["submit"]["text"] == "Approve edited"
    status, state = 0, {}
    async with http.get(emu.page_url + "ui/state?user=UALICE") as response:
        status, state = response.status, await response.json()
    assert status == 200 and state["modal"] is None and alices["modal"] is None
    async with http.get(emu.page_url + "ui/state?user=UBOB") as response:
        assert (await response.json())["modal"]["view"]["id"] == view_id

    url = emu.page_url + "ui/view/submit"
    empty = {"user": "UBOB", "view_id": view_id, "values": {"arg:replicas": "", "arg:mode": None}}
    status, said = await post(http, url, empty)
    assert status == 200 and said["outcome"] == "client_errors"
    assert set(said["errors"]) == {"arg:replicas", "arg:mode"}
    assert len(bot.payloads) == 1  # Slack's client sends nothing

    nine = {"user": "UBOB", "view_id": view_id, "values": {"arg:replicas": "9", "arg:mode": "fast"}}
    status, first = await post(http, url, nine)
    assert status == 200 and first["outcome"] == "errors" and first["status"] == 200
    assert first["errors"] == {"arg:replicas": "9 is more than the 4 allowed"}
    body, headers = bot.bodies[1]
    assert SignatureVerifier(SECRET).is_valid(
        body, headers["X-Slack-Request-Timestamp"], headers["X-Slack-Signature"]
    )
    submitted = bot.payloads[1]
    assert submitted["type"] == "view_submission" and submitted["user"]["id"] == "UBOB"
    assert submitted["view"]["id"] == view_id
    assert submitted["view"]["state"]["values"]["arg:mode"]["value"]["selected_option"] == {
        "text": plain("fast"),
        "value": "fast",
    }
    told = await bobs.next_of("modal")
    assert told["view"]["id"] == view_id and told["errors"] == first["errors"]
    assert emu.views.get(view_id).open

    three = {
        "user": "UBOB",
        "view_id": view_id,
        "values": {"arg:replicas": "3", "arg:mode": "slow"},
    }
    status, second = await post(http, url, three)
    assert status == 200 and second["outcome"] == "closed"
    assert (await bobs.next_of("modal"))["view"] is None
    assert not emu.views.get(view_id).open
    assert [d.type for d in emu.deliveries] == ["block_actions", *["view_submission"] * 2]


async def test_cancel_closes_and_a_view_not_shown_is_not_found(
    emu: Emulator, bot: Bot, http: aiohttp.ClientSession
) -> None:
    view_id = await open_modal(emu, http)
    close = {"user": "UALICE", "view_id": view_id}
    status, refused = await post(http, emu.page_url + "ui/view/close", close)
    assert (status, refused["error"]) == (404, "view_not_found")  # not Alice's modal
    status, _ = await post(http, emu.page_url + "ui/view/close", {**close, "user": "UBOB"})
    assert status == 200 and emu.views.top("UBOB") is None
    submit = {"user": "UBOB", "view_id": view_id, "values": {"arg:replicas": "3"}}
    status, gone = await post(http, emu.page_url + "ui/view/submit", submit)
    assert (status, gone["error"]) == (404, "view_not_found")
    bad = {"user": "UBOB", "view_id": view_id, "values": {"arg:replicas": {"x": 1}}}
    assert (await post(http, emu.page_url + "ui/view/submit", bad))[0] == 400
    assert [p["type"] for p in bot.payloads] == ["block_actions"]

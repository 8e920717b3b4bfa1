"""The final answer streams into the thread and ends as exactly one message holding it.

The scripted model server sends a response's chunks back to back, so a relay sits between
the bot and it: it passes the model's stream through and holds each content chunk until the
fake Slack has seen what the bot makes of the previous one (a new stream, an append, an
edit). The bot then sees the answer arrive over time, and the test waits on Slack's calls,
not on a clock.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from bot.emulator.scripted import Reply, split
from bot.emulator.slack import BOT_ID, FakeSlack
from bot.emulator.slack import Message as HeldMessage
from bot.slack.blockkit import unescape

from .conftest import StartBot
from .harness import ScriptedModel, mention, steps

CHUNKS = 4
GATE_TIMEOUT_S = 20.0  # a hang guard: each gate opens after one paced Slack call
ANSWER = "\n\n".join(
    f"**Step {n}.** The service on web-0{n} restarted cleanly; error rate back to 0.1% "
    "and p99 latency under 200 ms since 14:02. Nothing else in the logs & metrics stands out."
    for n in range(1, 9)
)


def is_content(line: bytes) -> bool:
    """Whether an SSE line of an OpenAI stream carries answer text."""
    if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
        return False
    try:
        choices = json.loads(line[len(b"data: ") :]).get("choices") or []
    except ValueError:
        return False
    return any((c.get("delta") or {}).get("content") for c in choices)


class Relay:
    """An OpenAI-compatible endpoint that relays to the scripted model server, holding the
    n-th content chunk of a stream until ``ready(n)`` holds on the fake Slack."""

    def __init__(self, upstream: str, slack: FakeSlack, ready: Callable[[int], bool]) -> None:
        self.upstream = upstream
        self.slack = slack
        self.ready = ready
        self.stuck: list[int] = []  # chunks whose gate never opened
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def start(self) -> None:
        self._session = aiohttp.ClientSession()
        app = web.Application()
        app.router.add_post("/{path:.*}", self._relay)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def _relay(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        body = await request.read()
        keep = ("content-type", "authorization")
        headers = {k: v for k, v in request.headers.items() if k.lower() in keep}
        async with self._session.post(
            self.upstream + request.path, data=body, headers=headers
        ) as up:
            kind = up.headers.get("content-type", "application/json")
            response = web.StreamResponse(status=up.status, headers={"content-type": kind})
            await response.prepare(request)
            n = 0
            async for line in up.content:
                if is_content(line):
                    n += 1
                    await self._gate(n)
                await response.write(line)
            await response.write_eof()
            return response

    async def _gate(self, n: int) -> None:
        try:
            await self.slack.wait_for(lambda: self.ready(n), timeout=GATE_TIMEOUT_S)
        except TimeoutError:
            self.stuck.append(n)
            raise


@pytest.fixture
async def relay_factory(
    model: ScriptedModel, slack: FakeSlack
) -> AsyncIterator[Callable[[Callable[[int], bool]], Any]]:
    relays: list[Relay] = []

    async def make(ready: Callable[[int], bool]) -> Relay:
        relay = Relay(model.server.root_url, slack, ready)
        await relay.start()
        relays.append(relay)
        return relay

    yield make
    for relay in relays:
        await relay.stop()


def bot_messages(slack: FakeSlack, thread_ts: str) -> list[HeldMessage]:
    return [m for m in slack.messages("C1", thread_ts) if m.bot_id == BOT_ID]


def holding(slack: FakeSlack, thread_ts: str, text: str) -> list[HeldMessage]:
    """The bot's messages in the thread rendering the answer ``text``: all of it in ``text``
    (Slack-escaped) and in one ``markdown`` block, then the feedback buttons."""
    block = [{"type": "markdown", "text": text}]
    return [
        m
        for m in bot_messages(slack, thread_ts)
        if unescape(m.text) == text
        and (m.blocks or [])[:1] == block
        and [b["type"] for b in (m.blocks or [])[1:]] == ["context_actions"]
    ]


async def test_the_final_answer_streams_and_ends_as_one_message(
    bot: StartBot,
    slack: FakeSlack,
    model: ScriptedModel,
    relay_factory: Callable[[Callable[[int], bool]], Any],
) -> None:
    model.server.chunks = CHUNKS
    pieces = split(ANSWER, CHUNKS)
    assert len(pieces) == CHUNKS and len(pieces[0]) >= 200  # enough to start a stream at once

    def ready(n: int) -> bool:  # chunk n goes once the bot has shown chunk n - 1
        if n == 1:
            return True
        if n == 2:
            return bool(slack.calls_of("chat.startStream"))
        return len(slack.calls_of("chat.appendStream")) >= n - 2

    relay = await relay_factory(ready)
    model.policy = steps(Reply(content=ANSWER))  # type: ignore[arg-type]
    serve = await bot(LLM_BASE_URL=relay.base_url)
    event = mention("C1", "U1", "how is the fleet after the restart?")
    assert (await serve.send(event))[0] == 200

    await slack.wait_for(lambda: holding(slack, event["ts"], ANSWER), timeout=30)
    assert relay.stuck == []
    start = slack.calls_of("chat.startStream")
    assert len(start) == 1
    assert start[0]["markdown_text"] == pieces[0]
    assert start[0]["thread_ts"] == event["ts"]
    assert start[0]["recipient_user_id"] == "U1" and start[0]["recipient_team_id"]
    appends = [p["markdown_text"] for p in slack.calls_of("chat.appendStream")]
    assert appends == pieces[1:-1]
    stops = slack.calls_of("chat.stopStream")
    assert [p.get("markdown_text") for p in stops] == [pieces[-1]]

    # Exactly one message holds the answer: the streamed one, with the final rendering.
    [final] = holding(slack, event["ts"], ANSWER)
    assert final.ts == stops[0]["ts"] and not final.streaming
    assert not any(
        unescape(p.get("text", "")) == ANSWER for p in slack.calls_of("chat.postMessage")
    )
    assert [m for m in bot_messages(slack, event["ts"]) if "restarted cleanly" in m.text] == [final]

    # The status message still becomes the ending.
    assert slack.calls_of("chat.postMessage")[0]["text"].startswith("Working")
    status = next(m for m in bot_messages(slack, event["ts"]) if m.ts != final.ts)
    await slack.wait_for(lambda: slack.message("C1", status.ts).text.startswith("Done"), timeout=30)
    assert len(bot_messages(slack, event["ts"])) == 2


async def test_without_chat_streaming_the_answer_is_shown_by_edits_and_ends_complete(
    bot: StartBot,
    slack: FakeSlack,
    model: ScriptedModel,
    relay_factory: Callable[[Callable[[int], bool]], Any],
) -> None:
    slack.fail_next("chat.startStream", status=200, error="unknown_method", times=100)
    model.server.chunks = CHUNKS
    pieces = split(ANSWER, CHUNKS)
    shown: list[str] = []  # the ts of the message showing the answer as it comes

    def ready(n: int) -> bool:
        if n == 1:
            return True
        if not shown:
            first = [m.ts for m in bot_messages(slack, thread) if m.text.startswith("**Step 1")]
            shown.extend(first)
            return bool(first)
        edits = [p for p in slack.calls_of("chat.update") if p["ts"] == shown[0]]
        return len(edits) >= n - 2

    relay = await relay_factory(ready)
    model.policy = steps(Reply(content=ANSWER))  # type: ignore[arg-type]
    serve = await bot(LLM_BASE_URL=relay.base_url)
    event = mention("C1", "U1", "how is the fleet after the restart?")
    thread = event["ts"]
    assert (await serve.send(event))[0] == 200

    await slack.wait_for(lambda: holding(slack, thread, ANSWER), timeout=30)
    assert relay.stuck == []
    assert slack.calls_of("chat.appendStream") == []
    [final] = holding(slack, thread, ANSWER)
    assert final.ts == shown[0]
    edits = [unescape(p["text"]) for p in slack.calls_of("chat.update") if p["ts"] == final.ts]
    assert edits[:2] == ["".join(pieces[:2]), "".join(pieces[:3])]  # it grew, in order
    assert [m for m in bot_messages(slack, thread) if "restarted cleanly" in m.text] == [final]
    status = next(m for m in bot_messages(slack, thread) if m.ts != final.ts)
    await slack.wait_for(lambda: slack.message("C1", status.ts).text.startswith("Done"), timeout=30)

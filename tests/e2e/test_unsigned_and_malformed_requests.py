"""Unsigned, oversized and malformed requests through the real wire: ``opsloop serve`` as a
process, the fake Slack, real Redis.

Anyone who can reach ``POST /slack/events`` may send anything. A missing, bad or stale
signature gets 401 and a body over 1 MiB 413, before anything is parsed; a signed body
that is no Slack request gets 400, one that our listeners cannot act on 200 (acknowledged
and ignored) — never a 5xx, which Slack retries and counts against the app. Each refusal
is one log line naming why and the peer, never the body, and never a traceback; nothing
changes in Redis or Slack, and the bot goes on serving.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any
from urllib.parse import parse_qsl, urlencode

import httpx
import redis.asyncio as aioredis

from bot.emulator.redis_server import ManagedRedis
from bot.emulator.scripted import Reply
from bot.emulator.slack import FakeSlack
from bot.slack.status_blocks import ACTION_APPROVE, ACTION_CONTINUE, ACTION_STOP
from bot.store.keys import DEFAULT_PREFIX, Keys

from .approvals_kit import wait_until
from .conftest import StartBot
from .harness import (
    EVENTS_PATH,
    FORM,
    JSON,
    REQUEST_TIMEOUT_S,
    BotProcess,
    ScriptedModel,
    block_actions_body,
    event_body,
    mention,
    sign,
    steps,
    url_verification_body,
)

MIB = 1024 * 1024
MARKER = "do-not-log-this-body"  # in every refused body; must never reach the log
JOB = "C1:1700000000.000100:j1"
TIMESTAMP = "X-Slack-Request-Timestamp"
FORM_TYPE = {"Content-Type": FORM}
JSON_TYPE = {"Content-Type": JSON}
RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ", re.MULTILINE)  # bot/logs.py


class Output:
    """What the bot wrote to stdout and stderr since the last ``new()``."""

    def __init__(self, proc: BotProcess) -> None:
        self.proc = proc
        self.seen = self._read()

    def _read(self) -> str:
        paths = (self.proc.stdout_path, self.proc.stderr_path)
        return "".join(p.read_text(errors="replace") if p.exists() else "" for p in paths)

    def new(self) -> str:
        # Each process writes to its own files and a log record is written before the
        # response goes out, so what a request logged is there once it is answered.
        text = self._read()
        fresh, self.seen = text[len(self.seen) :], text
        return fresh

    def all(self) -> str:
        return self._read()


async def keys(redis_server: ManagedRedis) -> list[str]:
    client = aioredis.Redis.from_url(redis_server.url, decode_responses=True)
    try:
        return sorted(await client.keys("*"))
    finally:
        await client.aclose()


START_RECORD_S = 30.0


async def started_recorded(redis_server: ManagedRedis) -> bool:
    """Whether the audit log holds an entry (the bot's ``process_started``)."""
    client = aioredis.Redis.from_url(redis_server.url, decode_responses=True)
    try:
        return bool(await client.exists(Keys(DEFAULT_PREFIX).audit_head()))
    finally:
        await client.aclose()


def click(action_id: str, value: Any, **replace: Any) -> bytes:
    """A click on one of our buttons, then ``value`` (any JSON) and ``replace`` put in."""
    form = block_actions_body("U1", action_id, "v", "C1", "1700000000.000200", "http://x/r")
    payload = json.loads(dict(parse_qsl(form.decode()))["payload"])
    payload["actions"][0]["value"] = value
    return form_body({**payload, **replace})


def form_body(payload: Any) -> bytes:
    return urlencode({"payload": json.dumps(payload)}).encode()


def envelope(event: Any, **extra: Any) -> bytes:
    body = json.loads(event_body({"type": "app_mention"}))
    body["event"] = event
    body.update(extra)
    return json.dumps(body).encode()


def http_client() -> httpx.AsyncClient:
    """For what ``BotProcess.post_event`` does not do: a chunked body, response headers."""
    return httpx.AsyncClient(trust_env=False, timeout=REQUEST_TIMEOUT_S)


def events_url(serve: BotProcess) -> str:
    return serve.url + EVENTS_PATH


def one_record(text: str) -> bool:
    return len(RECORD.findall(text)) == 1


async def test_unsigned_and_badly_signed_requests_get_401_and_change_nothing(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, redis_server: ManagedRedis
) -> None:
    serve = await bot()
    body = event_body(mention("C1", "U1", f"restart everything {MARKER}"))
    good = sign(body, serve.secret)
    ts = good[TIMESTAMP]
    stale = sign(body, serve.secret, timestamp=int(ts) - 360)  # six minutes old
    foreign = sign(b'{"type": "url_verification"}', serve.secret)
    # The process records its own start in the audit log in the background (it may start
    # before Redis does): wait for that, so that only what the requests did is compared.
    await wait_until(
        lambda: started_recorded(redis_server), timeout=START_RECORD_S, what="process_started"
    )
    before_keys, before_calls = await keys(redis_server), len(slack.calls)
    output = Output(serve)
    cases: list[tuple[str, bytes, dict[str, str], str]] = [
        ("no signature headers", body, {}, "missing signature"),
        ("only a timestamp", body, {TIMESTAMP: ts}, "missing signature"),
        ("a bad signature", body, sign(body, "not-the-secret"), "bad signature"),
        ("a stale timestamp", body, stale, "stale signature"),
        ("another body's signature", body, foreign, "bad signature"),
        ("a non-numeric timestamp", body, {**good, TIMESTAMP: "soon"}, "bad signature"),
        ("unsigned garbage", f"not json {MARKER}".encode(), {}, "missing signature"),
        ("an unsigned broken form", b"payload=%7B" + MARKER.encode(), FORM_TYPE, "missing"),
        ("an unsigned string event", envelope(MARKER), {}, "missing signature"),
    ]  # fmt: skip
    for name, sent, headers, reason in cases:
        status, _ = await serve.post_event(sent, headers)
        logged = output.new()
        assert status == 401, name
        assert one_record(logged) and reason in logged and "127.0.0.1" in logged, (name, logged)
    everything = output.all()
    assert MARKER not in everything and "Traceback" not in everything
    assert await keys(redis_server) == before_keys
    assert len(slack.calls) == before_calls and model.requests == []


async def test_a_body_over_one_mebibyte_gets_413(bot: StartBot, model: ScriptedModel) -> None:
    serve = await bot()
    output = Output(serve)
    over = b'{"type": "event_callback", "pad": "' + b"x" * MIB + b'"}'
    for headers in (None, {}):  # signed, unsigned
        status, _ = await serve.post_event(over, headers)
        assert status == 413 and one_record(output.new())

    async def chunks() -> Any:  # no Content-Length: read only up to the limit
        for _ in range(3):
            yield b"x" * (MIB // 2)

    async with http_client() as http:
        response = await http.post(events_url(serve), content=chunks(), headers=JSON_TYPE)
        assert response.status_code == 413
    assert one_record(output.new())
    # A Content-Length over the limit is answered at once, the body never read.
    reader, writer = await asyncio.open_connection(serve.host, serve.port)
    try:
        head = f"POST /slack/events HTTP/1.1\r\nHost: x\r\nContent-Length: {8 * MIB}\r\n\r\n"
        writer.write(head.encode())
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), REQUEST_TIMEOUT_S)
    finally:
        writer.close()
    assert status_line.split()[1] == b"413"
    # Exactly 1 MiB is within bounds (an event type nobody handles: acknowledged).
    exact = b'{"type": "event_callback", "event": {"type": "x"}, "pad": "'
    exact += b"x" * (MIB - len(exact) - 2) + b'"}'
    assert len(exact) == MIB and (await serve.post_event(exact))[0] == 200
    assert "Traceback" not in output.all() and model.requests == []


async def test_signed_malformed_payloads_get_400_or_200_and_the_bot_goes_on(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, redis_server: ManagedRedis
) -> None:
    model.policy = steps(Reply(content="Still here."))  # type: ignore[arg-type]
    serve = await bot()
    output = Output(serve)
    mentioned = mention("C1", "U1", MARKER)
    numeric_text = {**mentioned, "type": "message", "text": 1}
    no_challenge = json.dumps({"type": "url_verification"}).encode()
    cases: list[tuple[str, bytes, int]] = [
        # Not a Slack request at all: 400.
        ("bad JSON", f"not json {MARKER}".encode(), 400),
        ("a JSON list", json.dumps([MARKER]).encode(), 400),
        ("a JSON string", json.dumps(MARKER).encode(), 400),
        ("JSON nested 100,000 deep", b"[" * 100_000 + b"]" * 100_000, 400),
        ("an event that is a string", envelope(MARKER), 400),
        ("an event that is a list", envelope([MARKER]), 400),
        ("an event without a type", envelope({"text": MARKER}), 400),
        ("an event_callback without event", json.dumps({"type": "event_callback"}).encode(), 400),
        ("no type", json.dumps({"event": mentioned}).encode(), 400),
        ("authorizations not a list", envelope(mentioned, authorizations=MARKER), 400),
        ("a lone surrogate in a text", envelope({**mentioned, "text": "hi \ud800"}), 400),
        ("a lone surrogate in a click", click(ACTION_STOP, JOB, user={"id": "U\udfff"}), 400),
        ("an event whose channel is a list", envelope({**mentioned, "channel": [MARKER]}), 400),
        ("a form without payload", f"type=event_callback&event={MARKER}".encode(), 400),
        ("a payload that is not JSON", b"payload=%7B" + MARKER.encode(), 400),
        ("a payload that is a list", form_body([MARKER]), 400),
        ("actions not a list", click(ACTION_STOP, JOB, actions=MARKER), 400),
        ("no actions", click(ACTION_STOP, JOB, actions=[]), 400),
        ("an action that is a string", click(ACTION_STOP, JOB, actions=[MARKER]), 400),
        ("url_verification without challenge", no_challenge, 400),
        # Slack's shape, but nothing our listeners can act on: 200, ignored.
        ("a mention whose ts is an object", envelope({**mentioned, "ts": {"t": MARKER}}), 200),
        ("a mention whose ts is no ts", envelope({**mentioned, "ts": MARKER}), 200),
        ("a mention in a thread that is no ts", envelope({**mentioned, "thread_ts": MARKER}), 200),
        ("a mention whose channel is no id", envelope({**mentioned, "channel": "c:1}"}), 200),
        ("a message whose text is a number", envelope(numeric_text), 200),
        ("Approve without job|call", click(ACTION_APPROVE, MARKER), 200),
        ("Approve with a job but no call", click(ACTION_APPROVE, f"{JOB}|"), 200),
        ("Approve whose value is a number", click(ACTION_APPROVE, 5), 200),
        ("Approve by a user that is a string", click(ACTION_APPROVE, f"{JOB}|c", user="U1"), 200),
        ("Stop whose value is no job id", click(ACTION_STOP, MARKER), 200),
        ("Continue whose value is an object", click(ACTION_CONTINUE, {"job": MARKER}), 200),
        # Slack's shape, nobody's listener: 200, acknowledged.
        ("an unknown action id", click("someone_elses_button", MARKER), 200),
        ("an unknown event type", envelope({"type": "reaction_added", "user": "U1"}), 200),
        ("an unknown request type", json.dumps({"type": "weird", "x": MARKER}).encode(), 200),
        # Not even UTF-8, so its signature cannot be checked.
        ("a body that is not UTF-8", b"\xff\xfe" + MARKER.encode(), 401),
    ]  # fmt: skip
    # The process records its own start in the audit log in the background: wait for
    # that, so that only what the requests did is compared (it came late under load).
    await wait_until(
        lambda: started_recorded(redis_server), timeout=START_RECORD_S, what="process_started"
    )
    before_keys = await keys(redis_server)
    for name, body, expected in cases:
        status, _ = await serve.post_event(body)
        logged = output.new()
        assert status == expected, (name, status, logged)
        assert one_record(logged) and "Traceback" not in logged, (name, logged)
    garbage = b"not json"  # a 400 tells Slack not to retry: the same bytes fail again
    async with http_client() as http:
        signed = sign(garbage, serve.secret)
        answer = await http.post(events_url(serve), content=garbage, headers=signed)
    assert answer.status_code == 400 and answer.headers["X-Slack-No-Retry"] == "1"
    status, text = await serve.post_event(url_verification_body("ch4llenge"))
    assert (status, json.loads(text)) == (200, {"challenge": "ch4llenge"})
    assert "Traceback" not in output.all() and MARKER not in output.all()
    assert await keys(redis_server) == before_keys  # nothing started, nothing decided
    assert model.requests == [] and slack.calls_of("chat.postMessage") == []
    # The bot survived all of it: a valid mention still gets its answer.
    assert (await serve.send(mention("C1", "U1", "still there?")))[0] == 200
    await slack.wait_for(
        lambda: any(p.get("text") == "Still here." for p in slack.calls_of("chat.postMessage")),
        timeout=30,
    )

"""Whatever the gate lets through, bolt and our listeners can read.

Valid requests of each kind Slack sends us are mutated at every field, to every kind of
wrong value (and removed). For each mutation the gate either answers itself (400: no Slack
request; 200: nothing our listeners can act on) or hands the request to a real ``AsyncApp``
configured as ``bolt_app`` configures it (signed, ``process_before_response``, auth.test
against the fake Slack), whose listeners read the payload exactly as ``bot.slack.app``'s and
``bot.slack.actions``' do. Nothing may raise, log an error or answer a 5xx.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import re
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import parse_qsl, urlencode

import pytest
from slack_bolt.async_app import AsyncApp
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.request.internals import parse_body
from slack_bolt.response import BoltResponse
from slack_sdk.web.async_client import AsyncWebClient

from bot.emulator.slack import BOT_USER_ID, FakeSlack
from bot.errors import StoreError
from bot.slack.app import HUMAN_SUBTYPES
from bot.slack.gate import Admitted, Gate, acknowledged, inspect, listener_failure, parse
from bot.slack.status_blocks import ACTION_APPROVE, ACTION_CONTINUE, ACTION_DENY, ACTION_STOP
from bot.store.keys import Thread, thread_of
from bot.turns.context import ContextWindow
from tests.e2e.harness import (
    block_actions_body,
    event_body,
    mention,
    reply,
    sign,
    url_verification_body,
)

SECRET = "unit-signing-secret"
JOB = "C1:1700000000.000100:j1"
JUNK: list[Any] = [
    None, 0, -1, 1.5, True, "", "x", "1.2", [], [None], [1], ["x"], [{}], {}, {"id": 5},
    {"type": 5}, {"id": "U1"}, [{"action_id": 5}], {"channel": 5, "user": [], "team": 1.5},
    {"type": "x", "callback_id": {}, "view": {}}, [{"team_id": []}], "\ud800", "a\udfffb",
    {"\udbff": 1},
]  # fmt: skip


def click(action_id: str, value: str) -> dict[str, Any]:
    body = block_actions_body("U1", action_id, value, "C1", "1700000000.000200", "http://x/r")
    return dict(json.loads(dict(parse_qsl(body.decode()))["payload"]))


def templates() -> dict[str, dict[str, Any]]:
    thread = "1700000000.000100"
    reaction = {"type": "reaction_added", "user": "U1", "reaction": "eyes"}
    reaction["item"] = {"type": "message", "channel": "C1", "ts": thread}
    view = {"type": "modal", "callback_id": "cb", "team_id": "T1", "state": {"values": {}}}
    changed = {"type": "message", "subtype": "message_changed", "channel": "C1", "ts": thread}
    changed |= {"message": {"user": "U1", "ts": thread}, "previous_message": {"user": "U1"}}
    started = {"type": "assistant_thread_started", "event_ts": thread}
    started["assistant_thread"] = {"user_id": "U1", "channel_id": "D1", "thread_ts": thread}
    executed = {"type": "function_executed", "function_execution_id": "Fx1", "inputs": {}}
    legacy = {"type": "interactive_message", "callback_id": "cb", "user": {"id": "U1"}}
    legacy |= {"actions": [{"name": "a", "value": "v"}], "channel": {"id": "C1"}}
    return {
        "mention": json.loads(event_body(mention("C1", "U1", "hi", thread_ts=thread))),
        "reply": json.loads(event_body(reply("C1", "U2", "more", thread_ts=thread))),
        "reaction": json.loads(event_body(reaction)),
        "url_verification": json.loads(url_verification_body("ch4llenge")),
        "approve": click(ACTION_APPROVE, f"{JOB}|call_1"),
        "deny": click(ACTION_DENY, f"{JOB}|call_1"),
        "stop": click(ACTION_STOP, JOB),
        "continue": click(ACTION_CONTINUE, JOB),
        "unknown button": click("someone_elses", "anything"),
        "view_submission": {"type": "view_submission", "user": {"id": "U1"}, "view": view},
        "message shortcut": {"type": "message_action", "callback_id": "cb", "user": {"id": "U1"}},
        "shortcut": {"type": "shortcut", "callback_id": "cb", "user": {"id": "U1"}},
        "edit": json.loads(event_body(changed)),
        "assistant": json.loads(event_body(started)),
        "function": json.loads(event_body(executed)),
        "home": json.loads(event_body({"type": "app_home_opened", "user": "U1", "tab": "home"})),
        "attachment button": legacy,
        "options": {"type": "block_suggestion", "action_id": "a", "value": "v", "user": {}},
        "view_closed": {"type": "view_closed", "user": {"id": "U1"}, "view": view},
    }


def paths(node: Any, prefix: tuple[Any, ...] = (), depth: int = 4) -> Iterator[tuple[Any, ...]]:
    """Every key (of dicts) and index (of lists) down to ``depth``."""
    if depth == 0 or not isinstance(node, dict | list):
        return
    for key, child in node.items() if isinstance(node, dict) else enumerate(node):
        yield (*prefix, key)
        yield from paths(child, (*prefix, key), depth - 1)


def mutations(body: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for path in paths(body):
        for junk in [*JUNK, KeyError]:
            mutated = copy.deepcopy(body)
            parent = mutated
            for key in path[:-1]:
                parent = parent[key]
            if junk is KeyError:
                if not isinstance(parent, dict):
                    continue
                del parent[path[-1]]
            else:
                parent[path[-1]] = copy.deepcopy(junk)
            yield f"{'.'.join(map(str, path))} = {junk!r}", mutated


def encoded(body: dict[str, Any]) -> tuple[str, str]:
    """The wire form Slack uses: events as JSON, interactivity as a form."""
    if body.get("type") in ("event_callback", "url_verification"):
        return json.dumps(body), "application/json"
    return urlencode({"payload": json.dumps(body)}), "application/x-www-form-urlencoded"


# -- listeners that read what bot.slack.app's and bot.slack.actions' read ------------------


def on_chat_event(event: dict[str, Any], *, reply: bool) -> None:
    """``Messages.on_mention`` / ``on_message`` up to the store."""
    if reply and (event.get("bot_id") or event.get("subtype") not in HUMAN_SUBTYPES):
        return
    channel, ts, user = event.get("channel"), event.get("ts"), event.get("user")
    if not (channel and ts and user):
        return
    thread = Thread(str(channel), str(event.get("thread_ts") or ts))
    json.dumps(event, ensure_ascii=False).encode()  # what is stored must be UTF-8
    re.search(rf"<@{re.escape(BOT_USER_ID)}(\|[^>]*)?>", str(event.get("text") or ""))
    ContextWindow(str(ts), None, frozenset()).wants(thread.thread_ts)  # the context window
    assert ":" not in thread.channel and "}" not in thread.channel  # a Redis hash tag


def on_click(body: dict[str, Any], action: dict[str, Any], *, approval: bool) -> None:
    """``Interactions._tell`` / ``_decide`` / ``_steerer`` up to the store."""
    (body.get("channel") or {}).get("id") or (body.get("container") or {}).get("channel_id")
    str((body.get("user") or {}).get("id") or "")
    (body.get("message") or {}).get("thread_ts")
    str((body.get("container") or {}).get("message_ts") or "")
    if approval:
        job_id, _, call_id = str(action.get("value") or "").partition("|")
    else:
        job_id = str(action.get("value") or "")
    if job_id:
        thread_of(job_id)  # every Redis key of the job is built from it
    json.dumps(body, ensure_ascii=False).encode()  # what is stored or sent must be UTF-8


@contextlib.asynccontextmanager
async def bolt_app() -> AsyncIterator[AsyncApp]:
    """An ``AsyncApp`` set up as ``bolt_app`` sets it up, with look-alike listeners."""
    async with FakeSlack() as slack:
        bolt = AsyncApp(
            client=AsyncWebClient(token="xoxb-test", base_url=slack.api_url),
            signing_secret=SECRET,
            process_before_response=True,
        )

        async def mentioned(event: dict[str, Any]) -> None:
            on_chat_event(event, reply=False)

        async def message(event: dict[str, Any]) -> None:
            on_chat_event(event, reply=True)

        def clicked(approval: bool) -> Any:
            async def listener(ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
                await ack()
                on_click(body, action, approval=approval)

            return listener

        bolt.event("app_mention")(mentioned)
        bolt.event("message")(message)
        for action_id in (ACTION_APPROVE, ACTION_DENY):
            bolt.action(action_id)(clicked(approval=True))
        for action_id in (ACTION_STOP, ACTION_CONTINUE):
            bolt.action(action_id)(clicked(approval=False))
        Gate(SECRET).attach(bolt)
        yield bolt


@pytest.fixture
async def app() -> AsyncIterator[AsyncApp]:
    async with bolt_app() as bolt:
        yield bolt


async def dispatch(app: AsyncApp, text: str, content_type: str) -> BoltResponse:
    headers = {"content-type": content_type, **sign(text.encode(), SECRET)}
    request = AsyncBoltRequest(body=text, headers={**headers})
    return acknowledged(await app.async_dispatch(request), Admitted(request, "127.0.0.1"))


async def test_the_valid_templates_reach_their_listeners(app: AsyncApp) -> None:
    for name, body in templates().items():
        text, content_type = encoded(body)
        assert inspect(text, content_type) is None, name
        response = await dispatch(app, text, content_type)
        assert response.status == 200, (name, response.status, response.body)
    text, content_type = encoded(templates()["url_verification"])
    assert json.loads((await dispatch(app, text, content_type)).body) == {"challenge": "ch4llenge"}


async def test_every_mutation_is_refused_or_read_without_a_crash(
    app: AsyncApp, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    seen = {400: 0, 200: 0, "bolt": 0}
    for name, template in templates().items():
        for what, body in mutations(template):
            text, content_type = encoded(body)
            verdict = inspect(text, content_type)
            if verdict is not None:
                assert verdict[0] in (200, 400), (name, what, verdict)
                seen[verdict[0]] += 1
                continue
            seen["bolt"] += 1
            caplog.clear()
            response = await dispatch(app, text, content_type)
            errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
            assert response.status < 500 and not errors, (name, what, response.status, errors)
    assert all(seen.values()), seen  # each outcome happened


async def test_our_parse_reads_what_bolt_reads() -> None:
    bodies = [
        ('{"type": "x"}', "application/json"),
        ('{"type": "x"}', "text/plain"),
        ("payload=" + json.dumps({"type": "block_actions"}), "application/x-www-form-urlencoded"),
        ("a=1&payload=" + json.dumps({"type": "y"}) + "&b=2", None),
        ('[{"type": "x"}]', "application/json"),
        ("payload=" + json.dumps([1]), None),
        ("payload=%7B%22type%22%3A%22z%22%7D", None),
        ('{"type": "\\ud83d\\ude00"}', None),  # an escaped pair is one character
    ]
    for text, content_type in bodies:
        assert parse(text, content_type) == parse_body(text, content_type), text
    for text, content_type in [
        ("not json", "application/json"),
        ("{", None),
        ("payload=%7B", None),
        ("type=event_callback&event=x", None),  # bolt would read the form's fields
        ("p%61yload=%7B%7D", None),  # bolt looks for the word before decoding
        ("", None),
        ("", "application/json"),
        ('{"type": "x", "text": "\\ud800"}', None),  # a lone surrogate: no UTF-8 for it
        ("payload=" + json.dumps({"\udfff": 1}), None),
    ]:
        with pytest.raises(ValueError):
            parse(text, content_type)


async def test_a_store_error_is_the_one_503() -> None:
    body = json.loads(event_body(mention("C1", "U1", "hi")))
    assert (await listener_failure(StoreError("redis down"), body)).status == 503
    assert (await listener_failure(KeyError("oops"), body)).status == 500

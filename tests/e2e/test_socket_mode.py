"""``opsloop socket`` end to end: the bot opens Socket Mode with the app token through the
fake Slack's ``apps.connections.open``, and events and clicks arrive over the websocket as
Slack sends them — acked only once persisted, redelivered when not, a refreshed
connection picked up again — with the same behaviour as over HTTP."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest

from bot.emulator.redis_server import ManagedRedis
from bot.emulator.scripted import Reply
from bot.emulator.sender import view_submission
from bot.emulator.slack import FakeSlack
from bot.emulator.slack_socket import FakeSocketMode

from .alerts_kit import CHANNEL, TOKEN, notification, post_alert, roots
from .approvals_kit import (
    answered,
    call_then_answer,
    runs,
    scale_tools_yml,
    texts,
    tools_yml,
    wait_card,
)
from .conftest import StartBot
from .harness import ScriptedModel, click_body, event_body, mention, reply, seed, steps

APP_TOKEN = "xapp-1-A0OPSLOOP-1-0123456789abcdef"
SOCKET = {"SLACK_APP_TOKEN": APP_TOKEN, "SLACK_SIGNING_SECRET": None}


@pytest.fixture
async def fake() -> AsyncIterator[tuple[FakeSlack, FakeSocketMode]]:
    slack = FakeSlack(usergroups={"SOPS": ["UAPPROVER1", "UAPPROVER2"]})
    socket = FakeSocketMode(slack)
    async with slack:
        yield slack, socket
        await socket.close()


@pytest.fixture
def slack(fake: tuple[FakeSlack, FakeSocketMode]) -> FakeSlack:
    return fake[0]


@pytest.fixture
def socket(fake: tuple[FakeSlack, FakeSocketMode]) -> FakeSocketMode:
    return fake[1]


@pytest.fixture
def bot_argv() -> tuple[str, ...]:
    return (sys.executable, "-m", "bot", "socket")


def event(payload: dict[str, Any], **options: Any) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(event_body(payload, **options))
    return body


def click(message: Any, user: str, button: str, slack: FakeSlack) -> dict[str, Any]:
    form = click_body(
        message.as_slack(), message.channel, user, slack.api_url + "response", text=button
    )
    payload: dict[str, Any] = json.loads(parse_qs(form.decode())["payload"][0])
    return payload


async def test_a_mention_over_socket_mode_is_acked_and_answered(
    bot: StartBot, slack: FakeSlack, socket: FakeSocketMode, model: ScriptedModel
) -> None:
    model.policy = steps(Reply(content="web-03 is fine: CPU 12%."))  # type: ignore[arg-type]
    serve = await bot(**SOCKET)
    await socket.wait_connected()
    assert [c.method for c in slack.calls].count("apps.connections.open") == 1
    status, health = await serve.get("/healthz")
    assert status == 200 and json.loads(health)["ok"] is True
    assert (await serve.post_event(b"{}"))[0] == 404  # no request URL in Socket Mode

    mentioned = mention("C1", "U1", "web-03 is at 95% CPU, look into it")
    ack = await socket.send_event(event(mentioned))
    assert ack is not None and set(ack) == {"envelope_id"}
    await slack.wait_for(
        lambda: any(t.startswith("web-03 is fine") for t in texts(slack, "C1", mentioned["ts"])),
        timeout=30,
    )
    bot_messages = [m for m in slack.messages("C1", mentioned["ts"]) if m.user == "UBOT"]
    assert len(bot_messages) == 2  # the status message, then the answer
    assert len(model.requests) == 1
    _, metrics = await serve.get("/metrics")
    acks = re.search(r"^opsloop_ack_seconds_count (\S+)$", metrics, re.MULTILINE)
    assert acks and float(acks[1]) == 1.0  # envelopes are timed to their ack too
    assert await serve.stop(timeout=10) == 0  # SIGTERM: the connection closed, a clean exit
    assert socket.open_connections == 0


async def test_a_redelivered_envelope_starts_nothing_new(
    bot: StartBot, slack: FakeSlack, socket: FakeSocketMode, model: ScriptedModel
) -> None:
    model.policy = steps(Reply(content="Done."))  # type: ignore[arg-type]
    await bot(**SOCKET)
    await socket.wait_connected()
    mentioned = mention("C1", "U1", "check web-03")
    body = event(mentioned)
    assert await socket.send_event(body) is not None
    # Slack redelivers when it missed the ack: same event id, a new envelope, a retry count.
    again = await socket.send_event(body, retry_attempt=1, retry_reason="timeout")
    assert again is not None
    await slack.wait_for(lambda: "Done." in texts(slack, "C1", mentioned["ts"]), timeout=30)
    await slack.wait_for(lambda: len(model.requests) >= 1, timeout=5)
    assert len(model.requests) == 1
    assert texts(slack, "C1", mentioned["ts"]).count("Done.") == 1


async def test_approve_over_socket_mode_runs_the_call_once_as_the_clicker(
    bot: StartBot,
    slack: FakeSlack,
    socket: FakeSocketMode,
    model: ScriptedModel,
    tmp_path: Path,
) -> None:
    tools, log = tools_yml(tmp_path)
    model.policy = call_then_answer("restart_service", {"service": "nginx"})  # type: ignore[assignment]
    await bot(OPSLOOP_TOOLS=tools, OPSLOOP_APPROVERS="UAPPROVER1,SOPS", **SOCKET)
    await socket.wait_connected()
    mentioned = mention("C1", "U1", "restart nginx on web-03")
    assert await socket.send_event(event(mentioned)) is not None
    card = await wait_card(slack, "C1", mentioned["ts"])

    refused = await socket.send_interactive(click(card, "UMALLORY", "Approve", slack))
    assert refused is not None
    await slack.wait_for(lambda: bool(slack.ephemerals("C1", "UMALLORY")), timeout=10)
    assert "approver" in slack.ephemerals("C1", "UMALLORY")[0].text
    assert runs(log) == []

    ack = await socket.send_interactive(click(card, "UAPPROVER1", "Approve", slack))
    assert ack is not None
    await slack.wait_for(lambda: answered(slack, mentioned["ts"]), timeout=30)
    done = runs(log, tool="restart_service")
    assert [r["env_confirmed_by"] for r in done] == ["UAPPROVER1"]
    await slack.wait_for(
        lambda: "Approved by <@UAPPROVER1>" in slack.message("C1", card.ts).text, timeout=10
    )


async def test_a_refreshed_connection_is_opened_again_and_keeps_serving(
    bot: StartBot, slack: FakeSlack, socket: FakeSocketMode, model: ScriptedModel
) -> None:
    model.policy = steps(Reply(content="Still here."))  # type: ignore[arg-type]
    await bot(**SOCKET)
    await socket.wait_connected()
    await socket.disconnect("refresh_requested")
    await socket.wait_connections(2)
    assert [c.method for c in slack.calls].count("apps.connections.open") == 2
    mentioned = mention("C1", "U1", "are you there?")
    assert await socket.send_event(event(mentioned)) is not None
    await slack.wait_for(lambda: "Still here." in texts(slack, "C1", mentioned["ts"]), timeout=30)


async def test_socket_mode_needs_the_app_token(bot: StartBot, redis_server: ManagedRedis) -> None:
    proc = await bot(wait=False, SLACK_SIGNING_SECRET=None)
    assert await proc.wait_exit() != 0
    assert "SLACK_APP_TOKEN: required" in proc.output()


async def test_with_redis_down_nothing_is_acked_and_the_redelivery_is_answered(
    bot: StartBot,
    slack: FakeSlack,
    socket: FakeSocketMode,
    model: ScriptedModel,
    redis_server: ManagedRedis,
) -> None:
    model.policy = steps(Reply(content="Recovered."))  # type: ignore[arg-type]
    await bot(**SOCKET)
    await socket.wait_connected()
    mentioned = mention("C1", "U1", "web-03 is down")
    body = event(mentioned)
    await asyncio.to_thread(redis_server.stop)
    try:
        # Nothing could be saved, so nothing is acknowledged: Slack will redeliver.
        assert await socket.send_event(body, timeout=5) is None
    finally:
        await asyncio.to_thread(redis_server.start)
    assert not [m for m in slack.messages("C1", mentioned["ts"]) if m.user == "UBOT"]
    again = await socket.send_event(body, retry_attempt=1, retry_reason="timeout", timeout=10)
    assert again is not None
    await slack.wait_for(lambda: "Recovered." in texts(slack, "C1", mentioned["ts"]), timeout=30)


async def test_malformed_envelopes_are_acknowledged_not_redelivered_forever(
    bot: StartBot, slack: FakeSlack, socket: FakeSocketMode, model: ScriptedModel
) -> None:
    """Socket Mode has no signatures, but the same shape checks: what our listeners can
    never act on, or no listener takes, is acknowledged with one log line."""
    model.policy = steps(Reply(content="Still here."))  # type: ignore[arg-type]
    serve = await bot(**SOCKET)
    await socket.wait_connected()
    good = event(mention("C1", "U1", "still there?"))
    stop = {"action_id": "opsloop_stop", "value": "not-a-job", "type": "button"}
    malformed: list[tuple[str, dict[str, Any]]] = [
        ("events_api", {**good, "event": "a string"}),
        ("events_api", {**good, "event": ["a", "list"]}),
        ("events_api", {**good, "authorizations": "nope"}),
        ("events_api", {**good, "event": {"type": "reaction_added", "user": "U1"}}),
        ("interactive", {"type": "block_actions", "user": {"id": "U1"}, "actions": "x"}),
        ("interactive", {"type": "block_actions", "user": {"id": "U1"}, "actions": [stop]}),
    ]
    for kind, payload in malformed:
        assert await socket.send(kind, payload) is not None, payload
    assert await socket.send_event(good) is not None
    await slack.wait_for(lambda: answered(slack, good["event"]["ts"], "Still here."), timeout=30)
    assert len(model.requests) == 1
    assert "Traceback" not in serve.output()


async def test_a_reply_to_a_waiting_card_over_socket_mode_is_heard_before_the_click(
    bot: StartBot,
    slack: FakeSlack,
    socket: FakeSocketMode,
    model: ScriptedModel,
    tmp_path: Path,
) -> None:
    tools, log = tools_yml(tmp_path)
    model.policy = call_then_answer("restart_service", {"service": "nginx"})  # type: ignore[assignment]
    await bot(OPSLOOP_TOOLS=tools, **SOCKET)
    await socket.wait_connected()
    mentioned = mention("C1", "U1", "web is slow, look into it")
    assert await socket.send_event(event(mentioned)) is not None
    card = await wait_card(slack, "C1", mentioned["ts"])

    said = reply("C1", "UALICE", "don't restart, show me the logs first", thread_ts=mentioned["ts"])
    seed(slack, said)
    assert await socket.send_event(event(said)) is not None
    await slack.wait_for(
        lambda: (
            "show me the logs first" in str(slack.message("C1", card.ts).blocks)
            and "eyes" in slack.reactions("C1", said["ts"])
        ),
        timeout=10,
    )
    assert runs(log) == []

    assert await socket.send_interactive(click(card, "UAPPROVER1", "Approve", slack)) is not None
    await slack.wait_for(lambda: len(model.requests) >= 2, timeout=30)
    told = [m for m in model.requests[1].messages if m.get("role") == "user"][-1]
    assert "waited for approval; <@UAPPROVER1> approved it at" in str(told["content"])


async def test_alerts_reach_the_health_server_of_socket_mode(
    bot: StartBot, slack: FakeSlack, socket: FakeSocketMode, model: ScriptedModel
) -> None:
    """``opsloop socket`` has no events endpoint, but its health server takes alerts."""
    model.policy = steps(Reply(content="web-03 is busy with a backup."))
    serve = await bot(**SOCKET, OPSLOOP_ALERTS_TOKEN=TOKEN, OPSLOOP_ALERTS_CHANNEL=CHANNEL)
    await socket.wait_connected()
    assert (await post_alert(serve, notification(("web-03", "firing"))))[0] == 200
    await slack.wait_for(lambda: len(roots(slack)) == 1, timeout=30)
    [alert] = roots(slack)
    await slack.wait_for(
        lambda: any("backup" in m.text for m in slack.messages(CHANNEL, alert.ts)), timeout=30
    )


async def test_approve_with_edits_over_socket_mode(
    bot: StartBot, slack: FakeSlack, socket: FakeSocketMode, model: ScriptedModel, tmp_path: Path
) -> None:
    """The card's Edit over the websocket: the modal opens with the click's trigger id;
    a bad value is answered with errors in the ack, a good one closes it and the call runs
    once with the edit."""
    tools, log = scale_tools_yml(tmp_path)
    model.policy = call_then_answer(  # type: ignore[assignment]
        "scale_deployment", {"name": "web", "replicas": 5, "strategy": "rolling"}
    )
    serve = await bot(**SOCKET, OPSLOOP_TOOLS=tools)
    await socket.wait_connected()
    mentioned = mention("C1", "U1", "scale web up")
    seed(slack, mentioned)
    await socket.send_event(event(mentioned))
    card = await wait_card(slack, "C1", mentioned["ts"])

    assert await socket.send_interactive(click(card, "UEDITOR1", "Edit", slack)) is not None
    await slack.views.wait_opened("UEDITOR1")
    [view] = slack.views.opened("UEDITOR1")
    bad = view_submission(
        view.view, user_id="UEDITOR1", user_name="editor", values={"arg:replicas": "-1"}
    )
    answer = await socket.submit_view(bad)
    assert answer.outcome == "errors" and list(answer.errors) == ["arg:replicas"], answer
    good = view_submission(
        slack.views.get(view.id).view,
        user_id="UEDITOR1",
        user_name="editor",
        values={"arg:replicas": "3"},
    )
    assert (await socket.submit_view(good)).outcome == "closed"

    await slack.wait_for(lambda: answered(slack, mentioned["ts"]), timeout=30)
    assert [r["args"] for r in runs(log, tool="scale_deployment")] == [
        ["web", "3", "rolling", "UEDITOR1"]
    ]
    assert serve.pid  # served over the websocket only

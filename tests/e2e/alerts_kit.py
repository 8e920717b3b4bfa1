"""Shared pieces of the alerts-in end-to-end tests: the token and channel, the
``alert_feed`` fixture (a real Alertmanager notifying a started bot,
``bot.emulator.alert_feed``), a webhook body to post by hand, and what to read back: the
alert messages, a thread's job, and every text the bot sent Slack."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from bot.emulator.alert_feed import ALERTS_PATH, AlertFeed
from bot.emulator.slack import FakeSlack, Message
from bot.store.alerts import AlertGroups, group_id
from bot.store.keys import Keys, Thread

from .harness import BotProcess

TOKEN = "alert-token-0123456789"
CHANNEL = "C0ALERTS"
ANSWER = "web-03 CPU is high because of a runaway cron job."
ALERT_ENV = {"OPSLOOP_ALERTS_TOKEN": TOKEN, "OPSLOOP_ALERTS_CHANNEL": CHANNEL}
# What a Slack message must never carry from an alert: a broadcast, or a mention of anyone.
PINGS = ("<!channel", "<!here", "<!everyone", "<!subteam^S1", "<@U0BOSS")

StartFeed = Callable[..., Awaitable[AlertFeed]]


@pytest.fixture
async def alert_feed(tmp_path: Path) -> AsyncIterator[StartFeed]:
    """``await alert_feed(serve, repeat_interval="2s")`` → a started ``AlertFeed`` sending
    to ``serve`` with ``TOKEN``; stopped after the test."""
    started: list[AlertFeed] = []

    async def start(serve: BotProcess, **intervals: str) -> AlertFeed:
        folder = tmp_path / f"alertmanager-{len(started)}"
        feed = AlertFeed(folder, serve.url, TOKEN, **intervals)
        await feed.start()
        started.append(feed)
        return feed

    yield start
    for feed in reversed(started):
        await feed.stop()


def notification(*alerts: tuple[str, str], name: str = "HighCPU", **labels: str) -> dict[str, Any]:
    """Alertmanager's webhook body: one group ``name`` with ``(instance, status)`` alerts,
    all of them with ``labels`` too."""
    firing = any(state == "firing" for _, state in alerts)
    common = {"alertname": name, "severity": "critical", **labels}
    return {
        "version": "4",
        "groupKey": f'{{}}:{{alertname="{name}"}}',
        "status": "firing" if firing else "resolved",
        "receiver": "opsloop",
        "groupLabels": {"alertname": name},
        "commonLabels": common,
        "commonAnnotations": {"summary": "CPU over 90%"},
        "externalURL": "http://alertmanager:9093",
        "truncatedAlerts": 0,
        "alerts": [
            {
                "status": state,
                "labels": {**common, "instance": host},
                "annotations": {"description": f"{host} at 95%"},
                "startsAt": "2026-12-06T03:12:00Z",
                "endsAt": "0001-01-01T00:00:00Z",
                "generatorURL": "http://prometheus:9090/graph?g0.expr=cpu",
                "fingerprint": f"fp-{host}",
            }
            for host, state in alerts
        ],
    }


async def post_alert(
    bot: BotProcess, body: bytes | dict[str, Any], *, token: str | None = TOKEN
) -> tuple[int, dict[str, Any]]:
    """POST a notification to the bot as Alertmanager would: (status, JSON answer)."""
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with httpx.AsyncClient(trust_env=False, timeout=15) as http:
        response = await http.post(bot.url + ALERTS_PATH, content=content, headers=headers)
    try:
        answer = response.json()
    except ValueError:
        answer = {}
    return response.status_code, answer if isinstance(answer, dict) else {}


def roots(slack: FakeSlack, channel: str = CHANNEL) -> list[Message]:
    """The messages that open a thread: the alert messages."""
    return [m for m in slack.messages(channel) if m.thread_ts in (None, m.ts)]


def replies(slack: FakeSlack, root: Message) -> list[Message]:
    return [m for m in slack.messages(root.channel, root.ts) if m.ts != root.ts]


def has_button(message: Message) -> bool:
    return '"action_id": "opsloop_investigate_alert"' in json.dumps(message.blocks)


async def thread_job(redis_url: str, root: Message, *, number: int = 1) -> dict[str, Any] | None:
    """The record of the ``number``th job in the alert message's thread, or None."""
    client = aioredis.Redis.from_url(redis_url, decode_responses=True)
    try:
        key = Keys().job(Thread(root.channel, root.ts).job_id(number))
        data = await client.hget(key, "data")
    finally:
        await client.aclose()
    return json.loads(data) if data else None


async def inject_entries(redis_url: str, root: Message) -> str:
    """The thread's inject stream (what a running job takes in), as one text."""
    client = aioredis.Redis.from_url(redis_url, decode_responses=True)
    try:
        entries = await client.xrange(Keys().inject(Thread(root.channel, root.ts)))
    finally:
        await client.aclose()
    return json.dumps(entries)


async def no_work_left(redis_url: str, group_key: str) -> bool:
    """Whether the alert group's work list is empty and nobody holds its lock."""
    groups = AlertGroups(redis=aioredis.Redis.from_url(redis_url), keys=Keys())
    try:
        gid = group_id(group_key)
        waiting = await groups.redis.llen(groups.work_key(gid))
        locked = await groups.redis.exists(groups.lock_key(gid))
    finally:
        await groups.redis.aclose()
    return waiting == 0 and locked == 0


def sent_texts(slack: FakeSlack) -> list[str]:
    """Every text and blocks the bot sent Slack to show (posts, edits, ephemerals,
    streams), as JSON."""
    shown = (
        "chat.postMessage",
        "chat.update",
        "chat.postEphemeral",
        "chat.startStream",
        "chat.appendStream",
        "chat.stopStream",
    )
    return [json.dumps(call.params) for call in slack.calls if call.method in shown]

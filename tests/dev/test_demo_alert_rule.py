"""The demo's alerting against a stand-in for web's metrics and the bot's webhook: the body
is Alertmanager's (version 4) and the bot reads it as such; the error-rate rule fires once
web fails more than 5 % of its requests, sends nothing more while it fires, resolves once
web recovers, and sends again what the bot did not take (as Alertmanager retries); no
metrics change nothing; the page's button fires a new group each click. Every post carries
the bearer token."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

from bot.alerts.payload import parse
from bot.dev.demo_alerts import ALERTS_PATH, ERROR_RATE, AlertSender, DemoAlerts, notification

TOKEN = "dev-token-0123456789"


@dataclass
class Stand:
    """web's ``/metrics`` and the bot's webhook on one local server."""

    metrics: dict[str, Any] | None = None  # None: /metrics answers 503
    answer: int = 200
    posts: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    port: int = 0

    async def _metrics(self, request: web.Request) -> web.Response:
        if self.metrics is None:
            return web.Response(status=503)
        return web.json_response(self.metrics)

    async def _alerts(self, request: web.Request) -> web.Response:
        self.posts.append((request.headers.get("Authorization", ""), await request.json()))
        if self.answer != 200:
            return web.json_response({"ok": False, "error": "redis_down"}, status=self.answer)
        return web.json_response({"ok": True, "outcome": "opened"})

    def bodies(self) -> list[dict[str, Any]]:
        return [body for _, body in self.posts]


@pytest.fixture
async def stand() -> AsyncIterator[Stand]:
    stand = Stand()
    app = web.Application()
    app.router.add_get("/metrics", stand._metrics)
    app.router.add_post(ALERTS_PATH, stand._alerts)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    stand.port = runner.addresses[0][1]
    yield stand
    await runner.cleanup()


@pytest.fixture
async def alerts(stand: Stand) -> AsyncIterator[DemoAlerts]:
    sender = AlertSender(f"http://127.0.0.1:{stand.port}{ALERTS_PATH}", TOKEN)
    demo = DemoAlerts(sender, stand.port, now=lambda: "2026-12-06T03:12:00.000000Z")
    yield demo
    await demo.close()


def degraded(rate: float | None = 0.3) -> dict[str, Any]:
    return {
        "state": "degraded",
        "window_s": 12.0,
        "requests_last_min": 40,
        "error_rate": rate,
        "p95_ms": 2400.0,
    }


def test_the_body_is_alertmanagers_and_the_bot_reads_it() -> None:
    body = notification(
        ERROR_RATE,
        "firing",
        instance="127.0.0.1:4242",
        starts_at="2026-12-06T03:12:00Z",
        description="web: 30% of 40 requests failed",
        generator_url="http://127.0.0.1:4242/metrics",
    )
    assert body["version"] == "4" and body["status"] == "firing"
    assert (
        body["groupKey"]
        == '{}:{alertname="WebErrorRateHigh", instance="127.0.0.1:4242", service="web"}'
    )
    [alert] = body["alerts"]
    assert set(alert) == {
        "status", "labels", "annotations", "startsAt", "endsAt", "generatorURL", "fingerprint"
    }  # fmt: skip
    assert set(alert["annotations"]) == {"summary", "description", "runbook_url"}
    assert alert["endsAt"] == "0001-01-01T00:00:00Z"

    read = parse(json.dumps(body).encode())
    assert read.name == "WebErrorRateHigh" and read.group_key == body["groupKey"]
    assert read.alerts[0].fingerprint == alert["fingerprint"]
    assert read.alerts[0].generator_url == "http://127.0.0.1:4242/metrics"
    assert read.common_labels["severity"] == "critical"


async def test_the_rule_fires_once_resolves_once_and_retries_what_the_bot_refused(
    stand: Stand, alerts: DemoAlerts
) -> None:
    stand.metrics = {"state": "healthy", "error_rate": 0.0, "requests_last_min": 30}
    assert await alerts.look() is None  # healthy: nothing
    stand.metrics = degraded(rate=None)
    assert await alerts.look() is None  # degraded, but no request finished yet: no data

    stand.metrics, stand.answer = degraded(), 503
    refused = await alerts.look()
    assert refused is not None and (refused.status, refused.outcome) == (503, "redis_down")
    stand.answer = 200
    fired = await alerts.look()  # sent again, as Alertmanager retries
    assert fired is not None and fired.taken
    assert await alerts.look() is None  # still firing: nothing new

    stand.metrics = None
    assert await alerts.look() is None  # web restarting: no metrics, no change
    stand.metrics = {"state": "healthy", "error_rate": 0.0, "requests_last_min": 3}
    resolved = await alerts.look()
    assert resolved is not None and resolved.taken
    assert await alerts.look() is None

    firing, again, gone = stand.bodies()
    assert firing == again and firing["status"] == "firing"
    assert (
        "30% of 40 requests failed in the last 12 s" in firing["commonAnnotations"]["description"]
    )
    assert gone["status"] == "resolved" and gone["groupKey"] == firing["groupKey"]
    assert gone["alerts"][0]["fingerprint"] == firing["alerts"][0]["fingerprint"]
    assert gone["alerts"][0]["endsAt"] != "0001-01-01T00:00:00Z"
    assert {auth for auth, _ in stand.posts} == {f"Bearer {TOKEN}"}


async def test_each_click_fires_a_new_group(stand: Stand, alerts: DemoAlerts) -> None:
    stand.metrics = degraded()
    first = await alerts.fire_by_hand()
    second = await alerts.fire_by_hand()

    assert first == {"status": 200, "outcome": "opened", "alert": "WebLatencyHigh"} == second
    one, two = stand.bodies()
    assert one["groupKey"] != two["groupKey"]
    assert one["commonLabels"]["alertname"] == "WebLatencyHigh"
    assert "p95 latency 2.4 s" in one["commonAnnotations"]["description"]

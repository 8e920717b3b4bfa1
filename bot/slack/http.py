"""The HTTP transport (``opsloop serve``): ``POST /slack/events``, ``POST /alerts/alertmanager``,
``/healthz``, ``/metrics``.

Nothing reaches bolt before ``bot.slack.gate`` has checked it: the body's size (413), its
signature on the raw bytes (401) and its shape (a signed but malformed payload gets 400 or
200, never a 5xx); a listener's ``StoreError`` is the one 503. See that module for the
split. Each answer to Slack is timed into ``opsloop_ack_seconds``.

``/healthz`` is 200 only when Redis answers (503 within ``HEALTH_TIMEOUT_S``); its JSON
body also says how many jobs the process runs, its limit and how many it left waiting
for room (``"jobs"``, when the composition root gave the counts: ``Metrics.watch_jobs``);
``/metrics`` is the process's metrics plus the workspace's live counts (``Turns``), those
left out when Redis does not answer. Socket Mode serves the same two without
``/slack/events`` (``bot.slack.socket``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable

from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response
from slack_bolt.async_app import AsyncApp

from bot.errors import StoreError
from bot.metrics import Metrics
from bot.slack.alert_webhook import PATH as ALERTS_PATH
from bot.slack.alert_webhook import AlertWebhook
from bot.slack.gate import MAX_BODY_BYTES, Answer, Gate, acknowledged
from bot.turns.parts import Turns

HEALTH_TIMEOUT_S = 2.0
SHUTDOWN_TIMEOUT_S = 5.0


class _Routes:
    def __init__(self, *, app: AsyncApp, turns: Turns, metrics: Metrics, gate: Gate | None) -> None:
        self.app = app
        self.turns = turns
        self.metrics = metrics
        self.gate = gate

    async def events(self, request: web.Request) -> web.Response:
        assert self.gate is not None
        started = time.perf_counter()
        admitted = await self.gate.admit(request)
        if isinstance(admitted, Answer):
            if admitted.signed:  # Slack's request, answered by the gate
                self.metrics.ack.observe(time.perf_counter() - started)
            return admitted.response()
        response = acknowledged(await self.app.async_dispatch(admitted.request), admitted)
        self.metrics.ack.observe(time.perf_counter() - started)
        return await to_aiohttp_response(response)

    async def healthz(self, request: web.Request) -> web.Response:
        try:
            async with asyncio.timeout(HEALTH_TIMEOUT_S):
                await self.turns.stores.ping()
        except (StoreError, TimeoutError):
            return web.json_response({"ok": False, "redis": "unavailable"}, status=503)
        body: dict[str, object] = {"ok": True}
        if (jobs := self.metrics.jobs_here()) is not None:
            body["jobs"] = jobs
        return web.json_response(body)

    async def scrape(self, request: web.Request) -> web.Response:
        live: tuple[int, int] | None
        try:
            async with asyncio.timeout(HEALTH_TIMEOUT_S):
                counts = await self.turns.stores.live_counts()
        except (StoreError, TimeoutError):
            live = None
        else:
            live = (counts.jobs, counts.pending_approvals)
        return web.Response(body=self.metrics.scrape(live), content_type="text/plain")


def web_app(
    *,
    app: AsyncApp,
    turns: Turns,
    metrics: Metrics,
    signing_secret: str | None,
    alerts: AlertWebhook | None = None,
) -> web.Application:
    """The HTTP app: ``/slack/events`` (when there is a ``signing_secret``; none for
    Socket Mode), ``/alerts/alertmanager`` (``bot.slack.alert_webhook``: 404 while
    ``OPSLOOP_ALERTS_TOKEN`` is unset), ``/healthz`` and ``/metrics``. With events,
    requests pass ``bot.slack.gate`` before bolt, and bolt's listener errors become the
    statuses the gate defines."""
    server = web.Application(client_max_size=MAX_BODY_BYTES)
    gate = Gate(signing_secret) if signing_secret is not None else None
    routes = _Routes(app=app, turns=turns, metrics=metrics, gate=gate)
    if gate is not None:
        gate.attach(app)
        server.router.add_post("/slack/events", routes.events)
    if alerts is not None:
        server.router.add_post(ALERTS_PATH, alerts.handle)
    server.router.add_get("/healthz", routes.healthz)
    server.router.add_get("/metrics", routes.scrape)
    return server


def run(opened: Awaitable[web.Application], *, host: str, port: int) -> None:
    """Serve the app ``opened`` makes on ``host``:``port`` until interrupted (SIGTERM,
    SIGINT), then run its cleanup."""
    web.run_app(
        opened,
        host=host,
        port=port,
        print=None,
        access_log=None,
        shutdown_timeout=SHUTDOWN_TIMEOUT_S,
    )

"""The Socket Mode transport (``opsloop socket``): events and clicks over the websocket.

There is no request URL, so no signature to check: ``SLACK_APP_TOKEN`` opens the
connection and Slack authenticates it. ``TimedHandler`` is bolt's handler with the
gate's shape checks in front (``bot.slack.gate.judge``) and each envelope's time to its
ack in ``opsloop_ack_seconds``. ``run`` serves ``GET /healthz`` and ``GET /metrics`` on
``HOST``:``PORT`` as ``serve`` has them (``bot.slack.http``), connects, and holds the
connection until ``stop`` is set; unacknowledged envelopes are redelivered by Slack.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time

from aiohttp import web
from slack_bolt.adapter.socket_mode.aiohttp import AsyncSocketModeHandler
from slack_bolt.adapter.socket_mode.async_internals import run_async_bolt_app, send_async_response
from slack_bolt.async_app import AsyncApp
from slack_bolt.response import BoltResponse
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.web.async_client import AsyncWebClient

from bot.metrics import Metrics
from bot.slack.gate import attach, judge

log = logging.getLogger(__name__)


class TimedHandler(AsyncSocketModeHandler):
    """bolt's handler, with each envelope's time to its ack in ``opsloop_ack_seconds``."""

    def __init__(
        self, app: AsyncApp, app_token: str, *, web_client: AsyncWebClient, metrics: Metrics
    ) -> None:
        super().__init__(app, app_token, web_client=web_client)
        self.metrics = metrics

    async def handle(self, client: SocketModeClient, req: SocketModeRequest) -> None:  # type: ignore[override]  # as bolt types it
        """bolt's ``handle``, with the gate's shape checks first: an envelope our
        listeners can never act on, or none takes, is acknowledged (one log line)
        rather than left for Slack to redeliver forever; a listener's ``StoreError``
        still leaves it unacknowledged, so Slack redelivers it."""
        started = time.perf_counter()
        verdict = judge(req.payload)
        if verdict is not None:
            status, why = verdict
            log.warning("socket mode %s envelope: %s; acknowledged", req.type, why)
            response = BoltResponse(status=200, body="")
        else:
            response = await run_async_bolt_app(self.app, req)
            if response.status == 404:
                log.info("socket mode %s envelope: no listener; acknowledged", req.type)
                response = BoltResponse(status=200, body="")
        await send_async_response(client, req, response, started)
        self.metrics.ack.observe(time.perf_counter() - started)


async def run(
    *,
    app: AsyncApp,
    client: AsyncWebClient,
    app_token: str,
    metrics: Metrics,
    health: web.Application,
    host: str,
    port: int,
    stop: asyncio.Event,
) -> None:
    """Serve ``health`` (``/healthz``, ``/metrics``) and ``app`` over Socket Mode until
    ``stop`` is set; then close the connection and the HTTP side."""
    attach(app)
    runner = web.AppRunner(health, access_log=None)
    await runner.setup()
    handler = TimedHandler(app, app_token, web_client=client, metrics=metrics)
    try:
        await web.TCPSite(runner, host, port).start()
        # Everything built so far lives as long as the process: keep it out of the
        # collector's full passes, whose pauses hold up every envelope.
        gc.collect()
        gc.freeze()
        await handler.connect_async()  # type: ignore[no-untyped-call]  # untyped in bolt
        log.info("connected to Slack over Socket Mode")
        await stop.wait()
    finally:
        await handler.close_async()  # type: ignore[no-untyped-call]
        await runner.cleanup()

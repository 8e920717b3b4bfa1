"""``POST /alerts/alertmanager``: Alertmanager's and Grafana's webhook, acknowledged after
it is persisted.

Off (404) unless ``OPSLOOP_ALERTS_TOKEN`` is set; then the request must carry
``Authorization: Bearer <token>`` (compared in constant time), else 401 and nothing is
read further. The body is read up to ``MAX_BODY_BYTES`` (over it: 413) and parsed by
``bot.alerts.payload`` (bad JSON, not an object, ``alerts`` missing or not a list: 400
with the reason). The group's route decides the channel (nothing routes it: 422, which
Alertmanager logs). Then the notification's change is written to Redis
(``bot.turns.alerts.AlertDesk.receive``) before the 200; Redis down, or the write not
replicated under ``OPSLOOP_REDIS_MIN_REPLICAS``: 503, which Alertmanager retries. Bad input
is never a 5xx. The Slack side of the change (the alert message, its thread, the
investigation) is done after the answer, in the background.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from aiohttp import web

from bot.alerts.payload import BadPayload, parse
from bot.errors import StoreError
from bot.metrics import Metrics
from bot.turns.alerts import AlertDesk, Unroutable

log = logging.getLogger(__name__)

PATH = "/alerts/alertmanager"
MAX_BODY_BYTES = 1 << 20
READ_CHUNK = 64 * 1024

Background = Callable[[Coroutine[Any, Any, Any], str], None]


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


class AlertWebhook:
    """The endpoint's handler (see the module docstring)."""

    def __init__(
        self,
        *,
        token: str | None,
        desk: AlertDesk | None,
        metrics: Metrics | None,
        background: Background,
    ) -> None:
        self._token = token.encode() if token else None
        self.desk = desk
        self.metrics = metrics
        self.background = background

    def _count(self, status: str) -> None:
        if self.metrics is not None:
            self.metrics.alerts_received.labels(status=status).inc()

    async def handle(self, request: web.Request) -> web.Response:
        if self._token is None or self.desk is None:
            return _error(404, "not found")
        scheme, _, credentials = request.headers.get("Authorization", "").partition(" ")
        given = credentials.strip().encode()
        if scheme.lower() != "bearer" or not hmac.compare_digest(given, self._token):
            self._count("unauthorized")
            return web.json_response(
                {"error": "a bearer token is required"},
                status=401,
                headers={"WWW-Authenticate": 'Bearer realm="opsloop alerts"'},
            )
        body = await _read(request)
        if body is None:
            self._count("too_large")
            return _error(413, f"the body is larger than {MAX_BODY_BYTES} bytes")
        try:
            notification = parse(body)
        except BadPayload as exc:
            self._count("bad")
            return _error(400, str(exc))
        try:
            receipt = await self.desk.receive(notification)
        except StoreError as exc:
            self._count("unavailable")
            log.warning("alert %s not persisted: %s", notification.name, exc)
            return _error(503, "the store is unavailable; retry")
        if isinstance(receipt, Unroutable):
            self._count("unroutable")
            return _error(422, f"no route takes the alert group {receipt.name!r}")
        self._count(notification.status)
        if receipt.pending:
            self.background(self.desk.work(receipt.group), "alert work")
        return web.json_response({"ok": True, "outcome": receipt.outcome})


async def _read(request: web.Request) -> bytes | None:
    """The body, or None when it is over the cap (read no further than the cap)."""
    if (request.content_length or 0) > MAX_BODY_BYTES:
        return None
    chunks: list[bytes] = []
    size = 0
    while chunk := await request.content.read(READ_CHUNK):
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return None
        chunks.append(chunk)
    return b"".join(chunks)

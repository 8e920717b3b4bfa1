"""A real Alertmanager feeding a bot's ``POST /alerts/alertmanager``, through a relay that
records every notification and the bot's answer to it.

``AlertFeed(folder, bot_url, token)`` starts ``prometheus-alertmanager`` (the Debian
package, through ``bot.emulator.prometheus_stack.AlertmanagerServer``) with one route —
grouped by ``alertname``, ``group_wait`` and ``group_interval`` of a second, a short
``repeat_interval`` — to one webhook receiver with ``send_resolved`` and
``Authorization: Bearer <token>``. The receiver's URL is a ``WebhookRelay`` in front of
the bot: it forwards each notification as Alertmanager sent it (body, ``Authorization``,
content type) and answers Alertmanager with the bot's own status and body, so a 503 is
retried by Alertmanager exactly as without the relay. Each notification is kept as a
``Delivery``: the body, the bot's status and its JSON answer (``outcome``).

``fire`` and ``resolve`` post alerts through Alertmanager's ``POST /api/v2/alerts``, as
Prometheus does (``resolve``: with ``endsAt`` in the past). Used by the end-to-end tests
of alerts in (``tests/e2e/test_alerts_*.py``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from aiohttp import web

from bot.emulator.app_server import AppServer, StartStop
from bot.emulator.prometheus_stack import AlertmanagerServer

ALERTS_PATH = "/alerts/alertmanager"
RECEIVER = "opsloop"
FORWARD_TIMEOUT_S = 30.0  # a hang guard: Alertmanager gives up on its own after its timeout
WAIT_TIMEOUT_S = 30.0
GENERATOR_URL = "http://prometheus.example:9090/graph?g0.expr=up"
NO_ANSWER = 502  # what the relay answers when the bot did not


@dataclass(frozen=True, slots=True)
class Delivery:
    """One notification Alertmanager sent, and what the bot answered."""

    body: dict[str, Any]
    status: int
    answer: dict[str, Any]
    authorization: str

    @property
    def outcome(self) -> str | None:
        """The bot's ``outcome`` (``opened``, ``repeat`` …) of a 200, else None."""
        found = self.answer.get("outcome")
        return str(found) if found is not None else None

    @property
    def group(self) -> str:
        return str(self.body.get("groupLabels", {}).get("alertname", ""))

    @property
    def states(self) -> dict[str, str]:
        """Each alert's status by its ``instance`` label (else its fingerprint)."""
        return {
            str(a["labels"].get("instance") or a.get("fingerprint")): str(a["status"])
            for a in self.body.get("alerts", [])
        }


@dataclass(eq=False)
class WebhookRelay(StartStop):
    """Forwards each POST to ``target`` as it came and answers with the target's answer;
    every one is kept in ``deliveries``."""

    target: str
    deliveries: list[Delivery] = field(default_factory=list)
    _server: AppServer = field(default_factory=AppServer, init=False)
    _client: httpx.AsyncClient | None = field(default=None, init=False)
    _changed: asyncio.Condition = field(default_factory=asyncio.Condition, init=False)
    port: int = field(default=0, init=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/notify"

    async def start(self) -> None:
        # trust_env=False: a proxy setting must never route loopback traffic.
        self._client = httpx.AsyncClient(trust_env=False, timeout=FORWARD_TIMEOUT_S)
        app = web.Application(client_max_size=16 << 20)  # the bot decides what is too large
        app.router.add_post("/notify", self._relay)
        self.port = await self._server.start(app)

    async def stop(self) -> None:
        await self._server.stop()
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def _relay(self, request: web.Request) -> web.Response:
        assert self._client is not None
        body = await request.read()
        authorization = request.headers.get("Authorization", "")
        headers = {"Content-Type": request.headers.get("Content-Type", "application/json")}
        if authorization:
            headers["Authorization"] = authorization
        try:
            response = await self._client.post(self.target, content=body, headers=headers)
        except httpx.HTTPError:
            status, text = NO_ANSWER, ""
        else:
            status, text = response.status_code, response.text
        try:
            answer = json.loads(text) if text else {}
        except ValueError:
            answer = {}
        delivery = Delivery(
            body=json.loads(body),
            status=status,
            answer=answer if isinstance(answer, dict) else {},
            authorization=authorization,
        )
        async with self._changed:
            self.deliveries.append(delivery)
            self._changed.notify_all()
        return web.Response(status=status, text=text, content_type="application/json")

    async def wait_for(
        self,
        predicate: Callable[[list[Delivery]], object],
        *,
        timeout: float = WAIT_TIMEOUT_S,  # noqa: ASYNC109 (a hang guard)
    ) -> None:
        """Return once ``predicate(deliveries)`` holds, re-checked after each delivery."""
        async with self._changed:
            try:
                await asyncio.wait_for(
                    self._changed.wait_for(lambda: predicate(self.deliveries)), timeout
                )
            except TimeoutError:
                seen = [(d.group, d.status, d.outcome) for d in self.deliveries]
                raise TimeoutError(f"no such delivery within {timeout}s; seen: {seen}") from None


def alertmanager_config(
    url: str, token: str, *, group_wait: str, group_interval: str, repeat_interval: str
) -> str:
    """One route grouped by ``alertname`` to one webhook receiver with the bearer token
    (JSON, which is YAML)."""
    webhook = {
        "url": url,
        "send_resolved": True,
        "max_alerts": 0,
        "http_config": {"authorization": {"type": "Bearer", "credentials": token}},
    }
    config = {
        "route": {
            "receiver": RECEIVER,
            "group_by": ["alertname"],
            "group_wait": group_wait,
            "group_interval": group_interval,
            "repeat_interval": repeat_interval,
        },
        "receivers": [{"name": RECEIVER, "webhook_configs": [webhook]}],
    }
    return json.dumps(config, indent=2)


def alert(
    name: str,
    *,
    annotations: Mapping[str, str] | None = None,
    **labels: str,
) -> dict[str, Any]:
    """An alert as Prometheus posts it (``alertname`` plus ``labels``), firing."""
    return {
        "labels": {"alertname": name, **labels},
        "annotations": dict(annotations or {}),
        "generatorURL": GENERATOR_URL,
    }


def _iso(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(eq=False)
class AlertFeed(StartStop):
    """A real Alertmanager notifying the bot at ``bot_url`` (see the module docstring)."""

    folder: Path
    bot_url: str
    token: str
    group_wait: str = "1s"
    group_interval: str = "1s"
    repeat_interval: str = "2s"
    relay: WebhookRelay = field(init=False)
    server: AlertmanagerServer = field(init=False)

    def __post_init__(self) -> None:
        self.relay = WebhookRelay(self.bot_url.rstrip("/") + ALERTS_PATH)

    @property
    def deliveries(self) -> list[Delivery]:
        return self.relay.deliveries

    async def start(self) -> None:
        await self.relay.start()
        config = alertmanager_config(
            self.relay.url,
            self.token,
            group_wait=self.group_wait,
            group_interval=self.group_interval,
            repeat_interval=self.repeat_interval,
        )
        self.server = AlertmanagerServer(self.folder, config)
        try:
            await asyncio.to_thread(self.server.start)  # it blocks until Alertmanager is ready
        except BaseException:
            await self.relay.stop()
            raise

    async def stop(self) -> None:
        if hasattr(self, "server"):
            await asyncio.to_thread(self.server.stop)
        await self.relay.stop()

    async def fire(self, *alerts: Mapping[str, Any]) -> None:
        """Post ``alerts`` (firing) to Alertmanager."""
        await self._post(list(alerts))

    async def resolve(self, *alerts: Mapping[str, Any]) -> None:
        """Post ``alerts`` as resolved: ``endsAt`` a second ago."""
        ended = _iso(datetime.now(UTC) - timedelta(seconds=1))
        await self._post([{**a, "endsAt": ended} for a in alerts])

    async def _post(self, alerts: Sequence[Mapping[str, Any]]) -> None:
        async with httpx.AsyncClient(base_url=self.server.url, trust_env=False, timeout=10) as http:
            response = await http.post("/api/v2/alerts", json=list(alerts))
        response.raise_for_status()

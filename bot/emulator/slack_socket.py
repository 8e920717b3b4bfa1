"""Slack's side of Socket Mode for a :class:`~bot.emulator.slack.FakeSlack`, for tests.

``apps.connections.open`` (with the app-level ``xapp-`` token) answers a one-time
``ws://`` URL on the fake's own port; a client that connects gets Slack's ``hello``, and
then the envelopes a test sends: ``events_api`` (the same ``event_callback`` body the
Events API posts) and ``interactive`` (a ``block_actions`` or ``view_submission`` payload
as JSON). Slack waits for an ack naming the envelope id and redelivers an envelope that is
not acked (with ``retry_attempt`` and ``retry_reason``); ``send`` returns the ack (with
the ``payload`` bolt answers a submission with) or ``None`` after its timeout so a test
can do the same, and ``submit_view`` judges a submission's ack as Slack does.
``disconnect`` sends Slack's ``disconnect`` message, after which a client opens a new
connection, as it must when Slack refreshes one::

    slack = FakeSlack()
    socket = FakeSocketMode(slack)   # before slack.start()
    await slack.start()
    ...                              # start the app with SLACK_API_URL=slack.api_url
    await socket.wait_connected()
    ack = await socket.send_event(event_callback_body)
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
import uuid
from typing import Any, Literal

from aiohttp import WSMsgType, web

from bot.emulator.slack import FakeSlack
from bot.emulator.slack_views import ViewAnswer
from bot.emulator.slack_wire import APP_ID, Params, Reply

SOCKET_PATH = "/socket-mode"
Kind = Literal["events_api", "interactive", "slash_commands"]


class FakeSocketMode:
    """Socket Mode for one fake workspace: connections, envelopes, acks."""

    def __init__(self, slack: FakeSlack) -> None:
        self._slack = slack
        self._tickets: set[str] = set()
        self._sockets: list[web.WebSocketResponse] = []
        self._acks: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._changed = asyncio.Condition()
        self.connections = 0  # websockets opened so far
        self.received: list[dict[str, Any]] = []  # every message a client sent
        slack.add_method("apps.connections.open", self._open, app_token=True)
        slack.add_route("GET", SOCKET_PATH, self._connect)

    @property
    def open_connections(self) -> int:
        return sum(1 for ws in self._sockets if not ws.closed)

    async def wait_connected(self, count: int = 1, *, timeout: float = 15.0) -> None:  # noqa: ASYNC109
        """Until ``count`` websockets are open."""
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(lambda: self.open_connections >= count)

    async def wait_connections(self, total: int, *, timeout: float = 15.0) -> None:  # noqa: ASYNC109
        """Until ``total`` websockets have been opened in all (reconnections count)."""
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(
                lambda: self.connections >= total and self.open_connections > 0
            )

    async def send(
        self,
        kind: Kind,
        payload: dict[str, Any],
        *,
        envelope_id: str | None = None,
        retry_attempt: int = 0,
        retry_reason: str = "",
        timeout: float = 3.0,  # noqa: ASYNC109
    ) -> dict[str, Any] | None:
        """Deliver an envelope on the newest open connection; its ack, or ``None`` when
        none came within ``timeout`` (Slack's 3 s), as Slack would then redeliver it."""
        envelope_id = envelope_id or str(uuid.uuid4())
        socket = next((ws for ws in reversed(self._sockets) if not ws.closed), None)
        if socket is None:
            raise RuntimeError("no Socket Mode connection is open")
        envelope = {
            "envelope_id": envelope_id,
            "type": kind,
            "accepts_response_payload": kind != "events_api",
            "retry_attempt": retry_attempt,
            "retry_reason": retry_reason,
            "payload": payload,
        }
        acked: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._acks[envelope_id] = acked
        try:
            await socket.send_str(json.dumps(envelope))
            return await asyncio.wait_for(acked, timeout)
        except TimeoutError:
            return None
        finally:
            self._acks.pop(envelope_id, None)

    async def send_event(self, body: dict[str, Any], **options: Any) -> dict[str, Any] | None:
        """An Events API ``event_callback`` body, as an ``events_api`` envelope."""
        return await self.send("events_api", body, **options)

    async def send_interactive(
        self, payload: dict[str, Any], **options: Any
    ) -> dict[str, Any] | None:
        """A ``block_actions`` (or other interactivity) payload, as an ``interactive`` envelope."""
        return await self.send("interactive", payload, **options)

    async def submit_view(self, payload: dict[str, Any], *, timeout: float = 3.0) -> ViewAnswer:  # noqa: ASYNC109
        """A ``view_submission`` payload (``sender.view_submission``) as an ``interactive``
        envelope; the ack judged as Slack does (``slack.views.answer_ack``: bolt puts the
        ``response_action`` in the ack's ``payload``; no ack in time is refused)."""
        ack = await self.send_interactive(payload, timeout=timeout)
        return await self._slack.views.answer_ack(str(payload["view"]["id"]), ack)

    async def disconnect(self, reason: str = "refresh_requested") -> None:
        """Slack's ``disconnect`` message on every open connection (the client reconnects)."""
        message = json.dumps({"type": "disconnect", "reason": reason, "debug_info": {}})
        for ws in self._sockets:
            if not ws.closed:
                await ws.send_str(message)

    async def close(self) -> None:
        for ws in self._sockets:
            await ws.close()

    # ---- the server side -------------------------------------------------------------------

    def _open(self, params: Params) -> Reply:
        ticket = secrets.token_hex(8)
        self._tickets.add(ticket)
        base = self._slack.api_url.removesuffix("/api/").replace("http://", "ws://", 1)
        return {"url": f"{base}{SOCKET_PATH}?ticket={ticket}&app_id={APP_ID}"}

    async def _connect(self, request: web.Request) -> web.StreamResponse:
        ticket = request.query.get("ticket", "")
        if ticket not in self._tickets:
            return web.Response(status=403, text="invalid_ticket")
        self._tickets.discard(ticket)  # one connection per URL, as Slack's
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        self._sockets.append(ws)
        self.connections += 1
        hello = {
            "type": "hello",
            "num_connections": self.open_connections,
            "debug_info": {"host": "fake-slack", "approximate_connection_time": 18060},
            "connection_info": {"app_id": APP_ID},
        }
        await ws.send_str(json.dumps(hello))
        await self._notify()
        try:
            async for message in ws:
                if message.type is not WSMsgType.TEXT:
                    continue
                data = json.loads(message.data)
                self.received.append({"at": time.time(), **data})
                future = self._acks.get(str(data.get("envelope_id")))
                if future is not None and not future.done():
                    future.set_result(data)
        finally:
            await self._notify()
        return ws

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

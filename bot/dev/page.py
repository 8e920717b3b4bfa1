"""The emulator's page for people: its routes, their guard, and the server-sent event stream.

**The page** (``bot/dev/static``: plain HTML, JS and CSS) is served at ``/`` and talks to
``/ui/…`` JSON endpoints (``info``, ``state?user=``, ``post``, ``click``, ``shortcut``,
``alert``, ``fire-alert``, and a modal's ``view/submit`` and ``view/close``) and a
server-sent event stream ``/ui/stream?user=U…`` whose first event is a ``snapshot`` of the
state and the rest are changes in the order they happened (``message``, ``update``,
``delete``, ``reaction``, ``ephemeral``, ``status``, ``delivery``, ``modal``). Ephemeral
messages and modals are scoped **on the server**: a stream or a state snapshot only ever
holds the ephemerals and the modal of the user it was opened for. ``?user=U…`` and
``?thread=TS`` on the page's URL pick the user and open a thread. The page's endpoints
answer only requests addressed to a loopback host name when the server is bound to
loopback (no DNS rebinding), and their POSTs must be JSON (a cross-site
form cannot send that without a CORS preflight, which is never granted). All JSON the page
reads escapes ``<``, ``>`` and ``&`` (:func:`html_safe_json`); nothing is rendered to HTML on
the server.

:class:`PageRoutes` serves all that over a :class:`PageBackend` (the emulator) and a
:class:`StreamHub`, which fans the changes out to at most :data:`MAX_STREAM_CLIENTS` streams;
a client that falls :data:`STREAM_QUEUE` events behind is dropped (its ``EventSource``
reconnects and gets a fresh snapshot). :class:`EmulatorError` is a request refused, with a
Slack-like code.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from aiohttp import web
from yarl import URL

from bot.emulator.slack import MAX_MESSAGE_TEXT, Ephemeral
from bot.emulator.slack_wire import Submitted, json_object

log = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).with_name("static")

MAX_STREAM_CLIENTS = 16
STREAM_QUEUE = 256  # events a stream client may lag behind before it is dropped (frames are
# shared between clients, so this also bounds the memory held for slow ones)
KEEPALIVE_S = 15.0
RECONNECT_MS = 1_000  # how soon a dropped page reconnects (the SSE `retry` field)
MAX_VIEW_INPUTS = 100  # values in a submitted modal (a view holds at most 100 blocks)

_LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


class EmulatorError(ValueError):
    """A page request the emulator refuses; ``code`` is Slack-like (``no_text``, …)."""

    def __init__(self, code: str, status: int = 400) -> None:
        super().__init__(code)
        self.code = code
        self.status = status


def html_safe_json(value: object) -> str:
    """JSON with ``<``, ``>`` and ``&`` as ``\\u`` escapes: never markup, whatever it holds."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def json_response(value: object, status: int = 200) -> web.Response:
    return web.Response(text=html_safe_json(value), status=status, content_type="application/json")


def is_loopback(host: str) -> bool:
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def ui_ephemeral(ephemeral: Ephemeral) -> dict[str, Any]:
    """An ephemeral message as the page shows it."""
    return {
        "channel": ephemeral.channel,
        "user": ephemeral.user,
        "ts": ephemeral.message_ts,
        "thread_ts": ephemeral.thread_ts,
        "text": ephemeral.text,
        "blocks": ephemeral.blocks,
    }


async def security_headers(request: web.Request, response: web.StreamResponse) -> None:
    """``on_response_prepare``: no sniffing, no referrer, and a strict CSP for the page."""
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    response.headers.setdefault("Referrer-Policy", "no-referrer")
    if request.path == "/" or request.path.startswith("/static/"):
        response.headers.setdefault(
            "Content-Security-Policy",
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
            "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        )


# ---- the event stream -------------------------------------------------------------------


@dataclass(eq=False)  # held in a set, by identity
class _Client:
    user: str | None
    queue: asyncio.Queue[bytes | None]


class StreamHub:
    """The page streams: every change is numbered (``seq``) and sent to each, in order."""

    def __init__(self) -> None:
        self.seq = 0
        self._clients: set[_Client] = set()

    def __len__(self) -> int:
        return len(self._clients)

    def publish(self, kind: str, data: Mapping[str, Any], audience: str | None = None) -> None:
        """Send an event to every stream client (only ``audience``'s, if given), in order."""
        self.seq += 1
        frame = f"id: {self.seq}\nevent: {kind}\ndata: {html_safe_json(data)}\n\n".encode()
        for client in list(self._clients):
            if audience is not None and client.user != audience:
                continue
            try:
                client.queue.put_nowait(frame)
            except asyncio.QueueFull:
                log.info("dropping a page stream that fell %d events behind", STREAM_QUEUE)
                self._drop(client)

    def close(self) -> None:
        """End every stream."""
        for client in list(self._clients):
            self._drop(client)

    def _drop(self, client: _Client) -> None:
        self._clients.discard(client)
        while not client.queue.empty():
            client.queue.get_nowait()
        client.queue.put_nowait(None)

    async def serve(
        self, request: web.Request, user: str | None, snapshot: str
    ) -> web.StreamResponse:
        """Stream to one page: ``snapshot`` (taken just now: no await since), then changes."""
        client = _Client(user, asyncio.Queue(maxsize=STREAM_QUEUE))
        self._clients.add(client)  # no await since the snapshot: nothing is missed
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream; charset=utf-8",
                "Cache-Control": "no-cache",
                "X-Accel-Buffering": "no",
            }
        )
        try:
            await response.prepare(request)
            head = f"retry: {RECONNECT_MS}\nid: {self.seq}\nevent: snapshot\n"
            await response.write(f"{head}data: {snapshot}\n\n".encode())
            while True:
                try:
                    frame = await asyncio.wait_for(client.queue.get(), KEEPALIVE_S)
                except TimeoutError:
                    frame = b": keepalive\n\n"
                if frame is None:
                    break
                await response.write(frame)
        except ConnectionError:
            pass  # the page went away
        finally:
            self._clients.discard(client)
        return response


# ---- the routes -------------------------------------------------------------------------


class PageBackend(Protocol):
    """What the page's endpoints need of the emulator."""

    @property
    def channel_id(self) -> str: ...

    def user(self, user_id: str) -> object: ...

    def info(self) -> dict[str, Any]: ...

    def state(self, user_id: str | None = None) -> dict[str, Any]: ...

    async def post_as(self, user_id: str, text: str, thread_ts: str | None = None) -> str: ...

    async def click_as(
        self, user_id: str, channel: str, message_ts: str, action_id: str, value: str
    ) -> int: ...

    async def shortcut_as(
        self, user_id: str, channel: str, message_ts: str, callback_id: str
    ) -> int: ...

    async def submit_view_as(
        self, user_id: str, view_id: str, values: Mapping[str, Submitted]
    ) -> dict[str, Any]: ...

    async def close_view_as(self, user_id: str, view_id: str) -> None: ...

    def post_alert(self) -> str: ...

    async def fire_alert(self) -> dict[str, Any]: ...


class PageRoutes:
    """``/``, ``/static/``, ``/ui/…`` and their guard (:meth:`guard`, a middleware)."""

    def __init__(self, backend: PageBackend, hub: StreamHub, *, loopback: bool) -> None:
        self._backend = backend
        self._hub = hub
        self._loopback = loopback

    def add_to(self, app: web.Application) -> None:
        app.router.add_get("/", self._index)
        app.router.add_static("/static/", STATIC_DIR, follow_symlinks=False)
        app.router.add_get("/ui/info", self._ui_info)
        app.router.add_get("/ui/state", self._ui_state)
        app.router.add_get("/ui/stream", self._ui_stream)
        app.router.add_post("/ui/post", self._ui_post)
        app.router.add_post("/ui/click", self._ui_click)
        app.router.add_post("/ui/shortcut", self._ui_shortcut)  # shortcut.js
        app.router.add_post("/ui/view/submit", self._ui_view_submit)  # modal.js
        app.router.add_post("/ui/view/close", self._ui_view_close)  # modal.js
        app.router.add_post("/ui/alert", self._ui_alert)  # alerts.js: Alertmanager's Slack post
        app.router.add_post("/ui/fire-alert", self._ui_fire_alert)  # alerts.js: its webhook

    @web.middleware
    async def guard(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        """Page routes: a loopback Host when bound to loopback; POSTs JSON from this origin."""
        path = request.path
        if path == "/" or path.startswith(("/ui/", "/static/")):
            if self._loopback and (request.url.host or "") not in _LOOPBACK_NAMES:
                return json_response({"ok": False, "error": "forbidden_host"}, status=403)
            if request.method == "POST":
                origin = request.headers.get("Origin")
                if origin is not None and (URL(origin).host or "") != request.url.host:
                    return json_response({"ok": False, "error": "forbidden_origin"}, status=403)
                if request.content_type != "application/json":
                    return json_response({"ok": False, "error": "json_only"}, status=415)
        try:
            return await handler(request)
        except EmulatorError as exc:
            return json_response({"ok": False, "error": exc.code}, status=exc.status)

    async def _index(self, request: web.Request) -> web.FileResponse:
        return web.FileResponse(STATIC_DIR / "index.html")

    async def _ui_info(self, request: web.Request) -> web.Response:
        return json_response(self._backend.info())

    async def _ui_state(self, request: web.Request) -> web.Response:
        user = request.query.get("user") or None
        if user is not None:
            self._backend.user(user)
        return json_response(self._backend.state(user))

    async def _ui_stream(self, request: web.Request) -> web.StreamResponse:
        user = request.query.get("user") or None
        if user is not None:
            self._backend.user(user)
        if len(self._hub) >= MAX_STREAM_CLIENTS:
            return json_response({"ok": False, "error": "too_many_streams"}, status=503)
        snapshot = html_safe_json(self._backend.state(user))
        return await self._hub.serve(request, user, snapshot)

    async def _json_body(self, request: web.Request) -> dict[str, Any]:
        body = await json_object(request)
        if body is None:
            raise EmulatorError("invalid_json")
        return body

    async def _ui_post(self, request: web.Request) -> web.Response:
        body = await self._json_body(request)
        user, text, thread_ts = body.get("user"), body.get("text"), body.get("thread_ts")
        if not isinstance(user, str) or not isinstance(text, str):
            raise EmulatorError("invalid_arguments")
        if thread_ts is not None and not isinstance(thread_ts, str):
            raise EmulatorError("invalid_arguments")
        if len(text) > MAX_MESSAGE_TEXT:
            raise EmulatorError("msg_too_long")
        ts = await self._backend.post_as(user, text, thread_ts or None)
        return json_response({"ok": True, "channel": self._backend.channel_id, "ts": ts})

    async def _ui_click(self, request: web.Request) -> web.Response:
        body = await self._json_body(request)
        fields = ("user", "channel", "message_ts", "action_id", "value")
        values = [body.get(name) for name in fields]
        if not all(isinstance(v, str) for v in values):
            raise EmulatorError("invalid_arguments")
        user, channel, message_ts, action_id, value = (str(v) for v in values)
        status = await self._backend.click_as(user, channel, message_ts, action_id, value)
        return json_response({"ok": True, "status": status})

    async def _ui_shortcut(self, request: web.Request) -> web.Response:
        body = await self._json_body(request)
        values = [body.get(name) for name in ("user", "channel", "message_ts", "callback_id")]
        if not all(isinstance(v, str) and v for v in values):
            raise EmulatorError("invalid_arguments")
        user, channel, message_ts, callback_id = (str(v) for v in values)
        status = await self._backend.shortcut_as(user, channel, message_ts, callback_id)
        return json_response({"ok": True, "status": status})

    async def _ui_view_submit(self, request: web.Request) -> web.Response:
        body = await self._json_body(request)
        user, view_id, values = body.get("user"), body.get("view_id"), body.get("values")
        if not isinstance(user, str) or not isinstance(view_id, str) or not view_id:
            raise EmulatorError("invalid_arguments")
        if not isinstance(values, dict) or len(values) > MAX_VIEW_INPUTS:
            raise EmulatorError("invalid_arguments")
        for value in values.values():
            items = value if isinstance(value, list) else [value]
            if len(items) > MAX_VIEW_INPUTS or not all(
                v is None or (isinstance(v, str) and len(v) <= MAX_MESSAGE_TEXT) for v in items
            ):
                raise EmulatorError("invalid_arguments")
        result = await self._backend.submit_view_as(user, view_id, values)
        return json_response({"ok": True, **result})

    async def _ui_view_close(self, request: web.Request) -> web.Response:
        body = await self._json_body(request)
        user, view_id = body.get("user"), body.get("view_id")
        if not isinstance(user, str) or not isinstance(view_id, str) or not view_id:
            raise EmulatorError("invalid_arguments")
        await self._backend.close_view_as(user, view_id)
        return json_response({"ok": True})

    async def _ui_alert(self, request: web.Request) -> web.Response:
        await self._json_body(request)
        return json_response({"ok": True, "ts": self._backend.post_alert()})

    async def _ui_fire_alert(self, request: web.Request) -> web.Response:
        await self._json_body(request)
        return json_response({"ok": True, **await self._backend.fire_alert()})


__all__ = [
    "MAX_STREAM_CLIENTS",
    "STATIC_DIR",
    "STREAM_QUEUE",
    "EmulatorError",
    "PageBackend",
    "PageRoutes",
    "StreamHub",
    "html_safe_json",
    "is_loopback",
    "json_response",
    "security_headers",
    "ui_ephemeral",
]

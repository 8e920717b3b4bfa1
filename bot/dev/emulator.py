"""The local Slack emulator: the fake Web API, Events API delivery to the bot, and a web page.

:class:`Emulator` is :class:`~bot.slack.fake.FakeSlack` (every Web API method answers exactly as
there) plus Slack's other direction and a page for people, all on one aiohttp server::

    emulator = Emulator(signing_secret=secret, users=[DevUser("UALICE", "alice", "requester")])
    await emulator.start()                       # page_url, api_url (SLACK_API_URL for the bot)
    emulator.bot_url = "http://127.0.0.1:4000/slack/events"
    ts = await emulator.post_as("UALICE", "@opsloop is web down?")
    status = await emulator.click_as("UBOB", "C0INCIDENT", card_ts, "opsloop_approve", value)

**Events** go out as Slack sends them: an ``event_callback`` JSON envelope, signed v0 with the
signing secret (``X-Slack-Request-Timestamp``, ``X-Slack-Signature``). A message mentioning the
bot goes out twice, as ``app_mention`` and as ``message`` (two event ids, same channel and ts),
each delivery on its own. The bot has :data:`ACK_TIMEOUT_S` (3 s) to answer 2xx; a timeout, a
connection failure or any other status is retried up to :data:`MAX_RETRIES` times with
``X-Slack-Retry-Num`` (1..3) and ``X-Slack-Retry-Reason`` (``http_timeout``,
``connection_failed`` or ``http_error``), the same ``event_id`` and a fresh signature; an answer
carrying ``X-Slack-No-Retry: 1`` stops the retries. Slack waits about a minute and then five
minutes between retries; the emulator waits :data:`RETRY_DELAYS_S` (1 s, 2 s, 4 s) so local
development does not stall. The bot's own posts are not echoed back to it as ``message`` events
(Slack would send them; bolt drops them as self events anyway).

**Clicks** go out as ``block_actions``: form-encoded ``payload=<json>``, signed, with the clicker,
the clicked message as it is now, the button (``action_id``, ``block_id``, ``value``, ``text``)
and a ``response_url`` on this server that handles ``replace_original``, ``delete_original``,
``response_type: in_channel`` and (the default) an ephemeral reply to the clicker, valid for
30 minutes and 5 uses, as Slack's are. Slack does not retry interactivity requests, nor does
the emulator: :meth:`Emulator.click_as` returns the bot's status, or :data:`NO_ANSWER` (0) when
it did not answer within 3 s.

**The page** (``bot/dev/static``: plain HTML, JS and CSS) is served at ``/`` and talks to
``/ui/…`` JSON endpoints (``info``, ``state?user=``, ``post``, ``click``) and a server-sent
event stream ``/ui/stream?user=U…`` whose first event is a ``snapshot`` of the state and the
rest are changes in the order they happened (``message``, ``update``, ``delete``,
``reaction``, ``ephemeral``, ``status``, ``delivery``). Ephemeral messages are scoped **on the
server**: a stream or a state snapshot only ever holds the ephemerals of the user it was
opened for. ``?user=U…`` and ``?thread=TS`` on the page's URL pick the user and open a
thread. The page's endpoints answer only requests addressed to a loopback host name when the
server is bound to loopback (no DNS rebinding), and their POSTs must be JSON (a cross-site
form cannot send that without a CORS preflight, which is never granted). All JSON the page
reads escapes ``<``, ``>`` and ``&``; nothing is rendered to HTML on the server.

An assistant thread status (``assistant.threads.setStatus``) clears itself when the app posts
in the thread or after two minutes, as Slack's does. While ``bot_url`` is None messages are
stored and shown, and nothing is delivered.

Everything is bounded: message text, messages, ephemerals and recorded calls kept, stream
clients and their queues (a client that falls behind is dropped; its ``EventSource``
reconnects and gets a fresh snapshot), deliveries in flight and their retries.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import json
import logging
import re
import secrets
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlencode

import aiohttp
from aiohttp import web
from yarl import URL

from bot.slack.fake import (
    BOT_ID,
    BOT_NAME,
    BOT_USER_ID,
    MAX_MESSAGE_TEXT,
    TEAM_ID,
    Call,
    Ephemeral,
    FakeSlack,
    Message,
    Params,
    Reply,
    block_errors,
)

log = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).with_name("static")

APP_ID = "A0OPSLOOP"
TEAM_DOMAIN = "opsloop-dev"
VERIFICATION_TOKEN = "dev-verification-token"  # the deprecated body token Slack still sends
USER_AGENT = "Slackbot 1.0 (+https://api.slack.com/robots)"

ACK_TIMEOUT_S = 3.0
MAX_RETRIES = 3
RETRY_DELAYS_S: tuple[float, ...] = (1.0, 2.0, 4.0)  # Slack: ~immediately, 1 min, 5 min
NO_ANSWER = 0  # the status recorded (and returned by click_as) when the bot did not answer

MAX_MESSAGES = 1_000  # the oldest are dropped beyond this (a `delete` event tells the page)
MAX_EPHEMERALS = 500
MAX_CALLS = 2_000  # Web API calls remembered in `calls`
MAX_DELIVERIES = 1_000  # delivery attempts remembered in `deliveries`
MAX_IN_FLIGHT = 200  # event deliveries (with their retries) running at once
MAX_STREAM_CLIENTS = 16
STREAM_QUEUE = 256  # events a stream client may lag behind before it is dropped (frames are
# shared between clients, so this also bounds the memory held for slow ones)
KEEPALIVE_S = 15.0
RECONNECT_MS = 1_000  # how soon a dropped page reconnects (the SSE `retry` field)
MAX_RESPONSE_URLS = 1_000
RESPONSE_URL_TTL_S = 30 * 60
RESPONSE_URL_USES = 5
MAX_BODY_BYTES = 1024 * 1024
MAX_ANSWER_BYTES = 64 * 1024  # of the bot's answer to an event, read and discarded
SHUTDOWN_TIMEOUT_S = 2.0
STATUS_TTL_S = 120.0  # an assistant thread status clears itself after 2 minutes

_USER_ID = re.compile(r"[UW][A-Z0-9]{2,}")
_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,79}")
_LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
_EDIT_METHODS = frozenset({"chat.update", "chat.appendStream", "chat.stopStream"})


@dataclass(frozen=True)
class DevUser:
    """A person the page can act as."""

    id: str  # e.g. "UALICE"
    name: str  # "alice"
    role: str  # shown in the switcher, e.g. "requester", "approver", "stranger"


@dataclass(frozen=True)
class Delivery:
    """One attempt at sending the bot an event or a click."""

    kind: Literal["event", "click"]
    type: str  # "app_mention", "message" or "block_actions"
    event_id: str | None  # events only; the same across retries
    ts: str  # the message the event is about, or the clicked one
    attempt: int  # 0 for the first, then the X-Slack-Retry-Num sent
    status: int  # the bot's HTTP status, NO_ANSWER without one
    reason: str | None  # why it failed: http_timeout, connection_failed, http_error

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


@dataclass(eq=False)  # held in a set, by identity
class _Client:
    user: str | None
    queue: asyncio.Queue[bytes | None]


@dataclass
class _ResponseUrl:
    channel: str
    message_ts: str
    thread_ts: str | None
    user: str
    expires: float
    uses: int = 0


class EmulatorError(ValueError):
    """A page request the emulator refuses; ``code`` is Slack-like (``no_text``, …)."""

    def __init__(self, code: str, status: int = 400) -> None:
        super().__init__(code)
        self.code = code
        self.status = status


def sign(body: bytes, secret: str, timestamp: int) -> dict[str, str]:
    """Slack's v0 signature headers: HMAC-SHA256 of ``v0:{timestamp}:{body}``."""
    base = b"v0:" + str(timestamp).encode() + b":" + body
    digest = hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": str(timestamp), "X-Slack-Signature": f"v0={digest}"}


def html_safe_json(value: object) -> str:
    """JSON with ``<``, ``>`` and ``&`` as ``\\u`` escapes: never markup, whatever it holds."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _json_response(value: object, status: int = 200) -> web.Response:
    return web.Response(text=html_safe_json(value), status=status, content_type="application/json")


def _slack_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _slack_unescape(text: str) -> str:
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def _new_event_id() -> str:
    return "Ev" + uuid.uuid4().hex[:10].upper()


def _is_loopback(host: str) -> bool:
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Emulator(FakeSlack):
    """The fake Slack Web API plus event delivery, clicks, ``response_url`` and the page.

    ``bot_url`` (settable at any time) is where events and clicks go; while it is None,
    messages are stored and shown but nothing is delivered. ``ack_timeout`` and
    ``retry_delays`` may be changed (tests shorten them); at most :data:`MAX_RETRIES` retries
    are made whatever ``retry_delays`` holds.
    """

    def __init__(
        self,
        *,
        signing_secret: str,
        users: Sequence[DevUser],
        channel_id: str = "C0INCIDENT",
        channel_name: str = "incident",
        model_label: str = "demo model",
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        super().__init__(host=host)
        if not signing_secret:
            raise ValueError("the signing secret must not be empty")
        seen: set[str] = set()
        for user in users:
            if not _USER_ID.fullmatch(user.id) or user.id == BOT_USER_ID:
                raise ValueError(f"bad user id {user.id!r}: U followed by capitals or digits")
            if not _NAME.fullmatch(user.name) or user.name == BOT_NAME:
                raise ValueError(f"bad user name {user.name!r}: lower case, digits, . _ -")
            if user.id in seen or user.name in seen:
                raise ValueError(f"user {user.id} / {user.name} given twice")
            seen |= {user.id, user.name}
        self.signing_secret = signing_secret
        self.users: tuple[DevUser, ...] = tuple(users)
        self.channel_id = channel_id
        self.channel_name = channel_name
        self.model_label = model_label
        self.bot_url: str | None = None
        self.ack_timeout: float = ACK_TIMEOUT_S
        self.retry_delays: tuple[float, ...] = RETRY_DELAYS_S
        self.deliveries: deque[Delivery] = deque(maxlen=MAX_DELIVERIES)
        self._port_wanted = port
        self._loopback = _is_loopback(host)
        self._by_id = {u.id: u for u in self.users}
        self._ids_by_name = {u.name: u.id for u in self.users} | {BOT_NAME: BOT_USER_ID}
        names = sorted(self._ids_by_name, key=len, reverse=True)
        self._typed = re.compile(
            r"<@(?P<id>[UW][A-Z0-9]+)(?:\|[^<>]*)?>"
            r"|(?<![\w@.])@(?P<name>" + "|".join(map(re.escape, names)) + r")(?![\w-])",
            re.IGNORECASE,
        )
        self._mention = re.compile(rf"<@{BOT_USER_ID}(?:\|[^<>]*)?>")
        self._seq = 0
        self._clients: set[_Client] = set()
        self._streamed: set[tuple[str, str]] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._response_urls: dict[str, _ResponseUrl] = {}
        self._status_timers: dict[tuple[str, str], asyncio.TimerHandle] = {}
        self._session: aiohttp.ClientSession | None = None

    # ---- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Serve the Web API, ``response_url``, the page and its endpoints on host:port."""
        app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[self._guard])
        app.on_response_prepare.append(_security_headers)
        app.router.add_route("*", "/api/{method}", self._handle)
        app.router.add_post("/actions/{token}", self._response_url)
        app.router.add_get("/", self._index)
        app.router.add_static("/static/", STATIC_DIR, follow_symlinks=False)
        app.router.add_get("/ui/info", self._ui_info)
        app.router.add_get("/ui/state", self._ui_state)
        app.router.add_get("/ui/stream", self._ui_stream)
        app.router.add_post("/ui/post", self._ui_post)
        app.router.add_post("/ui/click", self._ui_click)
        self._session = aiohttp.ClientSession(headers={"User-Agent": USER_AGENT}, trust_env=False)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=SHUTDOWN_TIMEOUT_S)
        await runner.setup()
        try:
            await web.TCPSite(runner, self._host, self._port_wanted).start()
        except OSError:
            await runner.cleanup()
            await self._session.close()
            raise
        self._runner = runner
        self._port = runner.addresses[0][1]

    async def stop(self) -> None:
        """Cancel deliveries, end the streams, close everything (idempotent)."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for client in list(self._clients):
            self._drop(client)
        for timer in self._status_timers.values():
            timer.cancel()
        self._status_timers.clear()
        if self._session is not None:
            await self._session.close()
            self._session = None
        await super().stop()

    @property
    def page_url(self) -> str:
        """The page, e.g. ``http://127.0.0.1:3000/``."""
        if self._port is None:
            raise RuntimeError("the emulator is not started")
        host = "127.0.0.1" if self._host in ("0.0.0.0", "::", "") else self._host
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self._port}/"

    async def idle(self) -> None:
        """Return once no event delivery (retries included) is in flight."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    # ---- people ----------------------------------------------------------------------------

    def user(self, user_id: str) -> DevUser:
        """The dev user with that id; :class:`EmulatorError` ``user_not_found`` otherwise."""
        try:
            return self._by_id[user_id]
        except KeyError:
            raise EmulatorError("user_not_found") from None

    def compose(self, typed: str) -> str:
        """What Slack's client sends for ``typed``: ``&``, ``<``, ``>`` escaped, and ``@name``
        (a dev user or ``@opsloop``) and an already written ``<@U…>`` of a known id as mentions.
        """
        parts: list[str] = []
        pos = 0
        for match in self._typed.finditer(typed):
            parts.append(_slack_escape(typed[pos : match.start()]))
            if match.group("name"):
                parts.append(f"<@{self._ids_by_name[match.group('name').lower()]}>")
            elif match.group("id") in self._by_id or match.group("id") == BOT_USER_ID:
                parts.append(f"<@{match.group('id')}>")
            else:
                parts.append(_slack_escape(match.group(0)))
            pos = match.end()
        parts.append(_slack_escape(typed[pos:]))
        return "".join(parts)

    def mentions_bot(self, text: str) -> bool:
        return self._mention.search(text) is not None

    # ---- what a person does ----------------------------------------------------------------

    async def post_as(self, user_id: str, text: str, thread_ts: str | None = None) -> str:
        """Post ``text`` (as typed: see :meth:`compose`) in the channel, or in the thread of
        ``thread_ts``, as ``user_id``; deliver it to the bot; return the new message's ts.

        Raises :class:`EmulatorError` (``user_not_found``, ``no_text``, ``msg_too_long``,
        ``thread_not_found``, ``too_many_deliveries``).
        """
        self.user(user_id)
        composed = self.compose(text)
        if not composed.strip():
            raise EmulatorError("no_text")
        if len(composed) > MAX_MESSAGE_TEXT:
            raise EmulatorError("msg_too_long")
        channel = self.channel_id
        parent: Message | None = None
        if thread_ts:
            held = self._state.messages.get((channel, thread_ts))
            if held is None:
                raise EmulatorError("thread_not_found")
            parent = self._state.messages.get((channel, held.thread_ts or held.ts), held)
        mention = self.mentions_bot(composed)
        if self.bot_url is not None and len(self._tasks) + 2 > MAX_IN_FLIGHT:
            raise EmulatorError("too_many_deliveries", status=503)
        ts = self.add_message(channel, None, user_id, composed, parent.ts if parent else None)
        stored = self._state.messages[(channel, ts)]
        stored.blocks = [_rich_text(composed)]
        self._publish("message", self._ui_message(stored))
        self._evict()
        events = []
        base = self._human_event(stored, parent)
        if mention:
            events.append({k: v for k, v in base.items() if k != "channel_type"})
            events[0]["type"] = "app_mention"
        events.append(base)
        if self.bot_url is not None:  # no bot yet: the message is only shown
            for event in events:
                self._spawn(self._deliver_event(event))
        async with self._changed:
            self._changed.notify_all()
        return ts

    async def click_as(
        self, user_id: str, channel: str, message_ts: str, action_id: str, value: str
    ) -> int:
        """Click the button ``action_id`` (with ``value``) of a message as ``user_id``; return
        the bot's HTTP status, :data:`NO_ANSWER` if it gave none within 3 s (or no ``bot_url``).

        Raises :class:`EmulatorError` ``user_not_found`` / ``message_not_found`` /
        ``button_not_found`` (404) when there is nothing to click.
        """
        user = self.user(user_id)
        held = self._state.messages.get((channel, message_ts))
        if held is None:
            raise EmulatorError("message_not_found", status=404)
        found = _find_button(held.blocks, action_id, value)
        if found is None:
            raise EmulatorError("button_not_found", status=404)
        block_id, button = found
        response_url = self._new_response_url(channel, held, user.id)
        container: dict[str, Any] = {
            "type": "message",
            "message_ts": held.ts,
            "channel_id": channel,
            "is_ephemeral": False,
        }
        if held.thread_ts:
            container["thread_ts"] = held.thread_ts
        action: dict[str, Any] = {
            "type": "button",
            "action_id": action_id,
            "block_id": block_id,
            "text": dict(button.get("text") or {"type": "plain_text", "text": ""}),
            "value": value,
            "action_ts": f"{time.time():.6f}",
        }
        if button.get("style"):
            action["style"] = button["style"]
        payload: dict[str, Any] = {
            "type": "block_actions",
            "user": {"id": user.id, "username": user.name, "name": user.name, "team_id": TEAM_ID},
            "api_app_id": APP_ID,
            "token": VERIFICATION_TOKEN,
            "container": container,
            "trigger_id": f"{int(time.time())}.{secrets.randbelow(10**12)}.{uuid.uuid4().hex}",
            "team": {"id": TEAM_ID, "domain": TEAM_DOMAIN},
            "enterprise": None,
            "is_enterprise_install": False,
            "channel": {"id": channel, "name": self._channel_name(channel)},
            "message": held.as_slack(),
            "state": {"values": {}},
            "response_url": response_url,
            "actions": [action],
        }
        body = urlencode({"payload": json.dumps(payload)}).encode()
        headers = {"Content-Type": "application/x-www-form-urlencoded"}
        status, reason, _ = await self._send(body, headers)
        self._record(Delivery("click", "block_actions", None, held.ts, 0, status, reason))
        async with self._changed:
            self._changed.notify_all()
        return status

    # ---- the page's view of the state ------------------------------------------------------

    def info(self) -> dict[str, Any]:
        """Channel, bot, users and model label, as ``/ui/info`` serves them."""
        return {
            "channel": {"id": self.channel_id, "name": self.channel_name},
            "bot": {"id": BOT_USER_ID, "name": BOT_NAME, "bot_id": BOT_ID},
            "users": [{"id": u.id, "name": u.name, "role": u.role} for u in self.users],
            "model_label": self.model_label,
        }

    def state(self, user_id: str | None = None) -> dict[str, Any]:
        """The channel as the page shows it to ``user_id``: messages with their reactions,
        assistant statuses, and only that user's ephemerals (none without a user)."""
        channel = self.channel_id
        ephemerals = self.ephemerals(channel, user_id) if user_id else []
        statuses = [
            {"channel": c, "thread_ts": t, "status": s}
            for (c, t), s in self._state.statuses.items()
            if c == channel and s
        ]
        return {
            "seq": self._seq,
            "channel": {"id": channel, "name": self.channel_name},
            "messages": [self._ui_message(m) for m in self.messages(channel)],
            "ephemerals": [_ui_ephemeral(e) for e in ephemerals],
            "statuses": statuses,
        }

    def _ui_message(self, message: Message) -> dict[str, Any]:
        out = message.as_slack()
        key = (message.channel, message.ts)
        out.update(
            channel=message.channel,
            streaming=message.streaming,
            streamed=key in self._streamed,
            reactions=[
                {"name": name, "users": [BOT_USER_ID], "count": 1}
                for name in self._state.reactions.get(key, [])
            ],
        )
        return out

    def _channel_name(self, channel: str) -> str:
        return self.channel_name if channel == self.channel_id else channel.lower()

    # ---- Web API hook: every change the bot makes reaches the page ---------------------------

    def _answer(
        self, method: str, params: Params, token: str | None
    ) -> tuple[int, dict[str, str], Reply]:
        status, headers, body = super()._answer(method, params, token)
        if status == 200 and body.get("ok"):
            self._changed_by(method, params, body)
        if len(self.calls) > MAX_CALLS:
            del self.calls[: len(self.calls) - MAX_CALLS]
        return status, headers, body

    def _changed_by(self, method: str, params: Params, body: Reply) -> None:
        if method in ("chat.postMessage", "chat.startStream"):
            key = (str(body["channel"]), str(body["ts"]))
            if method == "chat.startStream":
                self._streamed.add(key)
            message = self._state.messages[key]
            self._publish("message", self._ui_message(message))
            if message.thread_ts:  # Slack clears the assistant status when the app replies
                self._show_status(message.channel, message.thread_ts, "")
            self._evict()
        elif method in _EDIT_METHODS:
            key = (str(body["channel"]), str(body["ts"]))
            self._publish("update", self._ui_message(self._state.messages[key]))
        elif method == "chat.postEphemeral":
            self._published_ephemeral(self._state.ephemerals[-1])
        elif method == "reactions.add":
            channel, ts = str(params["channel"]), str(params["timestamp"])
            self._publish(
                "reaction",
                {
                    "channel": channel,
                    "ts": ts,
                    "name": params["name"],
                    "user": BOT_USER_ID,
                    "reactions": self.reactions(channel, ts),
                },
            )
        elif method == "assistant.threads.setStatus":
            channel, thread_ts = str(params["channel_id"]), str(params["thread_ts"])
            status = self._state.statuses.get((channel, thread_ts), "")
            self._show_status(channel, thread_ts, status, told=True)

    def _show_status(
        self, channel: str, thread_ts: str, status: str, *, told: bool = False
    ) -> None:
        """An assistant thread status, cleared after STATUS_TTL_S as Slack does; the page
        hears of it when it was set (``told``) or when what it shows changes."""
        key = (channel, thread_ts)
        timer = self._status_timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        shown = bool(self._state.statuses.get(key))
        if status:
            self._state.statuses[key] = status
            loop = asyncio.get_running_loop()
            self._status_timers[key] = loop.call_later(
                STATUS_TTL_S, self._show_status, channel, thread_ts, ""
            )
        else:
            self._state.statuses.pop(key, None)
        if told or status or shown:
            self._publish("status", {"channel": channel, "thread_ts": thread_ts, "status": status})

    def _published_ephemeral(self, ephemeral: Ephemeral) -> None:
        ephemerals = self._state.ephemerals
        if len(ephemerals) > MAX_EPHEMERALS:
            del ephemerals[: len(ephemerals) - MAX_EPHEMERALS]
        self._publish("ephemeral", _ui_ephemeral(ephemeral), audience=ephemeral.user)

    def _next_ts(self) -> str:
        # Wall-clock timestamps (the page shows times), strictly increasing.
        self._clock_us = max(self._clock_us + 1, time.time_ns() // 1_000)
        return f"{self._clock_us // 1_000_000}.{self._clock_us % 1_000_000:06d}"

    def _evict(self) -> None:
        held = self._state.messages
        if len(held) <= MAX_MESSAGES:
            return
        oldest = sorted(held, key=lambda key: _ts_order(key[1]))[: len(held) - MAX_MESSAGES]
        for channel, ts in oldest:
            del held[(channel, ts)]
            self._state.reactions.pop((channel, ts), None)
            self._state.statuses.pop((channel, ts), None)
            timer = self._status_timers.pop((channel, ts), None)
            if timer is not None:
                timer.cancel()
            self._streamed.discard((channel, ts))
            self._publish("delete", {"channel": channel, "ts": ts})

    # ---- the event stream ------------------------------------------------------------------

    def _publish(self, kind: str, data: Mapping[str, Any], audience: str | None = None) -> None:
        """Send an event to every stream client (only ``audience``'s, if given), in order."""
        self._seq += 1
        frame = f"id: {self._seq}\nevent: {kind}\ndata: {html_safe_json(data)}\n\n".encode()
        for client in list(self._clients):
            if audience is not None and client.user != audience:
                continue
            try:
                client.queue.put_nowait(frame)
            except asyncio.QueueFull:
                log.info("dropping a page stream that fell %d events behind", STREAM_QUEUE)
                self._drop(client)

    def _drop(self, client: _Client) -> None:
        self._clients.discard(client)
        while not client.queue.empty():
            client.queue.get_nowait()
        client.queue.put_nowait(None)

    async def _ui_stream(self, request: web.Request) -> web.StreamResponse:
        user = request.query.get("user") or None
        if user is not None:
            self.user(user)
        if len(self._clients) >= MAX_STREAM_CLIENTS:
            return _json_response({"ok": False, "error": "too_many_streams"}, status=503)
        snapshot = html_safe_json(self.state(user))
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
            head = f"retry: {RECONNECT_MS}\nid: {self._seq}\nevent: snapshot\n"
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

    # ---- delivery to the bot ---------------------------------------------------------------

    def _human_event(self, message: Message, parent: Message | None) -> dict[str, Any]:
        event: dict[str, Any] = {
            "type": "message",
            "user": message.user,
            "text": message.text,
            "ts": message.ts,
            "channel": message.channel,
            "event_ts": message.ts,
            "channel_type": "channel",
            "team": TEAM_ID,
            "client_msg_id": str(uuid.uuid4()),
            "blocks": message.blocks,
        }
        if parent is not None:
            event["thread_ts"] = parent.ts
            event["parent_user_id"] = parent.user
        return event

    def _envelope(self, event: Mapping[str, Any], event_id: str) -> dict[str, Any]:
        return {
            "token": VERIFICATION_TOKEN,
            "team_id": TEAM_ID,
            "api_app_id": APP_ID,
            "event": dict(event),
            "type": "event_callback",
            "event_id": event_id,
            "event_time": int(time.time()),
            "authorizations": [
                {
                    "enterprise_id": None,
                    "team_id": TEAM_ID,
                    "user_id": BOT_USER_ID,
                    "is_bot": True,
                    "is_enterprise_install": False,
                }
            ],
            "is_ext_shared_channel": False,
            "event_context": "4-" + uuid.uuid4().hex,
        }

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _deliver_event(self, event: Mapping[str, Any]) -> None:
        """Deliver one event, retrying as Slack does (bounded) until the bot answers 2xx."""
        event_id = _new_event_id()
        body = json.dumps(self._envelope(event, event_id)).encode()
        reason: str | None = None
        delays = (0.0, *self.retry_delays[:MAX_RETRIES])
        for attempt, delay in enumerate(delays):
            if delay > 0:
                await asyncio.sleep(delay)
            headers = {"Content-Type": "application/json"}
            if attempt:
                headers["X-Slack-Retry-Num"] = str(attempt)
                headers["X-Slack-Retry-Reason"] = reason or "http_error"
            status, reason, no_retry = await self._send(body, headers)
            delivery = Delivery(
                "event", event["type"], event_id, event["ts"], attempt, status, reason
            )
            self._record(delivery)
            async with self._changed:
                self._changed.notify_all()
            if delivery.ok or no_retry or self.bot_url is None:
                return

    async def _send(self, body: bytes, headers: Mapping[str, str]) -> tuple[int, str | None, bool]:
        """POST to the bot, signed now: (status, failure reason, X-Slack-No-Retry)."""
        url, session = self.bot_url, self._session
        if url is None or session is None:
            return NO_ANSWER, "no_bot_url", False
        signed = {**headers, **sign(body, self.signing_secret, int(time.time()))}
        try:
            async with asyncio.timeout(self.ack_timeout):
                async with session.post(
                    url, data=body, headers=signed, allow_redirects=False
                ) as response:
                    await response.content.read(MAX_ANSWER_BYTES)
                    no_retry = response.headers.get("X-Slack-No-Retry") == "1"
                    ok = 200 <= response.status < 300
                    return response.status, None if ok else "http_error", no_retry
        except TimeoutError:
            return NO_ANSWER, "http_timeout", False
        except aiohttp.ClientConnectorError:
            return NO_ANSWER, "connection_failed", False
        except (aiohttp.ClientError, OSError):
            return NO_ANSWER, "http_error", False

    def _record(self, delivery: Delivery) -> None:
        self.deliveries.append(delivery)
        retries = min(len(self.retry_delays), MAX_RETRIES) if delivery.kind == "event" else 0
        data = {
            "kind": delivery.kind,
            "type": delivery.type,
            "event_id": delivery.event_id,
            "ts": delivery.ts,
            "attempt": delivery.attempt,
            "retries": retries,
            "status": delivery.status,
            "ok": delivery.ok,
            "reason": delivery.reason,
        }
        self._publish("delivery", data)

    # ---- response_url ----------------------------------------------------------------------

    def _new_response_url(self, channel: str, message: Message, user: str) -> str:
        now = time.monotonic()
        urls = self._response_urls
        for token in [t for t, u in urls.items() if u.expires <= now]:
            del urls[token]
        while len(urls) >= MAX_RESPONSE_URLS:
            del urls[next(iter(urls))]
        token = secrets.token_urlsafe(18)
        urls[token] = _ResponseUrl(
            channel, message.ts, message.thread_ts, user, now + RESPONSE_URL_TTL_S
        )
        return str(URL(self.api_url).with_path(f"/actions/{token}"))

    async def _response_url(self, request: web.Request) -> web.Response:
        target = self._response_urls.get(request.match_info["token"])
        if target is None or target.expires <= time.monotonic():
            return web.json_response({"ok": False, "error": "expired_url"}, status=404)
        if target.uses >= RESPONSE_URL_USES:
            return web.json_response({"ok": False, "error": "used_url"}, status=404)
        try:
            params = await request.json()
        except ValueError:
            return web.json_response({"ok": False, "error": "invalid_payload"}, status=400)
        if not isinstance(params, dict):
            return web.json_response({"ok": False, "error": "invalid_payload"}, status=400)
        self.calls.append(Call("response_url", params))
        try:
            self._respond(target, params)
        except EmulatorError as exc:
            return web.json_response({"ok": False, "error": exc.code}, status=exc.status)
        finally:
            async with self._changed:
                self._changed.notify_all()
        target.uses += 1
        return web.json_response({"ok": True})

    def _respond(self, target: _ResponseUrl, params: Params) -> None:
        key = (target.channel, target.message_ts)
        if params.get("delete_original") in (True, "true"):
            if self._state.messages.pop(key, None) is not None:
                self._publish("delete", {"channel": target.channel, "ts": target.message_ts})
            return
        text = str(params.get("text") or "")
        blocks = params.get("blocks")
        if len(text) > MAX_MESSAGE_TEXT:
            raise EmulatorError("msg_too_long")
        if blocks is not None and block_errors(blocks):
            raise EmulatorError("invalid_blocks")
        if not text and not blocks:
            raise EmulatorError("no_text")
        thread_ts = target.thread_ts
        if params.get("replace_original") in (True, "true"):
            held = self._state.messages.get(key)
            if held is None:
                raise EmulatorError("message_not_found", status=404)
            held.text, held.blocks, held.edited = text, blocks or None, True
            self._publish("update", self._ui_message(held))
        elif params.get("response_type") == "in_channel":
            ts = self._next_ts()
            thread_ts = params.get("thread_ts") or thread_ts
            self._state.messages[(target.channel, ts)] = Message(
                target.channel, ts, text, BOT_USER_ID, BOT_ID, thread_ts, blocks
            )
            self._publish("message", self._ui_message(self._state.messages[(target.channel, ts)]))
            self._evict()
        else:
            ts = self._next_ts()
            ephemeral = Ephemeral(target.channel, target.user, ts, text, thread_ts, blocks)
            self._state.ephemerals.append(ephemeral)
            self._published_ephemeral(ephemeral)

    # ---- the page's endpoints --------------------------------------------------------------

    @web.middleware
    async def _guard(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        """Page routes: a loopback Host when bound to loopback; POSTs JSON from this origin."""
        path = request.path
        if path == "/" or path.startswith(("/ui/", "/static/")):
            if self._loopback and (request.url.host or "") not in _LOOPBACK_NAMES:
                return _json_response({"ok": False, "error": "forbidden_host"}, status=403)
            if request.method == "POST":
                origin = request.headers.get("Origin")
                if origin is not None and (URL(origin).host or "") != request.url.host:
                    return _json_response({"ok": False, "error": "forbidden_origin"}, status=403)
                if request.content_type != "application/json":
                    return _json_response({"ok": False, "error": "json_only"}, status=415)
        try:
            return await handler(request)
        except EmulatorError as exc:
            return _json_response({"ok": False, "error": exc.code}, status=exc.status)

    async def _index(self, request: web.Request) -> web.FileResponse:
        return web.FileResponse(STATIC_DIR / "index.html")

    async def _ui_info(self, request: web.Request) -> web.Response:
        return _json_response(self.info())

    async def _ui_state(self, request: web.Request) -> web.Response:
        user = request.query.get("user") or None
        if user is not None:
            self.user(user)
        return _json_response(self.state(user))

    async def _json_body(self, request: web.Request) -> dict[str, Any]:
        try:
            body = await request.json()
        except ValueError:
            raise EmulatorError("invalid_json") from None
        if not isinstance(body, dict):
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
        ts = await self.post_as(user, text, thread_ts or None)
        return _json_response({"ok": True, "channel": self.channel_id, "ts": ts})

    async def _ui_click(self, request: web.Request) -> web.Response:
        body = await self._json_body(request)
        fields = ("user", "channel", "message_ts", "action_id", "value")
        values = [body.get(name) for name in fields]
        if not all(isinstance(v, str) for v in values):
            raise EmulatorError("invalid_arguments")
        user, channel, message_ts, action_id, value = (str(v) for v in values)
        status = await self.click_as(user, channel, message_ts, action_id, value)
        return _json_response({"ok": True, "status": status})


async def _security_headers(request: web.Request, response: web.StreamResponse) -> None:
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    response.headers.setdefault("Referrer-Policy", "no-referrer")
    if request.path == "/" or request.path.startswith("/static/"):
        response.headers.setdefault(
            "Content-Security-Policy",
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
            "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        )


def _find_button(
    blocks: Sequence[Mapping[str, Any]] | None, action_id: str, value: str
) -> tuple[str, Mapping[str, Any]] | None:
    """The button with ``action_id`` and ``value`` in ``blocks``, with its block's id."""
    for index, block in enumerate(blocks or ()):
        elements = list(block.get("elements") or []) if block.get("type") == "actions" else []
        if isinstance(block.get("accessory"), Mapping):
            elements.append(block["accessory"])
        for element in elements:
            if not isinstance(element, Mapping) or element.get("type") != "button":
                continue
            if element.get("action_id") == action_id and str(element.get("value", "")) == value:
                block_id = (
                    block.get("block_id")
                    or hashlib.sha1(f"{index}".encode(), usedforsecurity=False).hexdigest()[:5]
                )
                return str(block_id), element
    return None


def _rich_text(text: str) -> dict[str, Any]:
    """The ``rich_text`` block Slack's client sends with a typed message."""
    elements: list[dict[str, Any]] = []
    pos = 0
    for match in re.finditer(r"<@([UW][A-Z0-9]+)>", text):
        if match.start() > pos:
            elements.append({"type": "text", "text": _slack_unescape(text[pos : match.start()])})
        elements.append({"type": "user", "user_id": match.group(1)})
        pos = match.end()
    if pos < len(text):
        elements.append({"type": "text", "text": _slack_unescape(text[pos:])})
    block_id = hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()[:5]
    return {
        "type": "rich_text",
        "block_id": block_id,
        "elements": [{"type": "rich_text_section", "elements": elements}],
    }


def _ts_order(ts: str) -> tuple[int, str]:
    seconds, _, micros = ts.partition(".")
    return (int(seconds) if seconds.isdigit() else 0, micros.ljust(6, "0"))


def _ui_ephemeral(ephemeral: Ephemeral) -> dict[str, Any]:
    return {
        "channel": ephemeral.channel,
        "user": ephemeral.user,
        "ts": ephemeral.message_ts,
        "thread_ts": ephemeral.thread_ts,
        "text": ephemeral.text,
        "blocks": ephemeral.blocks,
    }


__all__ = [
    "ACK_TIMEOUT_S",
    "MAX_RETRIES",
    "NO_ANSWER",
    "RETRY_DELAYS_S",
    "Delivery",
    "DevUser",
    "Emulator",
    "EmulatorError",
    "html_safe_json",
    "sign",
]

"""The local Slack emulator: the fake Web API and Slack's side of a workspace, on one server.

:class:`Emulator` is :class:`~bot.emulator.slack.FakeSlack` (every Web API method answers exactly as
there) plus Slack's other direction and a page for people, all on one aiohttp server::

    emulator = Emulator(signing_secret=secret, users=[DevUser("UALICE", "alice", "requester")])
    await emulator.start()                       # page_url, api_url (SLACK_API_URL for the bot)
    emulator.bot_url = "http://127.0.0.1:4000/slack/events"
    ts = await emulator.post_as("UALICE", "@opsloop is web down?")
    status = await emulator.click_as("UBOB", "C0INCIDENT", card_ts, "opsloop_approve", value)

The fake Web API knows the workspace's people and its channel by name, as Slack does:
``users.info`` answers each dev user's display name, ``conversations.info`` the channel's.

This module owns the workspace's state and when things happen; the parts live beside it:

- ``bot.dev.people``: the dev users and what Slack's client makes of typed text.
- ``bot.emulator.sender``: events and clicks as Slack sends them, signed, with the 3 s ack
  timeout and Slack's retries (``X-Slack-Retry-Num``, ``X-Slack-No-Retry``).
- ``bot.dev.page``: the page (``/``, ``/ui/…``), its guard and its server-sent event stream.

A message mentioning the bot goes out twice, as ``app_mention`` and as ``message`` (two event
ids, same channel and ts), each delivery on its own. The bot's own posts are not echoed back to
it as ``message`` events (Slack would send them; bolt drops them as self events anyway). A
click's ``response_url`` is served here and handles ``replace_original``,
``delete_original``, ``response_type: in_channel`` and (the default) an ephemeral reply to the
clicker, valid for 30 minutes and 5 uses, as Slack's are. :meth:`Emulator.click_as` returns
the bot's status, or :data:`NO_ANSWER` (0) when it did not answer within 3 s.

An assistant thread status (``assistant.threads.setStatus``) clears itself when the app posts
in the thread or after two minutes, as Slack's does. While ``bot_url`` is None messages are
stored and shown, and nothing is delivered.

Everything is bounded: message text, messages, ephemerals and recorded calls kept, stream
clients and their queues (``bot.dev.page``), deliveries in flight and their retries.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import deque
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web
from yarl import URL

from bot.dev.page import (
    STATIC_DIR,
    EmulatorError,
    PageRoutes,
    StreamHub,
    html_safe_json,
    is_loopback,
    security_headers,
    ui_ephemeral,
)
from bot.dev.pane import DevPane
from bot.dev.people import Composer, DevUser, rich_text
from bot.emulator.alert_posts import alertmanager_firing
from bot.emulator.sender import (
    ACK_TIMEOUT_S,
    MAX_RETRIES,
    NO_ANSWER,
    RETRY_DELAYS_S,
    USER_AGENT,
    Delivery,
    Sent,
    block_actions,
    deliver_event,
    find_button,
    find_feedback_value,
    form_body,
    human_event,
    message_action,
    post_signed,
    sign,
)
from bot.emulator.slack import (
    BOT_ID,
    BOT_NAME,
    BOT_USER_ID,
    MAX_MESSAGE_TEXT,
    Call,
    Ephemeral,
    FakeSlack,
    Message,
    Params,
    Reply,
    block_errors,
)

MAX_MESSAGES = 1_000  # the oldest are dropped beyond this (a `delete` event tells the page)
MAX_EPHEMERALS = 500
MAX_CALLS = 2_000  # Web API calls remembered in `calls`
MAX_DELIVERIES = 1_000  # delivery attempts remembered in `deliveries`
MAX_IN_FLIGHT = 200  # event deliveries (with their retries) running at once
MAX_RESPONSE_URLS = 1_000
RESPONSE_URL_TTL_S = 30 * 60
RESPONSE_URL_USES = 5
MAX_BODY_BYTES = 1024 * 1024
SHUTDOWN_TIMEOUT_S = 2.0
STATUS_TTL_S = 120.0  # an assistant thread status clears itself after 2 minutes

_EDIT_METHODS = frozenset({"chat.update", "chat.appendStream", "chat.stopStream"})
PANE_METHODS = frozenset(
    {"assistant.threads.setSuggestedPrompts", "assistant.threads.setTitle", "views.publish"}
)


@dataclass
class _ResponseUrl:
    channel: str
    message_ts: str
    thread_ts: str | None
    user: str
    expires: float
    uses: int = 0


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
        people = Composer(users)  # ValueError for a bad set, before anything starts
        super().__init__(
            host=host,
            users={u.id: u.name for u in people.users},
            channels={channel_id: channel_name},
        )
        if not signing_secret:
            raise ValueError("the signing secret must not be empty")
        self._people = people
        self.signing_secret = signing_secret
        self.people: tuple[DevUser, ...] = people.users
        self.channel_id = channel_id
        self.channel_name = channel_name
        self.model_label = model_label
        self.bot_url: str | None = None
        self.ack_timeout: float = ACK_TIMEOUT_S
        self.retry_delays: tuple[float, ...] = RETRY_DELAYS_S
        self.deliveries: deque[Delivery] = deque(maxlen=MAX_DELIVERIES)
        self._port_wanted = port
        self._hub = StreamHub()
        self._page = PageRoutes(self, self._hub, loopback=is_loopback(host))
        self._streamed: set[tuple[str, str]] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._response_urls: dict[str, _ResponseUrl] = {}
        self._status_timers: dict[tuple[str, str], asyncio.TimerHandle] = {}
        self._session: aiohttp.ClientSession | None = None

    # ---- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Serve the Web API, ``response_url``, the page and its endpoints on host:port."""
        app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[self._page.guard])
        app.on_response_prepare.append(security_headers)
        app.router.add_route("*", "/api/{method}", self._handle)
        app.router.add_post("/actions/{token}", self._response_url)
        self._page.add_to(app)
        DevPane(self).add_to(app)  # the assistant pane and App Home (bot.dev.pane)
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
        self._hub.close()
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
            return self._people.by_id[user_id]
        except KeyError:
            raise EmulatorError("user_not_found") from None

    def compose(self, typed: str) -> str:
        """What Slack's client sends for ``typed``: ``&``, ``<``, ``>`` escaped, and ``@name``
        (a dev user or ``@opsloop``) and an already written ``<@U…>`` of a known id as mentions.
        """
        return self._people.compose(typed)

    def mentions_bot(self, text: str) -> bool:
        return self._people.mentions_bot(text)

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
        stored.blocks = [rich_text(composed)]
        self._publish("message", self._ui_message(stored))
        self._evict()
        events = []
        base = human_event(stored, parent)
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
        found = find_button(held.blocks, action_id=action_id, value=value)
        found = found or find_feedback_value(held.blocks, action_id=action_id, value=value)
        if found is None:
            raise EmulatorError("button_not_found", status=404)
        block_id, button = found
        response_url = self._new_response_url(channel, held, user.id)
        payload = block_actions(
            user_id=user.id,
            user_name=user.name,
            channel=channel,
            channel_name=self._channel_name(channel),
            message=held.as_slack(),
            message_ts=held.ts,
            thread_ts=held.thread_ts,
            block_id=block_id,
            button=button,
            response_url=response_url,
        )
        body, headers = form_body(payload)
        status, reason, _ = await self._send(body, headers)
        self._record(Delivery("click", "block_actions", None, held.ts, 0, status, reason))
        async with self._changed:
            self._changed.notify_all()
        return status

    async def shortcut_as(
        self, user_id: str, channel: str, message_ts: str, callback_id: str
    ) -> int:
        """Use the message shortcut ``callback_id`` ("⋯ → Investigate with opsloop") on a
        message as ``user_id``: a signed ``message_action``; the bot's HTTP status, as
        :meth:`click_as` returns it (``message_not_found``: 404)."""
        user = self.user(user_id)
        held = self._state.messages.get((channel, message_ts))
        if held is None:
            raise EmulatorError("message_not_found", status=404)
        payload = message_action(
            callback_id=callback_id,
            user_id=user.id,
            user_name=user.name,
            channel=channel,
            channel_name=self._channel_name(channel),
            message=held.as_slack(),
            response_url=self._new_response_url(channel, held, user.id),
        )
        body, headers = form_body(payload)
        status, reason, _ = await self._send(body, headers)
        self._record(Delivery("click", "message_action", None, held.ts, 0, status, reason))
        async with self._changed:
            self._changed.notify_all()
        return status

    def post_alert(self) -> str:
        """Post the demo Alertmanager alert in the channel, as its incoming webhook would (a
        bot's post: it starts nothing until someone mentions opsloop or uses the shortcut)."""
        ts = self.add_post(self.channel_id, alertmanager_firing(host="web"))
        self._publish("message", self._ui_message(self._state.messages[(self.channel_id, ts)]))
        self._evict()
        return ts

    # ---- the page's view of the state ------------------------------------------------------

    def info(self) -> dict[str, Any]:
        """Channel, bot, users and model label, as ``/ui/info`` serves them."""
        return {
            "channel": {"id": self.channel_id, "name": self.channel_name},
            "bot": {"id": BOT_USER_ID, "name": BOT_NAME, "bot_id": BOT_ID},
            "users": [{"id": u.id, "name": u.name, "role": u.role} for u in self.people],
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
            "seq": self._hub.seq,
            "channel": {"id": channel, "name": self.channel_name},
            "messages": [self._ui_message(m) for m in self.messages(channel)],
            "ephemerals": [ui_ephemeral(e) for e in ephemerals],
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
        elif method == "chat.delete":
            self._publish("delete", {"channel": str(body["channel"]), "ts": str(body["ts"])})
        elif method in _EDIT_METHODS:
            key = (str(body["channel"]), str(body["ts"]))
            self._publish("update", self._ui_message(self._state.messages[key]))
        elif method == "files.completeUploadExternal":  # a file shared: a new message
            for message in self.files.shared(body):
                self._publish("message", self._ui_message(message))
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
        elif method in PANE_METHODS:  # prompts, a title, a home: the page asks again
            self._publish("pane", {"method": method, "user": params.get("user_id")})
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
        self._publish("ephemeral", ui_ephemeral(ephemeral), audience=ephemeral.user)

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

    def _publish(self, kind: str, data: Mapping[str, Any], audience: str | None = None) -> None:
        """Send an event to every page stream (only ``audience``'s, if given), in order."""
        self._hub.publish(kind, data, audience)

    # ---- delivery to the bot ---------------------------------------------------------------

    def deliver(self, event: Mapping[str, Any]) -> None:
        """Deliver ``event`` to the bot in the background (nothing while ``bot_url`` is None)."""
        if self.bot_url is not None:
            if len(self._tasks) + 1 > MAX_IN_FLIGHT:
                raise EmulatorError("too_many_deliveries", status=503)
            self._spawn(self._deliver_event(event))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _deliver_event(self, event: Mapping[str, Any]) -> None:
        """Deliver one event, retrying as Slack does (bounded) until the bot answers 2xx."""
        await deliver_event(
            event,
            send=self._send,
            retry_delays=self.retry_delays,
            record=self._recorded,
            gone=lambda: self.bot_url is None,
        )

    async def _recorded(self, delivery: Delivery) -> None:
        self._record(delivery)
        async with self._changed:
            self._changed.notify_all()

    async def _send(self, body: bytes, headers: Mapping[str, str]) -> Sent:
        """POST to the bot, signed now: (status, failure reason, X-Slack-No-Retry)."""
        url, session = self.bot_url, self._session
        if url is None or session is None:
            return NO_ANSWER, "no_bot_url", False
        return await post_signed(
            session, url, body, headers, secret=self.signing_secret, ack_timeout=self.ack_timeout
        )

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


def _ts_order(ts: str) -> tuple[int, str]:
    seconds, _, micros = ts.partition(".")
    return (int(seconds) if seconds.isdigit() else 0, micros.ljust(6, "0"))


__all__ = [
    "ACK_TIMEOUT_S",
    "MAX_RETRIES",
    "NO_ANSWER",
    "RETRY_DELAYS_S",
    "STATIC_DIR",
    "Delivery",
    "DevUser",
    "Emulator",
    "EmulatorError",
    "html_safe_json",
    "sign",
]

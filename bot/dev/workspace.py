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
- ``bot.dev.pane``: the assistant pane and App Home of each dev user.
- ``bot.dev.response_urls``: the ``response_url`` of each click, its lifetime and uses.
- ``bot.dev.demo_alerts``: the page's "Fire an alert" (:meth:`Emulator.fire_alert`), once
  ``opsloop dev`` sets ``alerts``: an Alertmanager notification posted to the bot's
  webhook with its token, which stays on this side (the page never sees it).

A message mentioning the bot goes out twice, as ``app_mention`` and as ``message`` (two event
ids, same channel and ts), each delivery on its own. The bot's own posts are not echoed back to
it as ``message`` events (Slack would send them; bolt drops them as self events anyway). A
click's ``response_url`` is served here and handles ``replace_original``,
``delete_original``, ``response_type: in_channel`` and (the default) an ephemeral reply to the
clicker, valid for 30 minutes and 5 uses, as Slack's are. :meth:`Emulator.click_as` returns
the bot's status, or :data:`NO_ANSWER` (0) when it did not answer within 3 s.

A modal the bot opens (``views.open`` with a click's trigger id, ``bot.emulator.slack_views``)
is shown on its person's page only (a ``modal`` stream event, and in their snapshot);
:meth:`Emulator.submit_view_as` presses its submit button: what Slack's client refuses is
shown without sending, else a signed ``view_submission`` goes to the bot and its answer is
applied as Slack applies it (errors under the inputs, an update, closed).
:meth:`Emulator.close_view_as` presses its close button (no ``view_closed`` is sent).

An assistant thread status (``assistant.threads.setStatus``) clears itself when the app posts
in the thread or after two minutes, as Slack's does. While ``bot_url`` is None messages are
stored and shown, and nothing is delivered.

Everything is bounded: message text, messages, ephemerals and recorded calls kept, stream
clients and their queues (``bot.dev.page``), deliveries in flight and their retries.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any

import aiohttp
from aiohttp import web

from bot.dev.demo_alerts import DemoAlerts
from bot.dev.page import (
    STATIC_DIR,
    EmulatorError,
    PageRoutes,
    html_safe_json,
    is_loopback,
    security_headers,
)
from bot.dev.page_feed import PageFeed
from bot.dev.pane import DevPane
from bot.dev.people import Composer, DevUser, rich_text
from bot.dev.response_urls import PATH as RESPONSE_URL_PATH
from bot.dev.response_urls import ResponseUrl, ResponseUrls
from bot.emulator.alert_posts import alertmanager_firing
from bot.emulator.sender import (
    ACK_TIMEOUT_S,
    MAX_RETRIES,
    NO_ANSWER,
    RETRY_DELAYS_S,
    USER_AGENT,
    ActedOn,
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
    post_signed_answer,
    sign,
    view_submission,
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
from bot.emulator.slack_chat import TsClock, ts_order
from bot.emulator.slack_views import MAX_ANSWER_BYTES, HeldView, ViewAnswer, client_errors
from bot.emulator.slack_wire import Submitted

MAX_MESSAGES = 1_000  # the oldest are dropped beyond this (a `delete` event tells the page)
MAX_CALLS = 2_000  # Web API calls remembered in `calls`
MAX_DELIVERIES = 1_000  # delivery attempts remembered in `deliveries`
MAX_IN_FLIGHT = 200  # event deliveries (with their retries) running at once
MAX_BODY_BYTES = 1024 * 1024
SHUTDOWN_TIMEOUT_S = 2.0

_EDIT_METHODS = frozenset({"chat.update", "chat.appendStream", "chat.stopStream"})
PANE_METHODS = frozenset(
    {"assistant.threads.setSuggestedPrompts", "assistant.threads.setTitle", "views.publish"}
)


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
            clock=TsClock(wall=True),  # the page shows when each message was posted
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
        self.alerts: DemoAlerts | None = None  # the page's "Fire an alert", once the bot runs
        self.ack_timeout: float = ACK_TIMEOUT_S
        self.retry_delays: tuple[float, ...] = RETRY_DELAYS_S
        self.deliveries: deque[Delivery] = deque(maxlen=MAX_DELIVERIES)
        self._port_wanted = port
        self._feed = PageFeed(self._state)
        self._page = PageRoutes(self, self._feed.hub, loopback=is_loopback(host))
        self._tasks: set[asyncio.Task[None]] = set()
        self._response_urls = ResponseUrls()
        self._session: aiohttp.ClientSession | None = None
        self.views.watch(self._view_changed)  # a modal shown, changed or gone: its person's page

    # ---- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Serve the Web API, ``response_url``, the page and its endpoints on host:port."""
        app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[self._page.guard])
        app.on_response_prepare.append(security_headers)
        app.router.add_route("*", "/api/{method}", self._handle)
        for method, path, handler in self._routes:  # the fake Slack's upload host and files
            app.router.add_route(method, path, handler)
        app.router.add_post(RESPONSE_URL_PATH, self._response_url)
        self._page.add_to(app)
        DevPane(self).add_to(app)  # the assistant pane and App Home (bot.dev.pane)
        self._session = aiohttp.ClientSession(headers={"User-Agent": USER_AGENT}, trust_env=False)
        try:
            self._port = await self._server.start(
                app,
                host=self._host,
                port=self._port_wanted,
                shutdown_timeout=SHUTDOWN_TIMEOUT_S,
            )
        except OSError:
            await self._session.close()
            raise

    async def stop(self) -> None:
        """Cancel deliveries, end the streams, close everything (idempotent)."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._feed.close()
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

    def compose_post(self, typed: str) -> str:
        """:meth:`compose`, refused as Slack's client refuses a post (:class:`EmulatorError`
        ``no_text`` for blanks only, ``msg_too_long`` over Slack's limit)."""
        composed = self.compose(typed)
        if not composed.strip():
            raise EmulatorError("no_text")
        if len(composed) > MAX_MESSAGE_TEXT:
            raise EmulatorError("msg_too_long")
        return composed

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
        composed = self.compose_post(text)
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
        self._feed.posted(stored)
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
        held = self._clicked(channel, message_ts)
        found = find_button(held.blocks, action_id=action_id, value=value)
        found = found or find_feedback_value(held.blocks, action_id=action_id, value=value)
        if found is None:
            raise EmulatorError("button_not_found", status=404)
        block_id, button = found
        payload = block_actions(
            message_ts=held.ts,
            thread_ts=held.thread_ts,
            block_id=block_id,
            button=button,
            **self._acted_on(user, channel, held),
        )
        return await self._interact(payload, held)

    async def shortcut_as(
        self, user_id: str, channel: str, message_ts: str, callback_id: str
    ) -> int:
        """Use the message shortcut ``callback_id`` ("⋯ → Investigate with opsloop") on a
        message as ``user_id``: a signed ``message_action``; the bot's HTTP status, as
        :meth:`click_as` returns it (``message_not_found``: 404)."""
        user = self.user(user_id)
        held = self._clicked(channel, message_ts)
        payload = message_action(callback_id=callback_id, **self._acted_on(user, channel, held))
        return await self._interact(payload, held)

    def _clicked(self, channel: str, message_ts: str) -> Message:
        held = self._state.messages.get((channel, message_ts))
        if held is None:
            raise EmulatorError("message_not_found", status=404)
        return held

    def _acted_on(self, user: DevUser, channel: str, held: Message) -> ActedOn:
        """``user`` acting on ``held``, with a fresh ``response_url`` for the bot's answer."""
        return ActedOn(
            user_id=user.id,
            user_name=user.name,
            channel=channel,
            channel_name=self._channel_name(channel),
            message=held.as_slack(),
            response_url=self._response_urls.new(self.api_url, channel, held, user.id),
        )

    async def _interact(self, payload: dict[str, Any], held: Message) -> int:
        """Send a click's or a shortcut's payload to the bot; its HTTP status."""
        body, headers = form_body(payload)
        status, reason, _ = await self._send(body, headers)
        self._record(Delivery("click", payload["type"], None, held.ts, 0, status, reason))
        async with self._changed:
            self._changed.notify_all()
        return status

    async def submit_view_as(
        self, user_id: str, view_id: str, values: Mapping[str, Submitted]
    ) -> dict[str, Any]:
        """Press the submit button of the modal ``user_id`` sees, its inputs holding
        ``values`` (by block id): what Slack's client refuses is shown and nothing is sent
        (``outcome: client_errors``); otherwise a signed ``view_submission`` goes to the bot
        and its answer is applied as Slack applies it (:class:`ViewAnswer`'s outcome,
        ``errors``, ``reason``). :class:`EmulatorError` ``view_not_found`` (404) when that is
        not the view shown to them, ``invalid_arguments`` for a value no input can hold."""
        user = self.user(user_id)
        held = self._shown(user_id, view_id)
        said = client_errors(held.view, values)
        if said:
            return {"outcome": "client_errors", "errors": said, "status": None}
        try:
            payload = view_submission(
                held.view, user_id=user.id, user_name=user.name, values=values
            )
        except ValueError:
            raise EmulatorError("invalid_arguments") from None
        body, headers = form_body(payload)
        url, session = self.bot_url, self._session
        reason: str | None = "no_bot_url"
        status, answer_body = NO_ANSWER, b""
        if url is not None and session is not None:
            answer = await post_signed_answer(
                session,
                url,
                body,
                headers,
                secret=self.signing_secret,
                ack_timeout=self.ack_timeout,
                max_bytes=MAX_ANSWER_BYTES,
            )
            status, reason, answer_body = answer.status, answer.reason, answer.body
        self._record(Delivery("click", "view_submission", None, view_id, 0, status, reason))
        try:
            judged: ViewAnswer = await self.views.answer(view_id, status, answer_body)
        except LookupError:  # closed meanwhile (the bot updated or cleared it)
            raise EmulatorError("view_not_found", status=404) from None
        return {
            "outcome": judged.outcome,
            "errors": judged.errors,
            "reason": judged.reason,
            "shown": judged.shown,
            "status": status,
        }

    async def close_view_as(self, user_id: str, view_id: str) -> None:
        """Press the close button of the modal ``user_id`` sees (``view_not_found``: 404)."""
        self.user(user_id)
        self._shown(user_id, view_id)
        await self.views.close(view_id)

    def _shown(self, user_id: str, view_id: str) -> HeldView:
        top = self.views.top(user_id)
        if top is None or top.id != view_id:
            raise EmulatorError("view_not_found", status=404)
        return top

    def _view_changed(self, held: HeldView) -> None:
        if held.user is not None:
            self._feed.modal(held.user, self.views.top(held.user))

    def post_alert(self) -> str:
        """Post the demo Alertmanager alert in the channel, as its incoming webhook would (a
        bot's post: it starts nothing until someone mentions opsloop or uses the shortcut)."""
        ts = self.add_post(self.channel_id, alertmanager_firing(host="web"))
        self._feed.posted(self._state.messages[(self.channel_id, ts)])
        self._evict()
        return ts

    async def fire_alert(self) -> dict[str, Any]:
        """The page's "Fire an alert": the bot's status and outcome (:class:`EmulatorError`
        ``alerts_off`` until ``alerts`` is set)."""
        if self.alerts is None:
            raise EmulatorError("alerts_off", status=503)
        return await self.alerts.fire_by_hand()

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
        assistant statuses, and only that user's ephemerals and open modal (none without a
        user)."""
        ephemerals = self.ephemerals(self.channel_id, user_id) if user_id else []
        modal = self.views.top(user_id) if user_id else None
        return self._feed.snapshot(self.channel_id, self.channel_name, ephemerals, modal)

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
        feed = self._feed
        if method in ("chat.postMessage", "chat.startStream"):
            message = self._state.messages[(str(body["channel"]), str(body["ts"]))]
            feed.posted(message, streamed=method == "chat.startStream")
            if message.thread_ts:  # Slack clears the assistant status when the app replies
                feed.show_status(message.channel, message.thread_ts, "")
            self._evict()
        elif method == "chat.delete":
            feed.deleted(str(body["channel"]), str(body["ts"]))
        elif method in _EDIT_METHODS:
            feed.updated(self._state.messages[(str(body["channel"]), str(body["ts"]))])
        elif method == "files.completeUploadExternal":  # a file shared: a new message
            for message in self.files.shared(body):
                feed.posted(message)
        elif method == "chat.postEphemeral":
            feed.ephemeral(self._state.ephemerals[-1])
        elif method == "reactions.add":
            feed.reacted(str(params["channel"]), str(params["timestamp"]), params["name"])
        elif method in PANE_METHODS:  # prompts, a title, a home: the page asks again
            feed.publish("pane", {"method": method, "user": params.get("user_id")})
        elif method == "assistant.threads.setStatus":
            channel, thread_ts = str(params["channel_id"]), str(params["thread_ts"])
            status = self._state.statuses.get((channel, thread_ts), "")
            feed.show_status(channel, thread_ts, status, told=True)

    def _evict(self) -> None:
        held = self._state.messages
        if len(held) <= MAX_MESSAGES:
            return
        oldest = sorted(held, key=lambda key: ts_order(key[1]))[: len(held) - MAX_MESSAGES]
        for channel, ts in oldest:
            self._feed.dropped(channel, ts)

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
        self._feed.delivery(delivery, retries=retries)

    # ---- response_url ----------------------------------------------------------------------

    async def _response_url(self, request: web.Request) -> web.Response:
        return await self._response_urls.serve(request, self._responded)

    async def _responded(self, target: ResponseUrl, params: Params) -> None:
        self.calls.append(Call("response_url", params))
        try:
            self._respond(target, params)
        finally:
            async with self._changed:
                self._changed.notify_all()

    def _respond(self, target: ResponseUrl, params: Params) -> None:
        key = (target.channel, target.message_ts)
        if params.get("delete_original") in (True, "true"):
            if self._state.messages.pop(key, None) is not None:
                self._feed.deleted(target.channel, target.message_ts)
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
            self._feed.updated(held)
        elif params.get("response_type") == "in_channel":
            thread_ts = params.get("thread_ts") or thread_ts
            posted = self.chat.post_as_bot(target.channel, text, thread_ts=thread_ts, blocks=blocks)
            self._feed.posted(posted)
            self._evict()
        else:
            ts = self.chat.clock.next()
            ephemeral = Ephemeral(target.channel, target.user, ts, text, thread_ts, blocks)
            self._state.ephemerals.append(ephemeral)
            self._feed.ephemeral(ephemeral)


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

"""A fake Slack Web API: a real aiohttp server on a free loopback port, for tests and dev mode.

It answers the methods opsloop calls the way Slack does (same shapes, same error codes, Block
Kit limits enforced), holds the messages it was sent so edits apply like Slack's, records every
call, and can be told to fail (``429`` with ``Retry-After``, or any error) so tests exercise the
bot's retry paths over the real protocol with slack-sdk's own client::

    async with FakeSlack() as slack:
        client = AsyncWebClient(token="xoxb-test", base_url=slack.api_url)
        await client.chat_postMessage(channel="C1", text="hi")
        await slack.wait_for(lambda: slack.messages("C1"))

Waiting is on an :class:`asyncio.Condition` notified after every call, never on sleeps.
Sending events *to* the bot (signed requests) does not belong here: that is
``bot.emulator.sender``.

This module owns the server: the method table, tokens, injected failures and holds, the
record of calls, seeding and reading back, and the methods about the workspace itself
(``auth.test``, users, channels, usergroups). The messages and the methods that post, edit
and read them are ``bot.emulator.slack_chat``'s; the assistant pane's and App Home's are
``bot.emulator.slack_assistant``'s, file uploads ``bot.emulator.slack_files``'s, modals
(``views.open``/``update``/``push``, trigger ids, judging a submission's answer)
``bot.emulator.slack_views``' (``slack.views``). Slack's wire
shapes, limits, errors and request parsing are in ``bot.emulator.slack_wire``; the names
users of the fake need (``Message``, ``BOT_USER_ID``, ``block_errors``, …) are re-exported
here.
"""

from __future__ import annotations

import asyncio
import copy
from collections import defaultdict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from bot.emulator.app_server import AppServer, StartStop
from bot.emulator.slack_assistant import install as install_pane
from bot.emulator.slack_chat import DEFAULT_REPLIES_LIMIT, Chat, TsClock
from bot.emulator.slack_files import FakeFiles
from bot.emulator.slack_views import SlackViews
from bot.emulator.slack_wire import (
    BOT_ID,
    BOT_NAME,
    BOT_USER_ID,
    MAX_MESSAGE_TEXT,
    TEAM_ID,
    Call,
    Ephemeral,
    Message,
    Params,
    Reply,
    SlackError,
    bearer_token,
    block_errors,
    read_params,
    required,
)

__all__ = [
    "BOT_ID",
    "BOT_NAME",
    "BOT_USER_ID",
    "DEFAULT_REPLIES_LIMIT",
    "DEFAULT_WAIT_TIMEOUT",
    "MAX_MESSAGE_TEXT",
    "TEAM_ID",
    "Call",
    "Ephemeral",
    "FakeSlack",
    "Message",
    "Params",
    "Reply",
    "SlackError",
    "block_errors",
]

DEFAULT_WAIT_TIMEOUT = 10.0  # a hang guard only: conditions are awaited, never polled


@dataclass
class _Fault:
    status: int
    error: str
    retry_after: int | None
    remaining: int = 1


def user_object(user_id: str, user: str | Mapping[str, Any]) -> dict[str, Any]:
    """A ``users.info`` user as Slack shapes it: a display name alone becomes a user whose
    ``profile.display_name`` it is (``name`` its lower-case handle); an object is kept."""
    if not isinstance(user, str):
        return {"id": user_id, **copy.deepcopy(dict(user))}
    handle = user.lower().replace(" ", ".")
    return {
        "id": user_id,
        "team_id": TEAM_ID,
        "name": handle,
        "real_name": user,
        "deleted": False,
        "is_bot": False,
        "profile": {"display_name": user, "real_name": user},
    }


def channel_object(channel_id: str, channel: str | Mapping[str, Any]) -> dict[str, Any]:
    """A ``conversations.info`` channel as Slack shapes it (a name alone: a public channel)."""
    if not isinstance(channel, str):
        return {"id": channel_id, **copy.deepcopy(dict(channel))}
    return {
        "id": channel_id,
        "name": channel.removeprefix("#"),
        "is_channel": True,
        "is_private": False,
        "is_im": False,
        "is_archived": False,
    }


class FakeSlack(StartStop):
    """The fake Web API. Use as ``async with FakeSlack() as slack``; point clients at ``api_url``.

    ``usergroups`` maps a usergroup id to its member ids for ``usergroups.users.list``;
    ``users`` a user id to its display name (or a whole Slack user object) for ``users.info``;
    ``channels`` a channel id to its name (or a whole conversation object) for
    ``conversations.info``. Ids not in them are ``user_not_found`` / ``channel_not_found``,
    as Slack answers for an id it does not know. ``clock`` numbers new messages (by
    default from a fixed instant, so every run reads the same ts).
    """

    def __init__(
        self,
        *,
        usergroups: Mapping[str, list[str]] | None = None,
        users: Mapping[str, str | Mapping[str, Any]] | None = None,
        channels: Mapping[str, str | Mapping[str, Any]] | None = None,
        host: str = "127.0.0.1",
        clock: TsClock | None = None,
    ) -> None:
        self.usergroups: dict[str, list[str]] = dict(usergroups or {})
        self.users: dict[str, dict[str, Any]] = {
            uid: user_object(uid, u) for uid, u in (users or {}).items()
        }
        self.channels: dict[str, dict[str, Any]] = {
            cid: channel_object(cid, c) for cid, c in (channels or {}).items()
        }
        self.calls: list[Call] = []
        self._host = host
        self._port: int | None = None
        self._server = AppServer()
        self._faults: dict[str, deque[_Fault]] = defaultdict(deque)
        self._changed = asyncio.Condition()
        self._methods: dict[str, Callable[[Params], Reply]] = {
            "auth.test": self._auth_test,
            "usergroups.users.list": self._usergroup_users,
            "users.info": self._user_info,
            "conversations.info": self._conversation_info,
        }
        self._app_token_methods: set[str] = set()  # methods called with the xapp- token
        self._holds: dict[str, asyncio.Event] = {}
        self._routes: list[tuple[str, str, Handler]] = []
        self.chat = Chat(clock or TsClock())  # chat.*, reactions, replies, thread statuses
        self.chat.install(self)
        self._state = self.chat.state  # the messages, ephemerals, reactions and statuses held
        self.files = FakeFiles(self)  # the v2 upload: files.getUploadURLExternal, …
        self.pane = install_pane(self)  # setSuggestedPrompts, setTitle, views.publish
        self.views = SlackViews(self)  # views.open, .update, .push; submissions judged

    def add_method(
        self, name: str, handler: Callable[[Params], Reply], *, app_token: bool = False
    ) -> None:
        """Answer Web API method ``name`` with ``handler`` (``app_token``: it takes the
        app-level ``xapp-`` token, as ``apps.connections.open`` does, not the bot's)."""
        self._methods[name] = handler
        if app_token:
            self._app_token_methods.add(name)

    def add_route(self, method: str, path: str, handler: Handler) -> None:
        """Serve another HTTP route (a websocket, say); call before ``start``."""
        if self._server.running:
            raise RuntimeError("add routes before the fake starts")
        self._routes.append((method, path, handler))

    # ---- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Bind a free loopback port and start answering."""
        app = web.Application()
        app.router.add_route("*", "/api/{method}", self._handle)
        for method, path, handler in self._routes:
            app.router.add_route(method, path, handler)
        self._port = await self._server.start(app, host=self._host)

    async def stop(self) -> None:
        """Stop the server (idempotent)."""
        for gate in self._holds.values():
            gate.set()
        await self._server.stop()

    @property
    def api_url(self) -> str:
        """The base URL for ``AsyncWebClient(base_url=...)``, with its trailing slash."""
        if self._port is None:
            raise RuntimeError("FakeSlack is not started")
        return f"http://{self._host}:{self._port}/api/"

    # ---- test controls ---------------------------------------------------------------------

    def fail_next(
        self,
        method: str,
        *,
        status: int = 429,
        retry_after: int | None = 1,
        error: str | None = None,
        times: int = 1,
    ) -> None:
        """Make the next ``times`` calls of ``method`` fail.

        With status 429 the answer carries ``Retry-After: retry_after`` (unless None) and
        ``error`` defaults to ``ratelimited``; other statuses default to ``internal_error``
        (use status 200 with an ``error`` for a plain Slack error such as ``channel_not_found``).
        """
        code = error or ("ratelimited" if status == 429 else "internal_error")
        after = retry_after if status == 429 else None
        self._faults[method].append(_Fault(status, code, after, remaining=times))

    def hold(self, method: str) -> asyncio.Event:
        """Keep every call of ``method`` waiting for its answer until the returned event is
        set (a slow Slack): the call is recorded when it arrives."""
        gate = self._holds.setdefault(method, asyncio.Event())
        gate.clear()
        return gate

    def clear_faults(self) -> None:
        """Forget every failure ``fail_next`` still has queued: Slack answers again."""
        self._faults.clear()

    def add_message(
        self,
        channel: str,
        ts: str | None,
        user: str,
        text: str,
        thread_ts: str | None = None,
        *,
        blocks: list[dict[str, Any]] | None = None,
    ) -> str:
        """Seed a human message (e.g. a thread the bot is mentioned in); returns its ts.
        ``blocks``: the rich text Slack's clients send along with what was typed."""
        ts = self.chat.clock.seed(ts)
        self._state.messages[(channel, ts)] = Message(
            channel, ts, text, user, thread_ts=thread_ts, blocks=blocks
        )
        return ts

    def add_post(
        self,
        channel: str,
        post: Mapping[str, Any],
        *,
        ts: str | None = None,
        thread_ts: str | None = None,
    ) -> str:
        """Seed a message in Slack's wire shape, as ``conversations.replies`` returns it:
        another integration's post (``subtype: bot_message`` with ``username`` from an
        incoming webhook, an app's ``bot_id``/``user``/``bot_profile``), with its
        ``attachments`` and ``blocks`` (``bot.emulator.alert_posts`` has some), or one
        of this bot's own. ``ts`` (else the post's, else the next) and ``thread_ts``
        override the post's; returns its ts."""
        wire = copy.deepcopy(dict(post))
        for name in ("type", "team", "ts", "thread_ts", "reply_count"):
            wire.pop(name, None)
        ts = self.chat.clock.seed(ts or post.get("ts"))
        blocks, attachments = wire.pop("blocks", None), wire.pop("attachments", None)
        self._state.messages[(channel, ts)] = Message(
            channel,
            ts,
            str(wire.pop("text", "") or ""),
            str(wire.pop("user", "") or ""),
            bot_id=wire.pop("bot_id", None),
            thread_ts=thread_ts or post.get("thread_ts"),
            blocks=blocks,
            attachments=attachments,
            extra=wire,
        )
        return ts

    def expire_stream(self, channel: str, ts: str) -> None:
        """End a stream server-side, as Slack does after some minutes."""
        self._state.messages[(channel, ts)].streaming = False

    # ---- inspection ------------------------------------------------------------------------

    def calls_of(self, method: str) -> list[Params]:
        """The params of every call of ``method``, in order (failed calls included)."""
        return [call.params for call in self.calls if call.method == method]

    def messages(self, channel: str, thread_ts: str | None = None) -> list[Message]:
        """Snapshots of the messages held, by ts: the whole channel, or one thread with parent."""
        return [copy.deepcopy(m) for m in self._state.thread(channel, thread_ts)]

    def message(self, channel: str, ts: str) -> Message:
        """A snapshot of one message; KeyError if the fake does not hold it."""
        return copy.deepcopy(self._state.messages[(channel, ts)])

    def ephemerals(self, channel: str, user: str | None = None) -> list[Ephemeral]:
        """Ephemeral messages posted in ``channel`` (to ``user`` only, if given)."""
        return [
            copy.deepcopy(e)
            for e in self._state.ephemerals
            if e.channel == channel and (user is None or e.user == user)
        ]

    def reactions(self, channel: str, ts: str) -> list[str]:
        """Names of the reactions the bot added to a message, in order."""
        return list(self._state.reactions.get((channel, ts), []))

    def status(self, channel: str, thread_ts: str) -> str | None:
        """The last assistant thread status set (``""`` once cleared)."""
        return self._state.statuses.get((channel, thread_ts))

    async def wait_for(
        self,
        predicate: Callable[[], object],
        *,
        timeout: float = DEFAULT_WAIT_TIMEOUT,  # noqa: ASYNC109 (a hang guard in a test helper)
    ) -> None:
        """Return once ``predicate()`` is truthy, re-checked after every call the fake answers."""
        async with self._changed:
            try:
                await asyncio.wait_for(self._changed.wait_for(predicate), timeout)
            except TimeoutError:
                seen = [call.method for call in self.calls]
                raise TimeoutError(f"condition not met within {timeout}s; calls: {seen}") from None

    async def notify(self) -> None:
        """Wake every :meth:`wait_for` (after a change made outside a Web API call)."""
        async with self._changed:
            self._changed.notify_all()

    async def wait_for_call(
        self,
        method: str,
        where: Callable[[Params], object] = lambda _: True,
        *,
        count: int = 1,
        timeout: float = DEFAULT_WAIT_TIMEOUT,  # noqa: ASYNC109 (passed on to wait_for)
    ) -> Params:
        """Wait until ``count`` calls of ``method`` match ``where``; return the last of them."""

        def matching() -> list[Params]:
            return [p for p in self.calls_of(method) if where(p)]

        await self.wait_for(lambda: len(matching()) >= count, timeout=timeout)
        return matching()[count - 1]

    # ---- HTTP ------------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        try:
            params = await read_params(request)
        except SlackError as exc:
            return web.json_response({"ok": False, "error": exc.code})
        token = bearer_token(request.headers.get("Authorization", "")) or params.pop("token", None)
        self.calls.append(Call(method, params))
        gate = self._holds.get(method)
        if gate is not None:
            async with self._changed:
                self._changed.notify_all()
            await gate.wait()
        try:
            status, headers, body = self._answer(method, params, token)
        finally:
            async with self._changed:
                self._changed.notify_all()
        return web.json_response(body, status=status, headers=headers)

    def _answer(
        self, method: str, params: Params, token: str | None
    ) -> tuple[int, dict[str, str], Reply]:
        if not token:
            return 200, {}, {"ok": False, "error": "not_authed"}
        wanted = "xapp-" if method in self._app_token_methods else "xoxb-"
        if not token.startswith(wanted):
            known = token.startswith(("xoxb-", "xapp-"))
            error = "not_allowed_token_type" if known else "invalid_auth"
            return 200, {}, {"ok": False, "error": error}
        fault = self._take_fault(method)
        if fault is not None:
            headers = {} if fault.retry_after is None else {"Retry-After": str(fault.retry_after)}
            return fault.status, headers, {"ok": False, "error": fault.error}
        handler = self._methods.get(method)
        if handler is None:
            return 200, {}, {"ok": False, "error": "unknown_method", "req_method": method}
        try:
            return 200, {}, {"ok": True, **handler(params)}
        except SlackError as exc:
            return 200, {}, {"ok": False, "error": exc.code, **exc.extra}

    def _take_fault(self, method: str) -> _Fault | None:
        queue = self._faults.get(method)
        if not queue:
            return None
        fault = queue[0]
        fault.remaining -= 1
        if fault.remaining <= 0:
            queue.popleft()
        return fault

    # ---- methods ---------------------------------------------------------------------------

    def _auth_test(self, params: Params) -> Reply:
        return {
            "url": f"https://{BOT_NAME}.slack.com/",
            "team": BOT_NAME,
            "user": BOT_NAME,
            "team_id": TEAM_ID,
            "user_id": BOT_USER_ID,
            "bot_id": BOT_ID,
            "is_enterprise_install": False,
        }

    def _usergroup_users(self, params: Params) -> Reply:
        users = self.usergroups.get(required(params, "usergroup"))
        if users is None:
            raise SlackError("no_such_subteam")
        return {"users": list(users)}

    def _user_info(self, params: Params) -> Reply:
        user = self.users.get(str(params.get("user") or ""))
        if user is None:
            raise SlackError("user_not_found")
        return {"user": copy.deepcopy(user)}

    def _conversation_info(self, params: Params) -> Reply:
        channel = self.channels.get(str(params.get("channel") or ""))
        if channel is None:
            raise SlackError("channel_not_found")
        return {"channel": copy.deepcopy(channel)}

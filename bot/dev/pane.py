"""The dev page's assistant pane and App Home: Slack's side of both, and their routes.

Each dev user has a DM with the bot (``D`` + their id). ``/ui/pane/open`` starts an
assistant thread there as Slack's client does (a root message, then
``assistant_thread_started`` with the emulator's channel as the context: the channel
the person has open); ``/ui/pane/ask`` posts what they type (or a suggested prompt) in
that thread and delivers it as ``message.im``; ``/ui/home/open`` delivers
``app_home_opened``. ``/ui/pane/state`` is what the page shows: the thread's messages,
the suggested prompts and title the bot set, and the user's published home (held by
``bot.emulator.slack_assistant``). The bot's own posts and edits reach the page through
the stream like any message; the pane methods publish a ``pane`` event
(``Emulator._changed_by``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from aiohttp import web

from bot.dev.page import EmulatorError, json_response
from bot.emulator.sender import app_home_opened, assistant_thread_event, im_event
from bot.emulator.slack import Message
from bot.emulator.slack_assistant import AssistantState

ROOT_TEXT = "New Assistant Thread"
MAX_PANE_MESSAGES = 200


class Workspace(Protocol):
    """What the pane needs of the emulator (``bot.dev.workspace.Emulator``)."""

    channel_id: str
    pane: AssistantState

    def user(self, user_id: str) -> object: ...

    def compose_post(self, typed: str) -> str: ...

    def add_message(
        self, channel: str, ts: str | None, user: str, text: str, thread_ts: str | None = None
    ) -> str: ...

    def messages(self, channel: str, thread_ts: str | None = None) -> list[Message]: ...

    def status(self, channel: str, thread_ts: str) -> str | None: ...

    def deliver(self, event: Mapping[str, Any]) -> None: ...


def dm_of(user_id: str) -> str:
    """The DM channel between ``user_id`` and the bot."""
    return "D" + user_id


class DevPane:
    """The pane's and the home's routes on the emulator's server."""

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace

    def add_to(self, app: web.Application) -> None:
        app.router.add_post("/ui/pane/open", self._open)
        app.router.add_post("/ui/pane/ask", self._ask)
        app.router.add_post("/ui/home/open", self._home)
        app.router.add_get("/ui/pane/state", self._state)

    def open(self, user_id: str) -> str:
        """A new assistant thread for ``user_id``; its ts."""
        space = self.workspace
        space.user(user_id)
        channel = dm_of(user_id)
        thread_ts = space.add_message(channel, None, user_id, ROOT_TEXT)
        space.deliver(
            assistant_thread_event(
                "assistant_thread_started",
                user=user_id,
                channel=channel,
                thread_ts=thread_ts,
                looking_at=space.channel_id,
            )
        )
        return thread_ts

    def home(self, user_id: str) -> None:
        """``user_id`` opened the app's Home tab: deliver ``app_home_opened``."""
        self.workspace.user(user_id)
        self.workspace.deliver(app_home_opened(user=user_id, channel=dm_of(user_id)))

    def ask(self, user_id: str, thread_ts: str, text: str) -> str:
        """Post ``text`` in the pane thread as ``user_id`` and deliver it; its ts."""
        space = self.workspace
        space.user(user_id)
        composed = space.compose_post(text)
        channel = dm_of(user_id)
        if not any(m.ts == thread_ts for m in space.messages(channel)):
            raise EmulatorError("thread_not_found")
        ts = space.add_message(channel, None, user_id, composed, thread_ts)
        space.deliver(im_event(Message(channel, ts, composed, user_id, thread_ts=thread_ts)))
        return ts

    def state(self, user_id: str, thread_ts: str | None) -> dict[str, Any]:
        space = self.workspace
        space.user(user_id)
        channel = dm_of(user_id)
        key = (channel, thread_ts or "")
        held = space.messages(channel, thread_ts) if thread_ts else []
        return {
            "channel": channel,
            "thread_ts": thread_ts,
            "messages": [{**m.as_slack(), "channel": channel} for m in held][-MAX_PANE_MESSAGES:],
            "prompts": space.pane.prompts.get(key, []),
            "prompts_title": space.pane.prompt_titles.get(key),
            "title": space.pane.titles.get(key),
            "status": space.status(channel, thread_ts) if thread_ts else None,
            "home": space.pane.homes.get(user_id),
        }

    # ---- routes -------------------------------------------------------------------------

    async def _body(self, request: web.Request) -> dict[str, Any]:
        try:
            body = await request.json()
        except ValueError:
            raise EmulatorError("invalid_json") from None
        if not isinstance(body, dict) or not isinstance(body.get("user"), str):
            raise EmulatorError("invalid_arguments")
        return body

    async def _open(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        return json_response({"ok": True, "thread_ts": self.open(body["user"])})

    async def _ask(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        thread_ts, text = body.get("thread_ts"), body.get("text")
        if not isinstance(thread_ts, str) or not isinstance(text, str):
            raise EmulatorError("invalid_arguments")
        return json_response({"ok": True, "ts": self.ask(body["user"], thread_ts, text)})

    async def _home(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        self.home(body["user"])
        return json_response({"ok": True})

    async def _state(self, request: web.Request) -> web.Response:
        user = request.query.get("user") or ""
        thread_ts = request.query.get("thread_ts") or None
        return json_response(self.state(user, thread_ts))

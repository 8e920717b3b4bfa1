"""The ``response_url`` of each click on the dev workspace: handed out, served, bounded.

Every click and shortcut the emulator sends carries a ``response_url`` served on the
emulator's own server (``/actions/{token}``). Like Slack's, one is valid for
:data:`RESPONSE_URL_TTL_S` seconds and :data:`RESPONSE_URL_USES` uses (``expired_url``,
``used_url``: 404); its body must be a JSON object (``invalid_payload``: 400). What an
answer does to the channel (replace or delete the clicked message, post in the channel,
or an ephemeral reply to the clicker) is the workspace's (``bot.dev.workspace``); at most
:data:`MAX_RESPONSE_URLS` are held, the oldest dropped first.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web
from yarl import URL

from bot.dev.page import EmulatorError
from bot.emulator.slack import Message, Params

MAX_RESPONSE_URLS = 1_000
RESPONSE_URL_TTL_S = 30 * 60
RESPONSE_URL_USES = 5
PATH = "/actions/{token}"


@dataclass
class ResponseUrl:
    """Where a click came from: what an answer to its ``response_url`` applies to."""

    channel: str
    message_ts: str
    thread_ts: str | None
    user: str
    expires: float
    uses: int = 0


Respond = Callable[[ResponseUrl, Params], Awaitable[None]]


class ResponseUrls:
    """The ``response_url`` tokens handed out; :meth:`serve` answers a POST to one."""

    def __init__(self) -> None:
        self._urls: dict[str, ResponseUrl] = {}

    def new(self, base_url: str, channel: str, message: Message, user: str) -> str:
        """A fresh ``response_url`` on the server at ``base_url`` for a click on ``message``."""
        now = time.monotonic()
        urls = self._urls
        for token in [t for t, u in urls.items() if u.expires <= now]:
            del urls[token]
        while len(urls) >= MAX_RESPONSE_URLS:
            del urls[next(iter(urls))]
        token = secrets.token_urlsafe(18)
        urls[token] = ResponseUrl(
            channel, message.ts, message.thread_ts, user, now + RESPONSE_URL_TTL_S
        )
        return str(URL(base_url).with_path(PATH.format(token=token)))

    async def serve(self, request: web.Request, respond: Respond) -> web.Response:
        """Answer a POST to a ``response_url``: ``respond`` applies its body (an
        :class:`EmulatorError` it raises is the answer); a use is counted when it did."""
        target = self._urls.get(request.match_info["token"])
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
        try:
            await respond(target, params)
        except EmulatorError as exc:
            return web.json_response({"ok": False, "error": exc.code}, status=exc.status)
        target.uses += 1
        return web.json_response({"ok": True})

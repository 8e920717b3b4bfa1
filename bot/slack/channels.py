"""Which channels are public, and links to threads: what past-incident search needs of Slack.

``ChannelDirectory`` answers ``bot.turns.knowledge.Workspace``:

- ``is_public(channel)``: ``conversations.info``'s ``is_private`` (a DM or group DM is
  never public), cached per process for ``ttl_s``. Anything that is not a clear "public"
  — a refusal (``channel_not_found`` for a private channel the bot is not in), a timeout,
  an error — is "not public", remembered for ``failure_ttl_s``: an incident from a
  channel whose privacy is unknown is not shown outside it.
- ``link(channel, ts)``: Slack's permalink form for a message, on the workspace's URL
  from ``auth.test`` (asked once); None while that is unknown.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

PRIVACY_TTL_S = 600.0
FAILURE_TTL_S = 60.0
LOOKUP_TIMEOUT_S = 2.0
MAX_CACHED = 10_000


@dataclass(eq=False)
class ChannelDirectory:
    """Channels' privacy and message links, from the Slack Web API client."""

    client: Any
    ttl_s: float = PRIVACY_TTL_S
    failure_ttl_s: float = FAILURE_TTL_S
    timeout_s: float = LOOKUP_TIMEOUT_S
    clock: Callable[[], float] = time.monotonic
    lookups: int = field(default=0, init=False)
    _public: dict[str, tuple[bool, float]] = field(default_factory=dict, init=False, repr=False)
    _base_url: str | None = field(default=None, init=False, repr=False)

    async def is_public(self, channel: str) -> bool:
        """Whether ``channel`` is a public channel (see the module docstring)."""
        cached = self._public.get(channel)
        now = self.clock()
        if cached is not None and cached[1] > now:
            return cached[0]
        public, ttl = await self._lookup(channel)
        if len(self._public) >= MAX_CACHED:
            self._public.clear()
        self._public[channel] = (public, now + ttl)
        return public

    async def _lookup(self, channel: str) -> tuple[bool, float]:
        self.lookups += 1
        try:
            async with asyncio.timeout(self.timeout_s):
                reply = await self.client.conversations_info(channel=channel)
        except Exception as exc:  # refused, slow, unreachable: not public
            log.info("conversations.info %s: %s; treated as private", channel, exc)
            return False, self.failure_ttl_s
        info = reply.get("channel")
        if not isinstance(info, dict):
            return False, self.failure_ttl_s
        private = (
            info.get("is_private") is not False
            or bool(info.get("is_im"))
            or bool(info.get("is_mpim"))
        )
        return not private, self.ttl_s

    async def link(self, channel: str, ts: str) -> str | None:
        """A permalink to the message ``ts`` in ``channel`` (None while the workspace's
        URL is unknown)."""
        if self._base_url is None:
            try:
                async with asyncio.timeout(self.timeout_s):
                    url = str((await self.client.auth_test()).get("url") or "")
            except Exception:
                return None
            if not url:
                return None
            self._base_url = url if url.endswith("/") else url + "/"
        return f"{self._base_url}archives/{channel}/p{ts.replace('.', '')}"

"""People and channels by name in what people read: ``<@U…>`` → ``@Alice``, ``<#C…>`` → ``#ops``.

Slack's ``markdown`` block (the model's answers, streamed text, task cards' notes) renders
``<@U0123>`` literally: it has no mention syntax. So wherever such text is built, the ids
found in it are first looked up (:meth:`Names.prefetch`: ``users.info`` for people,
``conversations.info`` for channels, at most ``max_lookups`` per text, each bounded by
``timeout_s``), then :func:`render_names` — pure — replaces ``<@U…>``, ``<@U…|label>``,
``<#C…>`` and ``<#C…|name>`` with ``@Name`` / ``#name``. A person's name is their
``profile.display_name``, else ``real_name``, else ``name``; a channel's its ``name``; an id
whose lookup failed, timed out or was not done stays as it is (``@U0123``), so text is
never held up by Slack. Names are cached per process for ``ttl_s``; a failed lookup is
logged at info and remembered for ``failure_ttl_s``, so a failing lookup is not retried for
every message.

Only ``text`` fallbacks and ``mrkdwn`` fields may keep ``<@U…>`` (Slack renders those as
mentions there); nothing here touches them. :func:`mention_safe_end` tells a stream how
much of a growing text can be sent without cutting a ``<@…>`` in two.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Literal

log = logging.getLogger(__name__)

NAME_TTL_S = 600.0  # a name looked up is shown for 10 minutes before it is asked again
FAILURE_TTL_S = 60.0  # a failed lookup is not retried for a minute
LOOKUP_TIMEOUT_S = 2.0  # one users.info / conversations.info
MAX_LOOKUPS = 10  # per text: a text naming hundreds of people asks Slack about ten
MAX_NAME = 80
MAX_TOKEN = 64  # the longest ``<@U…|label>`` a stream holds back while it is incomplete

# ``<@U…>``, ``<@W…>`` (enterprise users), ``<#C…>``/``<#G…>``, each with an optional label.
_TOKEN = re.compile(r"<([@#])([UWCGD][A-Z0-9]+)(?:\|([^<>|]*))?>")

Kind = Literal["user", "channel"]
Lookup = Callable[[Kind, str], Awaitable[str | None]]


def ids_in(text: str) -> list[tuple[Kind, str]]:
    """The people and channels a text mentions, in order, each once."""
    seen: dict[tuple[Kind, str], None] = {}
    for sigil, ident, label in _TOKEN.findall(text):
        if sigil == "#" and label:
            continue  # Slack already wrote the channel's name
        kind: Kind = "user" if sigil == "@" else "channel"
        seen.setdefault((kind, ident), None)
    return list(seen)


def render_names(text: str, users: Mapping[str, str], channels: Mapping[str, str]) -> str:
    """``text`` with every mention of a person or channel written as ``@Name`` / ``#name``
    (the label Slack gave, or the id, when the name is not known)."""

    def one(match: re.Match[str]) -> str:
        sigil, ident, label = match.group(1), match.group(2), match.group(3)
        if sigil == "@":
            return "@" + (users.get(ident) or label or ident)
        return "#" + (label or channels.get(ident) or ident)

    return _TOKEN.sub(one, text)


def mention_safe_end(text: str) -> int:
    """How much of a text still being written can be shown: all of it, unless it ends in
    what may be the start of a mention (``<@U01``), which waits for its ``>``."""
    start = text.rfind("<", max(0, len(text) - MAX_TOKEN))
    if start < 0 or ">" in text[start:]:
        return len(text)
    if re.fullmatch(r"<(?:[@#][A-Z0-9]*(?:\|[^<>|]*)?)?", text[start:]):
        return start
    return len(text)


def person_name(user: Mapping[str, Any]) -> str | None:
    """A ``users.info`` user's name as Slack shows it: display name, real name, handle."""
    profile = user.get("profile") or {}
    for name in (profile.get("display_name"), user.get("real_name"), profile.get("real_name")):
        if isinstance(name, str) and name.strip():
            return name.strip()[:MAX_NAME]
    name = user.get("name")
    return name[:MAX_NAME] if isinstance(name, str) and name else None


def slack_lookup(client: Any) -> Lookup:
    """Look names up with the Slack Web API client (``users.info``, ``conversations.info``)."""

    async def lookup(kind: Kind, ident: str) -> str | None:
        if kind == "user":
            reply = await client.users_info(user=ident)
            user = reply.get("user")
            return person_name(user) if isinstance(user, dict) else None
        reply = await client.conversations_info(channel=ident)
        channel = reply.get("channel")
        name = channel.get("name") if isinstance(channel, dict) else None
        return name[:MAX_NAME] if isinstance(name, str) and name else None

    return lookup


@dataclass(slots=True)
class _Cached:
    name: str | None  # None: the lookup failed; the id is shown
    until: float


@dataclass(eq=False)
class Names:
    """The process's names of people and channels (see the module docstring). Without
    ``lookup`` nothing is looked up: every mention is shown by its label or id."""

    lookup: Lookup | None = None
    _: KW_ONLY
    ttl_s: float = NAME_TTL_S
    failure_ttl_s: float = FAILURE_TTL_S
    timeout_s: float = LOOKUP_TIMEOUT_S
    max_lookups: int = MAX_LOOKUPS
    clock: Callable[[], float] = time.monotonic
    lookups: int = field(default=0, init=False)  # Slack calls made (for tests and the log)
    _cache: dict[tuple[Kind, str], _Cached] = field(default_factory=dict, init=False, repr=False)
    _inflight: dict[tuple[Kind, str], asyncio.Future[None]] = field(
        default_factory=dict, init=False, repr=False
    )

    @classmethod
    def of(cls, client: Any, **options: Any) -> Names:
        """Names looked up with a Slack Web API client."""
        return cls(slack_lookup(client), **options)

    def _fresh(self, key: tuple[Kind, str]) -> _Cached | None:
        cached = self._cache.get(key)
        if cached is not None and cached.until > self.clock():
            return cached
        return None

    async def prefetch(self, *texts: str) -> None:
        """Look up the people and channels ``texts`` mention that are not cached (at most
        ``max_lookups``, at once, each bounded); never raises."""
        if self.lookup is None:
            return
        wanted: list[tuple[Kind, str]] = []
        for text in texts:
            for key in ids_in(text):
                if key not in wanted and self._fresh(key) is None:
                    wanted.append(key)
        waits = [self._start(key) for key in wanted[: self.max_lookups]]
        if waits:
            await asyncio.gather(*waits, return_exceptions=True)

    def _start(self, key: tuple[Kind, str]) -> asyncio.Future[None]:
        running = self._inflight.get(key)
        if running is None:
            running = asyncio.ensure_future(self._look_up(key))
            self._inflight[key] = running
            running.add_done_callback(lambda _: self._inflight.pop(key, None))
        return asyncio.shield(running)

    async def _look_up(self, key: tuple[Kind, str]) -> None:
        kind, ident = key
        assert self.lookup is not None
        self.lookups += 1
        try:
            async with asyncio.timeout(self.timeout_s):
                name = await self.lookup(kind, ident)
        except Exception as exc:  # Slack refused, timed out, or is unreachable
            log.info("no name for %s %s (%s): showing the id", kind, ident, _why(exc))
            name = None
        if name is None:
            self._cache[key] = _Cached(None, self.clock() + self.failure_ttl_s)
        else:
            self._cache[key] = _Cached(name, self.clock() + self.ttl_s)

    def known(self) -> tuple[dict[str, str], dict[str, str]]:
        """The names cached now: (people, channels)."""
        users: dict[str, str] = {}
        channels: dict[str, str] = {}
        now = self.clock()
        for (kind, ident), cached in self._cache.items():
            if cached.name is not None and cached.until > now:
                (users if kind == "user" else channels)[ident] = cached.name
        return users, channels

    def render(self, text: str) -> str:
        """``text`` with the names cached now (:func:`render_names`); synchronous."""
        if "<" not in text:
            return text
        users, channels = self.known()
        return render_names(text, users, channels)

    async def rendered(self, text: str) -> str:
        """``text`` with names, looked up first when not cached."""
        await self.prefetch(text)
        return self.render(text)

    def name_of(self, kind: Kind, ident: str) -> str | None:
        """The cached name of one person or channel, if known."""
        cached = self._fresh((kind, ident))
        return cached.name if cached is not None else None


def _why(exc: BaseException) -> str:
    response = getattr(exc, "response", None)
    if response is not None:
        try:
            return str(response.get("error") or type(exc).__name__)
        except Exception:
            pass
    return type(exc).__name__ or "timeout"

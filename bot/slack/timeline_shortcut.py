"""“Incident timeline”: the message shortcut (callback id ``opsloop_timeline``).

On any message of a thread, the shortcut posts that thread's incident timeline — built
from Redis by ``bot.turns.timeline`` (alerts, requests and replies, jobs, tool calls,
approvals, writes, limits, Stop), rendered by ``bot.knowledge.timeline.to_markdown`` in
UTC, people by name — into the thread as ``incident-timeline-<thread ts>.md`` (Slack's v2
upload, ``bot.slack.files``), with a one-line comment naming how many events and who asked
(``<@U…>``, as the "Full output" file's comment names its asker: a message's text, where
Slack renders mentions; the file itself never holds Slack's ``<…>`` syntax).

The payload is untrusted and checked as the investigate shortcut checks it
(``bot.slack.shortcut.acted_on``: channel, ts and user shaped like Slack's, else nothing
happens); the thread is the message's ``thread_ts``, or its ts when it is a root. The
listener acknowledges at once and does the rest in the background. Reading is all it
does, so anyone in the channel may use it; someone outside the installing workspace is
refused as the other shortcut refuses them (``ApproverPolicy.outsider``). Whatever goes
wrong is told to the person alone, ephemerally through ``response_url``, and nothing is
posted: a thread opsloop has no record of, a store that cannot be read, an upload Slack
refused (with how to add the bot when it is not in the channel, and the CLI command
that prints the same timeline).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Coroutine
from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from bot.errors import StoreError
from bot.knowledge.timeline import Timeline, to_markdown
from bot.records import Thread
from bot.slack.files import post_file
from bot.slack.names import Names
from bot.slack.policy import ApproverPolicy
from bot.slack.posting import note_via_response_url, response_url_of
from bot.slack.shortcut import ActedOn, acted_on, bot_in_channel
from bot.turns.parts import Turns
from bot.turns.timeline import incident_timeline

log = logging.getLogger(__name__)

CALLBACK_TIMELINE = "opsloop_timeline"  # manifest.yml's message shortcut
TITLE = "Incident timeline"
READ_TIMEOUT_S = 20.0  # reading the thread's records from Redis
MAX_NAMED = 30  # people looked up by name for one timeline (the rest show their id)
NO_RECORD = (
    "opsloop has no record of this thread: no alert, request or job of it is kept, "
    "so there is no timeline to post."
)
UNAVAILABLE = "No timeline posted: this thread's records could not be read just now; try again."
NOT_IN_CHANNEL = (
    "I'm not in this channel, so I can't post the timeline here. Add me with "
    "`/invite @opsloop` and use “Incident timeline” again."
)
_USER_ID = re.compile(r"[UW][A-Z0-9]{1,63}")

Background = Callable[[Coroutine[Any, Any, Any], str], None]


def filename(thread: Thread) -> str:
    """``incident-timeline-<thread ts>.md``."""
    return f"incident-timeline-{thread.thread_ts}.md"


def comment(count: int, user: str) -> str:
    """The file's message: how many events, who asked."""
    return f"{TITLE}, {count} event{'s' if count != 1 else ''}, requested by <@{user}>"


def not_posted(thread: Thread) -> str:
    """A failed upload's note: nothing was lost, and where else to read it."""
    return (
        "The incident timeline could not be posted here (Slack refused the file). Nothing is "
        f"lost: use “{TITLE}” again, or run `opsloop timeline {thread.channel}:{thread.thread_ts}`."
    )


class TimelineShortcut:
    """The listener of the “Incident timeline” shortcut."""

    def __init__(
        self,
        *,
        turns: Turns,
        client: AsyncWebClient,
        policy: ApproverPolicy,
        background: Background,
        names: Names | None = None,
    ) -> None:
        self.turns = turns
        self.client = client
        self.policy = policy
        self.background = background
        self.names = names

    async def on_timeline(self, ack: Any, body: dict[str, Any]) -> None:
        await ack()
        acted = acted_on(body)
        if acted is None:
            return
        self.background(self._answer(acted, response_url_of(body)), "incident timeline")

    async def _answer(self, acted: ActedOn, url: str | None) -> None:
        try:
            await self._post(acted, url)
        except Exception:  # a bug here must still leave the person an answer
            log.exception("the timeline of %s failed", acted.thread)
            await self._tell(url, UNAVAILABLE)

    async def _post(self, acted: ActedOn, url: str | None) -> None:
        thread = acted.thread
        if (refusal := await self.policy.outsider(acted.user, acted.team)) is not None:
            await self._tell(url, f"No timeline posted: {refusal}.")
            return
        try:
            async with asyncio.timeout(READ_TIMEOUT_S):
                timeline = await incident_timeline(self.turns.stores, thread)
        except (StoreError, TimeoutError):
            log.warning("the timeline of %s could not be read", thread, exc_info=True)
            await self._tell(url, UNAVAILABLE)
            return
        if not timeline.events:
            log.info("timeline of %s asked by %s: nothing recorded", thread, acted.user)
            await self._tell(url, NO_RECORD)
            return
        text = to_markdown(timeline, names=await self._names(timeline))
        count = len(timeline.events)
        file_id = await post_file(
            self.client,
            channel=thread.channel,
            thread_ts=thread.thread_ts,
            filename=filename(thread),
            content=text,
            title=TITLE,
            comment=comment(count, acted.user),
        )
        if file_id is not None:
            log.info("timeline of %s (%d events) posted for %s", thread, count, acted.user)
            return
        member = await bot_in_channel(self.client, thread)
        await self._tell(url, not_posted(thread) if member else NOT_IN_CHANNEL)

    async def _names(self, timeline: Timeline) -> dict[str, str]:
        """The names of the people the timeline shows (looked up, bounded; never raises)."""
        if self.names is None:
            return {}
        people = list(dict.fromkeys(e.who for e in timeline.events if _USER_ID.fullmatch(e.who)))
        people = people[:MAX_NAMED]
        step = max(1, self.names.max_lookups)
        for at in range(0, len(people), step):
            await self.names.prefetch("".join(f"<@{p}>" for p in people[at : at + step]))
        return {p: n for p in people if (n := self.names.name_of("user", p))}

    async def _tell(self, url: str | None, text: str) -> None:
        if url is not None:
            await note_via_response_url(url, text)


def register(
    app: AsyncApp,
    *,
    turns: Turns,
    client: AsyncWebClient,
    policy: ApproverPolicy,
    background: Background,
    names: Names | None = None,
) -> TimelineShortcut:
    """Listen to the “Incident timeline” shortcut on ``app``."""
    shortcut = TimelineShortcut(
        turns=turns, client=client, policy=policy, background=background, names=names
    )
    app.shortcut(CALLBACK_TIMELINE)(shortcut.on_timeline)
    return shortcut

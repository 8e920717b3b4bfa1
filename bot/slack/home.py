"""App Home: ``app_home_opened`` → ``views.publish`` of what opsloop is doing.

The home shows the live jobs (channel, requester, state, a link to the thread), the
cards waiting for a decision (and who may decide them), the viewer's own recent jobs,
and what this deployment is configured with (packs, MCP servers, approvers, limits).
It is read from Redis (``bot.turns.home``), so every process renders the same home,
and built by ``home_view``, a pure function of that state kept within Block Kit's view
limits (``MAX_VIEW_BLOCKS`` blocks, ``MAX_SECTION`` characters a section): each list
is one section of at most ``SHOWN`` lines, each line cut, so even a workspace with
thousands of jobs renders a bounded home, newest first.

What it shows is current and readable: jobs awaiting approval count as live, states are
Unicode emoji (a shortcode Slack does not know would show as text), channels are named
(``bot.slack.names``: ``#ops``, not an id), and a thread that no longer exists in Slack
(``conversations.replies`` answers ``thread_not_found``; looked at once per publish,
bounded, remembered for ``GONE_TTL_S``) gets no link.

The listener only schedules the publish (off the ack path): ``views.publish`` is a
Slack call, and a slow Slack must not make Slack retry the event.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.actions import Interactions
from bot.slack.blockkit import (
    MAX_HEADER,
    MAX_SECTION,
    Block,
    context_block,
    cut,
    duration,
    escaped,
    hhmm,
    mention,
    section_block,
)
from bot.slack.cards import whom_to_ask
from bot.slack.names import Names
from bot.turns.home import SHOWN, Configured, Home, HomeCard, HomeJob, configured, read_home
from bot.turns.parts import Turns

log = logging.getLogger(__name__)

MAX_VIEW_BLOCKS = 100  # Slack's limit for a home or modal view
MAX_LINE = MAX_SECTION // (SHOWN + 2)  # one list's lines share one section
HOME_TAB = "home"
STATUS_EMOJI = {
    "queued": "⏳",
    "running": "⚙️",
    "awaiting_approval": "✋",
    "completed": "✅",
    "cancelled": "⏹️",
    "failed": "❌",
}
OTHER_STATUS = "⏱️"
CARD_EMOJI = "✋"
DM_PREFIX = "D"
THREAD_CHECK_S = 2.0  # all of one publish's looks at whether its threads still exist
GONE_TTL_S = 600.0
GONE_ERRORS = frozenset({"thread_not_found", "channel_not_found", "is_archived"})
Where = tuple[str, str]  # (channel, thread ts)

Background = Callable[[Coroutine[Any, Any, Any], str], None]


def thread_link(
    base_url: str | None,
    channel: str,
    thread_ts: str,
    *,
    channels: Mapping[str, str] | None = None,
    gone: Collection[Where] = (),
) -> str:
    """A mrkdwn link to a thread (Slack's permalink form), or where it is: the channel by
    name when known, and no link to a thread that no longer exists."""
    name = (channels or {}).get(channel)
    if channel.startswith(DM_PREFIX):
        where = "assistant pane (DM)"
    else:
        where = f"#{escaped(name, 80)}" if name else f"<#{channel}>"
    if (channel, thread_ts) in gone:
        return f"{where} (thread deleted)"
    if not base_url:
        return where
    return f"{where} <{base_url}archives/{channel}/p{thread_ts.replace('.', '')}|thread>"


def _line(text: str) -> str:
    return cut(text, MAX_LINE)


def _lines(lines: Sequence[str], total: int, empty: str) -> str:
    if not lines:
        return f"_{empty}_"
    more = total - len(lines)
    tail = [f"_…and {more} more_"] if more > 0 else []
    return cut("\n".join([*lines, *tail]), MAX_SECTION)


def job_line(
    job: HomeJob,
    base_url: str | None,
    *,
    now: float,
    channels: Mapping[str, str] | None = None,
    gone: Collection[Where] = (),
) -> str:
    emoji = STATUS_EMOJI.get(job.status, OTHER_STATUS)
    ago = duration(max(now - job.created_at, 0.0))
    link = thread_link(base_url, job.channel, job.thread_ts, channels=channels, gone=gone)
    return _line(
        f"{emoji} {link} · {mention(job.requester)}"
        f" · `{escaped(job.status, 40)}` · started {ago} ago"
    )


def card_line(
    card: HomeCard,
    base_url: str | None,
    approvers: Sequence[str],
    *,
    channels: Mapping[str, str] | None = None,
    gone: Collection[Where] = (),
) -> str:
    who = whom_to_ask(approvers) if approvers else "anyone but the bot"
    if card.destructive:
        who += f", not {mention(card.requester)} (two-person rule)"
    kind = "destructive" if card.destructive else "change"
    link = thread_link(base_url, card.channel, card.thread_ts, channels=channels, gone=gone)
    return _line(
        f"{CARD_EMOJI} `{escaped(card.tool, 80)}` ({kind}){_card_link(card, base_url, gone)} "
        f"in {link} · asked by {mention(card.requester)} · may approve: {who} · "
        f"expires {hhmm(card.expires_at)}"
    )


def _card_link(card: HomeCard, base_url: str | None, gone: Collection[Where]) -> str:
    """`` <…|card>``: the card message itself, in its thread (Slack's permalink form for a
    reply); nothing for a card in the pane's approval channel or a deleted thread."""
    if (
        not base_url
        or not card.card_ts
        or card.channel.startswith(DM_PREFIX)
        or (card.channel, card.thread_ts) in gone
    ):
        return ""
    ts = card.card_ts.replace(".", "")
    query = f"thread_ts={card.thread_ts}&cid={card.channel}"
    return f" <{base_url}archives/{card.channel}/p{ts}?{query}|card>"


def config_text(config: Configured, approvers: Sequence[str]) -> str:
    packs = ", ".join(f"`{escaped(p, 40)}`" for p in config.packs) or "none"
    servers = ", ".join(f"`{escaped(s, 60)}`" for s in config.mcp_servers) or "none"
    who = whom_to_ask(approvers) if approvers else "anyone but the bot"
    return cut(
        f"*Packs:* {packs}\n*MCP servers:* {servers}\n*Tools:* {config.tools}\n"
        f"*Approvers:* {who} (destructive tools: never the requester)\n"
        f"*Limits per job:* {config.max_iterations} iterations · "
        f"{duration(config.deadline_s)} · {config.token_budget:,} tokens · "
        f"cards valid {duration(config.approval_ttl_s)}",
        MAX_SECTION,
    )


def home_view(
    home: Home,
    config: Configured,
    *,
    approvers: Sequence[str],
    base_url: str | None,
    now: float,
    channels: Mapping[str, str] | None = None,
    gone: Collection[Where] = (),
) -> dict[str, Any]:
    """The App Home view (``views.publish``'s ``view``), within Block Kit's limits;
    ``channels`` names channels, ``gone`` are threads that no longer exist (no link)."""
    live = [job_line(j, base_url, now=now, channels=channels, gone=gone) for j in home.live]
    cards = [card_line(c, base_url, approvers, channels=channels, gone=gone) for c in home.cards]
    mine = [job_line(j, base_url, now=now, channels=channels, gone=gone) for j in home.mine]
    blocks: list[Block] = [
        {"type": "header", "text": {"type": "plain_text", "text": "opsloop"[:MAX_HEADER]}},
        section_block(f"*Live jobs* ({home.live_total})", block_id="live_title"),
        section_block(_lines(live, home.live_total, "No job is running."), block_id="live"),
        {"type": "divider"},
        section_block(f"*Waiting for a decision* ({home.cards_total})", block_id="cards_title"),
        section_block(_lines(cards, home.cards_total, "No card is waiting."), block_id="cards"),
        {"type": "divider"},
        section_block("*Your recent jobs*", block_id="mine_title"),
        section_block(_lines(mine, len(mine), "You have started no job yet."), block_id="mine"),
        {"type": "divider"},
        section_block("*Configuration*", block_id="config_title"),
        section_block(config_text(config, approvers), block_id="config"),
        context_block(f"Updated {hhmm(now)} · newest first, at most {SHOWN} of each"),
    ]
    return {"type": "home", "blocks": blocks[:MAX_VIEW_BLOCKS]}


@dataclass
class HomeTab:
    client: AsyncWebClient
    turns: Turns
    approvers: Sequence[str]
    background: Background
    names: Names | None = None  # the process's (a tab of its own when not given)
    _base_url: str | None = field(default=None, init=False)
    _gone: dict[Where, float] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        if self.names is None:
            self.names = Names.of(self.client)

    async def _exists(self, where: Where) -> bool:
        channel, thread_ts = where
        try:
            await self.client.conversations_replies(channel=channel, ts=thread_ts, limit=1)
        except Exception as exc:
            error = getattr(getattr(exc, "response", None), "get", lambda _: None)("error")
            return error not in GONE_ERRORS  # unknown: keep the link
        return True

    async def gone_threads(self, home: Home, *, now: float) -> set[Where]:
        """The shown threads Slack no longer has (each looked at once per ``GONE_TTL_S``
        at most; all within ``THREAD_CHECK_S``; a thread Slack did not answer for stays)."""
        shown = {(j.channel, j.thread_ts) for j in (*home.live, *home.mine)}
        shown |= {(c.channel, c.thread_ts) for c in home.cards}
        gone = {w for w, until in self._gone.items() if until > now and w in shown}
        ask = [w for w in shown - gone if not w[0].startswith(DM_PREFIX)]
        if ask:
            tasks = [asyncio.ensure_future(self._exists(w)) for w in ask]
            done, pending = await asyncio.wait(tasks, timeout=THREAD_CHECK_S)
            for task in pending:
                task.cancel()
            for where, task in zip(ask, tasks, strict=True):
                if task in done and not task.cancelled() and task.result() is False:
                    gone.add(where)
                    self._gone[where] = now + GONE_TTL_S
        return gone

    async def channel_names(self, home: Home) -> dict[str, str]:
        """The names of the channels the home shows (looked up, bounded)."""
        assert self.names is not None
        ids = {j.channel for j in (*home.live, *home.mine)} | {c.channel for c in home.cards}
        ids = {c for c in ids if not c.startswith(DM_PREFIX)}
        await self.names.prefetch(" ".join(f"<#{c}>" for c in sorted(ids)))
        return {c: n for c in ids if (n := self.names.name_of("channel", c)) is not None}

    async def on_home_opened(self, event: dict[str, Any]) -> None:
        user = event.get("user")
        if event.get("tab", HOME_TAB) != HOME_TAB or not isinstance(user, str) or not user:
            return
        self.background(self.publish(user), "app home")

    async def base_url(self) -> str | None:
        if self._base_url is None:
            try:
                url = str((await self.client.auth_test()).get("url") or "")
            except Exception:
                log.info("auth.test failed: App Home links name channels only", exc_info=True)
                return None
            self._base_url = url if url.endswith("/") else url + "/"
        return self._base_url or None

    async def publish(self, user: str) -> None:
        """Render ``user``'s home from Redis and publish it (best effort)."""
        now = time.time()
        try:
            home = await read_home(self.turns, user, now=now)
            channels, gone = await asyncio.gather(
                self.channel_names(home), self.gone_threads(home, now=now)
            )
            view = home_view(
                home,
                configured(self.turns),
                approvers=self.approvers,
                base_url=await self.base_url(),
                now=now,
                channels=channels,
                gone=gone,
            )
            await self.client.views_publish(user_id=user, view=view)
        except Exception:
            log.warning("App Home for %s not published", user, exc_info=True)


def register(app: AsyncApp, *, interactions: Interactions, names: Names | None = None) -> HomeTab:
    """Listen for ``app_home_opened`` (``manifest.yml``: the ``app_home`` feature and
    the event); ``names`` is the process's cache of people and channels."""
    tab = HomeTab(
        client=interactions.client,
        turns=interactions.turns,
        approvers=interactions.policy.approvers,
        background=interactions.background,
        names=names,
    )
    app.event("app_home_opened")(tab.on_home_opened)
    return tab

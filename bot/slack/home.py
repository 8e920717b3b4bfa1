"""App Home: ``app_home_opened`` → ``views.publish`` of what opsloop is doing.

The home shows the live jobs (channel, requester, state, a link to the thread), the
cards waiting for a decision (and who may decide them), the viewer's own recent jobs,
and what this deployment is configured with (packs, MCP servers, approvers, limits).
It is read from Redis (``bot.turns.home``), so every process renders the same home,
and built by ``home_view``, a pure function of that state kept within Block Kit's view
limits (``MAX_VIEW_BLOCKS`` blocks, ``MAX_SECTION`` characters a section): each list
is one section of at most ``SHOWN`` lines, each line cut, so even a workspace with
thousands of jobs renders a bounded home, newest first.

The listener only schedules the publish (off the ack path): ``views.publish`` is a
Slack call, and a slow Slack must not make Slack retry the event.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Coroutine, Sequence
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
from bot.turns.home import SHOWN, Configured, Home, HomeCard, HomeJob, configured, read_home
from bot.turns.runner import Turns

log = logging.getLogger(__name__)

MAX_VIEW_BLOCKS = 100  # Slack's limit for a home or modal view
MAX_LINE = MAX_SECTION // (SHOWN + 2)  # one list's lines share one section
HOME_TAB = "home"
STATUS_EMOJI = {
    "queued": ":hourglass_flowing_sand:",
    "running": ":gear:",
    "awaiting_approval": ":raised_hand:",
    "completed": ":white_check_mark:",
    "cancelled": ":black_square_for_stop:",
    "failed": ":x:",
}
DM_PREFIX = "D"

Background = Callable[[Coroutine[Any, Any, Any], str], None]


def thread_link(base_url: str | None, channel: str, thread_ts: str) -> str:
    """A mrkdwn link to a thread (Slack's permalink form), or where it is."""
    where = "assistant pane (DM)" if channel.startswith(DM_PREFIX) else f"<#{channel}>"
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


def job_line(job: HomeJob, base_url: str | None, *, now: float) -> str:
    emoji = STATUS_EMOJI.get(job.status, ":stopwatch:")
    ago = duration(max(now - job.created_at, 0.0))
    return _line(
        f"{emoji} {thread_link(base_url, job.channel, job.thread_ts)} · {mention(job.requester)}"
        f" · `{escaped(job.status, 40)}` · started {ago} ago"
    )


def card_line(card: HomeCard, base_url: str | None, approvers: Sequence[str]) -> str:
    who = whom_to_ask(approvers) if approvers else "anyone but the bot"
    if card.destructive:
        who += f", not {mention(card.requester)} (two-person rule)"
    kind = "destructive" if card.destructive else "change"
    return _line(
        f":raised_hand: `{escaped(card.tool, 80)}` ({kind}) in "
        f"{thread_link(base_url, card.channel, card.thread_ts)} · asked by "
        f"{mention(card.requester)} · may approve: {who} · expires {hhmm(card.expires_at)}"
    )


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
) -> dict[str, Any]:
    """The App Home view (``views.publish``'s ``view``), within Block Kit's limits."""
    live = [job_line(j, base_url, now=now) for j in home.live]
    cards = [card_line(c, base_url, approvers) for c in home.cards]
    mine = [job_line(j, base_url, now=now) for j in home.mine]
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
    _base_url: str | None = field(default=None, init=False)

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
            view = home_view(
                home,
                configured(self.turns),
                approvers=self.approvers,
                base_url=await self.base_url(),
                now=now,
            )
            await self.client.views_publish(user_id=user, view=view)
        except Exception:
            log.warning("App Home for %s not published", user, exc_info=True)


def register(app: AsyncApp, *, interactions: Interactions) -> HomeTab:
    """Listen for ``app_home_opened`` (``manifest.yml``: the ``app_home`` feature and
    the event)."""
    tab = HomeTab(
        client=interactions.client,
        turns=interactions.turns,
        approvers=interactions.policy.approvers,
        background=interactions.background,
    )
    app.event("app_home_opened")(tab.on_home_opened)
    return tab

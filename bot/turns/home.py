"""What App Home shows, read from Redis so any process renders the same home.

``read_home`` gathers, in a few bounded round trips: the live jobs (the newest of the
workspace's recent-jobs index that are still ``queued``, ``running`` or
``awaiting_approval``, with the live total from the scanner's index), the cards waiting
for a decision (the approval-expiry index, soonest to expire first, each re-read and
kept only while pending), and the viewer's own newest jobs. ``configured`` says what
this deployment runs with (packs, MCP servers, limits). Every list is cut to ``shown``;
the Slack edge (``bot.slack.home``) renders it within Block Kit's limits.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from bot.store.approvals import ApprovalRecord, parse_index_member
from bot.store.buckets import merged, read_buckets
from bot.store.jobs import JobRecord
from bot.turns.parts import Turns

SHOWN = 10  # of each list
CARDS_READ = 50  # pending cards looked at (the soonest to expire)
PACK_SOURCE = "built-in:"


@dataclass(frozen=True, slots=True, kw_only=True)
class HomeJob:
    id: str
    channel: str
    thread_ts: str
    requester: str
    status: str
    created_at: float
    updated_at: float


@dataclass(frozen=True, slots=True, kw_only=True)
class HomeCard:
    job_id: str
    tool: str
    destructive: bool
    channel: str
    thread_ts: str
    card_ts: str | None
    requester: str
    requested_at: float
    expires_at: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Configured:
    packs: tuple[str, ...]
    mcp_servers: tuple[str, ...]
    tools: int
    max_iterations: int
    deadline_s: float
    token_budget: int
    approval_ttl_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Home:
    live: tuple[HomeJob, ...]
    live_total: int
    cards: tuple[HomeCard, ...]
    cards_total: int
    mine: tuple[HomeJob, ...]


def _job(record: JobRecord) -> HomeJob:
    return HomeJob(
        id=record.id,
        channel=record.channel,
        thread_ts=record.thread_ts,
        requester=record.requester,
        status=record.status.value,
        created_at=record.created_at,
        updated_at=record.updated_at,
    )


def _card(record: ApprovalRecord) -> HomeCard:
    return HomeCard(
        job_id=record.job_id,
        tool=record.tool,
        destructive=record.category == "destructive",
        channel=record.channel,
        thread_ts=record.thread_ts,
        card_ts=record.card_ts,
        requester=record.requester,
        requested_at=record.requested_at,
        expires_at=record.expires_at,
    )


async def read_home(turns: Turns, user: str, *, now: float, shown: int = SHOWN) -> Home:
    """The home of ``user`` (see the module docstring)."""
    recent = turns.stores.recent
    counts = await turns.stores.live_counts()
    newest, mine_ids = await asyncio.gather(recent.newest(), recent.newest(user, limit=shown))
    records, mine = await asyncio.gather(recent.records(newest), recent.records(mine_ids))
    live = [_job(r) for r in records if not r.status.final][:shown]

    def read(pipe: Any, key: str) -> None:
        pipe.zrange(key, 0, CARDS_READ - 1, withscores=True)

    soonest = await read_buckets(
        turns.stores.redis, "home cards", turns.stores.keys.approval_expiries, read
    )
    pairs = [parse_index_member(m) for m, _ in merged(soonest, CARDS_READ)]
    found = await asyncio.gather(*(turns.stores.approvals.get(j, c) for j, c in pairs))
    pending = [a for a in found if a is not None and a.status == "pending" and a.expires_at > now]
    pending.sort(key=lambda a: a.requested_at, reverse=True)
    return Home(
        live=tuple(live),
        live_total=max(counts.jobs, len(live)),
        cards=tuple(_card(a) for a in pending[:shown]),
        cards_total=max(counts.pending_approvals, len(pending)),
        mine=tuple(_job(r) for r in mine[:shown]),
    )


def configured(turns: Turns) -> Configured:
    """What this deployment runs with (the same in every process of it)."""
    catalog = turns.catalog
    packs = sorted(
        {s.removeprefix(PACK_SOURCE) for s in catalog.sources.values() if s.startswith(PACK_SOURCE)}
    )
    limits = turns.settings.limits
    return Configured(
        packs=tuple(packs),
        mcp_servers=tuple(s.name for s in catalog.mcp_servers),
        tools=len(catalog.tools),
        max_iterations=limits.max_iterations,
        deadline_s=limits.deadline_s,
        token_budget=limits.token_budget,
        approval_ttl_s=turns.settings.approval_ttl_s,
    )

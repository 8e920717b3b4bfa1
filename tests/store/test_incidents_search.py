"""Searching past incidents: BM25 ranks the right record first however it is asked for,
and records of channels the reader may not see never come back."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from bot.store.incident_index import query_terms, tokens
from bot.store.incidents import Incidents
from bot.store.keys import Keys

from .incident_kit import PRIVATE, RETENTION, T0, TARGETS, corpus, everyone, public_only, record


@pytest.fixture
async def store(redis: aioredis.Redis, keys: Keys) -> Incidents:
    incidents = Incidents(redis, keys)
    for one in corpus():
        await incidents.add(one, retention_s=RETENTION, now=T0 + 50 * 3600)
    return incidents


@pytest.mark.parametrize(
    ("query", "wanted"),
    [
        ("disk full on db-02", "disk"),
        ("postgres wal growing", "disk"),
        ("DiskAlmostFull", "disk"),
        ("archive_command credentials", "disk"),
        ("kafka consumer lag", "kafka"),
        ("orders topic rebalance", "kafka"),
        ("max.poll.interval.ms exceeded", "kafka"),
        ("pods cannot resolve internal names NXDOMAIN", "dns"),
        ("coredns throttled", "dns"),
        ("certificate expiring", "cert"),
        ("cert-manager acme challenge failing", "cert"),
    ],
)
async def test_the_right_record_ranks_first(store: Incidents, query: str, wanted: str) -> None:
    hits = await store.search(query, limit=5, visible=everyone)
    assert hits, query
    assert hits[0].record == TARGETS[wanted]
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


async def test_service_and_host_questions_find_their_records(store: Incidents) -> None:
    hits = await store.search("inventory memory keeps growing", limit=3, visible=everyone)
    assert "inventory" in hits[0].record.request and "memory" in hits[0].record.request
    hits = await store.search("web-02 tls handshake", limit=3, visible=everyone)
    assert "tls handshake" in hits[0].record.request


async def test_private_records_stay_hidden_and_the_limit_is_still_reached(
    store: Incidents,
) -> None:
    everything = await store.search("latency slow query index", limit=20, visible=everyone)
    assert any(h.record.channel == PRIVATE for h in everything)

    asked: list[str] = []

    async def visible(channel: str) -> bool:
        asked.append(channel)
        return await public_only(channel)

    hits = await store.search("latency slow query index", limit=5, visible=visible)
    assert len(hits) == 5
    assert all(h.record.channel != PRIVATE for h in hits)
    assert sorted(asked) == sorted(set(asked))  # each channel asked about once
    expected = [h.record for h in everything if h.record.channel != PRIVATE][:5]
    assert [h.record for h in hits] == expected


async def test_equal_scores_rank_the_newer_first(redis: aioredis.Redis, keys: Keys) -> None:
    store = Incidents(redis, keys)
    old = record("redis evictions", "same answer", at=T0, n=1)
    new = record("redis evictions", "same answer", at=T0 + 60, n=2)
    for one in (old, new):
        await store.add(one, retention_s=RETENTION, now=T0 + 60)
    hits = await store.search("redis evictions", visible=everyone)
    assert [h.record for h in hits] == [new, old]
    assert hits[0].score == hits[1].score


def test_hostnames_are_one_term_and_their_parts() -> None:
    assert tokens("web-03 down, db-01.prod too") == [
        "web-03", "web", "03", "down", "db-01.prod", "db", "01", "prod",
    ]  # fmt: skip
    assert tokens("The 1700000000 is a timestamp") == ["timestamp"]
    assert query_terms("a b c " + "x" * 50).terms == []
    assert len(query_terms(" ".join(f"w{n}" for n in range(50))).terms) == 12
    asked = query_terms("web-03 web is slow")
    assert asked.terms == ["web-03", "web", "03", "slow"]
    assert asked.part_of == {"03": "web-03"}  # "web" is also asked for on its own
    assert asked.ranked({"web-03": "p1", "web": "p2", "03": "p3", "slow": "p4"}) == [
        "p1", "p2", "p4",
    ]  # fmt: skip
    assert asked.ranked({"web-03": "", "web": "p2", "03": "p3", "slow": "p4"}) == [
        "", "p2", "p3", "p4",
    ]  # fmt: skip

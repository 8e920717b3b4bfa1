"""Searching past incidents: BM25 ranks the right record first however it is asked for,
and records of channels the reader may not see never come back."""

from __future__ import annotations

import random

import pytest
import redis.asyncio as aioredis

from bot.store.incident_index import LENGTH_OF_BYTE, bm25, idf, query_terms, tokens
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


def _plain_bm25(
    packed: list[str], lens: str, lo: int, avg: float, top: int
) -> list[tuple[int, float]]:
    """BM25 the slow, obvious way (every posting of every term), for comparison."""
    length_bytes, n_docs = bytes.fromhex(lens), len(lens) // 2 + lo
    scores: dict[int, float] = {}
    for one in packed:
        postings = [
            (int(one[i : i + 6], 16), int(one[i + 6 : i + 8], 16)) for i in range(0, len(one), 8)
        ]
        postings = [(doc, tf) for doc, tf in postings if doc >= lo]
        weight = idf(n_docs, len(postings)) * 2.2 if postings else 0.0
        for doc, tf in postings:
            if length_bytes[doc - lo]:
                norm = 1.2 * (0.25 + 0.75 * LENGTH_OF_BYTE[length_bytes[doc - lo]] / avg)
                scores[doc] = scores.get(doc, 0.0) + weight * tf / (tf + norm)
    best = sorted(((score, doc) for doc, score in scores.items()), reverse=True)[:top]
    return [(doc, score) for score, doc in best]


def test_ranking_skips_no_record_that_belongs_in_the_top() -> None:
    rng = random.Random(5)
    for _ in range(60):
        n_docs, lo = rng.randint(50, 2_000), rng.randint(0, 20)
        lens = "".join(
            f"{0 if rng.random() < 0.02 else rng.randint(1, 255):02x}" for _ in range(n_docs - lo)
        )
        packed = []
        for _ in range(rng.randint(1, 6)):
            docs = sorted(rng.sample(range(n_docs), rng.randint(1, n_docs)))
            packed.append("".join(f"{d:06x}{rng.choice([1, 1, 1, 2, 3, 7]):02x}" for d in docs))
        avg, top = rng.uniform(20, 200), rng.choice([5, 50, 200])
        got = bm25(packed, lens, lo=lo, n_docs=n_docs, avg_length=avg, top=top)
        wanted = _plain_bm25(packed, lens, lo, avg, top)
        assert [doc for doc, _ in got] == [doc for doc, _ in wanted]
        assert [score for _, score in got] == pytest.approx([score for _, score in wanted])

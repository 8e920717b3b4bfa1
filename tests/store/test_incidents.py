"""The incident record in Redis: round trip, replacing by id, feedback, a restart,
bounds and the records of one alert."""

from __future__ import annotations

import redis.asyncio as aioredis

from bot.store.incidents import (
    ANSWER_CHARS,
    IncidentApproval,
    IncidentRecord,
    Incidents,
    IncidentWrite,
)
from bot.store.keys import Keys

from .incident_kit import PRIVATE, RETENTION, T0, everyone, public_only, record


async def test_a_record_comes_back_as_it_was_added(redis: aioredis.Redis, keys: Keys) -> None:
    store = Incidents(redis, keys)
    added = record(
        alertname="HighErrorRate",
        alert_labels={"service": "checkout-api"},
        tools=["prometheus_query", "k8s_scale"],
        approvals=[IncidentApproval(tool="k8s_scale", decision="approved", by="U0BOB")],
        writes=[IncidentWrite(tool="k8s_scale", outcome="done", confirmed_by="U0BOB")],
        cost_usd=0.12,
    )
    await store.add(added, retention_s=RETENTION, now=T0)

    assert await store.get(added.id) == added
    assert await store.get("C0NONE:1.000000:j1") is None
    assert await store.count() == 1


async def test_adding_the_same_id_again_replaces_it(redis: aioredis.Redis, keys: Keys) -> None:
    store = Incidents(redis, keys)
    first = record("nginx down on web-03", "restarted nginx", n=7)
    await store.add(first, retention_s=RETENTION, now=T0)
    again = record("nginx down on web-03", "the disk was full; cleaned /var/log", n=7)
    await store.add(again, retention_s=RETENTION, now=T0)
    await store.add(again, retention_s=RETENTION, now=T0)

    assert await store.count() == 1
    assert await store.get(first.id) == again
    hits = await store.search("nginx web-03", visible=everyone)
    assert [hit.record for hit in hits] == [again]
    assert await store.search("restarted", visible=everyone) == []  # the old text is gone
    meta = await redis.hgetall(keys.incidents("meta"))
    assert meta["n"] == "1"
    assert await redis.hlen(keys.incidents("ids")) == 1
    assert await redis.zcard(keys.incidents("time")) == 1


async def test_feedback_is_shown_on_the_record(redis: aioredis.Redis, keys: Keys) -> None:
    store = Incidents(redis, keys)
    added = record()
    await store.add(added, retention_s=RETENTION, now=T0)
    ttl_before = await redis.pttl(keys.incidents("r:0"))

    await store.set_feedback(added.id, "U0ALICE", "+1")
    await store.set_feedback(added.id, "U0BOB", "+1")
    updated = await store.set_feedback(added.id, "U0ALICE", "-1")  # changed her mind

    assert updated is not None and updated.feedback == {"U0BOB": "+1", "U0ALICE": "-1"}
    got = await store.get(added.id)
    assert got is not None and got.feedback == {"U0BOB": "+1", "U0ALICE": "-1"}
    [hit] = await store.search("checkout slow", visible=everyone)
    assert hit.record.feedback == {"U0BOB": "+1", "U0ALICE": "-1"}
    ttl_after = await redis.pttl(keys.incidents("r:0"))
    assert 0 < ttl_after <= ttl_before  # kept, not reset or removed
    assert await store.set_feedback("C0NONE:1.000000:j1", "U0BOB", "+1") is None


async def test_records_survive_a_new_store(redis: aioredis.Redis, keys: Keys) -> None:
    before = Incidents(redis, keys)
    added = record("replication lag on db-01", "a long vacuum blocked replay", alertname="Lag")
    await before.add(added, retention_s=RETENTION, now=T0)

    after = Incidents(redis, keys)  # a restarted process: nothing kept in memory
    assert await after.get(added.id) == added
    assert [h.record for h in await after.search("db-01 lag", visible=everyone)] == [added]
    assert await after.by_alert("Lag", visible=everyone) == [added]
    assert await after.count() == 1


async def test_bounds_cut_and_never_refuse(redis: aioredis.Redis, keys: Keys) -> None:
    big = record(
        "why " * 400,
        "because " * 400,
        tools=[f"tool_{n}" for n in range(30)] + ["tool_0"],
        approvals=[IncidentApproval(tool="t", decision="denied", arguments="x" * 500)] * 15,
        writes=[IncidentWrite(tool="t", outcome="unknown")] * 15,
        alertname="A\x1fB\nC",
    )
    assert len(big.request) == 500 and big.request.endswith("…")
    assert len(big.answer) == ANSWER_CHARS and big.answer.endswith("…")
    assert big.tools == [f"tool_{n}" for n in range(20)]
    assert len(big.approvals) == 10 and len(big.approvals[0].arguments) == 200
    assert len(big.writes) == 10
    assert big.alertname == "A B C"  # no control characters: the index uses them

    store = Incidents(redis, keys)
    await store.add(big, retention_s=RETENTION, now=T0)
    assert await store.get(big.id) == big
    stored = await redis.hget(keys.incidents("x:0"), "0")
    assert isinstance(stored, str) and stored.count("\x1f") == 2


async def test_search_and_by_alert_bound_what_they_are_asked(
    redis: aioredis.Redis, keys: Keys
) -> None:
    store = Incidents(redis, keys)
    for n in range(30):
        await store.add(
            record(f"checkout error {n}", alertname="HighErrorRate", at=T0 + n, n=n),
            retention_s=RETENTION,
            now=T0 + 60,
        )
    assert len(await store.search("checkout error", limit=100, visible=everyone)) == 20
    assert len(await store.search("checkout error", limit=0, visible=everyone)) == 1
    assert len(await store.search("checkout " * 5_000, visible=everyone)) == 5
    assert await store.search("the and of", visible=everyone) == []  # stop words only
    assert await store.search("", visible=everyone) == []
    assert len(await store.by_alert("HighErrorRate", limit=50, visible=everyone)) == 20


async def test_by_alert_is_newest_first(redis: aioredis.Redis, keys: Keys) -> None:
    store = Incidents(redis, keys)
    made: list[IncidentRecord] = []
    for n in range(6):
        one = record(
            f"disk full {n}",
            alertname="DiskAlmostFull",
            channel=PRIVATE if n == 4 else "C0OPS",
            at=T0 + n * 3600,
            n=n,
        )
        made.append(one)
    for one in reversed(made):  # the order added does not matter, the start does
        await store.add(one, retention_s=RETENTION, now=T0 + 6 * 3600)
    await store.add(record(alertname="Other", n=99), retention_s=RETENTION, now=T0)

    newest = await store.by_alert("DiskAlmostFull", visible=everyone)
    assert [r.id for r in newest] == [made[5].id, made[4].id, made[3].id]
    seen = await store.by_alert("DiskAlmostFull", limit=3, visible=public_only)
    assert [r.id for r in seen] == [made[5].id, made[3].id, made[2].id]
    earlier = await store.by_alert(
        "DiskAlmostFull", limit=2, visible=everyone, before=T0 + 3 * 3600
    )
    assert [r.id for r in earlier] == [made[2].id, made[1].id]
    assert await store.by_alert("NoSuchAlert", visible=everyone) == []

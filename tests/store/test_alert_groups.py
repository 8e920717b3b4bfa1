"""Alert groups on a real store: one incident per group while it fires, each change
written once with its work item, repeats adding nothing, a refire opening a new episode,
and the work taken by one process at a time."""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis

from bot.store.alerts import AlertGroups, GroupChange, group_id
from bot.store.keys import Keys

GROUP = '{}:{alertname="HighCPU"}'


async def receive(groups: AlertGroups, states: dict[str, str], status: str = "firing") -> str:
    change = GroupChange(GROUP, status, states, "HighCPU", f'{{"states": {len(states)}}}')
    receipt = await groups.receive(change, channel="C0ALERTS", investigate="yes")
    return receipt.outcome


async def test_a_group_opens_once_and_each_change_is_one_work_item(
    redis: aioredis.Redis, keys: Keys
) -> None:
    groups = AlertGroups(redis, keys)
    gid = group_id(GROUP)
    assert await receive(groups, {"a": "firing"}) == "opened"
    assert await receive(groups, {"a": "firing"}) == "repeat"  # repeat_interval, a retry
    assert await receive(groups, {"a": "firing", "b": "firing"}) == "updated"
    assert await receive(groups, {"a": "resolved", "b": "firing"}) == "updated"
    assert await receive(groups, {"a": "resolved", "b": "resolved"}, "resolved") == "resolved"
    assert await receive(groups, {"a": "resolved", "b": "resolved"}, "resolved") == "repeat"

    kinds = []
    while (work := await groups.next_work(gid)) is not None:
        kinds.append((work.kind, work.episode, work.changed))
        await groups.work_done(gid)
    assert kinds == [
        ("open", 1, ()),
        ("update", 1, ("b",)),
        ("update", 1, ("a",)),
        ("resolve", 1, ("b",)),
    ]
    group = await groups.get(gid)
    assert group is not None and group.status == "resolved" and group.resolved_at is not None
    assert await groups.due(now=1e12) == [gid]


async def test_a_refire_after_resolution_is_a_new_episode_and_old_fields_are_kept_apart(
    redis: aioredis.Redis, keys: Keys
) -> None:
    groups = AlertGroups(redis, keys)
    gid = group_id(GROUP)
    await receive(groups, {"a": "firing"})
    assert await groups.set(gid, 1, thread_ts="1700000000.000100")
    assert await groups.claim(gid, 1, "job_id", "job-1")
    assert not await groups.claim(gid, 1, "job_id", "job-2")  # one investigation per group
    await receive(groups, {"a": "resolved"}, "resolved")
    assert await receive(groups, {"a": "resolved"}, "resolved") == "repeat"
    assert await receive(groups, {"a": "firing"}) == "opened"
    group = await groups.get(gid)
    assert group is not None and group.episode == 2
    assert group.thread_ts == "" and group.job_id == ""  # a new thread, a new investigation
    assert not await groups.set(gid, 1, thread_ts="late")  # the old episode's write is refused
    assert await groups.claim(gid, 2, "job_id", "job-3")


async def test_a_resolved_notification_of_an_unknown_group_is_ignored(
    redis: aioredis.Redis, keys: Keys
) -> None:
    groups = AlertGroups(redis, keys)
    assert await receive(groups, {"a": "resolved"}, "resolved") == "ignored"
    assert await groups.get(group_id(GROUP)) is None


async def test_two_receivers_of_one_notification_open_one_group(
    redis: aioredis.Redis, keys: Keys
) -> None:
    one, two = AlertGroups(redis, keys), AlertGroups(redis, keys)
    outcomes = await asyncio.gather(
        *(receive(g, {"a": "firing", "b": "firing"}) for g in (one, two, one, two))
    )
    assert sorted(outcomes) == ["opened", "repeat", "repeat", "repeat"]


async def test_the_work_lock_is_one_owners(redis: aioredis.Redis, keys: Keys) -> None:
    groups = AlertGroups(redis, keys)
    gid = group_id(GROUP)
    assert await groups.lock(gid, "p1")
    assert not await groups.lock(gid, "p2")
    await groups.unlock(gid, "p2")  # not the owner: nothing
    assert not await groups.lock(gid, "p2")
    await groups.unlock(gid, "p1")
    assert await groups.lock(gid, "p2")

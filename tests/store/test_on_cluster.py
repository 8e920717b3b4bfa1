"""The store on a real Redis Cluster (three masters, three replicas): what differs there.

The whole store suite also runs on a cluster with ``OPSLOOP_TEST_REDIS=cluster`` (see
``conftest.py``); these tests cover what only a cluster has: Stop signals published on
one node and heard on every other, a master killed under a client that carries on once
its replica took over (scripts, the inject reader's MULTI, reads), and the durability
check asking every node.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from bot.emulator.redis_topology import ClusterNode, ManagedCluster, _info, command, key_slot
from bot.store.connection import (
    RedisTarget,
    StoreUnavailable,
    connect,
    durability,
    is_cluster,
    sharded_message,
    subscriber,
)
from bot.store.inject import InjectReader
from bot.store.jobs import JobLimits, Jobs
from bot.store.keys import BUCKETS, Keys, Thread, bucket_of
from bot.store.receipt import Receipts

LIMITS = JobLimits(max_iterations=20, deadline_s=3600, token_budget=200_000)
MESSAGE_TIMEOUT_S = 5.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ManagedCluster]:
    managed = ManagedCluster(Path(tmp_path_factory.mktemp("cluster")))
    try:
        yield managed.start()
    finally:
        managed.stop()


@pytest.fixture
async def client(cluster: ManagedCluster) -> AsyncIterator[aioredis.Redis]:
    cluster.wait_ready()
    redis = connect(RedisTarget(cluster.url, mode="cluster"))
    await redis.flushall()
    yield redis
    await redis.aclose()


async def test_connect_gives_redis_pys_cluster_client(client: aioredis.Redis) -> None:
    assert is_cluster(client)
    assert len(await client.cluster_nodes()) == 6  # type: ignore[attr-defined]


async def test_a_stop_is_heard_through_its_buckets_shard(
    client: aioredis.Redis, cluster: ManagedCluster, keys: Keys, thread: Thread
) -> None:
    channels = [keys.cancel_channel(bucket) for bucket in BUCKETS]
    masters = {cluster.master_of(channel).port for channel in channels}
    assert len(masters) == 3  # the buckets' channels spread over every master
    jobs = Jobs(client, keys)
    job = await jobs.create(thread, requester="U1", limits=LIMITS)
    pubsub = await subscriber(client)
    await pubsub.ssubscribe(*channels)
    try:
        await jobs.request_cancel(job.id, "U2")
        async with asyncio.timeout(MESSAGE_TIMEOUT_S):
            while (message := await sharded_message(pubsub)) is None:
                pass
    finally:
        await pubsub.aclose()  # type: ignore[no-untyped-call]
    assert message["data"] == f"{job.id}|U2"
    assert message["channel"] == keys.cancel_channel(bucket_of(thread.tag))


async def test_the_same_client_carries_on_after_the_threads_master_is_killed(
    client: aioredis.Redis, cluster: ManagedCluster, keys: Keys, thread: Thread
) -> None:
    jobs, receipts = Jobs(client, keys), Receipts(client, keys)
    job = await jobs.create(thread, requester="U1", limits=LIMITS)
    assert await receipts.append(thread, ts="1700000001.000100", text="first", author="U1")
    master = cluster.master_of(keys.job(job.id))
    await replicated_to(cluster.replica_of(master), offset(master.port))  # it has it all

    cluster.kill(master)
    with pytest.raises(StoreUnavailable):  # no silent retry: the caller hears of it
        await jobs.get(job.id)
    cluster.wait_ready()

    reader = InjectReader(client, keys, thread, consumer="p1", seen_ids=frozenset)
    got = await reader.fetch()  # a MULTI pipeline, on the promoted replica
    assert [i.text for i in got] == ["first"]
    assert await receipts.append(thread, ts="1700000002.000100", text="second", author="U1")
    assert [i.text for i in await reader.fetch()] == ["first", "second"]
    found = await jobs.get(job.id)
    assert found is not None and found.status == "queued"
    assert cluster.master_of(keys.job(job.id)) is not master

    cluster.restart(master)  # back as a replica; the next test has six nodes again


async def test_the_durability_check_reports_the_weakest_node(
    client: aioredis.Redis, cluster: ManagedCluster
) -> None:
    every = await durability(client)
    assert every is not None and every.every_write
    # A node the client routes to: one restarted by the test before may not be in the
    # slots map the client was built from yet.
    known = {node.port for node in client.get_nodes()}  # type: ignore[attr-defined]
    weak = next(node for node in reversed(cluster.nodes) if node.port in known)
    command(weak.port, "CONFIG", "SET", "appendfsync", "everysec")
    try:
        found = await durability(client)
    finally:
        command(weak.port, "CONFIG", "SET", "appendfsync", "always")
    assert found is not None and found.appendfsync == "everysec"


def test_the_fixtures_slot_of_a_key_is_the_servers(cluster: ManagedCluster, keys: Keys) -> None:
    thread = Thread("C9", "1700000000.000900")
    for key in (keys.job(thread.job_id(1)), keys.audit_log(), keys.quota("day"), "plain"):
        assert key_slot(key) == command(cluster.nodes[0].port, "CLUSTER", "KEYSLOT", key)
    owner = cluster.master_of(keys.inject(thread))
    assert command(owner.port, "EXISTS", keys.inject(thread)) == 0  # served there: no MOVED


async def test_a_burst_past_the_pool_queues_instead_of_failing(cluster: ManagedCluster) -> None:
    small = connect(RedisTarget(cluster.url, mode="cluster"), max_connections=4)
    try:
        counts = await asyncio.gather(*(small.incr("{burst}n") for _ in range(300)))
    finally:
        await small.aclose()
    assert sorted(counts) == list(range(1, 301))


def offset(port: int) -> int:
    """A node's replication offset (``master_repl_offset``, or a replica's own)."""
    info = _info(port, "replication")
    return int(info.get("master_repl_offset") or info.get("slave_repl_offset") or 0)


async def replicated_to(replica: ClusterNode, wanted: int, timeout_s: float = 10.0) -> None:
    """Until ``replica`` has the master's stream up to ``wanted`` (a WAIT on a fresh
    connection would prove nothing: it counts that connection's own writes only)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while asyncio.get_running_loop().time() < deadline:
        if int(_info(replica.port, "replication").get("slave_repl_offset") or 0) >= wanted:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"replica {replica.port} never reached offset {wanted}")


async def test_a_transaction_finds_its_slot_on_the_callers_loop_without_a_thread(
    client: aioredis.Redis, keys: Keys, thread: Thread, monkeypatch: pytest.MonkeyPatch
) -> None:
    """redis-py 8.1 finds each queued command's slot from a new thread with a loop of its
    own (~0.4 ms of CPU a command, the event loop blocked meanwhile): ours finds it here."""
    started: list[str] = []
    start = threading.Thread.start

    def spy(self: threading.Thread) -> None:
        started.append(self.name)
        start(self)

    monkeypatch.setattr(threading.Thread, "start", spy)
    key = keys.history(thread)
    async with client.pipeline(transaction=True) as pipe:
        pipe.rpush(key, "a", "b")
        pipe.expire(key, 60)
        pipe.lrange(key, 0, -1)
        assert await pipe.execute() == [2, True, ["a", "b"]]
    assert started == []

"""The store on a Sentinel-managed master (one replica, three sentinels, quorum 2).

The whole store suite also runs there with ``OPSLOOP_TEST_REDIS=sentinel`` (see
``conftest.py``); these tests cover what only Sentinel has: the client follows a failover
(manual, or the master killed) to the new master, and says so when a command fails
meanwhile instead of retrying it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from bot.emulator.redis_topology import ManagedSentinel, _info, command
from bot.store.connection import RedisTarget, StoreError, connect, is_cluster
from bot.store.inject import InjectReader
from bot.store.jobs import JobLimits, Jobs
from bot.store.keys import Keys, Thread
from bot.store.receipt import Receipts

LIMITS = JobLimits(max_iterations=20, deadline_s=3600, token_budget=200_000)
ATTEMPTS = 20


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ManagedSentinel]:
    managed = ManagedSentinel(Path(tmp_path_factory.mktemp("sentinel")))
    try:
        yield managed.start()
    finally:
        managed.stop()


@pytest.fixture
async def client(group: ManagedSentinel) -> AsyncIterator[aioredis.Redis]:
    group.wait_ready()
    target = RedisTarget(group.url, "sentinel", group.sentinels, group.master_name)
    redis = connect(target, socket_timeout_s=1.0, connect_timeout_s=1.0)
    await redis.flushall()
    yield redis
    await redis.aclose()


async def settled(jobs: Jobs, job_id: str) -> str:
    """The job's status, asking again after a ``StoreError`` (a bounded number of times:
    the first command after a failover may meet the old master)."""
    for _ in range(ATTEMPTS):
        try:
            found = await jobs.get(job_id)
        except StoreError:
            continue
        assert found is not None
        return found.status
    raise AssertionError("the client never reached the new master")


@pytest.mark.parametrize("how", ["failover", "kill_master"])
async def test_the_client_follows_the_master(
    how: str, client: aioredis.Redis, group: ManagedSentinel, keys: Keys, thread: Thread
) -> None:
    assert not is_cluster(client)
    jobs, receipts = Jobs(client, keys), Receipts(client, keys)
    job = await jobs.create(thread, requester="U1", limits=LIMITS)
    assert await receipts.append(thread, ts="1700000001.000100", text="first", author="U1")
    old = group.master
    await replicated_to(group.replica().port, offset(old.port))  # the replica has it all

    new = group.failover() if how == "failover" else group.kill_master()
    assert new.port != old.port

    assert await settled(jobs, job.id) == "queued"
    assert await receipts.append(thread, ts="1700000002.000100", text="second", author="U1")
    reader = InjectReader(client, keys, thread, consumer="p1", seen_ids=frozenset)
    assert [i.text for i in await reader.fetch()] == ["first", "second"]
    assert command(new.port, "EXISTS", keys.job(job.id)) == 1  # written on the new master
    group.restart(old)


def test_stop_leaves_no_process_answering(tmp_path: Path) -> None:
    group = ManagedSentinel(tmp_path).start()
    ports = [s.port for s in (*group.servers, *group.sentinel_nodes)]
    assert all(command(p, "PING") == "PONG" for p in ports)
    group.stop()
    for port in ports:
        with pytest.raises(OSError):
            command(port, "PING", timeout=0.5)


def offset(port: int) -> int:
    """A master's replication offset."""
    return int(_info(port, "replication").get("master_repl_offset") or 0)


async def replicated_to(port: int, wanted: int, timeout_s: float = 10.0) -> None:
    """Until the replica on ``port`` has its master's stream up to ``wanted`` (a WAIT on
    a fresh connection would prove nothing: it counts that connection's own writes)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while loop.time() < deadline:
        if int(_info(port, "replication").get("slave_repl_offset") or 0) >= wanted:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"replica {port} never reached offset {wanted}")

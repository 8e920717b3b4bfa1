"""A real redis-server per test session (AOF, appendfsync always), flushed per test.

``redis`` is a connected client; ``server`` the managed process (tests that kill or
restart Redis use their own ``fresh_server`` so the shared one stays up).

``OPSLOOP_TEST_REDIS=cluster`` (or ``sentinel``) makes ``redis`` a client of a real Redis
Cluster (or of a Sentinel-managed master) started once per session, so the whole store
suite can be run on each topology (``server`` and ``fresh_server`` stay standalone).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from bot.emulator.redis_server import ManagedRedis
from bot.emulator.redis_topology import ManagedCluster, ManagedSentinel
from bot.store.connection import RedisTarget, connect
from bot.store.keys import Keys, Thread


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ManagedRedis]:
    managed = ManagedRedis(tmp_path_factory.mktemp("redis")).start()
    yield managed
    managed.stop()


TOPOLOGY = os.environ.get("OPSLOOP_TEST_REDIS", "standalone")
# Tests that measure one server and so do not carry over to another topology: they open
# a second client on ``server`` (a different Redis from ``redis`` there), read KEYS or
# INFO (one node's, on a cluster) or need a replica of their own.
SINGLE_SERVER = {
    "test_approval_races.py": "second clients on `server`",
    "test_audit.py::test_two_publishers_racing": "second clients on `server`",
    "test_quota.py::test_concurrent_": "a second client on `server`",
    "test_rate.py::test_concurrent_": "a second client on `server`",
    "test_artifacts.py": "KEYS (one node's on a cluster)",
    "test_inject_consumer.py::test_the_common_case_is_one_round_trip": "INFO commandstats",
    "test_inject_consumer.py::test_the_claim_check_is_rate_limited": "INFO commandstats",
    "test_min_replicas.py": "a master and replica of its own",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if TOPOLOGY == "standalone":
        return
    for item in items:
        for where, why in SINGLE_SERVER.items():
            if f"tests/store/{where}" in item.nodeid:
                item.add_marker(pytest.mark.skip(reason=f"standalone only: {why}"))


_TARGETS: dict[str, RedisTarget] = {}


def topology_target(config: pytest.Config, factory: pytest.TempPathFactory) -> RedisTarget:
    """The cluster or sentinel group of ``OPSLOOP_TEST_REDIS``, started once per session
    (stopped at its end, pass or fail)."""
    found = _TARGETS.get(TOPOLOGY)
    if found is not None:
        return found
    tmp = factory.mktemp(f"redis-{TOPOLOGY}")
    if TOPOLOGY == "cluster":
        cluster = ManagedCluster(tmp)
        config.add_cleanup(cluster.stop)
        found = RedisTarget(cluster.start().url, mode="cluster")
    else:
        group = ManagedSentinel(tmp)
        config.add_cleanup(group.stop)
        group.start()
        found = RedisTarget(group.url, "sentinel", group.sentinels, group.master_name)
    _TARGETS[TOPOLOGY] = found
    return found


@pytest.fixture
async def redis(
    server: ManagedRedis, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[aioredis.Redis]:
    if TOPOLOGY == "standalone":
        client = connect(server.url)
    else:
        client = connect(topology_target(request.config, tmp_path_factory))
    await client.flushall()
    yield client
    await client.aclose()


@pytest.fixture
def fresh_server(tmp_path: Path) -> Iterator[ManagedRedis]:
    """A server of the test's own, for killing and restarting."""
    managed = ManagedRedis(tmp_path / "redis").start()
    yield managed
    managed.stop()


@pytest.fixture
def keys() -> Keys:
    return Keys("test:")


@pytest.fixture
def thread() -> Thread:
    return Thread("C123", "1700000000.000100")

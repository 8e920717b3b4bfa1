"""Bots on a real Redis Cluster or Sentinel group, for the end-to-end topology tests.

``topology`` is parametrised (``cluster``, ``sentinel``): each is started once per session
(``ManagedCluster``: three masters and three replicas; ``ManagedSentinel``: a master, a
replica, three sentinels), flushed before each test, and stopped by a finalizer. ``topo_bot``
is the ``bot`` factory of ``conftest.py`` with the bot's environment pointing at the
topology (``OPSLOOP_REDIS_MODE`` and its variables) instead of the standalone server.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest
import redis.asyncio as aioredis

from bot.emulator.redis_server import ManagedRedis
from bot.emulator.redis_topology import ManagedCluster, ManagedSentinel
from bot.emulator.slack import FakeSlack
from bot.store.connection import RedisTarget, connect
from bot.store.keys import Keys

from .conftest import _BOTS, StartBot
from .harness import SERVE_ARGV, BotProcess, ScriptedModel, bot_env

TOPOLOGIES = ("cluster", "sentinel")


@dataclass
class Topology:
    """A running topology: how a bot reaches it (``env``) and how a test does (``target``)."""

    name: str
    target: RedisTarget
    cluster: ManagedCluster | None = None
    sentinel: ManagedSentinel | None = None
    env: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        """REDIS_URL for a bot or a command started now (on a cluster: a running node)."""
        return self.cluster.url if self.cluster is not None else self.target.url

    def client(self) -> aioredis.Redis:
        """A client of the test's own; on a cluster seeded by a node running now (the
        bots' seed may be the node a test killed)."""
        return connect(
            RedisTarget(self.url, self.target.mode, self.target.sentinels, self.target.master)
        )

    def wait_ready(self) -> None:
        if self.cluster is not None:
            self.cluster.wait_ready()
        if self.sentinel is not None:
            self.sentinel.wait_ready()


def _cluster(tmp: Path) -> Topology:
    managed = ManagedCluster(tmp).start()
    target = RedisTarget(managed.url, mode="cluster")
    return Topology("cluster", target, cluster=managed, env={"OPSLOOP_REDIS_MODE": "cluster"})


def _sentinel(tmp: Path) -> Topology:
    managed = ManagedSentinel(tmp).start()
    target = RedisTarget(managed.url, "sentinel", managed.sentinels, managed.master_name)
    env = {
        "OPSLOOP_REDIS_MODE": "sentinel",
        "REDIS_SENTINELS": managed.sentinels,
        "REDIS_SENTINEL_MASTER": managed.master_name,
    }
    return Topology("sentinel", target, sentinel=managed, env=env)


@pytest.fixture(scope="session")
def topologies() -> dict[str, Topology]:
    """The topologies started so far: each on first use, once per session."""
    return {}


@pytest.fixture(params=TOPOLOGIES)
async def topology(
    request: pytest.FixtureRequest,
    topologies: dict[str, Topology],
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[Topology]:
    name = str(request.param)
    found = topologies.get(name)
    if found is None:
        tmp = tmp_path_factory.mktemp(f"e2e-{name}")
        found = _cluster(tmp) if name == "cluster" else _sentinel(tmp)
        managed = found.cluster or found.sentinel
        assert managed is not None
        request.session.config.add_cleanup(managed.stop)  # no orphans, pass or fail
        topologies[name] = found
    found.wait_ready()
    client = found.client()
    try:
        await client.flushall()
    finally:
        await client.aclose()
    yield found


@pytest.fixture
async def topo_bot(
    request: pytest.FixtureRequest,
    serve_available: bool,
    slack: FakeSlack,
    topology: Topology,
    model: ScriptedModel,
    tmp_path: Path,
) -> AsyncIterator[StartBot]:
    """``await topo_bot(**env)`` → a started ``opsloop serve`` on ``topology``."""
    if not serve_available:
        pytest.skip("`python -m bot serve` is not available yet")
    started: list[BotProcess] = []
    request.node.stash[_BOTS] = started

    async def start(*, wait: bool = True, **env: str | None) -> BotProcess:
        child_env = bot_env(
            slack, cast(ManagedRedis, topology), model, extra={**topology.env, **env}
        )
        proc = BotProcess(child_env, tmp_path / "bot", argv=SERVE_ARGV)
        started.append(proc)
        return await (proc.start() if wait else proc.spawn())

    yield start
    for proc in reversed(started):
        await proc.stop()


async def job_hash(topology: Topology, job_id: str) -> dict[str, Any]:
    """The job's stored hash (``status``, ``fence``, ``cancel``…), read on the topology."""
    client = topology.client()
    try:
        raw = await client.hgetall(Keys().job(job_id))
    finally:
        await client.aclose()
    return {str(k): str(v) for k, v in raw.items()}

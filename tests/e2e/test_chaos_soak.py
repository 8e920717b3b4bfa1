"""The chaos soak's short form (``tests/e2e/soak_kit.py``; the long one is
``benchmarks/chaos_soak.py``): three ``opsloop serve`` processes on a real Redis Cluster
(three masters, three replicas, ``OPSLOOP_REDIS_MIN_REPLICAS=1``), a few dozen jobs with
replies and approvals, while a process is SIGKILLed and started again, a master fails
over, the model returns a burst of 5xx and Slack a burst of 429s. Then: every mention
answered exactly once (or ended with a failure status, counted), every approved write run
exactly once as its approver, every reply in the model's conversation exactly once, no job
left non-terminal or owing its thread its answer and ending, no tool process left.

Every failure says all of it: each assertion's message is the report's text (the counts,
the endings, the problems, what stopped the soak if something did, and the last lines of
each bot's log), and the soak's own budget ends it with that report well before the
test's timeout would end it with none.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import cast

import pytest

from bot.emulator.redis_server import ManagedRedis
from bot.emulator.slack import FakeSlack

from .harness import ScriptedModel, bot_env
from .soak_kit import Chaos, Soak, Target
from .topology_kit import Topology, topologies, topology

__all__ = ["topologies", "topology"]  # fixtures, used by name

TIMEOUT_S = 300
# Starting the bots, the jobs and their settling; the checks, stopping the bots and the
# cluster's start-up fit in the rest of the test's timeout.
BUDGET_S = 180.0
JOBS = 24


@pytest.mark.timeout(TIMEOUT_S)
@pytest.mark.parametrize("topology", ["cluster"], indirect=True)
async def test_nothing_is_lost_or_done_twice_through_the_chaos(
    slack: FakeSlack,
    model: ScriptedModel,
    tmp_path: Path,
    topology: Topology,
) -> None:
    cluster = topology
    managed = cluster.cluster
    assert managed is not None

    async def failover() -> None:
        master = managed.masters()[0]
        await asyncio.to_thread(managed.failover, replica_of=master)

    def env(extra: Mapping[str, str]) -> dict[str, str]:
        return bot_env(
            slack,
            cast(ManagedRedis, cluster),
            model,
            extra={**extra, "OPSLOOP_REDIS_MIN_REPLICAS": "1"},
        )

    soak = Soak(
        slack=slack,
        model=model,
        target=Target(env=cluster.env, client=cluster.client, failover=failover),
        folder=tmp_path,
        env=env,
        bots=3,
        jobs=JOBS,
        rate=2.0,
        chaos=Chaos(kills=1, failovers=1, model_bursts=1, slack_bursts=1),
        settle_s=90.0,
        seed=7,
        budget_s=BUDGET_S,
    )
    report = await soak.run()
    told = report.text()
    print("\n".join(report.lines()))

    assert report.ok, told
    assert report.jobs == JOBS, told
    assert report.kills == 1 and report.failovers == 1, told
    assert report.answered_once + report.ended_failed == JOBS, told
    assert report.writes_twice == 0 and report.writes_wrong_approver == 0, told
    assert report.non_terminal == 0 and report.endings_owed == 0, told
    assert report.orphans == 0, told

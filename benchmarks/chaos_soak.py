"""The chaos soak: a few hundred jobs through three ``opsloop serve`` processes on a real
Redis Cluster (three masters, three replicas, ``OPSLOOP_REDIS_MIN_REPLICAS=1``) while
processes are SIGKILLed and started again, masters fail over, the model returns bursts of
5xx and Slack bursts of 429s (``bot/emulator/soak.py`` has the jobs, the chaos and the
checks; ``tests/e2e/test_chaos_soak.py`` is its short form in CI).

Printed: the counts checked from Slack's, the tools' and the model's side — every mention
answered exactly once (or ended with a clear failure status), every approved write run
exactly once as its approver, every reply in the model's conversation exactly once, jobs
left non-terminal, tool processes left running — and what broke.

    python benchmarks/chaos_soak.py [--jobs 240] [--rate 2] [--bots 3] [--kills 4]
        [--failovers 2] [--model-bursts 3] [--slack-bursts 3] [--topology cluster|sentinel]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import cast

from bot.emulator.bot_process import bot_env
from bot.emulator.redis_server import ManagedRedis
from bot.emulator.redis_topology import ManagedCluster, ManagedSentinel
from bot.emulator.scripted_model import ScriptedModel
from bot.emulator.slack import FakeSlack
from bot.emulator.soak import Chaos, Soak, Target
from bot.store.connection import RedisTarget, connect


async def drive(args: argparse.Namespace) -> int:
    folder = Path(tempfile.mkdtemp(prefix="opsloop-soak-"))
    cluster: ManagedCluster | None = None
    sentinel: ManagedSentinel | None = None
    if args.topology == "cluster":
        cluster = ManagedCluster(folder / "redis").start()
        redis_target = RedisTarget(cluster.url, mode="cluster")
        env = {"OPSLOOP_REDIS_MODE": "cluster"}
    else:
        sentinel = ManagedSentinel(folder / "redis").start()
        redis_target = RedisTarget(
            sentinel.url, "sentinel", sentinel.sentinels, sentinel.master_name
        )
        env = {
            "OPSLOOP_REDIS_MODE": "sentinel",
            "REDIS_SENTINELS": sentinel.sentinels,
            "REDIS_SENTINEL_MASTER": sentinel.master_name,
        }
    turn = 0

    async def failover() -> None:
        nonlocal turn
        if cluster is not None:
            master = cluster.masters()[turn % len(cluster.masters())]
            turn += 1
            await asyncio.to_thread(cluster.failover, replica_of=master)
        elif sentinel is not None:
            await asyncio.to_thread(sentinel.failover)

    class _Url:  # what bot_env reads as REDIS_URL
        url = redis_target.url

    model = ScriptedModel()
    await model.server.start()
    try:
        async with FakeSlack(usergroups={"SOPS": ["UAPPROVER1"]}) as slack:

            def bot_environment(extra: Mapping[str, str]) -> dict[str, str]:
                return bot_env(
                    slack,
                    cast(ManagedRedis, _Url()),
                    model,
                    extra={**extra, "OPSLOOP_REDIS_MIN_REPLICAS": "1"},
                )

            soak = Soak(
                slack=slack,
                model=model,
                target=Target(env=env, client=lambda: connect(redis_target), failover=failover),
                folder=folder,
                env=bot_environment,
                bots=args.bots,
                jobs=args.jobs,
                rate=args.rate,
                chaos=Chaos(
                    kills=args.kills,
                    failovers=args.failovers,
                    model_bursts=args.model_bursts,
                    slack_bursts=args.slack_bursts,
                ),
                settle_s=180.0,
                seed=args.seed,
            )
            report = await soak.run()
    finally:
        await model.server.stop()
        if cluster is not None:
            cluster.stop()
        if sentinel is not None:
            sentinel.stop()
    print(
        f"chaos soak on a {args.topology} ({args.bots} bots, {args.jobs} jobs at "
        f"{args.rate:g}/s, MIN_REPLICAS=1)"
    )
    # With problems: the bots' last log lines too (and what stopped the soak, if anything).
    print(report.text() if not report.ok else "\n".join(report.lines()))
    print("ok" if report.ok else "PROBLEMS")
    return 0 if report.ok else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=240)
    parser.add_argument("--rate", type=float, default=2.0)
    parser.add_argument("--bots", type=int, default=3)
    parser.add_argument("--kills", type=int, default=4)
    parser.add_argument("--failovers", type=int, default=2)
    parser.add_argument("--model-bursts", type=int, default=3)
    parser.add_argument("--slack-bursts", type=int, default=3)
    parser.add_argument("--topology", choices=("cluster", "sentinel"), default="cluster")
    parser.add_argument("--seed", type=int, default=1)
    sys.exit(asyncio.run(drive(parser.parse_args())))


if __name__ == "__main__":
    main()

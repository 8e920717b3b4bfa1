"""The kubernetes pack against the fake Kubernetes API: time to answer and what the answer
costs the model.

The fake API server (``bot.emulator.kube_api``, real HTTPS on loopback) serves the
incident cluster of ``bot.emulator.kube_fixtures`` grown to about 150 pods in 3
namespaces (``pods_per_deployment=13``): a crash-looping pod (OOMKilled), a pending pod
(Unschedulable), a failed rollout, a node under memory pressure, an evicted pod. Each
read-only tool is called through ``execute`` as the agent core calls it; reported per
call: median and p90 wall time, the requests it made, the answer's size in characters and
in tokens (≈ chars/4), and the size of the raw API JSON those requests returned (what a
tool passing the API through would hand the model).

    python benchmarks/pack_kubernetes.py [--calls 50] [--pods-per-deployment 13]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bot.agent.tools import CallContext  # noqa: E402
from bot.emulator.kube_api import FakeKube  # noqa: E402
from bot.emulator.kube_env import environ_for  # noqa: E402
from bot.emulator.kube_incident import incident_cluster  # noqa: E402
from tools.packs.k8s_client import Kube  # noqa: E402
from tools.packs.kubernetes import make_pack  # noqa: E402

CTX = CallContext(job_id="C1:1.1:bench", call_id="bench")


def cases(kube: FakeKube) -> list[tuple[str, dict[str, Any]]]:
    crash = next(n for (_, n) in kube.cluster.objects["pods"] if n.endswith("-x2k4p"))
    return [
        ("k8s_get", {"kind": "pods"}),
        ("k8s_get", {"kind": "pods", "namespace": "web"}),
        ("k8s_get", {"kind": "pods", "namespace": "web", "selector": "app=api"}),
        ("k8s_get", {"kind": "deployments"}),
        ("k8s_get", {"kind": "nodes"}),
        ("k8s_get", {"kind": "services"}),
        ("k8s_describe", {"kind": "pods", "name": crash, "namespace": "web"}),
        ("k8s_describe", {"kind": "deployments", "name": "checkout", "namespace": "payments"}),
        ("k8s_describe", {"kind": "nodes", "name": "node-c", "namespace": "default"}),
        ("k8s_logs", {"pod": crash, "namespace": "web", "previous": True}),
        ("k8s_events", {}),
        ("k8s_events", {"warnings_only": True}),
    ]


def short(arguments: dict[str, Any]) -> str:
    """``kind=pods ns=web name=api-2hc6…``: every argument, long values cut."""
    words = []
    for key, value in arguments.items():
        shown = str(value) if len(str(value)) <= 12 else str(value)[:11] + "…"
        words.append(f"{'ns' if key == 'namespace' else key}={shown}")
    return " ".join(words)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def bench(calls: int, per_deployment: int) -> None:
    cluster = incident_cluster(datetime.now(UTC), pods_per_deployment=per_deployment)
    namespaces = len(cluster.objects["namespaces"])
    print(
        f"fake API: {cluster.count('pods')} pods, {cluster.count('deployments')} deployments, "
        f"{namespaces} namespaces, {cluster.count('nodes')} nodes, "
        f"{cluster.count('events')} events; {calls} calls each (after 3 warm-up calls)\n"
    )
    async with FakeKube(cluster) as kube:
        with tempfile.TemporaryDirectory(prefix="opsloop-bench-k8s-") as folder:
            config = kube.kubeconfig(Path(folder) / "config")
            client = Kube(environ=environ_for(config))
            pack = make_pack(client)
            tools = {t.name: t for t in pack.tools}
            try:
                print(
                    f"{'tool':<13} {'args':<44} {'median ms':>9} {'p90 ms':>7} {'reqs':>4} "
                    f"{'chars':>6} {'tokens':>6} {'raw API chars':>13} {'raw tokens':>10}"
                )
                for name, arguments in cases(kube):
                    tool = tools[name]
                    validated = tool.args_model.model_validate(arguments)
                    for _ in range(3):
                        await tool.execute(validated, CTX)
                    times: list[float] = []
                    answer: str | bytes = ""
                    before = len(kube.answer_bytes)
                    for _ in range(calls):
                        start = time.perf_counter()
                        answer = await tool.execute(validated, CTX)
                        times.append((time.perf_counter() - start) * 1000)
                    requests = (len(kube.answer_bytes) - before) // calls
                    raw = sum(kube.answer_bytes[before:]) // calls
                    size = len(answer)
                    print(
                        f"{name:<13} {short(arguments):<44} {statistics.median(times):9.2f} "
                        f"{pct(times, 0.9):7.2f} {requests:4d} {size:6d} {size // 4:6d} "
                        f"{raw:13d} {raw // 4:10d}"
                    )
            finally:
                await client.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--pods-per-deployment", type=int, default=13)
    args = parser.parse_args()
    asyncio.run(bench(args.calls, args.pods_per_deployment))


if __name__ == "__main__":
    main()

"""The prometheus and alertmanager packs against the real servers: time to answer and
what the answer costs the model.

Prometheus (scraping node-exporter, itself and a closed port every second, with an
always-firing and an always-pending alert) and Alertmanager (a few posted alerts, one of
them silenced) run as child processes on loopback, started by
``bot/emulator/prometheus_stack.py``. Each read-only tool is called through ``execute``
as the agent core calls it; reported per call: median and p90 wall time, the answer's
size in characters and in tokens (≈ chars/4), and, for comparison, the size of the raw
API answer a tool that passed it through would hand the model.

    python benchmarks/pack_prometheus.py [--calls 50]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from bot.agent import CallContext
from bot.agent.tools import Tool
from bot.emulator.prometheus_stack import AlertmanagerServer, PrometheusStack
from tools.packs import PackConfig, load_packs

CTX = CallContext(job_id="C1:1.1:j1", call_id="bench")
APPROVED = CallContext(job_id="C1:1.1:j1", call_id="bench-silence", confirmed_by="U0BENCH")

CLOCK = 'label_replace(vector(time()), "job", "clock", "", "")'
# (tool, arguments, the raw API request a pass-through tool would make)
CASES: list[tuple[str, dict[str, object], str, dict[str, str]]] = [
    ("prometheus_query", {"query": "up"}, "/api/v1/query", {"query": "up"}),
    (
        "prometheus_query_range",
        {"query": "node_load1", "minutes": 5},
        "/api/v1/query_range",
        {"query": "node_load1", "step": "15"},
    ),
    (  # a series known at every step (the servers are seconds old): 301 points
        "prometheus_query_range",
        {"query": CLOCK, "minutes": 5, "step": "1s"},
        "/api/v1/query_range",
        {"query": CLOCK, "step": "1"},
    ),
    ("prometheus_alerts", {}, "/api/v1/alerts", {}),
    ("prometheus_targets", {}, "/api/v1/targets", {}),
    ("alertmanager_alerts", {}, "/api/v2/alerts", {}),
    ("alertmanager_silences", {}, "/api/v2/silences", {}),
]

ALERTS = [
    {
        "labels": {"alertname": "DiskFull", "instance": f"web-0{i}", "severity": "page"},
        "annotations": {"summary": f"disk / on web-0{i} is 9{i}% full"},
    }
    for i in range(1, 4)
] + [
    {
        "labels": {"alertname": "HighLatency", "service": "api", "severity": "ticket"},
        "annotations": {"description": "p99 above 2s for 10 minutes"},
    }
]


def _short(arguments: dict[str, object]) -> str:
    query = str(arguments.get("query", ""))
    return query if len(query) <= 14 else query[:13] + "…"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def raw_size(base: str, path: str, params: dict[str, str]) -> int:
    if path == "/api/v1/query_range":
        end = time.time()
        params = {**params, "start": f"{end - 300:.3f}", "end": f"{end:.3f}"}
    async with httpx.AsyncClient(base_url=base, timeout=10) as client:
        response = await client.get(path, params=params)
        response.raise_for_status()
        return len(response.text)


async def bench(stack: PrometheusStack, am: AlertmanagerServer, calls: int) -> None:
    packs = load_packs(
        ["prometheus", "alertmanager"],
        PackConfig(prometheus_url=stack.url, alertmanager_url=am.url),
    )
    tools: dict[str, Tool] = {t.name: t for pack in packs.values() for t in pack.tools}
    try:
        create = tools["alertmanager_create_silence"]
        args = {
            "matchers": [{"name": "alertname", "value": "HighLatency"}],
            "minutes": 60,
            "comment": "INC-42: known, rollback in progress",
        }
        print(await create.execute(create.args_model.model_validate(args), APPROVED))
        print(f"\n{calls} calls each (after 3 warm-up calls)\n")
        print(
            f"{'tool':<24} {'args':<14} {'median ms':>9} {'p90 ms':>7} {'chars':>6} {'tokens':>6}"
            f" {'raw API chars':>13} {'raw tokens':>10}"
        )
        for name, arguments, path, params in CASES:
            tool = tools[name]
            validated = tool.args_model.model_validate(arguments)
            for _ in range(3):
                await tool.execute(validated, CTX)
            times: list[float] = []
            answer: str | bytes = ""
            for _ in range(calls):
                start = time.perf_counter()
                answer = await tool.execute(validated, CTX)
                times.append((time.perf_counter() - start) * 1000)
            size = len(answer)
            base = stack.url if name.startswith("prometheus") else am.url
            raw = await raw_size(base, path, params)
            print(
                f"{name:<24} {_short(arguments):<14} {statistics.median(times):>9.2f}"
                f" {pct(times, 0.9):>7.2f} {size:>6} {size / 4:>6.0f} {raw:>13} {raw / 4:>10.0f}"
            )
        print("\nanswers:")
        for name, arguments, _, _ in CASES:
            tool = tools[name]
            out = await tool.execute(tool.args_model.model_validate(arguments), CTX)
            print(f"--- {name} {arguments or ''}\n{out!s}")
    finally:
        for pack in packs.values():
            for close in pack.closers:
                await close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=50)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="opsloop-bench-prom-") as folder:
        started = time.perf_counter()
        stack = PrometheusStack(Path(folder) / "prometheus").start()
        try:
            am = AlertmanagerServer(Path(folder) / "alertmanager").start()
            try:
                print(f"servers ready in {time.perf_counter() - started:.1f}s")
                am.post_alerts(*ALERTS)
                asyncio.run(bench(stack, am, options.calls))
            finally:
                am.stop()
        finally:
            stack.stop()


if __name__ == "__main__":
    main()

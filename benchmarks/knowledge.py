"""Team knowledge: past-incident search over 10,000 records, and what a record costs Redis.

Against a throwaway redis-server (AOF, appendfsync always, as the tests and the dev mode
run it), N generated incident records — a mix of services, hosts, pods, alerts and
symptoms, each with a request, an ~800-char answer, labels, tools, approvals and writes
— are added the way the job's end adds them (``Incidents.add``, one script each). Then
Q queries of a few words, phrased the way people ask ("checkout 502 after deploy",
"disk full on db-02"), are searched with a visibility check that hides one channel.

Printed: add wall times (the first 500 added one at a time, as jobs end; the rest in
batches, to load faster), search and by-alert wall times (p50, p99), the ``INFO
used_memory`` delta divided by N (with the record JSON's size for comparison), against
the targets (search p99 < 20 ms, < 4 KB per record). Then runbook search
(``bot.knowledge.runbooks``) over a synthetic folder of 1,000 sections, on the same
questions. Figures only, no asserts.

    python benchmarks/knowledge.py [--records 10000] [--queries 500] [--sections 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

import redis.asyncio as aioredis

from bot.emulator.redis_server import ManagedRedis
from bot.store.connection import connect
from bot.store.incidents import IncidentApproval, IncidentRecord, Incidents, IncidentWrite
from bot.store.keys import Keys

T0 = time.time() - 90 * 86_400  # the records span the last 90 days
RETENTION_S = 180 * 86_400.0
SEARCH_P99_MS = 20.0
BYTES_PER_RECORD = 4096
ADD_TIMED = 500
LOAD_BATCH = 100

SERVICES = [
    "checkout-api", "payments", "cart", "search", "inventory", "auth", "gateway", "orders",
    "shipping", "notifications", "billing", "catalog", "recommendations", "profile",
    "ledger", "kafka", "postgres", "redis-cache", "elasticsearch", "nginx-ingress",
]  # fmt: skip
HOSTS = [f"{kind}-{n:02d}" for kind in ("web", "db", "cache", "worker", "edge") for n in range(12)]
ALERTS = [
    "HighErrorRate", "HighLatencyP99", "DiskAlmostFull", "PodCrashLooping", "NodeNotReady",
    "CertificateExpiringSoon", "ReplicationLag", "KafkaConsumerLag", "MemoryPressure",
    "TargetDown", "TooManyConnections", "QueueBacklog", "CPUThrottling", "OOMKilled",
    "SLOBurnRateFast", "DNSResolutionFailures", "BackupFailed", "LoadBalancerUnhealthy",
]  # fmt: skip
SYMPTOMS = [
    ("502 errors from the gateway", "upstream connection refused, the pods were restarting"),
    ("p99 latency above 2s", "a slow query on the orders table after an index was dropped"),
    ("disk full on {host}", "log rotation stopped, /var/log grew to 98%"),
    ("pods crash looping", "the new image missed an environment variable, OOMKilled at start"),
    ("replication lag growing", "a long running vacuum on the primary blocked replay"),
    ("consumer lag on orders topic", "a rebalance storm after the deploy, max.poll exceeded"),
    ("certificate expiring", "cert-manager failed the ACME challenge, DNS record missing"),
    ("memory leak in {service}", "heap grew after the cache change, GC pauses of 3s"),
    ("connection pool exhausted", "too many idle connections held by the batch job"),
    ("timeouts calling {service}", "the circuit breaker opened, retries amplified the load"),
    ("5xx spike after deploy", "a feature flag enabled a code path with a nil pointer"),
    ("node not ready", "kubelet lost its lease, the node ran out of inodes"),
    ("dns resolution failures", "coredns pods were throttled, CPU limit too low"),
    ("backup job failed", "the S3 bucket policy changed and denied PutObject"),
    ("queue backlog", "workers scaled down by the autoscaler during a traffic spike"),
    ("high cpu on {host}", "a runaway cron job compressing old logs every minute"),
]
TOOLS = [
    "prometheus_query", "host_tail_log", "k8s_get_pods", "k8s_describe", "k8s_logs",
    "k8s_rollout_restart", "k8s_scale", "http_get", "postgres_query", "supervisor_status",
    "supervisor_restart", "alertmanager_silence",
]  # fmt: skip
WRITES = ["k8s_rollout_restart", "k8s_scale", "supervisor_restart", "alertmanager_silence"]
PEOPLE = [f"U0{n:07d}" for n in range(40)]
CHANNELS = ["C0INCIDENT", "C0PAYMENTS", "C0PLATFORM", "C0DATA", "C0EDGE", "C_PRIV"]
FILLER = [
    "I checked the dashboards for the last hour and compared them with the previous week.",
    "The error budget burn rate was above 14x for the fast window.",
    "Logs show repeated retries with exponential backoff from the client side.",
    "After the restart the error rate returned to baseline within five minutes.",
    "The rollout history shows revision {rev} was deployed at {hh}:{mm} UTC.",
    "No related changes in the infrastructure repository in the last day.",
    "Traffic was normal, so this is not a load problem.",
    "I recommend adding an alert on the saturation metric before it pages again.",
    "The runbook step to drain the node was followed before the restart.",
    "Pod {pod} was evicted twice on {host} because of memory pressure.",
]


def record(rng: random.Random, n: int) -> IncidentRecord:
    """One varied, realistically sized incident record."""
    service, host = rng.choice(SERVICES), rng.choice(HOSTS)
    symptom, cause = rng.choice(SYMPTOMS)
    symptom = symptom.format(host=host, service=service)
    pod = f"{service}-{rng.getrandbits(32):08x}-{rng.getrandbits(20):05x}"
    alert = rng.choice(ALERTS) if rng.random() < 0.6 else None
    started = T0 + n * (90 * 86_400 / 10_000) + rng.uniform(0, 300)
    channel = rng.choice(CHANNELS)
    tools = rng.sample(TOOLS, rng.randint(2, 6))
    writes = rng.sample(WRITES, rng.randint(0, 2))
    facts = [
        f"{symptom} on {service} ({host}): {cause}.",
        *(
            rng.choice(FILLER).format(
                rev=rng.randint(10, 400),
                hh=rng.randint(0, 23),
                mm=rng.randint(10, 59),
                pod=pod,
                host=host,
            )
            for _ in range(8)
        ),
    ]
    answer = " ".join(facts)
    while len(answer) < 800:
        answer += " " + rng.choice(FILLER).format(rev=1, hh=1, mm=11, pod=pod, host=host)
    return IncidentRecord(
        id=f"{channel}:{int(started)}.{n % 1_000_000:06d}:j{1 + n % 3}",
        channel=channel,
        thread_ts=f"{int(started)}.{n % 1_000_000:06d}",
        permalink=f"https://acme.slack.com/archives/{channel}/p{int(started)}{n % 1_000_000:06d}",
        started_at=started,
        ended_at=started + rng.uniform(60, 1800),
        requester="alertmanager" if alert else rng.choice(PEOPLE),
        alertname=alert,
        alert_labels=(
            {"service": service, "instance": f"{host}:9100", "severity": "page"} if alert else {}
        ),
        request=(
            f"{alert} firing for {service}" if alert else f"@opsloop why {symptom} on {service}?"
        ),
        answer=answer[:820],
        tools=tools,
        approvals=[
            IncidentApproval(
                tool=w, decision="approved", by=rng.choice(PEOPLE), arguments=f"{service} on {host}"
            )
            for w in writes
        ],
        writes=[
            IncidentWrite(tool=w, outcome="done", confirmed_by=rng.choice(PEOPLE)) for w in writes
        ],
        feedback={rng.choice(PEOPLE): "+1"} if rng.random() < 0.3 else {},
        stop_reason="done",
        cost_usd=round(rng.uniform(0.01, 0.4), 4),
    )


def queries(rng: random.Random, count: int) -> list[str]:
    """Short questions people ask, from the same vocabulary."""
    out = []
    for _ in range(count):
        service, host = rng.choice(SERVICES), rng.choice(HOSTS)
        symptom, cause = rng.choice(SYMPTOMS)
        shape = rng.randrange(4)
        if shape == 0:
            out.append(symptom.format(host=host, service=service))
        elif shape == 1:
            out.append(f"{service} {' '.join(cause.split()[:3])}")
        elif shape == 2:
            out.append(f"{rng.choice(ALERTS)} {service} {host}")
        else:
            out.append(f"has {host} had {symptom.format(host=host, service=service)} before?")
    return out


def runbook_folder(root: Path, sections: int) -> None:
    """A synthetic runbooks folder: files of 10 sections each, one per service × symptom,
    with front matter naming an alert."""
    rng = random.Random(7)
    for n in range(sections // 10):
        service = SERVICES[n % len(SERVICES)]
        alert = ALERTS[n % len(ALERTS)]
        lines = [
            "---",
            f"title: {service} {alert} ({n})",
            f"alerts: [{alert}]",
            f"services: [{service}]",
            "---",
            f"# {service}: {alert}",
        ]
        for k in range(10):
            symptom, cause = rng.choice(SYMPTOMS)
            host = rng.choice(HOSTS)
            lines += [
                f"## {symptom.format(host=host, service=service)} ({k})",
                f"1. Check {service} on {host}: {cause}.",
                f"2. {rng.choice(FILLER).format(rev=3, hh=1, mm=12, pod=service, host=host)}",
                f"3. If it persists, run `{rng.choice(TOOLS)}` and page the {service} owner.",
            ]
        (root / f"{service}-{n:03d}.md").write_text("\n".join(lines) + "\n")


def runbook_rows(asked: list[str], sections: int) -> list[tuple[str, float, str]]:
    """Search p50/p99 over ``bot.knowledge.runbooks`` (when that module exists)."""
    try:
        from bot.knowledge.runbooks import Runbooks
    except ImportError:
        return []
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        runbook_folder(root, sections)
        started = time.perf_counter()
        runbooks = Runbooks(root)
        built = time.perf_counter() - started
        wall = []
        for q in asked:
            started = time.perf_counter()
            runbooks.search(q, limit=5)
            wall.append(time.perf_counter() - started)
        runbooks.close()
    return [
        (f"runbooks ({sections:,} sections): index build ms", built * 1000, ""),
        (f"runbooks ({sections:,} sections): search p50 ms", pct(wall, 0.5), ""),
        (f"runbooks ({sections:,} sections): search p99 ms", pct(wall, 0.99), ""),
    ]


async def used_memory(redis: aioredis.Redis) -> int:
    return int((await redis.info("memory"))["used_memory"])


def pct(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(len(values) * q))] * 1000


async def measure(url: str, n_records: int, n_queries: int, sections: int) -> None:
    redis = connect(url)
    store = Incidents(redis, Keys())
    rng = random.Random(33)
    records = [record(rng, n) for n in range(n_records)]
    json_bytes = sum(len(r.model_dump_json(exclude_defaults=True)) for r in records)

    await redis.ping()
    before = await used_memory(redis)
    # The first ADD_TIMED one at a time, as jobs end (their latency measured); the rest
    # LOAD_BATCH at a time, so loading does not wait on 10,000 fsyncs in a row.
    add_wall = []
    for one in records[:ADD_TIMED]:
        started = time.perf_counter()
        await store.add(one, retention_s=RETENTION_S, now=one.ended_at)
        add_wall.append(time.perf_counter() - started)
    for at in range(ADD_TIMED, n_records, LOAD_BATCH):
        batch = records[at : at + LOAD_BATCH]
        await asyncio.gather(
            *(store.add(one, retention_s=RETENTION_S, now=one.ended_at) for one in batch)
        )
    after = await used_memory(redis)
    assert await store.count() == n_records

    async def visible(channel: str) -> bool:
        return channel != "C_PRIV"

    asked = queries(rng, n_queries)
    for q in asked[:20]:  # warm up: scripts loaded, code paths hot
        await store.search(q, limit=5, visible=visible)
    search_wall = []
    search_cpu = []  # this process's CPU: the ranking's own cost, without waiting
    hits = 0
    for q in asked:
        started, cpu = time.perf_counter(), time.process_time()
        found = await store.search(q, limit=5, visible=visible)
        search_wall.append(time.perf_counter() - started)
        search_cpu.append(time.process_time() - cpu)
        hits += len(found)
    alert_wall = []
    for _ in range(100):
        started = time.perf_counter()
        await store.by_alert(rng.choice(ALERTS), limit=3, visible=visible)
        alert_wall.append(time.perf_counter() - started)
    await redis.aclose()

    per_record = (after - before) / n_records
    p99 = pct(search_wall, 0.99)
    rows: list[tuple[str, float, str]] = [
        ("incidents: add, p50 ms", pct(add_wall, 0.5), ""),
        ("incidents: add, p99 ms", pct(add_wall, 0.99), ""),
        ("incidents: search, p50 ms", pct(search_wall, 0.5), ""),
        ("incidents: search, p99 ms", p99, f"< {SEARCH_P99_MS:g}"),
        ("incidents: search, mean ms", statistics.mean(search_wall) * 1000, ""),
        ("incidents: search, client CPU p50 ms", pct(search_cpu, 0.5), ""),
        ("incidents: search, client CPU p99 ms", pct(search_cpu, 0.99), ""),
        ("incidents: by alert, p99 ms", pct(alert_wall, 0.99), ""),
        ("incidents: bytes per record (used_memory)", per_record, f"< {BYTES_PER_RECORD}"),
        ("incidents: record JSON bytes (comparison)", json_bytes / n_records, ""),
    ]
    # -- runbook search (bot.knowledge.runbooks), on the same questions ------------------
    rows += runbook_rows(asked, sections)

    print(f"team knowledge: {n_records:,} past incidents, {n_queries} queries (limit 5)")
    print(f"{'what':<50} {'value':>10} {'target':>10}")
    for name, value, target in rows:
        print(f"{name:<50} {value:>10.2f} {target:>10}")
    ok = p99 < SEARCH_P99_MS and per_record < BYTES_PER_RECORD
    print(f"targets {'met' if ok else 'MISSED'}; mean hits per search {hits / n_queries:.2f}")
    load = os.getloadavg()[0]
    cores = os.cpu_count()
    print(f"(load average {load:.2f} on {cores} cores: wall times include waiting for one)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--sections", type=int, default=1_000)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        server = ManagedRedis(Path(folder) / "redis").start()
        try:
            asyncio.run(measure(server.url, opts.records, opts.queries, opts.sections))
        finally:
            server.stop()


if __name__ == "__main__":
    main()

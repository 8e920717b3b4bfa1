"""Alertmanager notifications acknowledged per second by ``POST /alerts/alertmanager``,
their latency, and the bot's CPU per notification.

One ``opsloop serve`` process on a standalone ``redis-server`` (AOF, appendfsync always);
the fake Slack Web API and the scripted model (answering at once) run in a second process
(``benchmarks/slack_ack.py``'s), the load generator in this one. Each rate gets a fresh
bot on a fresh Redis, so every row sees the same storm from its start.

The workload: realistic Alertmanager ``version: "4"`` bodies of 2-4 KB (one group of
2-3 alerts with a production's labels, a summary, a few hundred characters of
description, runbook and dashboard links), sent open-loop at each rate (on schedule,
whatever the answers) for a bounded time. Four in five are new groups, each opening an
alert message in Slack; the fifth repeats an earlier group's notification byte for byte
(Alertmanager's ``repeat_interval``), which must change nothing. Groups route through an
``OPSLOOP_ALERTS`` file (a regex matcher, then the default channel).
``OPSLOOP_ALERT_INVESTIGATIONS_PER_HOUR`` stays at its default, 20 (the storm limit): the
first 20 new groups of a rate start an investigation (a job in the alert's thread,
answered at once by the scripted model), the rest are posted with the Investigate button,
as in a real storm, so the model is never the bottleneck.

Reported per rate: notifications sent, answered 200, any other status (or a connection
error), the 200s per second (from the first send to the last answer), the answer's
latency p50/p99 as the sender sees it (from the request's start), and the bot process's
CPU per notification (``/proc/<pid>/stat`` utime+stime, from the start of the load until
every alert message is posted and every investigation ended: the ack path, the Slack
posts and the 20 jobs). Then what the bot did (outcomes, posts, investigations), and the
target line: p99 < 50 ms at 100/s.

    python benchmarks/alerts.py [--rates 20,100,200] [--seconds 10] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import random
import re
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402

from benchmarks.slack_ack import (  # noqa: E402
    POLL_S,
    SECRET,
    TRAILING_S,
    Endpoint,
    backends,
    cpu_seconds,
    jobs_done,
    pct,
)
from bot.emulator.bot_process import BotProcess, bot_env  # noqa: E402
from bot.emulator.redis_server import ManagedRedis  # noqa: E402

RATES = (20, 100, 200)
SECONDS = 10.0
QUICK_SECONDS = 2.0
TARGET_RATE, TARGET_P99_MS = 100, 50.0
PER_HOUR = 20  # OPSLOOP_ALERT_INVESTIGATIONS_PER_HOUR: the default storm limit
REPEAT_EVERY = 5  # every fifth notification repeats an earlier group
WARMUP = 10  # notifications of one uninvestigated group before each rate's load
DONE_TIMEOUT_S = 120.0  # a rate's alert messages and jobs must be done within this
TOKEN = "bench-alerts-token-0123456789"
PATH = "/alerts/alertmanager"
ROUTES = """\
routes:
  - match: {severity: info}
    channel: C0NOISE
    investigate: false
  - match: {severity: critical, cluster: /prod-.*/}
    channel: C0INCIDENTS
default_channel: C0ALERTS
"""

# (alertname, job, summary, description) of the kinds of alert a group is.
KINDS = (
    (
        "HighCPU",
        "node-exporter",
        "CPU usage above 90% for 10 minutes",
        "{host} has been at {n}% CPU since 03:12 UTC. The busiest process is the checkout "
        "worker (pid 4{n}17); load average 14.2 on 8 cores. A deploy of checkout-api rolled "
        "out to this node 14 minutes before the alert fired.",
    ),
    (
        "KubePodCrashLooping",
        "kube-state-metrics",
        "Pod is crash looping",
        "Pod {ns}/{host} (container api) is in CrashLoopBackOff: it restarted {n} times in "
        "the last 15 minutes. The last termination reason was OOMKilled with a limit of "
        "512Mi; the container's working set was 498Mi one minute before. The image tag "
        "changed from v2.14.1 to v2.15.0 at 03:05 UTC.",
    ),
    (
        "HighErrorRate",
        "ingress-nginx",
        "5xx rate above 5% on the ingress",
        "The ingress for {ns} answers {n}% of requests with a 5xx over the last 5 minutes "
        "(threshold 5%). Most errors are 502 from upstream {host}; p99 latency rose from "
        "180 ms to 2.4 s. The upstream's ready endpoints dropped from 6 to 2 at 03:10 UTC.",
    ),
    (
        "DiskWillFillIn4Hours",
        "node-exporter",
        "Disk predicted to fill within 4 hours",
        "The filesystem /var/lib/postgresql on {host} is {n}% full and, at the rate of the "
        "last 6 hours, fills within 4 hours. WAL files account for most of the growth; "
        "replication slot 'analytics' has been inactive since yesterday 22:40 UTC and "
        "retains 41 GB of WAL.",
    ),
)
TEAMS = ("payments", "checkout", "search", "platform", "identity", "data")


def notification(group: int) -> bytes:
    """Alertmanager's webhook body of group ``group``: the same bytes for the same number
    (a repeat is a byte-identical resend), 2-4 KB."""
    rng = random.Random(group)
    name, job, summary, description = KINDS[group % len(KINDS)]
    team = TEAMS[group % len(TEAMS)]
    namespace = f"{team}-{group}"
    severity = "critical" if group % 3 else "warning"
    cluster = "prod-eu-1" if group % 2 else "prod-us-2"
    alerts: list[dict[str, Any]] = []
    for i in range(2 + group // len(KINDS) % 2):
        host = f"{team}-api-{group}-{i}"
        n = rng.randint(91, 99)
        labels = {
            "alertname": name,
            "severity": severity,
            "cluster": cluster,
            "region": "eu-west-1" if cluster == "prod-eu-1" else "us-east-2",
            "namespace": namespace,
            "pod": f"{host}-7d9f8b6c4-{rng.randrange(16**5):05x}",
            "container": "api",
            "instance": f"10.{group % 250}.{i}.{rng.randint(2, 250)}:9100",
            "job": job,
            "service": f"{team}-api",
            "team": team,
        }
        alerts.append(
            {
                "status": "firing",
                "labels": labels,
                "annotations": {
                    "summary": summary,
                    "description": description.format(host=host, ns=namespace, n=n),
                    "runbook_url": f"https://runbooks.example.com/{name}",
                    "dashboard_url": f"https://grafana.example.com/d/{team}/{team}-api"
                    f"?var-namespace={namespace}",
                },
                "startsAt": f"2026-12-06T03:{10 + i:02d}:00.000Z",
                "endsAt": "0001-01-01T00:00:00Z",
                "generatorURL": "http://prometheus-k8s-0:9090/graph?g0.expr="
                f"{name}%7Bnamespace%3D%22{namespace}%22%7D&g0.tab=1",
                "fingerprint": f"{group:08x}{i:08x}",
            }
        )
    body: dict[str, Any] = {
        "version": "4",
        "groupKey": f'{{}}/{{severity=~"critical|warning"}}:'
        f'{{alertname="{name}", namespace="{namespace}"}}',
        "truncatedAlerts": 0,
        "status": "firing",
        "receiver": "opsloop",
        "groupLabels": {"alertname": name, "namespace": namespace},
        "commonLabels": {
            k: v for k, v in alerts[0]["labels"].items() if k not in ("pod", "instance")
        },
        "commonAnnotations": {"summary": summary},
        "externalURL": "http://alertmanager-main-0:9093",
        "alerts": alerts,
    }
    return json.dumps(body).encode()


def warmup_notification() -> bytes:
    """A group routed to the channel that does not investigate (``severity: info``)."""
    body = json.loads(notification(0))
    for labels in [body["commonLabels"], *(a["labels"] for a in body["alerts"])]:
        labels["severity"] = "info"
    body["groupKey"] = '{}:{alertname="BenchWarmup"}'
    return json.dumps(body).encode()


@dataclass
class Load:
    """What the sender saw at one rate."""

    sent: int = 0
    new_groups: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    statuses: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    first_sent: float = 0.0
    last_answer: float = 0.0

    @property
    def ok(self) -> int:
        return self.statuses["200"]


async def post(session: aiohttp.ClientSession, url: str, body: bytes, load: Load) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    start = time.monotonic()
    try:
        async with session.post(url, data=body, headers=headers) as response:
            answer = await response.read()
            status = str(response.status)
    except (aiohttp.ClientError, TimeoutError) as exc:
        answer, status = b"", type(exc).__name__
    end = time.monotonic()
    load.latencies_ms.append((end - start) * 1000)
    load.last_answer = max(load.last_answer, end)
    load.statuses[status] += 1
    if status == "200":
        load.outcomes[json.loads(answer).get("outcome", "?")] += 1


async def send(session: aiohttp.ClientSession, url: str, rate: int, seconds: float) -> Load:
    """Open loop: notification ``n`` leaves at ``n / rate`` whatever the answers so far."""
    load = Load()
    rng = random.Random(rate)
    total = int(rate * seconds)
    tasks = []
    begin = time.perf_counter()
    load.first_sent = time.monotonic()
    for n in range(total):
        delay = begin + n / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        if n % REPEAT_EVERY == REPEAT_EVERY - 1 and load.new_groups:
            body = notification(rng.randrange(load.new_groups))
        else:
            body = notification(load.new_groups)
            load.new_groups += 1
        tasks.append(asyncio.create_task(post(session, url, body, load)))
    load.sent = total
    await asyncio.gather(*tasks)
    return load


def counter_sum(metrics: str, name: str, label: str | None = None) -> float:
    """The sum of a counter's samples (those with ``label`` in their labels, if given)."""
    total = 0.0
    for match in re.finditer(rf"^{name}\{{([^}}]*)\}} (\S+)$", metrics, re.MULTILINE):
        if label is None or label in match.group(1):
            total += float(match.group(2))
    return total


INVESTIGATIONS = "opsloop_alert_investigations_total"


@dataclass(frozen=True)
class Row:
    rate: int
    load: Load
    cpu_ms: float
    posted: float
    started: float
    jobs: float
    unfinished: str

    def line(self) -> str:
        load = self.load
        others = ", ".join(f"{k}×{v}" for k, v in sorted(load.statuses.items()) if k != "200")
        span = max(load.last_answer - load.first_sent, 1e-9)
        return (
            f"{self.rate:>6} {load.sent:>5} {load.ok:>5} {others or '-':>12}"
            f" {load.ok / span:>8.1f} {statistics.median(load.latencies_ms):>7.1f}"
            f" {pct(load.latencies_ms, 0.99):>7.1f} {self.cpu_ms:>9.2f}{self.unfinished}"
        )


async def wait_done(
    session: aiohttp.ClientSession, bot: BotProcess, *, posts: float, jobs_before: float
) -> tuple[str, float, float]:
    """Poll the bot's metrics until ``posts`` alert groups are posted and every
    investigation they started has ended (bounded); the last metrics text, the
    investigations started and the jobs ended since ``jobs_before``."""
    deadline = time.monotonic() + DONE_TIMEOUT_S
    while True:
        async with session.get(bot.url + "/metrics") as response:
            text = await response.text()
        started = counter_sum(text, INVESTIGATIONS, 'outcome="started"')
        done = jobs_done(text) - jobs_before
        if counter_sum(text, INVESTIGATIONS) >= posts and done >= started:
            return text, started, done
        if time.monotonic() > deadline:
            return text, started, done
        await asyncio.sleep(POLL_S)


async def one_rate(
    session: aiohttp.ClientSession, fakes: Any, tmp: Path, rate: int, seconds: float
) -> Row:
    """A fresh bot on a fresh Redis, warmed up, then ``rate`` notifications/s."""
    folder = tmp / f"rate-{rate}"
    redis = ManagedRedis(folder / "redis").start()
    routes = folder / "alerts.yml"
    routes.write_text(ROUTES)
    extra = {
        "OPSLOOP_ALERTS_TOKEN": TOKEN,
        "OPSLOOP_ALERTS": str(routes),
        "OPSLOOP_ALERT_INVESTIGATIONS_PER_HOUR": str(PER_HOUR),
    }
    env = bot_env(fakes[0], redis, fakes[1], secret=SECRET, extra=extra)
    bot = BotProcess(env, folder / "bot", secret=SECRET)
    try:
        await bot.start()
        url = bot.url + PATH
        warm = Load()
        for _ in range(WARMUP):
            await post(session, url, warmup_notification(), warm)
        if warm.ok != WARMUP:
            raise RuntimeError(f"warm-up answers: {dict(warm.statuses)}")
        text, _, _ = await wait_done(session, bot, posts=1, jobs_before=0)
        posted_before = counter_sum(text, INVESTIGATIONS)
        jobs_before = jobs_done(text)
        cpu_before = cpu_seconds(bot.pid)
        load = await send(session, url, rate, seconds)
        # What the bot said it opened: a 503's group may be persisted, or not.
        opened = load.outcomes["opened"]
        text, started, done = await wait_done(
            session, bot, posts=posted_before + opened, jobs_before=jobs_before
        )
        await asyncio.sleep(TRAILING_S)
        cpu = cpu_seconds(bot.pid) - cpu_before
        posted = counter_sum(text, INVESTIGATIONS) - posted_before
        unfinished = ""
        if posted < opened or done < started:
            unfinished = f"  ({opened - posted:g} posts, {started - done:g} jobs unfinished)"
        return Row(rate, load, cpu * 1000 / max(load.sent, 1), posted, started, done, unfinished)
    finally:
        await bot.stop()
        redis.stop()


async def main(rates: list[int], seconds: float) -> int:
    receive, send_end = multiprocessing.Pipe(duplex=False)
    child = multiprocessing.get_context("spawn").Process(
        target=backends, args=(send_end, set()), daemon=True
    )
    child.start()
    slack_url, model_url = receive.recv()
    fakes: Any = (Endpoint(slack_url), Endpoint(model_url))  # what bot_env reads of them
    sizes = [len(notification(g)) for g in range(100)]
    print(
        f"Alertmanager notifications to `opsloop serve` (standalone Redis, appendfsync always;"
        f" fake Slack and the scripted model in another process); {seconds:g} s per rate,"
        f" open loop; bodies {min(sizes)}-{max(sizes)} bytes; {REPEAT_EVERY - 1} in"
        f" {REPEAT_EVERY} new groups, the rest repeats;"
        f" OPSLOOP_ALERT_INVESTIGATIONS_PER_HOUR={PER_HOUR} (the first {PER_HOUR} groups"
        f" investigated); a fresh bot and Redis per rate"
    )
    rows: list[Row] = []
    try:
        connector = aiohttp.TCPConnector(limit=400)
        timeout = aiohttp.ClientTimeout(total=30)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            with tempfile.TemporaryDirectory() as tmp:
                print(
                    f"{'rate/s':>6} {'sent':>5} {'200':>5} {'other':>12} {'200s/s':>8}"
                    f" {'p50 ms':>7} {'p99 ms':>7} {'cpu ms/n':>9}"
                )
                for rate in rates:
                    row = await one_rate(session, fakes, Path(tmp), rate, seconds)
                    rows.append(row)
                    print(row.line(), flush=True)
    finally:
        child.terminate()
        child.join(5)
    for row in rows:
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(row.load.outcomes.items()))
        print(
            f"  {row.rate}/s: outcomes {outcomes}; alert messages posted {row.posted:g};"
            f" investigations started {row.started:g}, jobs ended {row.jobs:g}"
        )
    target = next((row for row in rows if row.rate == TARGET_RATE), None)
    if target is None:
        print(f"target: p99 < {TARGET_P99_MS:g} ms at {TARGET_RATE}/s: not measured")
        return 0
    p99 = pct(target.load.latencies_ms, 0.99)
    passed = p99 < TARGET_P99_MS and target.load.ok == target.load.sent
    verdict = "PASS" if passed else "FAIL"
    print(f"target: p99 < {TARGET_P99_MS:g} ms at {TARGET_RATE}/s: {verdict} (p99 {p99:.1f} ms)")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--rates", default=",".join(map(str, RATES)), help="notifications/s")
    parser.add_argument("--seconds", type=float, default=SECONDS, help="load time per rate")
    parser.add_argument(
        "--quick", action="store_true", help=f"{QUICK_SECONDS:g} s per rate (a smoke run)"
    )
    args = parser.parse_args()
    seconds = QUICK_SECONDS if args.quick else args.seconds
    sys.exit(asyncio.run(main([int(r) for r in args.rates.split(",")], seconds)))

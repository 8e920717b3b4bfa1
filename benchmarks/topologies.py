"""Slack acks and jobs/s on each Redis topology, and how long a failover stalls jobs.

One `opsloop serve` at a time (a fresh bot and a fresh Redis per row) against the fake
Slack and the scripted model of ``benchmarks/slack_ack.py`` (its load generator, metrics
parsing and CPU figures are reused), on real redis-server processes with AOF
``appendfsync always`` (``bot/emulator``'s fixtures):

* ``standalone``: one server, as ``slack_ack.py`` runs it (the baseline);
* ``replica``: that server plus one replica, ``OPSLOOP_REDIS_MIN_REPLICAS=1`` (every
  acknowledged write waits for the replica: ``WAIT 1``);
* ``cluster``: a Redis Cluster of three masters and three replicas;
* ``cluster-mr1``: the same cluster with ``OPSLOOP_REDIS_MIN_REPLICAS=1``;
* ``sentinel``: a master, a replica and three sentinels.

Each row runs the same two loads one after the other: **steady**, signed mentions
open-loop at ``--rate`` for ``--seconds`` (below capacity, so jobs/s is the offered rate
on every row: the row's figures are the ack latency, the bot's CPU per job and the Redis
commands per job), then **saturating**, ``--capacity-rate`` for ``--capacity-seconds``
(more than the bot can take on these machines: jobs/s is then its capacity, which is
what the target "within 1.3x of standalone" compares). Per row: sender-side ack
p50/p99, non-2xx, jobs/s (first event sent to the last job's end), bot CPU ms per job,
Redis commands per job (``INFO commandstats`` of the masters) and Redis CPU ms per job
(every data node); under saturation also the bot's share of a core, the jobs/s one core
would hold at its CPU per job, and both ratios to standalone's. The rows run one after
the other on a machine others use too: ``--rounds N`` runs them N times (every other
round in reverse order) and prints the medians.

Then the **failover stall**: for each topology named in ``--faults``, a fresh one and a
fresh bot under a steady ``--failover-rate``, and ``--fault-at`` seconds into each of its
faults: (a) ``CLUSTER FAILOVER`` on a master's replica, (b) SIGKILL of a master
(restarted once its replica took over, as a supervisor would), and on Sentinel (c)
SIGKILL of the master (restarted after the load: see ``run_fault``). The sender behaves
as Slack does: a non-2xx answer, or none within 3 s, is redelivered (same event id,
``X-Slack-Retry-Num``) after 1, 3 and 8 s. Reported per fault: the deliveries refused and
the span they fall in (from the fault), the mentions never acknowledged, the longest gap
between answers (at the fake Slack) and between job ends (the bot's
``opsloop_jobs_total``, read every 100 ms), the jobs unfinished ``--unfinished-after``
seconds after the load (acknowledged mentions less job endings: a job that ended twice
counts twice), how the jobs ended, and whether every mention was answered exactly once
(answers counted per thread; the mentions are seeded in the fake Slack, so a resumed job
finds its status message).

    python benchmarks/topologies.py [--rate 20] [--seconds 10] [--capacity-rate 80]
        [--capacity-seconds 4] [--rows standalone,replica,cluster,cluster-mr1,sentinel]
        [--rounds 1]
        [--failover-rate 10] [--failover-seconds 10] [--fault-at 3]
        [--faults cluster:failover,cluster:kill,sentinel:kill] [--keep] [--profile ROWS]

``--faults ''`` skips the failover part; ``cluster-mr1:kill`` etc. run a fault with
``OPSLOOP_REDIS_MIN_REPLICAS=1``. Every process it starts is stopped at the end, on an
error and on Ctrl-C. ``--keep`` keeps the bots' logs and Redis data (the folder is printed);
``--profile standalone,cluster`` samples those rows' bot with py-spy under the saturating
load and prints where its time goes (``slack_ack.py --profile``'s report).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import multiprocessing
import os
import re
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import redis.asyncio as aioredis  # noqa: E402
from aiohttp import web  # noqa: E402

from benchmarks.slack_ack import (  # noqa: E402
    ANSWER,
    CHUNKS,
    POLL_S,
    SECRET,
    TRAILING_S,
    USERS,
    Endpoint,
    TimedSlack,
    command_stats,
    cpu_seconds,
    jobs_done,
    load,
    pct,
    profile,
    report_profile,
)
from bot.emulator.bot_process import BotProcess, bot_env  # noqa: E402
from bot.emulator.model_server import ScriptedServer  # noqa: E402
from bot.emulator.redis_replica import ManagedReplica  # noqa: E402
from bot.emulator.redis_server import ManagedRedis  # noqa: E402
from bot.emulator.redis_topology import ClusterNode, ManagedCluster, ManagedSentinel  # noqa: E402
from bot.emulator.scripted import Reply  # noqa: E402
from bot.emulator.sender import new_event_id, retried, sign  # noqa: E402
from bot.emulator.slack_requests import event_body, mention  # noqa: E402

ROWS = ("standalone", "replica", "cluster", "cluster-mr1", "sentinel")
FAULTS = ("cluster:failover", "cluster:kill", "sentinel:kill")
RATE, SECONDS = 20, 10.0
CAPACITY_RATE, CAPACITY_SECONDS = 80, 4.0
FAILOVER_RATE, FAILOVER_SECONDS, FAULT_AT_S = 10, 10.0, 3.0
UNFINISHED_AFTER_S = 5.0
DONE_TIMEOUT_S = 60.0  # a row's jobs must all end within this after its load
SETTLE_S = 30.0  # after a fault's load: until every acknowledged mention has ended
STOP_S = 2.0  # SIGTERM, then SIGKILL: the drain would wait out paced status edits (50/min)
SLACK_TIMEOUT_S = 3.0  # Slack's own: an ack later than this is a failed delivery
REDELIVER_AFTER_S = (1.0, 3.0, 8.0)  # Slack retries thrice (1 min, 5 min: shortened here)
METRICS_EVERY_S = 0.1
PROFILE_TAIL_S = 5.0  # the saturating load's jobs end a while after its last event
ANSWER_PREFIX = ANSWER[:12]  # the first streamed chunk starts the answer message
LOG_RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ ([A-Z]+) (.*)$")
EXCEPTION_LINE = re.compile(
    r"^[a-z_][\w.]*\.[A-Z]\w*(Error|Exception|Unavailable|Conflict)\b|^[A-Z]\w*Error\b"
)
MAX_LOG_LINES = 10


# -- the fakes (a child process) -----------------------------------------------------------
class AnswerSlack(TimedSlack):
    """``TimedSlack`` that also tells when each answer stream ended (``bench.answered``)
    and, per thread of a channel, how many answers and other bot messages it holds, the
    other messages' last text and how many answers are whole (``bench.threads?channel=C``);
    ``bench.seed`` holds a mention as Slack would."""

    def __init__(self) -> None:
        super().__init__()
        self.answered: list[tuple[float, str]] = []

    async def _handle(self, request: Any) -> Any:
        method = request.match_info["method"]
        if method == "bench.seed":  # the mention itself, as Slack holds it
            seen = await request.json()
            self.add_message(seen["channel"], seen["ts"], seen["user"], seen["text"])
            return web.json_response({"ok": True})
        if method == "bench.answered":
            return web.json_response(self.answered)
        if method == "bench.threads":
            threads: dict[str, list[Any]] = {}
            for message in self.messages(request.query["channel"]):
                if message.thread_ts is None or message.thread_ts == message.ts:
                    continue
                seen = threads.setdefault(message.thread_ts, [0, 0, "", 0])
                if message.text.startswith(ANSWER_PREFIX):
                    seen[0] += 1
                    seen[3] += message.text == ANSWER  # the whole answer, stream ended
                else:
                    seen[1] += 1
                    seen[2] = message.text[:160]
            return web.json_response(threads)
        response = await super()._handle(request)
        if method == "chat.stopStream" and response.status == 200:
            body = json.loads(response.body)
            if body.get("ok"):
                thread = body["message"].get("thread_ts", "")
                self.answered.append((time.monotonic(), thread))
        return response


def fakes(ports: Any) -> None:
    """The child process: the fake Slack and the scripted model until terminated."""

    async def serve() -> None:
        model = ScriptedServer(lambda request: Reply(content=ANSWER), chunks=CHUNKS)
        await model.start()
        async with AnswerSlack() as slack:
            ports.send((slack.api_url, model.base_url))
            await asyncio.Event().wait()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve())


# -- everything started, stopped whatever happens ----------------------------------------
class Reaper:
    """What to stop, newest first: on the normal path, an error, Ctrl-C or SIGTERM; and
    ``sweep`` once more at exit (every stop is idempotent), for a fault's thread that was
    still under way meanwhile (``ABORT`` tells it not to start anything more)."""

    def __init__(self) -> None:
        self._stops: list[Callable[[], None]] = []
        self._ever: list[Callable[[], None]] = []

    def add(self, stop: Callable[[], None]) -> Callable[[], None]:
        self._stops.append(stop)
        self._ever.append(stop)
        return stop

    def sweep(self) -> None:
        ABORT.set()
        self.all()
        for stop in reversed(self._ever):
            with contextlib.suppress(Exception):
                stop()

    def run(self, stop: Callable[[], None]) -> None:
        """Stop one thing now (and forget it)."""
        if stop in self._stops:
            self._stops.remove(stop)
        with contextlib.suppress(Exception):
            stop()

    def all(self) -> None:
        while self._stops:
            self.run(self._stops[-1])


ABORT = threading.Event()
REAPER = Reaper()


async def in_thread(blocking: Callable[[], None]) -> None:
    """``blocking()`` in a daemon thread (the fixtures poll over sockets for up to 30 s;
    a Ctrl-C need not wait for that, as it would for ``asyncio.to_thread``'s)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def settle(error: BaseException | None) -> None:
        if done.done():
            return
        if error is None:
            done.set_result(None)
        elif isinstance(error, StopIteration):  # a fixture's next() on no live node
            done.set_exception(RuntimeError(f"{blocking!r}: nothing left running"))
        else:
            done.set_exception(error)

    def run() -> None:
        error: BaseException | None = None
        try:
            blocking()
        except BaseException as exc:  # noqa: BLE001  # handed to the awaiting task
            error = exc
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(settle, error)

    threading.Thread(target=run, daemon=True).start()
    await done


def kill_bot(bot: BotProcess) -> Callable[[], None]:
    """A synchronous last resort for a bot (its own process group, as the harness starts it)."""

    def stop() -> None:
        if bot.running and bot.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(bot.pid, signal.SIGKILL)

    return stop


# -- the topologies ------------------------------------------------------------------------
class _Url:
    """What ``bot_env`` reads as ``REDIS_URL``."""

    def __init__(self, url: str) -> None:
        self.url = url


@dataclass
class Topology:
    """A running topology: the bot's environment for it, its data nodes, how to stop it."""

    name: str
    env: dict[str, str]
    stop: Callable[[], None]
    server: ManagedRedis | None = None
    replica: ManagedReplica | None = None
    cluster: ManagedCluster | None = None
    sentinel: ManagedSentinel | None = None

    def data_ports(self) -> list[int]:
        """Every running redis-server holding data (masters and replicas)."""
        if self.cluster is not None:
            return [n.port for n in self.cluster.nodes if n.running]
        if self.sentinel is not None:
            return [s.port for s in self.sentinel.servers if s.running]
        assert self.server is not None
        return [self.server.port] + ([self.replica.port] if self.replica is not None else [])

    def master_ports(self) -> list[int]:
        """The servers taking the bot's commands now."""
        if self.cluster is not None:
            return [n.port for n in self.cluster.masters()]
        if self.sentinel is not None:
            return [self.sentinel.master.port]
        assert self.server is not None
        return [self.server.port]


async def start_topology(kind: str, folder: Path) -> Topology:
    """``kind`` is a row name (see ``ROWS``); runs in the event loop's thread on purpose:
    a Ctrl-C meanwhile cancels at the next await, after the processes are registered."""
    min_replicas = {"OPSLOOP_REDIS_MIN_REPLICAS": "1"} if kind.endswith("mr1") else {}
    if kind in ("standalone", "replica"):
        server = ManagedRedis(folder / "redis")
        stop_server = REAPER.add(server.kill)
        server.start()
        topo = Topology(kind, {"REDIS_URL": server.url}, stop_server, server=server)
        if kind == "replica":
            replica = ManagedReplica(server, folder / "replica")
            stop_replica = REAPER.add(replica.stop)
            replica.start()
            await replica.linked()

            def stop_both() -> None:
                REAPER.run(stop_replica)
                REAPER.run(stop_server)

            topo.replica, topo.stop = replica, stop_both
            topo.env["OPSLOOP_REDIS_MIN_REPLICAS"] = "1"
        return topo
    if kind.startswith("cluster"):
        cluster = ManagedCluster(folder / "cluster")
        stop = REAPER.add(cluster.stop)
        cluster.start()
        env = {"REDIS_URL": cluster.url, "OPSLOOP_REDIS_MODE": "cluster", **min_replicas}
        return Topology(kind, env, stop, cluster=cluster)
    if kind.startswith("sentinel"):
        sentinel = ManagedSentinel(folder / "sentinel")
        stop = REAPER.add(sentinel.stop)
        sentinel.start()
        env = {
            "REDIS_URL": sentinel.url,
            "OPSLOOP_REDIS_MODE": "sentinel",
            "REDIS_SENTINELS": sentinel.sentinels,
            "REDIS_SENTINEL_MASTER": sentinel.master_name,
            **min_replicas,
        }
        return Topology(kind, env, stop, sentinel=sentinel)
    raise ValueError(f"unknown topology {kind!r}")


ROW_TITLES = {
    "standalone": "standalone (AOF always)",
    "replica": "standalone + 1 replica, MIN_REPLICAS=1",
    "cluster": "cluster 3 masters x 3 replicas",
    "cluster-mr1": "cluster 3x3, MIN_REPLICAS=1",
    "sentinel": "sentinel (master + 1 replica)",
    "sentinel-mr1": "sentinel, MIN_REPLICAS=1",
}


async def redis_figures(ports: list[int], masters: list[int]) -> tuple[int, float]:
    """Commands the masters served so far, and CPU seconds of every data node so far."""
    commands, cpu = 0, 0.0
    for port in ports:
        client = aioredis.Redis(host="127.0.0.1", port=port, socket_timeout=2)
        try:
            if port in masters:
                commands += sum((await command_stats(client)).values())
            info = await client.info("cpu")
            cpu += float(info["used_cpu_sys"]) + float(info["used_cpu_user"])
        except (aioredis.RedisError, OSError):
            pass  # a node that died meanwhile
        finally:
            await client.aclose()
    return commands, cpu


async def start_bot(topo: Topology, slack_url: str, model_url: str, folder: Path) -> BotProcess:
    fake: Any = Endpoint(slack_url), Endpoint(model_url)
    redis: Any = _Url(topo.env["REDIS_URL"])  # what bot_env reads of a ManagedRedis
    env = bot_env(fake[0], redis, fake[1], secret=SECRET, extra=topo.env)
    bot = BotProcess(env, folder / "bots", secret=SECRET, name=f"bot-{topo.name}")
    REAPER.add(kill_bot(bot))
    await bot.start()
    return bot


# -- one row: a steady load and a saturating one ------------------------------------------
@dataclass
class Load:
    rate: int
    sent: int
    bad: int
    ack_p50: float
    ack_p99: float
    jobs_per_s: float
    cpu_ms: float
    commands: float
    redis_cpu_ms: float
    unfinished: float
    cpu_share: float  # of one core, over the load and until its last job ended

    @property
    def per_core(self) -> float:
        """Jobs/s one core would hold at this bot CPU per job (less sensitive than jobs/s
        to what else the machine runs meanwhile)."""
        return 1000 / self.cpu_ms if self.cpu_ms else float("nan")

    @staticmethod
    def median(loads: list[Load]) -> Load:
        """Field by field, over the rounds."""
        fields = {k: statistics.median(getattr(x, k) for x in loads) for k in vars(loads[0])}
        return Load(**fields)


async def measure(
    http: httpx.AsyncClient, bot: BotProcess, topo: Topology, slack_url: str, rate: int, s: float
) -> Load:
    done_before = jobs_done((await http.get(bot.url + "/metrics")).text)
    commands_before, redis_cpu_before = await redis_figures(topo.data_ports(), topo.master_ports())
    cpu_before = cpu_seconds(bot.pid)
    began = time.monotonic()
    acks, bad, _ = await load(http, bot.url + "/slack/events", slack_url, rate, s)
    deadline = time.monotonic() + DONE_TIMEOUT_S
    while True:
        done = jobs_done((await http.get(bot.url + "/metrics")).text) - done_before
        if done >= len(acks) or time.monotonic() > deadline:
            break
        await asyncio.sleep(POLL_S)
    ended = time.monotonic()
    await asyncio.sleep(TRAILING_S)
    cpu = cpu_seconds(bot.pid) - cpu_before
    commands, redis_cpu = await redis_figures(topo.data_ports(), topo.master_ports())
    jobs = max(done, 1)
    return Load(
        rate=rate,
        sent=len(acks),
        bad=bad,
        ack_p50=statistics.median(acks),
        ack_p99=pct(acks, 0.99),
        jobs_per_s=done / (ended - began),
        cpu_ms=cpu * 1000 / jobs,
        commands=(commands - commands_before) / jobs,
        redis_cpu_ms=(redis_cpu - redis_cpu_before) * 1000 / jobs,
        unfinished=len(acks) - done,
        cpu_share=cpu / (ended - began),
    )


async def row(
    kind: str, args: argparse.Namespace, http: httpx.AsyncClient, urls: tuple[str, str], tmp: Path
) -> tuple[Load, Load]:
    topo = await start_topology(kind, tmp / kind)
    bot: BotProcess | None = None
    try:
        bot = await start_bot(topo, *urls, tmp / kind)
        steady = await measure(http, bot, topo, urls[0], args.rate, args.seconds)
        spy = None
        if kind in args.profile and bot.pid is not None and tmp.name == "r0":
            spy = await profile(bot.pid, args.capacity_seconds + PROFILE_TAIL_S, tmp / kind / "spy")
        saturated = await measure(
            http, bot, topo, urls[0], args.capacity_rate, args.capacity_seconds
        )
        if spy is not None:
            await spy.wait()
        return steady, saturated
    finally:
        if bot is not None:
            await bot.stop(timeout=STOP_S)
        REAPER.run(topo.stop)


# -- the failover stall ------------------------------------------------------------------
@dataclass
class Delivery:
    """One mention as Slack delivers it: every attempt's (time, status), 0 for no answer."""

    ts: str
    attempts: list[tuple[float, int]] = field(default_factory=list)

    @property
    def acked(self) -> bool:
        return any(200 <= status < 300 for _, status in self.attempts)


async def deliver(
    http: httpx.AsyncClient, url: str, slack_url: str, channel: str, into: Delivery
) -> None:
    event = mention(channel, f"U{next(USERS)}", "status?", ts=into.ts)
    # A job resumed by another run looks for its status message in the thread.
    seed = {k: event[k] for k in ("channel", "ts", "user", "text")}
    await http.post(slack_url + "bench.seed", json=seed)
    body = event_body(event, event_id=new_event_id())
    for attempt in range(len(REDELIVER_AFTER_S) + 1):
        headers = {**sign(body, SECRET), "Content-Type": "application/json"}
        if attempt:
            reason = "http_timeout" if into.attempts[-1][1] == 0 else "http_error"
            headers = retried(headers, attempt, reason)
        at = time.monotonic()
        try:
            response = await http.post(url, content=body, headers=headers, timeout=SLACK_TIMEOUT_S)
            status = response.status_code
        except httpx.HTTPError:
            status = 0
        into.attempts.append((at, status))
        if 200 <= status < 300 or attempt == len(REDELIVER_AFTER_S):
            return
        await asyncio.sleep(REDELIVER_AFTER_S[attempt])


@dataclass
class Fault:
    """What a fault did, in seconds from its start: when the new master served, and (a
    killed node) when it was back as a replica."""

    what: str
    started: float = 0.0
    served_s: float = float("nan")
    back_s: float = float("nan")


def run_fault(topo: Topology, kind: str, avoid: set[int], fault: Fault) -> None:
    """Blocking (the fixtures poll over sockets): run in a thread."""
    fault.started = time.monotonic()
    if topo.cluster is not None:
        cluster = topo.cluster
        master: ClusterNode = next(
            (m for m in cluster.masters() if m.port not in avoid), cluster.masters()[0]
        )
        if kind == "failover":
            promoted = cluster.failover(replica_of=master)
            fault.what = f"CLUSTER FAILOVER: {promoted.name} took over from {master.name}"
            fault.served_s = time.monotonic() - fault.started
            avoid.add(promoted.port)
            return
        cluster.kill(master)
        cluster.wait_ready()
        fault.served_s = time.monotonic() - fault.started
        if ABORT.is_set():
            return
        cluster.restart(master)
        fault.back_s = time.monotonic() - fault.started
        fault.what = f"SIGKILL of master {master.name}, restarted as a replica once replaced"
        return
    assert topo.sentinel is not None
    sentinel = topo.sentinel
    old = sentinel.master
    sentinel.kill_master()
    fault.served_s = time.monotonic() - fault.started
    # Not restarted here: started again at once, the old master comes back a master with
    # its own data, and a second failover (the new master flapping under load with the
    # fixture's 1 s down-after) can promote it, discarding the new master's writes (seen:
    # jobs lost, a mention answered twice). ``stalls`` restarts it after the load.
    fault.what = f"SIGKILL of the master (port {old.port}; sentinels promote the replica)"


@dataclass
class Stall:
    fault: Fault
    sent: int
    refused: int
    refused_span: tuple[float, float] | None
    never_acked: int
    answer_gap: tuple[float, float]  # longest gap between answers, and its start from the fault
    last_answer: float  # the last answer, from the end of the load
    jobs_gap: tuple[float, float]
    scrape_max_s: float
    unfinished_after: float
    unfinished_end: float
    endings: dict[str, float]
    once: int
    none: int
    doubled: int
    odd_threads: list[str]
    errors: list[str]


def longest_gap(times: list[float], since: float, until: float) -> tuple[float, float]:
    """The longest gap between ``times`` inside [since, until] (its edges count as
    times), and when it began."""
    ordered = sorted([since, until, *(t for t in times if since <= t <= until)])
    gaps = [(b - a, a) for a, b in zip(ordered, ordered[1:], strict=False)]
    return max(gaps, default=(float("nan"), float("nan")))


def endings(metrics: str) -> dict[str, float]:
    found = re.finditer(r'^opsloop_jobs_total\{[^}]*="([^"]*)"\} (\S+)$', metrics, re.MULTILINE)
    return {m.group(1): float(m.group(2)) for m in found}


def log_records(bot: BotProcess, offset: int) -> list[str]:
    """The bot's WARNING and ERROR records since ``offset`` of its stderr, told apart by
    what they say (ids, times and ports blanked) and the exception a traceback ends on,
    most frequent first, errors before warnings, with counts."""
    text = bot.stderr_path.read_text(errors="replace")[offset:] if bot.stderr_path.exists() else ""
    seen: Counter[tuple[int, str]] = Counter()
    key: tuple[int, str] | None = None
    last_exception = ""

    def close() -> None:
        if key is not None:
            seen[(key[0], key[1] + (f" <- {last_exception}" if last_exception else ""))] += 1

    for line in text.splitlines():
        record = LOG_RECORD.match(line)
        if record is not None:
            close()
            level, message = record.group(1), record.group(2)
            key = (0 if level in ("ERROR", "CRITICAL") else 1, f"{level} {blank(message)}")
            key = key if level != "INFO" and level != "DEBUG" else None
            last_exception = ""
        elif EXCEPTION_LINE.match(line):
            last_exception = blank(line)
        elif line.startswith("task: <Task"):  # asyncio's "Task was destroyed but …"
            last_exception = blank(re.sub(r" wait_for=.*", "", line))
    close()
    ordered = sorted(seen.items(), key=lambda kv: (kv[0][0], -kv[1]))
    return [f"{n}x {line[:230]}" for (_, line), n in ordered[:MAX_LOG_LINES]]


def blank(text: str) -> str:
    text = re.sub(r"\d+\.\d{6}", "<ts>", text)
    text = re.sub(r"127\.0\.0\.1:\d+|port \d+", "<addr>", text)
    text = re.sub(r"\b\d+(\.\d+)?\b", "<n>", text)
    return re.sub(r"\bC[A-Z0-9]+\b", "<channel>", text)


async def watch_jobs(
    http: httpx.AsyncClient, url: str, into: list[tuple[float, float, float]]
) -> None:
    """``(asked, answered, jobs ended)`` of ``/metrics`` every 100 ms, until cancelled."""
    while True:
        asked = time.monotonic()
        with contextlib.suppress(httpx.HTTPError):
            text = (await http.get(url + "/metrics", timeout=5)).text
            into.append((asked, time.monotonic(), jobs_done(text)))
        await asyncio.sleep(max(0.0, METRICS_EVERY_S - (time.monotonic() - asked)))


async def stall(
    topo: Topology,
    kind: str,
    bot: BotProcess,
    args: argparse.Namespace,
    http: httpx.AsyncClient,
    slack_url: str,
    avoid: set[int],
) -> Stall:
    channel = f"CFAIL{kind.upper()}{len(avoid)}{topo.name.upper().replace('-', '')}"
    metrics_before = (await http.get(bot.url + "/metrics")).text
    ended_before = endings(metrics_before)
    log_offset = bot.stderr_path.stat().st_size if bot.stderr_path.exists() else 0
    scrapes: list[tuple[float, float, float]] = []
    watcher = asyncio.create_task(watch_jobs(http, bot.url, scrapes))
    fault = Fault(kind)
    deliveries: list[Delivery] = []
    tasks: list[asyncio.Task[None]] = []
    fault_task: asyncio.Task[None] | None = None
    began = time.perf_counter()
    total = int(args.failover_rate * args.failover_seconds)
    try:
        for n in range(total):
            delay = began + n / args.failover_rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            if fault_task is None and time.perf_counter() - began >= args.fault_at:
                fault_task = asyncio.create_task(
                    in_thread(lambda: run_fault(topo, kind, avoid, fault))
                )
            one = Delivery(f"{time.time():.6f}")
            deliveries.append(one)
            tasks.append(
                asyncio.create_task(
                    deliver(http, bot.url + "/slack/events", slack_url, channel, one)
                )
            )
        load_end = time.monotonic()
        assert fault_task is not None, "--fault-at must fall inside --failover-seconds"
        try:
            await fault_task
        except Exception as exc:  # noqa: BLE001  # reported with the figures
            fault.what += f" (the fixture failed: {exc})"
        await asyncio.gather(*tasks)
        acked = sum(d.acked for d in deliveries)
        ended_at = ended_before_total = jobs_done(metrics_before)
        snapshot: float | None = None
        deadline = load_end + args.settle
        while time.monotonic() < deadline:
            ended_at = jobs_done((await http.get(bot.url + "/metrics", timeout=10)).text)
            if snapshot is None and time.monotonic() >= load_end + args.unfinished_after:
                snapshot = acked - (ended_at - ended_before_total)
            if ended_at - ended_before_total >= acked and snapshot is not None:
                break
            await asyncio.sleep(0.25)
        await asyncio.sleep(TRAILING_S)
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        for task in tasks:
            task.cancel()
        if fault_task is not None and not fault_task.done():
            ABORT.set()  # leaving early (an error, Ctrl-C): its thread starts nothing more
            fault_task.cancel()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await fault_task
    metrics_after = (await http.get(bot.url + "/metrics")).text
    ended = {
        k: v - ended_before.get(k, 0.0)
        for k, v in endings(metrics_after).items()
        if v > ended_before.get(k, 0.0)
    }
    refusals = [at for d in deliveries for at, status in d.attempts if not 200 <= status < 300]
    answered_json = (await http.get(slack_url + "bench.answered")).json()
    answered_at = [at for at, _ in answered_json]
    threads = (await http.get(slack_url + "bench.threads", params={"channel": channel})).json()
    once = none = doubled = 0
    odd: list[str] = []
    for d in deliveries:
        answers, others, last, whole = threads.get(d.ts, [0, 0, "", 0])
        once += answers == 1
        none += answers == 0
        doubled += answers > 1
        if answers != 1 or others != 1:
            codes = "/".join(str(s) for _, s in d.attempts)
            odd.append(
                f"{d.ts}: {answers} answers ({whole} whole), {others} other messages"
                f" (acks {codes}) {last!r}"
            )
    t0 = fault.started
    window = (t0 - args.fault_at, load_end)
    answer_gap = longest_gap(answered_at, *window)
    jobs_gap = longest_gap(
        [answered for i, (_, answered, n) in enumerate(scrapes) if i and n > scrapes[i - 1][2]],
        *window,
    )
    mine = [at for at, thread in answered_json if thread in {d.ts for d in deliveries}]
    return Stall(
        fault=fault,
        sent=len(deliveries),
        refused=len(refusals),
        refused_span=(min(refusals) - t0, max(refusals) - t0) if refusals else None,
        never_acked=sum(not d.acked for d in deliveries),
        answer_gap=(answer_gap[0], answer_gap[1] - t0),
        last_answer=max(mine, default=float("nan")) - load_end,
        jobs_gap=(jobs_gap[0], jobs_gap[1] - t0),
        scrape_max_s=max((b - a for a, b, _ in scrapes), default=float("nan")),
        unfinished_after=snapshot if snapshot is not None else float("nan"),
        unfinished_end=acked - (ended_at - ended_before_total),
        endings=ended,
        once=once,
        none=none,
        doubled=doubled,
        odd_threads=odd,
        errors=log_records(bot, log_offset),
    )


async def stalls(
    kind: str,
    faults: list[str],
    args: argparse.Namespace,
    http: httpx.AsyncClient,
    urls: tuple[str, str],
    tmp: Path,
) -> list[Stall]:
    """The faults ``faults`` one after the other on one fresh ``kind`` topology and bot."""
    topo = await start_topology(kind, tmp / f"faults-{kind}")
    bot: BotProcess | None = None
    found: list[Stall] = []
    avoid: set[int] = set()
    try:
        bot = await start_bot(topo, *urls, tmp / f"faults-{kind}")
        for fault in faults:
            found.append(await stall(topo, fault, bot, args, http, urls[0], avoid))
            print_stall(topo.name, found[-1], args)
            if topo.cluster is not None:
                await in_thread(topo.cluster.wait_ready)
            sentinel = topo.sentinel
            if sentinel is not None:
                for server in [s for s in sentinel.servers if not s.running]:
                    await in_thread(functools.partial(sentinel.restart, server))
                await in_thread(sentinel.wait_ready)  # the killed master back as a replica
        return found
    finally:
        if bot is not None:
            await bot.stop(timeout=STOP_S)
        REAPER.run(topo.stop)


# -- printing --------------------------------------------------------------------------------
def print_rows(runs: dict[str, list[tuple[Load, Load]]], args: argparse.Namespace) -> None:
    results = {
        kind: (Load.median([s for s, _ in found]), Load.median([t for _, t in found]))
        for kind, found in runs.items()
    }
    base = results.get("standalone")
    rounds = f"; the median of {args.rounds} rounds" if args.rounds > 1 else ""
    print(
        f"\nsteady: {args.rate}/s for {args.seconds:g} s (below capacity: every row's jobs/s is"
        f" the offered rate){rounds}"
    )
    print(
        f"{'topology':<40} {'non-2xx':>7} {'ack p50':>7} {'ack p99':>7} {'jobs/s':>6}"
        f" {'bot cpu/job':>11} {'redis cmds/job':>14} {'redis cpu/job':>13}"
    )
    for kind, (steady, _) in results.items():
        print(
            f"{ROW_TITLES.get(kind, kind):<40} {steady.bad:>7g} {steady.ack_p50:>7.1f}"
            f" {steady.ack_p99:>7.1f} {steady.jobs_per_s:>6.1f} {steady.cpu_ms:>11.2f}"
            f" {steady.commands:>14.1f} {steady.redis_cpu_ms:>13.2f}"
            + (f"  ({steady.unfinished:g} jobs unfinished)" if steady.unfinished else "")
        )
    print(
        f"\nsaturating: {args.capacity_rate}/s for {args.capacity_seconds:g} s (more than the bot"
        f" takes: jobs/s is its capacity on this machine, with Redis, the fakes and the load on"
        f" the same {os.cpu_count()} cores){rounds}"
    )
    print(
        f"{'topology':<40} {'jobs/s':>6} {'x std':>6} {'ack p99':>7} {'non-2xx':>7}"
        f" {'bot cpu/job':>11} {'bot core':>8} {'jobs/s/core':>11} {'x std':>6}"
        f" {'redis cpu/job':>13}"
    )
    for kind, (_, sat) in results.items():
        ratio = base[1].jobs_per_s / sat.jobs_per_s if base else float("nan")
        core_ratio = base[1].per_core / sat.per_core if base else float("nan")
        print(
            f"{ROW_TITLES.get(kind, kind):<40} {sat.jobs_per_s:>6.1f} {ratio:>5.2f}x"
            f" {sat.ack_p99:>7.0f} {sat.bad:>7g} {sat.cpu_ms:>11.2f} {sat.cpu_share:>8.0%}"
            f" {sat.per_core:>11.1f} {core_ratio:>5.2f}x {sat.redis_cpu_ms:>13.2f}"
            + (f"  ({sat.unfinished:g} jobs unfinished)" if sat.unfinished else "")
        )
    print(
        "  (ms; ack = sender side; bot cpu/job = the bot process, from /proc; redis cmds/job ="
        " the masters' INFO commandstats; redis cpu/job = every data node's INFO cpu;"
        "\n  x std = standalone's jobs/s over this row's (the target: <= 1.3x); bot core ="
        " the bot's CPU over the wall time (below 100%: it waited, on Redis or for a core);"
        "\n  jobs/s/core = 1000 / bot cpu/job, what one core would hold for the bot alone)"
    )


def print_stall(name: str, s: Stall, args: argparse.Namespace) -> None:
    f = s.fault
    span = f"{s.refused_span[0]:+.1f}..{s.refused_span[1]:+.1f} s" if s.refused_span else "none"
    print(f"\n{name}: {f.what} at {args.fault_at:g} s of {args.failover_seconds:g} s at"
          f" {args.failover_rate}/s")  # fmt: skip
    back = "" if f.back_s != f.back_s else f"; old node back {f.back_s:.1f} s"
    print(f"  new master serving {f.served_s:.1f} s after the fault{back}")
    print(
        f"  mentions {s.sent}; deliveries refused (non-2xx or > 3 s) {s.refused}, from the"
        f" fault {span}; never acknowledged after 3 redeliveries {s.never_acked}"
    )
    print(
        f"  while the load ran: longest gap between answers {s.answer_gap[0]:.2f} s (from"
        f" {s.answer_gap[1]:+.1f} s), between job ends (/metrics every 100 ms)"
        f" {s.jobs_gap[0]:.2f} s (from {s.jobs_gap[1]:+.1f} s; slowest scrape"
        f" {s.scrape_max_s:.2f} s); the last answer {s.last_answer:+.1f} s after the load"
    )
    print(
        f"  jobs unfinished {args.unfinished_after:g} s after the load {s.unfinished_after:g},"
        f" after {args.settle:g} s {s.unfinished_end:g}; endings "
        + ", ".join(f"{k} {v:g}" for k, v in sorted(s.endings.items()))
    )
    verdict = "yes" if s.once == s.sent else "NO"
    print(
        f"  every mention answered exactly once: {verdict} (once {s.once}, never {s.none},"
        f" more than once {s.doubled})"
    )
    for line in s.odd_threads[:6]:
        print(f"    {line}")
    if len(s.odd_threads) > 6:
        print(f"    … {len(s.odd_threads) - 6} more")
    for line in s.errors:
        print(f"  bot log: {line}")


# -- the run -----------------------------------------------------------------------------------
async def main(args: argparse.Namespace) -> None:
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    receive, send = multiprocessing.Pipe(duplex=False)
    child = multiprocessing.get_context("spawn").Process(target=fakes, args=(send,), daemon=True)
    tmp = Path(tempfile.mkdtemp(prefix="opsloop-topologies-"))
    try:
        child.start()

        def stop_child() -> None:
            child.terminate()
            child.join(5)

        REAPER.add(stop_child)
        urls: tuple[str, str] = await asyncio.to_thread(receive.recv)
        began = time.monotonic()
        print(f"opsloop serve on each Redis topology (a fresh bot and Redis per row; nothing"
              f" pinned: {os.cpu_count()} cores shared with the fakes and the load)")  # fmt: skip
        async with httpx.AsyncClient(
            limits=httpx.Limits(max_connections=200), timeout=30, trust_env=False
        ) as http:
            results: dict[str, list[tuple[Load, Load]]] = {kind: [] for kind in args.rows}
            for n in range(args.rounds):  # every other round in reverse: drift evens out
                for kind in args.rows if n % 2 == 0 else args.rows[::-1]:
                    results[kind].append(await row(kind, args, http, urls, tmp / f"r{n}"))
                    steady, sat = results[kind][-1]
                    print(
                        f"  {kind}: steady {steady.jobs_per_s:.1f} jobs/s, saturated"
                        f" {sat.jobs_per_s:.1f} jobs/s ({time.monotonic() - began:.0f} s)"
                    )
            if args.rows:
                print_rows(results, args)
            for kind in args.profile:
                if (tmp / "r0" / kind / "spy").exists():
                    print(f"\n--- {ROW_TITLES.get(kind, kind)}, saturating load ---", end="")
                    report_profile(tmp / "r0" / kind / "spy")
            by_topology: dict[str, list[str]] = {}
            for spec in args.faults:
                topology, _, fault = spec.partition(":")
                by_topology.setdefault(topology, []).append(fault)
            for kind, faults in by_topology.items():
                await stalls(kind, faults, args, http, urls, tmp)
        print(f"\n({time.monotonic() - began:.0f} s in all)")
    finally:
        REAPER.sweep()
        if args.keep:
            print(f"(logs and data kept in {tmp})")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=RATE, help="steady mentions/s per row")
    parser.add_argument("--seconds", type=float, default=SECONDS, help="steady load time")
    parser.add_argument("--capacity-rate", type=int, default=CAPACITY_RATE)
    parser.add_argument("--capacity-seconds", type=float, default=CAPACITY_SECONDS)
    parser.add_argument("--rows", default=",".join(ROWS), help="or '' for none")
    parser.add_argument(
        "--rounds", type=int, default=1, help="rows run this many times (medians printed)"
    )
    parser.add_argument("--failover-rate", type=int, default=FAILOVER_RATE)
    parser.add_argument("--failover-seconds", type=float, default=FAILOVER_SECONDS)
    parser.add_argument("--fault-at", type=float, default=FAULT_AT_S)
    parser.add_argument("--unfinished-after", type=float, default=UNFINISHED_AFTER_S)
    parser.add_argument("--settle", type=float, default=SETTLE_S)
    parser.add_argument("--faults", default=",".join(FAULTS), help="topology:failover|kill,…")
    parser.add_argument("--keep", action="store_true", help="keep logs and Redis data")
    parser.add_argument(
        "--profile", default="", help="rows to sample with py-spy under the saturating load"
    )
    args = parser.parse_args(argv)
    args.rows = [r for r in args.rows.split(",") if r]
    args.faults = [f for f in args.faults.split(",") if f]
    args.profile = [r for r in args.profile.split(",") if r]
    for spec in args.faults:
        topology, _, fault = spec.partition(":")
        if not topology.startswith(("cluster", "sentinel")) or fault not in ("failover", "kill"):
            parser.error(f"--faults: {spec!r} is not cluster[-mr1]|sentinel[-mr1]:failover|kill")
        if topology.startswith("sentinel") and fault == "failover":
            parser.error("--faults: sentinel:failover is not measured (sentinel:kill is)")
    if not 0 < args.fault_at < args.failover_seconds:
        parser.error("--fault-at must fall inside --failover-seconds")
    return args


if __name__ == "__main__":
    arguments = parse()
    try:
        asyncio.run(main(arguments))
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        sys.exit(130)
    except asyncio.CancelledError:  # SIGTERM
        print("\nterminated", file=sys.stderr)
        sys.exit(143)
    finally:
        REAPER.sweep()  # a second Ctrl-C can skip the async path's own

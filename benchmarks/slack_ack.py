"""Slack ack latency under load, jobs/s, and the bot's CPU per job.

`opsloop serve` runs as its own process on real Redis (AOF, appendfsync always); the fake
Slack Web API and the scripted model server run in a second process, and the load
generator in this one. Signed `app_mention` events, each in a new thread (so each starts
a real job whose model answers at once, streamed in a few chunks), are sent open-loop at
each rate for a bounded time. Reported per rate: ack latency p50/p99 as the sender sees
it, the share of acks the bot itself timed under 50 ms and the bucket bound of its p99
(its `opsloop_ack_seconds` histogram), the bound of the p99 of its event loop's lag, non-2xx
answers, the time from sending an event to the bot's status message (p50/p99), the jobs
completed per second (from the first event sent to the last job's end, by the bot's
`opsloop_jobs_total`), and the bot process's CPU per job (from ``/proc``, over the load
and until its last job ended) and its share of a core. Then, per job: the Slack Web API
calls by method and the Redis commands (``INFO commandstats``).

Two setups:

* default (**the figure users see**): nothing pinned — the bot, Redis, the fakes and the
  load generator share the machine's cores as the scheduler likes — with streaming on
  (`LLM_STREAM`, the default), at 20 and 50 events/s for 10 s each;
* ``--pinned``: on a machine with 2+ cores the bot is pinned to core 0 and everything else
  to the other cores, so the figures measure the bot alone (as in production, where
  Slack and the model are remote); the older 5-6 ms/job figure is this one's.

    python benchmarks/slack_ack.py [--rates 20,50] [--seconds 10] [--pinned]
        [--max-running N] [--profile]

``--max-running N`` sets ``OPSLOOP_MAX_RUNNING_JOBS`` (admission control). ``--profile``
samples the bot with py-spy (``pip install py-spy``) during the last rate's run and prints
where its time goes: the share of samples inside each layer and part of a job (bolt,
slack-sdk, redis-py, aiohttp, the streamed answer, the status message, the assistant
status, the reactions, the paced updates, …) and the busiest functions by own time.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import itertools
import math
import multiprocessing
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from aiohttp import web

from bot.emulator.bot_process import BotProcess, bot_env
from bot.emulator.model_server import ScriptedServer
from bot.emulator.redis_server import ManagedRedis
from bot.emulator.scripted import Reply
from bot.emulator.sender import sign
from bot.emulator.slack import FakeSlack
from bot.emulator.slack_requests import event_body, mention
from bot.store.connection import connect

SECRET = "bench-secret"
LAG = "opsloop_event_loop_lag_seconds"
RATES = (20, 50)  # ``--rates``; the target is set at 200/s (see ../shared/BENCHMARKS.md)
SECONDS = 10.0
DONE_TIMEOUT_S = 120.0  # a rate's jobs must all end within this after its load
POLL_S = 0.25  # how often the bot's job counter is read while its jobs finish
TRAILING_S = 0.5  # after the last job's end: its trace flush, paced edits
# The model's answer: a few sentences, streamed in CHUNKS pieces (``LLM_STREAM`` is on).
ANSWER = (
    "web-03 looks healthy: CPU is at 12% after the deploy, memory is flat at 41%, and the "
    "error rate went back to 0.02% five minutes ago. Nothing to do; I would keep an eye "
    "on the p99 latency of the checkout service for the next hour."
)
CHUNKS = 8
# Each mention from a person of its own (one person may start 30 jobs an hour).
USERS = itertools.count(100_000)


class TimedSlack(FakeSlack):
    """Records when each thread's first bot message arrives, and counts the calls by
    method (``bench.calls``)."""

    def __init__(self) -> None:
        super().__init__()
        self.first_post: dict[str, float] = {}

    async def _handle(self, request: Any) -> Any:
        if request.match_info["method"] == "bench.firstPosts":
            return web.json_response(self.first_post)
        if request.match_info["method"] == "bench.calls":
            return web.json_response(collections.Counter(c.method for c in self.calls))
        response = await super()._handle(request)
        if self.calls and self.calls[-1].method == "chat.postMessage":
            thread = self.calls[-1].params.get("thread_ts")
            if thread and thread not in self.first_post:
                self.first_post[str(thread)] = time.monotonic()
        return response


def pin(pid: int, cores: set[int]) -> None:
    if hasattr(os, "sched_setaffinity") and cores:
        os.sched_setaffinity(pid, cores)


def backends(ports: Any, cores: set[int]) -> None:
    """The child process: fake Slack and the scripted model until terminated."""
    pin(0, cores)

    async def serve() -> None:
        model = ScriptedServer(lambda request: Reply(content=ANSWER), chunks=CHUNKS)
        await model.start()
        async with TimedSlack() as slack:
            ports.send((slack.api_url, model.base_url))
            await asyncio.Event().wait()

    asyncio.run(serve())


def ack_histogram(metrics: str, name: str = "opsloop_ack_seconds") -> dict[float, float]:
    """``le`` bound → cumulative count of the histogram ``name``."""
    found = {}
    for line in metrics.splitlines():
        match = re.match(name + r'_bucket\{le="([^"]+)"\} (\S+)', line)
        if match:
            found[float(match.group(1))] = float(match.group(2))
    return found


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def load(
    http: httpx.AsyncClient, url: str, slack_url: str, rate: int, seconds: float
) -> tuple[list[float], int, list[float]]:
    acks: list[float] = []
    bad = 0
    sent_at: dict[str, float] = {}

    async def one() -> None:
        nonlocal bad
        event = mention("CBENCH", f"U{next(USERS)}", "status?")
        body = event_body(event)
        headers = {**sign(body, SECRET), "Content-Type": "application/json"}
        start = time.monotonic()
        sent_at[event["ts"]] = start
        response = await http.post(url, content=body, headers=headers)
        acks.append((time.monotonic() - start) * 1000)
        if response.status_code >= 300:
            bad += 1

    tasks = []
    total = int(rate * seconds)
    begin = time.perf_counter()
    for n in range(total):
        delay = begin + n / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one()))
    await asyncio.gather(*tasks)
    deadline = time.monotonic() + 30
    while True:
        first_post = (await http.get(slack_url + "bench.firstPosts")).json()
        if len([ts for ts in sent_at if ts in first_post]) >= total:
            break
        if time.monotonic() > deadline:
            break
        await asyncio.sleep(0.2)
    firsts = [(first_post[ts] - sent) * 1000 for ts, sent in sent_at.items() if ts in first_post]
    return acks, bad, firsts


class Endpoint:
    """What ``bot_env`` reads of the fakes running in the other process."""

    def __init__(self, url: str) -> None:
        self.api_url = self.base_url = url


LAYERS = {  # py-spy names files relative to their sys.path entry
    "slack_bolt": "(slack_bolt/",
    "slack_sdk": "(slack_sdk/",
    "redis-py": "(redis/",
    "aiohttp (under the app: the server's own frames are at every root)": "(aiohttp/",
    "httpx/httpcore (model calls)": "(httpcore/",
    "pydantic": "(pydantic",
    "opsloop bot/": "(bot/",
    "opsloop bot/agent (the loop)": "(bot/agent/",
    "opsloop bot/store (Redis scripts, records)": "(bot/store/",
    "  the ack path (_Routes.events)": "_Routes.events (",
    "    receipt (Receiver.receive)": "Receiver.receive (",
    "  running jobs (JobRunner.run_job)": "JobRunner.run_job (",
    "  a job's events to its face (JobProgress)": "JobProgress.",
    "  status message (LiveStatus)": "LiveStatus.",
    "  task cards (RunSteps)": "RunSteps.",
    "  streamed answer (AnswerStream)": "AnswerStream.",
    "  assistant status (ThreadStatus)": "ThreadStatus.",
    "  paced chat.update (UpdateBudget)": "UpdateBudget.",
    "  eyes reactions (SlackNotifier.acknowledge)": "SlackNotifier.acknowledge (",
    "  checkpoints (JobSession)": "JobSession.",
    "  trace (TraceRecorder)": "TraceRecorder.",
    "  the scanner (Scanner)": "Scanner.",
    "  garbage collection": "<gc>",
}


async def profile(pid: int, seconds: float, out: Path) -> asyncio.subprocess.Process | None:
    if shutil.which("py-spy") is None:
        print("(--profile: py-spy is not installed)")
        return None
    return await asyncio.create_subprocess_exec(
        "py-spy", "record", "-p", str(pid), "-d", str(int(seconds) + 1), "-r", "250",
        "-f", "raw", "-o", str(out), "--nonblocking",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip


def task_root(frames: list[str]) -> str:
    """The coroutine a sample's event-loop step ran (the frame after the loop's
    ``Handle._run``), without its line number: which kind of task the time went to."""
    for i in range(len(frames) - 1, -1, -1):
        if frames[i].startswith("Handle._run (asyncio/events.py"):
            if i + 1 < len(frames):
                return re.sub(r":\d+\)$", ")", frames[i + 1])
            return "(the event loop itself)"
    return "(outside the event loop: " + (frames[-1] if frames else "?") + ")"


def library(frame: str) -> str:
    """The library (or opsloop room) a frame's file belongs to."""
    match = re.search(r"\(([^/:)]+)(?:/([^/:)]+))?", frame)
    if match is None:
        return "?"
    top, sub = match.group(1), match.group(2)
    if top == "bot" and sub and not sub.endswith(".py"):
        return f"bot/{sub}"
    return top.removesuffix(".py")


def report_profile(path: Path, keep: Path | None = None) -> None:
    if keep is not None:
        shutil.copyfile(path, keep)
    own: dict[str, int] = {}
    roots: dict[str, int] = {}
    libs: dict[str, int] = {}
    layers = dict.fromkeys(LAYERS, 0)
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        n = int(count)
        total += n
        frames = stack.split(";")
        leaf = frames[-1]
        own[leaf] = own.get(leaf, 0) + n
        root = task_root(frames)
        roots[root] = roots.get(root, 0) + n
        lib = library(leaf)
        libs[lib] = libs.get(lib, 0) + n
        for layer, marker in LAYERS.items():
            if any(marker in frame for frame in frames):
                layers[layer] += n
    if not total:
        return
    print(f"\nprofile of the bot at the last rate ({total} samples at 250 Hz)")
    print("by the task each sample ran (its coroutine's outermost frame)")
    for root, n in sorted(roots.items(), key=lambda kv: -kv[1])[:14]:
        print(f"  {n / total:6.1%}  {root[:110]}")
    print("by the library of the function running (own time)")
    for lib, n in sorted(libs.items(), key=lambda kv: -kv[1])[:14]:
        print(f"  {n / total:6.1%}  {lib}")
    print("by layer or part of a job (inclusive: a sample inside it anywhere on the stack)")
    for layer, n in sorted(layers.items(), key=lambda kv: -kv[1]):
        print(f"  {n / total:6.1%}  {layer}")
    print("busiest functions (own time)")
    for leaf, n in sorted(own.items(), key=lambda kv: -kv[1])[:20]:
        print(f"  {n / total:6.1%}  {leaf[:110]}")


def cpu_seconds(pid: int | None) -> float:
    """CPU time (user + system) the bot process has used, from ``/proc``."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def jobs_done(metrics: str) -> float:
    """Jobs the bot ended so far, any status (``opsloop_jobs_total``)."""
    return sum(
        float(m.group(1))
        for m in re.finditer(r"^opsloop_jobs_total\{[^}]*\} (\S+)$", metrics, re.MULTILINE)
    )


async def command_stats(redis: Any) -> dict[str, int]:
    """Redis commands served so far, by name (``INFO commandstats``)."""
    info = await redis.info("commandstats")
    return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in info.items()}


def per_job(before: dict[str, int], after: dict[str, int], jobs: float) -> str:
    diff = {k: v - before.get(k, 0) for k, v in after.items()}
    diff = {k: v for k, v in diff.items() if v > 0}
    total = sum(diff.values()) / jobs
    top = sorted(diff.items(), key=lambda kv: -kv[1])[:8]
    return f"{total:.1f}: " + ", ".join(f"{k} {v / jobs:.1f}" for k, v in top)


async def main(
    rates: list[int],
    seconds: float,
    *,
    pinned: bool = False,
    max_running: int | None = None,
    profiling: bool = False,
    profile_raw: Path | None = None,
) -> None:
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    bot_cores: set[int] = set()
    other_cores: set[int] = set()  # Redis and the fakes inherit this process's cores
    if pinned and len(cores) > 1:
        bot_cores, other_cores = {cores[0]}, set(cores[1:])
    pin(0, other_cores)
    receive, send = multiprocessing.Pipe(duplex=False)
    child = multiprocessing.get_context("spawn").Process(
        target=backends, args=(send, other_cores), daemon=True
    )
    child.start()
    slack_url, model_url = receive.recv()
    with tempfile.TemporaryDirectory() as tmp:
        redis = ManagedRedis(Path(tmp) / "redis").start()
        extra = {"OPSLOOP_MAX_RUNNING_JOBS": str(max_running)} if max_running else None
        fakes: Any = (Endpoint(slack_url), Endpoint(model_url))  # what bot_env reads of them
        env = bot_env(fakes[0], redis, fakes[1], secret=SECRET, extra=extra)
        bot = BotProcess(env, Path(tmp) / "bot", secret=SECRET)
        await bot.start()
        if bot.pid is not None:
            pin(bot.pid, bot_cores)
        store = connect(redis.url)
        try:
            async with httpx.AsyncClient(
                limits=httpx.Limits(max_connections=200), timeout=30, trust_env=False
            ) as http:
                where = (
                    f"bot on core {sorted(bot_cores)}, the rest on {sorted(other_cores)}"
                    if bot_cores
                    else f"nothing pinned: bot, Redis, fakes and load share {len(cores)} cores"
                )
                limit = f"OPSLOOP_MAX_RUNNING_JOBS={max_running or 'default'}"
                print(
                    f"signed app_mention events against `opsloop serve` (real Redis; {where};"
                    f" streamed answers; {limit}; {seconds:g} s per rate)"
                )
                print(
                    f"{'rate/s':>6} {'sent':>5} {'non-2xx':>7} {'ack p50':>8} {'ack p99':>8}"
                    f" {'bot <50ms':>9} {'bot p99 ≤':>9} {'lag p99 ≤':>9}"
                    f" {'status p50':>10} {'status p99':>10} {'jobs/s':>7} {'cpu/job':>7}"
                    f" {'bot cpu':>7}  (ms)"
                )
                per_rate: list[tuple[int, str, str]] = []
                for n, rate in enumerate(rates):
                    text = (await http.get(bot.url + "/metrics")).text
                    before = ack_histogram(text)
                    lag_before = ack_histogram(text, LAG)
                    done_before = jobs_done(text)
                    calls_before = (await http.get(slack_url + "bench.calls")).json()
                    redis_before = await command_stats(store)
                    spy = None
                    if profiling and n == len(rates) - 1 and bot.pid is not None:
                        spy = await profile(bot.pid, seconds, Path(tmp) / "profile.txt")
                    cpu_before = cpu_seconds(bot.pid)
                    began = time.monotonic()
                    acks, bad, firsts = await load(
                        http, bot.url + "/slack/events", slack_url, rate, seconds
                    )
                    # Until every job of this rate has ended (bounded), then its tail.
                    deadline = time.monotonic() + DONE_TIMEOUT_S
                    while True:
                        text = (await http.get(bot.url + "/metrics")).text
                        done = jobs_done(text) - done_before
                        if done >= len(acks) or time.monotonic() > deadline:
                            break
                        await asyncio.sleep(POLL_S)
                    ended = time.monotonic()
                    await asyncio.sleep(TRAILING_S)
                    cpu = cpu_seconds(bot.pid) - cpu_before
                    cpu_ms = cpu * 1000 / max(done, 1)
                    cpu_share = cpu / (time.monotonic() - began)
                    text = (await http.get(bot.url + "/metrics")).text
                    after = ack_histogram(text)
                    lag = {
                        le: n - lag_before.get(le, 0) for le, n in ack_histogram(text, LAG).items()
                    }
                    lag_p99 = min(le for le, n in lag.items() if n >= 0.99 * lag[math.inf])
                    if spy is not None:
                        await spy.wait()
                    counts = {le: n - before.get(le, 0) for le, n in after.items()}
                    total = counts[math.inf]
                    fast = counts[0.05]
                    bot_p99 = min(le for le, n in counts.items() if n >= 0.99 * total)
                    print(
                        f"{rate:>6} {len(acks):>5} {bad:>7} {statistics.median(acks):>8.1f}"
                        f" {pct(acks, 0.99):>8.1f} {fast / total:>9.1%} {bot_p99 * 1000:>9g}"
                        f" {lag_p99 * 1000:>9g}"
                        f" {pct(firsts, 0.5):>10.1f} {pct(firsts, 0.99):>10.1f}"
                        f" {done / (ended - began):>7.1f} {cpu_ms:>7.2f} {cpu_share:>7.0%}"
                        + ("" if done >= len(acks) else f"  ({len(acks) - done:g} jobs unfinished)")
                    )
                    calls_after = (await http.get(slack_url + "bench.calls")).json()
                    per_rate.append(
                        (
                            rate,
                            per_job(calls_before, calls_after, max(done, 1)),
                            per_job(redis_before, await command_stats(store), max(done, 1)),
                        )
                    )
                for rate, slack_calls, redis_calls in per_rate:
                    print(f"  {rate}/s per job: Slack calls {slack_calls}")
                    print(f"  {rate}/s per job: Redis commands {redis_calls}")
            if profiling and (Path(tmp) / "profile.txt").exists():
                report_profile(Path(tmp) / "profile.txt", keep=profile_raw)
        finally:
            await store.aclose()
            await bot.stop()
            redis.stop()
            child.terminate()
            child.join(5)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--rates", default=",".join(map(str, RATES)), help="events/s, e.g. 20,50")
    parser.add_argument("--seconds", type=float, default=SECONDS, help="load time per rate")
    parser.add_argument(
        "--pinned", action="store_true", help="the bot on core 0, the rest on the others"
    )
    parser.add_argument("--max-running", type=int, help="OPSLOOP_MAX_RUNNING_JOBS")
    parser.add_argument("--profile", action="store_true", help="sample the bot with py-spy")
    parser.add_argument("--profile-raw", type=Path, help="keep py-spy's raw samples here")
    args = parser.parse_args()
    sys.exit(
        asyncio.run(
            main(
                [int(r) for r in args.rates.split(",")],
                args.seconds,
                pinned=args.pinned,
                max_running=args.max_running,
                profiling=args.profile,
                profile_raw=args.profile_raw,
            )
        )
    )

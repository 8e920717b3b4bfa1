"""How long a crashed process's job waits for another process to take it over, under load.

Real processes on a real redis-server (appendfsync always), with the real constants
(lease 15 s renewed every 5 s, a scan every 5 s):

- survivors (default 2): a ``Turns`` and its ``Scanner`` each, as ``opsloop serve`` wires
  them, loaded with jobs of their own that keep running (their model calls hang), a
  busy event loop (a blocking slice of CPU every few ms), and a share of the paused jobs
  every scan looks at (default 2,000 awaiting approval, made at the start);
- a CPU hog process;
- a victim per round: it runs K jobs (default 12) to the point where their model call
  is in flight, each started at a random moment (so each lease is at a random point of
  its renewal cycle), and is killed with SIGKILL at a random moment after that. A third
  of its jobs were started by a mention, a third resumed after their approval (paused
  first, long enough for a scan to look at them), a third continued after an iteration
  limit (the Continue button).

Measured: the time from the SIGKILL to a survivor's resumed run calling the model (it
holds the lease and has saved the job running by then), against the bound the design
gives: the lease's 15 s plus one scan period, 20 s. The lease a crash leaves behind
still has 10–15 s to live, so that much of the wait is by design; "after expiry" is the
scanner's own share.

    python benchmarks/takeover.py [--rounds 3] [--jobs 12] [--survivors 2] [--paused 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from pydantic import BaseModel, Field

from bot.agent import CallContext, FunctionTool, ModelRequest, ModelResponse, ToolMessage
from bot.agent.messages import UserMessage
from bot.agent.testing import ScriptedModel, call, calls, text
from bot.emulator.redis_server import ManagedRedis
from bot.service import build_turns
from bot.store.approvals import ApprovalRecord
from bot.store.connection import connect
from bot.store.jobs import JobLimits, JobRecord
from bot.store.keys import BUCKETS, LEASE_RENEW_S, LEASE_TTL_MS, Keys, Thread, job_bucket
from bot.store.parts import Stores
from bot.turns.parts import Turns
from bot.turns.run import TurnSettings
from bot.turns.scanner import SCAN_INTERVAL_S, Scanner
from tools.registry import Catalog

PREFIX = "opsloop:"
META = "takeover-bench:"  # the benchmark's own bookkeeping, outside the bot's keys
RESUMED = f"{META}resumed"  # label -> "time|survivor"
BOUND_S = LEASE_TTL_MS / 1000 + SCAN_INTERVAL_S
SCENARIOS = ("mention", "approval", "continue")
GIVE_UP_S = 60.0  # after the crash: a job not resumed by then counts as never
LIMITS = JobLimits(max_iterations=2, deadline_s=3600, token_budget=100_000_000)
KINDS = ("r", "own", "paused")  # label kinds: a round's crashed jobs, a survivor's, paused
LABEL = re.compile(r"job=(\S+) scenario=(\S+)")


class HostArgs(BaseModel):
    host: str = Field(description="Host name")


async def _ok(args: HostArgs, ctx: CallContext) -> str:
    return f"ok {args.host}"


def process_turns(redis: aioredis.Redis, model: ScriptedModel, name: str) -> Turns:
    check = FunctionTool(name="check", description="check a host", args_model=HostArgs, fn=_ok)
    restart = FunctionTool(
        name="restart",
        description="restart a host",
        args_model=HostArgs,
        fn=_ok,
        category="mutating",
    )

    class CardsOnly:  # a Notifier whose cards "reach the thread": the scan finds them posted
        status_ts = None  # and its own quiet progress sink

        def __call__(self, event: object) -> None:
            pass

        async def aclose(self) -> None:
            pass

        async def open_progress(self, record: JobRecord) -> CardsOnly:
            return self

        async def post_card(self, record: JobRecord, approval: ApprovalRecord) -> str:
            return "1700000000.000900"

        async def tell_unknown(self, record: JobRecord, entries: Sequence[object]) -> None:
            pass

        async def acknowledge(self, thread: Thread, items: Sequence[object]) -> None:
            pass

    return build_turns(
        Stores.build(redis, Keys(PREFIX)),
        resolver=model,
        catalog=Catalog(
            tools={"check": check, "restart": restart},
            sources={"check": "bench", "restart": "bench"},
        ),
        system_prompt="You are opsloop.",
        settings=TurnSettings(limits=LIMITS),
        notifier=CardsOnly(),
        consumer=name,
    )


def label_of(request: ModelRequest) -> tuple[str, str]:
    for message in request.messages:
        if isinstance(message, UserMessage) and (m := LABEL.search(message.content)):
            return m.group(1), m.group(2)
    raise AssertionError("a benchmark job without its label")


def tool_results(request: ModelRequest) -> int:
    return sum(isinstance(m, ToolMessage) for m in request.messages)


async def forever() -> ModelResponse:
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


class Scheduler:
    """What ``opsloop serve`` does with a job to run: one background task per job."""

    def __init__(self, turns: Turns) -> None:
        self.turns = turns
        self.scheduled: set[str] = set()
        self.tasks: set[asyncio.Task[None]] = set()

    def __call__(self, job_id: str) -> None:
        if job_id in self.scheduled:
            return
        self.scheduled.add(job_id)
        self.spawn(self._run(job_id))

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _run(self, job_id: str) -> None:
        try:
            await self.turns.runner.run_job(job_id)
        except Exception as exc:
            print(f"job {job_id} failed outside the loop: {exc!r}", file=sys.stderr)
        finally:
            self.scheduled.discard(job_id)


async def no_expiry(approval: ApprovalRecord) -> None:
    pass


def thread_for(label: str) -> Thread:
    """A thread of its own per job label (``kind-a-b``: a number from the label's parts)."""
    kind, *parts = label.split("-")
    digits = "".join(f"{int(p[1:] if p[0].isalpha() else p):05d}" for p in parts)
    return Thread("CBENCH", f"18{KINDS.index(kind)}0000000.{digits}")


# -- the survivor ------------------------------------------------------------------


class TimedScanner(Scanner):
    durations: list[float]

    async def scan(self) -> None:
        started = time.perf_counter()
        try:
            await super().scan()
        finally:
            self.durations.append(time.perf_counter() - started)


async def survivor(url: str, name: str, own: int, busy_ms: float, idle_ms: float) -> None:
    redis = connect(url)
    turns: Turns

    async def reply(request: ModelRequest) -> ModelResponse:
        label, _ = label_of(request)
        if label.startswith("own"):
            return await forever()
        await redis.hsetnx(RESUMED, label, f"{time.time()}|{name}")
        return text("resumed")

    turns = process_turns(redis, ScriptedModel(fn=reply), name)
    schedule = Scheduler(turns)
    scanner = TimedScanner(turns, schedule=schedule, on_expired=no_expiry)
    scanner.durations = []
    lags: list[float] = []
    loop = asyncio.get_running_loop()

    async def busy() -> None:  # event-loop load: a blocking slice every few ms
        while True:
            end = time.perf_counter() + busy_ms / 1000
            while time.perf_counter() < end:
                pass
            await asyncio.sleep(idle_ms / 1000)

    async def lag() -> None:
        while True:
            started = loop.time()
            await asyncio.sleep(0.1)
            lags.append(loop.time() - started - 0.1)

    async def report() -> None:
        while True:
            await asyncio.sleep(1.0)
            if lags and scanner.durations:
                stats = f"{META}stats:{name}"
                await redis.hset(stats, "lag", ",".join(f"{x:.4f}" for x in lags[-3000:]))
                await redis.hset(stats, "scans", ",".join(f"{x:.4f}" for x in scanner.durations))

    for i in range(own):  # jobs of its own that keep running here
        label = f"own-{name}-{i}"  # name is s<N>
        receipt = await turns.receiver.receive(
            thread_for(label),
            ts=thread_for(label).thread_ts,
            user="UBENCH",
            text=f"job={label} scenario=own",
        )
        assert receipt.job_id is not None
        schedule(receipt.job_id)
    for work in (scanner.run(), busy(), lag(), report()):
        schedule.spawn(work)
    await redis.set(f"{META}up:{name}", "1")
    await asyncio.Event().wait()


# -- the victim ----------------------------------------------------------------------


async def victim(url: str, round_no: int, jobs: int, seed: int) -> None:
    redis = connect(url)
    rng = random.Random(seed)
    hanging: dict[str, asyncio.Event] = {}

    async def reply(request: ModelRequest) -> ModelResponse:
        label, scenario = label_of(request)
        done = tool_results(request)
        if scenario == "approval" and done == 0:
            return calls(call("restart", host="web-01"))
        if scenario == "continue" and done < LIMITS.max_iterations:
            return calls(call("check", host=f"web-{done:02d}"))
        hanging[label].set()  # in flight when the process dies
        return await forever()

    turns = process_turns(redis, ScriptedModel(fn=reply), f"victim-{round_no}")
    schedule = Scheduler(turns)
    schedule.spawn(Scanner(turns, schedule=schedule, on_expired=no_expiry).run())
    keys = turns.stores.keys
    labels = [f"r-{round_no}-{i:02d}" for i in range(jobs)]
    scenario = {label: SCENARIOS[i % len(SCENARIOS)] for i, label in enumerate(labels)}
    job_ids: dict[str, str] = {}
    call_ids: dict[str, str] = {}

    async def receive(label: str) -> str:
        receipt = await turns.receiver.receive(
            thread_for(label),
            ts=thread_for(label).thread_ts,
            user="UBENCH",
            text=f"job={label} scenario={scenario[label]}",
        )
        assert receipt.job_id is not None
        job_ids[label] = receipt.job_id
        return receipt.job_id

    for label in labels:
        hanging[label] = asyncio.Event()

    for label in labels:  # the jobs that reach the crash by a pause or a limit
        if scenario[label] == "approval":
            paused = await turns.runner.run_job(await receive(label))
            assert paused is not None and paused.approval is not None, paused
            call_ids[label] = paused.approval.call_id
        elif scenario[label] == "continue":
            stopped = await turns.runner.run_job(await receive(label))
            assert stopped is not None and stopped.stop_reason.value == "limit_iterations"
    # A paused job is looked at by some scan (the next look is then far off) before
    # anyone clicks, as when people take more than a few seconds to decide.
    deadline = time.monotonic() + 3 * SCAN_INTERVAL_S
    while time.monotonic() < deadline:
        scores = [
            await redis.zscore(keys.active_jobs(job_bucket(job_ids[label])), job_ids[label])
            for label in call_ids
        ]
        if all(s is not None and s > time.time() + SCAN_INTERVAL_S for s in scores):
            break
        await asyncio.sleep(0.2)

    async def start(label: str, delay: float) -> None:
        await asyncio.sleep(delay)
        if scenario[label] == "mention":
            schedule(await receive(label))  # the ack path: persist, then run
        elif scenario[label] == "approval":
            decided = await turns.stores.approvals.decide(
                job_ids[label],
                call_ids[label],
                outcome="approved",
                by="UAPPROVER",
                args_hash=None,
                now=time.time(),
            )
            assert decided is not None and decided.won
            schedule(job_ids[label])  # the clicking process resumes it
        else:
            raised = await turns.controls.raise_limit(job_ids[label], "UBENCH")
            assert not isinstance(raised, str), raised
            schedule(job_ids[label])

    for label in labels:
        schedule.spawn(start(label, rng.uniform(0, LEASE_RENEW_S)))
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(LEASE_RENEW_S + 10):
            for label in labels:
                await hanging[label].wait()
    ours = [label for label in labels if hanging[label].is_set()]
    await redis.hset(f"{META}jobs:{round_no}", mapping={label: job_ids[label] for label in ours})
    await redis.set(f"{META}ready:{round_no}", str(time.time()))
    await asyncio.Event().wait()


# -- the driver ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Crash:
    label: str
    scenario: str
    lease_left_s: float  # the victim's lease at the SIGKILL
    takeover_s: float | None  # SIGKILL to the resumed model call; None: never


def child(role: str, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, __file__, "--role", role, *args])


async def make_paused(redis: aioredis.Redis, count: int) -> None:
    """Jobs awaiting approval (their cards posted): work for every scan."""
    model = ScriptedModel(fn=lambda _: calls(call("restart", host="web-01")))
    turns = process_turns(redis, model, "maker")

    async def one(i: int) -> None:
        label = f"paused-{i}"
        receipt = await turns.receiver.receive(
            thread_for(label),
            ts=thread_for(label).thread_ts,
            user="UBENCH",
            text=f"job={label} scenario=paused",
        )
        assert receipt.job_id is not None
        await turns.runner.run_job(receipt.job_id)

    for start in range(0, count, 50):
        await asyncio.gather(*(one(i) for i in range(start, min(start + 50, count))))
    # Spread their next looks over the 30 s a paused job waits between looks.
    keys = turns.stores.keys
    now = time.time()
    for bucket in BUCKETS:
        members = await redis.zrange(keys.active_jobs(bucket), 0, -1)
        if members:
            spread = {str(m): now + random.uniform(0, 30) for m in members}
            await redis.zadd(keys.active_jobs(bucket), spread)


async def wait_for(redis: aioredis.Redis, key: str, within_s: float) -> str:
    deadline = time.monotonic() + within_s
    while (value := await redis.get(key)) is None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{key} never came")
        await asyncio.sleep(0.05)
    return str(value)


async def one_round(
    redis: aioredis.Redis, url: str, round_no: int, jobs: int, rng: random.Random
) -> list[Crash]:
    """One victim: its jobs running, a SIGKILL at a random moment, the takeovers."""
    keys = Keys(PREFIX)
    seed = str(rng.randrange(1 << 30))
    proc = child(
        "victim", "--url", url, "--round", str(round_no), "--jobs", str(jobs), "--seed", seed
    )
    try:
        await wait_for(redis, f"{META}ready:{round_no}", 90)
        ours = {str(k): str(v) for k, v in (await redis.hgetall(f"{META}jobs:{round_no}")).items()}
        await asyncio.sleep(rng.uniform(0, LEASE_RENEW_S))
        killed_at = time.time()
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    labels = sorted(ours)
    async with redis.pipeline(transaction=False) as pipe:
        for label in labels:
            pipe.pttl(keys.lease(thread_for(label)))
        read_at = time.time()
        pttls = await pipe.execute()
    left = {
        label: max(int(ms), 0) / 1000 + (read_at - killed_at)
        for label, ms in zip(labels, pttls, strict=True)
    }
    resumed: dict[str, float] = {}
    while len(resumed) < len(labels) and time.time() < killed_at + GIVE_UP_S:
        await asyncio.sleep(0.05)
        for key, value in (await redis.hgetall(RESUMED)).items():
            if str(key) in ours:
                resumed[str(key)] = float(str(value).split("|")[0])
    return [
        Crash(
            label=label,
            scenario=SCENARIOS[int(label.rsplit("-", 1)[1]) % len(SCENARIOS)],
            lease_left_s=left[label],
            takeover_s=resumed[label] - killed_at if label in resumed else None,
        )
        for label in labels
    ]


def pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def row(name: str, crashes: list[Crash]) -> str:
    done = [c.takeover_s for c in crashes if c.takeover_s is not None]
    never = len(crashes) - len(done)
    after = [c.takeover_s - c.lease_left_s for c in crashes if c.takeover_s is not None]
    within = sum(1 for t in done if t <= BOUND_S)
    lease = [c.lease_left_s for c in crashes]
    if not crashes:
        return f"| {name} | 0 | | | | | | | |"
    if done:
        times = f"{statistics.median(done):.2f} | {pct(done, 0.95):.2f} | {max(done):.2f}"
        expiry = f"{statistics.median(after):.2f} | {max(after):.2f}"
    else:
        times, expiry = "never | never | never", "never | never"
    if never:
        times = f"{times} (+{never} never: > {GIVE_UP_S:.0f} s)" if done else times
    return (
        f"| {name} | {len(crashes)} | {times} | {min(lease):.1f}–{max(lease):.1f} | "
        f"{expiry} | {within}/{len(crashes)} |"
    )


async def drive(args: argparse.Namespace) -> None:
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        server = ManagedRedis(Path(tmp) / "redis").start()
        url = server.url
        redis = connect(url)
        procs: list[subprocess.Popen[bytes]] = []
        started = time.monotonic()
        try:
            await make_paused(redis, args.paused)
            made = time.monotonic() - started
            procs += [child("hog") for _ in range(args.hogs)]
            names = [f"s{i}" for i in range(args.survivors)]
            for name in names:
                procs.append(
                    child(
                        "survivor",
                        "--url",
                        url,
                        "--name",
                        name,
                        "--own",
                        str(args.own),
                        "--busy-ms",
                        str(args.busy_ms),
                        "--idle-ms",
                        str(args.idle_ms),
                    )
                )
            for name in names:
                await wait_for(redis, f"{META}up:{name}", 60)
            crashes: list[Crash] = []
            for round_no in range(args.rounds):
                crashes += await one_round(redis, url, round_no, args.jobs, rng)
            lags: list[float] = []
            scans: list[float] = []
            for name in names:
                stats = await redis.hgetall(f"{META}stats:{name}")
                lags += [float(x) for x in str(stats.get("lag", "")).split(",") if x]
                scans += [float(x) for x in str(stats.get("scans", "")).split(",") if x]
        finally:
            for proc in procs:
                proc.kill()
                proc.wait()
            await redis.aclose()
            server.stop()
    total = time.monotonic() - started
    print(
        f"takeover after SIGKILL: {len(crashes)} crashes "
        f"({args.rounds} rounds × {args.jobs} jobs), "
        f"{args.survivors} survivors, {args.hogs} CPU hog, {args.paused} paused jobs, "
        f"{args.own} running jobs per survivor, survivor loops busy {args.busy_ms:g} ms "
        f"in every {args.busy_ms + args.idle_ms:g} ms"
    )
    print(
        f"real constants: lease {LEASE_TTL_MS / 1000:g} s renewed every {LEASE_RENEW_S:g} s, "
        f"scan every {SCAN_INTERVAL_S:g} s; bound = lease + one scan = {BOUND_S:g} s"
    )
    print()
    print(
        "| jobs | n | SIGKILL → takeover s: median | p95 | max | lease left at SIGKILL s | "
        "after lease expiry: median | max | within bound |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    print(row("all", crashes))
    for scenario in SCENARIOS:
        print(row(scenario, [c for c in crashes if c.scenario == scenario]))
    print()
    if lags and scans:
        print(
            f"survivors: event-loop lag p50 {pct(lags, 0.5) * 1000:.0f} ms, p99 "
            f"{pct(lags, 0.99) * 1000:.0f} ms, max {max(lags) * 1000:.0f} ms; scan "
            f"median {statistics.median(scans) * 1000:.0f} ms, max {max(scans) * 1000:.0f} ms "
            f"({len(scans)} scans)"
        )
    print(f"run time {total:.0f} s (making the paused jobs {made:.0f} s)")


def hog() -> None:
    while True:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--role", choices=["drive", "survivor", "victim", "hog"], default="drive")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=12, help="crashed jobs per round")
    parser.add_argument("--survivors", type=int, default=2)
    parser.add_argument("--paused", type=int, default=2000)
    parser.add_argument("--own", type=int, default=50, help="running jobs per survivor")
    parser.add_argument("--hogs", type=int, default=1)
    parser.add_argument("--busy-ms", type=float, default=20.0)
    parser.add_argument("--idle-ms", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=int(os.environ.get("BENCH_SEED", "0")) or None)
    parser.add_argument("--url", default="")
    parser.add_argument("--name", default="")
    parser.add_argument("--round", type=int, default=0)
    args = parser.parse_args()
    if args.role == "hog":
        hog()
    elif args.role == "survivor":
        asyncio.run(survivor(args.url, args.name, args.own, args.busy_ms, args.idle_ms))
    elif args.role == "victim":
        asyncio.run(victim(args.url, args.round, args.jobs, args.seed or 0))
    else:
        asyncio.run(drive(args))


if __name__ == "__main__":
    main()

"""The chaos soak: many jobs through several ``opsloop serve`` processes while things break.

``soak(…)`` drives real bot processes on one Redis topology (standalone, a Redis Cluster
or Sentinel; ``Target``) with the fake Slack and the scripted model of the end-to-end
harness. Mentions arrive at a steady rate, each a new thread of one of three kinds:

- ``read``: the model checks a host, then answers ``done N``;
- ``write``: the model restarts a service (mutating: an Approve card, clicked by an
  approver on a random process), checks it, then answers ``done N``;
- ``reply``: the model checks a host with a slow tool; while it runs, someone replies in
  the thread (``correction N``), and the model answers ``done N`` once it has seen it.

Meanwhile the chaos (``Chaos``): bot processes SIGKILLed and started again, master
failovers (cluster or sentinel), bursts of model 5xx, bursts of Slack 429. Slack's own
behaviour is imitated: the people's messages are in the fake's threads before their events
are sent (so a process delivering the ending another one owed can read the thread); a
mention or reply not acknowledged (a 5xx) is delivered again with the same event id; a
click told to try again is clicked again. A write job whose model call fails before it asks
for approval ends with no card to click: that is a failed ending, not a lost card.

At the end, checked from Slack's side, the tools' side and the model's side (``Report``):
every mention answered exactly once (or ended with a clear failure status, counted), every
approved write run exactly once with the clicker as ``confirmed_by``, every reply in the
model's conversation exactly once, no job left non-terminal or still owing its thread its
answer and ending (``Jobs.finish``'s ``owed``; the soak settles only once none is owed,
since a killed process's ending is delivered by another's scanner after its lease
expires), no tool process left.
``benchmarks/chaos_soak.py`` runs a few minutes of it; ``tests/e2e/test_chaos_soak.py`` a
short form (through ``tests/e2e/soak_kit.py``, which re-exports this module).

The soak always ends with its report, pass or fail: a soak that breaks on its own (a bot
that does not start, a failover that does not finish, its time budget spent) is a problem
in it, the checks still count what happened, and ``Report.text()`` holds the counts, the
problems and the last lines of every bot process's log — one self-contained failure
message.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import re
import time
import traceback
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import InitVar, dataclass, field
from pathlib import Path

import redis.asyncio as aioredis

from bot.emulator.bot_process import BotProcess
from bot.emulator.recording_tools import runs, tool_processes, tools_yml
from bot.emulator.scripted import Fault, Reply, ScriptedCall, ScriptedRequest
from bot.emulator.scripted_model import ScriptedModel
from bot.emulator.sender import new_event_id
from bot.emulator.slack import BOT_USER_ID, FakeSlack, Message
from bot.emulator.slack_requests import click_body, event_body, mention, reply, seed
from bot.emulator.soak_report import Report, tail
from bot.records import Thread
from bot.store.keys import Keys
from bot.turns.scanner import MAX_DELIVERIES

CHANNEL = "CSOAK"
REQUESTER = "USOAKER1"
APPROVER = "UAPPROVER1"
KINDS = ("read", "write", "reply")
FINAL = frozenset(
    {"completed", "incomplete", "loop", "stalled", "no_action", "failed", "cancelled"}
    | {"limit_iterations", "limit_tokens", "limit_deadline"}
)
_REQUEST = re.compile(r"soak (\d+) (read|write|reply)")
DELIVERY_TRIES = 12  # Slack redelivers a few times; the soak keeps trying a little longer
CHECK_TIMEOUT_S = 30.0  # the checks read a few keys per thread


@dataclass
class Chaos:
    """What breaks during the soak (each spread over its duration)."""

    kills: int = 1  # a bot SIGKILLed, then started again
    failovers: int = 1  # a master failover (``failover()`` of the topology)
    model_bursts: int = 1  # a few seconds of 5xx from the model (every other request)
    slack_bursts: int = 1  # 429s with Retry-After on chat.postMessage and chat.update
    burst_s: float = 3.0


@dataclass
class Target:
    """Where the bots' Redis is: their environment, a client for the checks, and how to
    fail its master over (None: no failover)."""

    env: Mapping[str, str]
    client: Callable[[], aioredis.Redis]
    failover: Callable[[], Awaitable[None]] | None = None


@dataclass
class _Thread:
    n: int
    kind: str
    ts: str
    replied: bool = False
    clicked: bool = False


class _Model:
    """The soak's model policy: stateless from the conversation, plus the 5xx bursts."""

    def __init__(self) -> None:
        self.burst_until = 0.0
        self.failed = 0
        self._flip = False
        self.first_request: dict[int, asyncio.Event] = {}

    def __call__(self, request: ScriptedRequest) -> Reply | Fault:
        found = self._job(request)
        if found is None:
            return Reply(content="(not a soak request)")
        n, kind = found
        self.first_request.setdefault(n, asyncio.Event()).set()
        if time.monotonic() < self.burst_until:
            self._flip = not self._flip
            if self._flip:
                self.failed += 1
                return Fault(status=503, message="soak: a burst of model errors")
        done = request.tool_results()
        if kind == "write":
            if done == 0:
                return Reply(
                    content="Restarting it.",
                    tool_calls=[ScriptedCall("restart_service", {"service": f"svc{n}"})],
                )
            if done == 1:
                return Reply(tool_calls=[ScriptedCall("check_host", {"host": f"host{n}"})])
            return Reply(content=f"done {n}")
        if kind == "reply":
            if done == 0:
                return Reply(tool_calls=[ScriptedCall("slow_check", {"host": f"host{n}"})])
            if f"correction {n}" not in json.dumps(request.messages):
                return Reply(tool_calls=[ScriptedCall("slow_check", {"host": f"again{n}"})])
            return Reply(content=f"done {n}")
        if done == 0:
            return Reply(tool_calls=[ScriptedCall("check_host", {"host": f"host{n}"})])
        return Reply(content=f"done {n}")

    @staticmethod
    def _job(request: ScriptedRequest) -> tuple[int, str] | None:
        for message in request.messages:
            if message.get("role") == "user":
                found = _REQUEST.search(json.dumps(message.get("content")))
                if found:
                    return int(found.group(1)), found.group(2)
        return None


def cards(slack: FakeSlack, channel: str, thread_ts: str) -> list[Message]:
    """The approval cards the bot posted in the thread."""
    return [
        m
        for m in slack.messages(channel, thread_ts)
        if m.user == BOT_USER_ID and m.blocks and "Approval" in m.text
    ]


def soak_tools(tmp: Path) -> tuple[str, Path]:
    """The recording tools (``bot.emulator.recording_tools``) plus ``slow_check`` (a
    read that takes 2 s)."""
    path, log = tools_yml(tmp)
    text = Path(path).read_text()
    check = text[text.index("  - name: check_host") : text.index("  - name: restart_service")]
    slow = (
        check.replace("name: check_host", "name: slow_check")
        .replace('OPSLOOP_TEST_DELAY: "0.0"', 'OPSLOOP_TEST_DELAY: "2.0"')
        .replace('"check_host"', '"slow_check"')
    )
    Path(path).write_text(
        text.replace("  - name: restart_service", slow + "  - name: restart_service")
    )
    return path, log


@dataclass(eq=False, kw_only=True)
class Soak:
    """One soak (see the module docstring): ``bots`` processes, ``jobs`` jobs at ``rate``
    a second, ``chaos`` meanwhile, ``settle_s`` for the last ones to end; ``seed`` makes
    the choices (which process, when things break) repeatable."""

    slack: FakeSlack
    model: ScriptedModel
    target: Target
    folder: Path
    env: Callable[[Mapping[str, str]], dict[str, str]]
    bots: int
    jobs: int
    rate: float
    chaos: Chaos
    settle_s: float
    seed: InitVar[int]
    budget_s: float | None = None  # the bots' start, the jobs and the settling, at most
    phase: str = field(default="not started", init=False)
    policy: _Model = field(default_factory=_Model, init=False)
    started: list[BotProcess] = field(default_factory=list, init=False)  # answered /healthz
    procs: list[BotProcess] = field(default_factory=list, init=False)  # every one spawned
    threads: list[_Thread] = field(default_factory=list, init=False)
    report: Report = field(default_factory=Report, init=False)

    def __post_init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.tools, self.log = soak_tools(self.folder)

    # -- bots ---------------------------------------------------------------------
    def _bot_env(self) -> dict[str, str]:
        return self.env(
            {
                **self.target.env,
                "OPSLOOP_TOOLS": self.tools,
                "OPSLOOP_APPROVERS": APPROVER,
                "OPSLOOP_JOBS_PER_USER_HOUR": "0",  # one requester starts every job
                "LLM_STREAM": "false",
            }
        )

    async def _start_bot(self) -> BotProcess:
        proc = BotProcess(self._bot_env(), self.folder / "bots")
        self.procs.append(proc)  # stopped at the end even if its start is cut short
        await proc.start()
        self.started.append(proc)
        return proc

    def _live(self) -> list[BotProcess]:
        return [b for b in self.started if b.running]

    async def _deliver(self, body_of: Callable[[], bytes]) -> None:
        """Slack's delivery: again (same event id) until a 200, a bounded number of times."""
        body = body_of()
        for attempt in range(DELIVERY_TRIES):
            live = self._live()
            if live:
                with contextlib.suppress(Exception):
                    status, _ = await self.rng.choice(live).post_event(body)
                    if status == 200:
                        return
            self.report.redeliveries += 1
            await asyncio.sleep(min(0.5 * (attempt + 1), 3.0))
        self.report.problems.append("a delivery was never acknowledged")

    # -- the jobs -----------------------------------------------------------------
    async def _one_job(self, n: int) -> None:
        kind = KINDS[n % len(KINDS)]
        event = mention(CHANNEL, REQUESTER, f"soak {n} {kind}: look into it")
        thread = _Thread(n, kind, event["ts"])
        self.threads.append(thread)
        seed(self.slack, event)  # Slack holds the message it sends the event for
        event_id = new_event_id()
        await self._deliver(lambda: event_body(event, event_id=event_id))
        if kind == "reply":
            await self._reply_when_running(thread)
        if kind == "write":
            await self._approve(thread)

    async def _reply_when_running(self, thread: _Thread) -> None:
        first = self.policy.first_request.setdefault(thread.n, asyncio.Event())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(first.wait(), 60)
        event = reply(
            CHANNEL, REQUESTER, f"correction {thread.n}: it is host{thread.n}b", thread_ts=thread.ts
        )
        seed(self.slack, event)
        event_id = new_event_id()
        await self._deliver(lambda: event_body(event, event_id=event_id))
        thread.replied = True

    async def _approve(self, thread: _Thread) -> None:
        """Click Approve (on a random process), again every few seconds like an impatient
        approver (a click told to try again, or lost with its process), until the card
        says it was approved — or until the job has ended without ever asking (its model
        call failed through a burst of 5xx: counted by the checks as a failed ending)."""
        deadline = time.monotonic() + 120
        next_click = 0.0
        next_look = 0.0
        card_ts: str | None = None
        client = self.target.client()
        try:
            while time.monotonic() < deadline:
                if card_ts is None:
                    found = cards(self.slack, CHANNEL, thread.ts)
                    card_ts = found[0].ts if found else None
                if card_ts is None and time.monotonic() >= next_look:
                    # A job pauses (not ends) for its card, which it posts before anyone
                    # can resume it: ended with no card means it never asked.
                    next_look = time.monotonic() + 1.0
                    status = "unknown"  # through a failover: looked at again in a second
                    with contextlib.suppress(Exception):
                        status = await self._status(client, thread)
                    if status in FINAL and not cards(self.slack, CHANNEL, thread.ts):
                        if status == "completed":
                            self.report.problems.append(
                                f"job {thread.n}: completed without an approval card"
                            )
                        return
                if card_ts is not None:
                    card = self.slack.message(CHANNEL, card_ts)  # as edited since
                    if "Approved by" in card.text:
                        thread.clicked = True
                        return
                    if time.monotonic() >= next_click:
                        if next_click:
                            self.report.reclicks += 1
                        await self._click(card)
                        next_click = time.monotonic() + 3.0
                await asyncio.sleep(0.25)
        finally:
            await client.aclose()
        self.report.problems.append(f"job {thread.n}: its card was never decided")

    async def _click(self, card: Message) -> None:
        live = self._live()
        if not live:
            return
        body = click_body(
            card.as_slack(), CHANNEL, APPROVER, self.slack.api_url + "response", text="Approve"
        )
        with contextlib.suppress(Exception):
            await self.rng.choice(live).post_event(body)

    # -- chaos --------------------------------------------------------------------
    async def _chaos(self, span_s: float) -> None:
        events: list[tuple[float, str]] = []
        for kind, count in (
            ("kill", self.chaos.kills),
            ("failover", self.chaos.failovers if self.target.failover else 0),
            ("model", self.chaos.model_bursts),
            ("slack", self.chaos.slack_bursts),
        ):
            events += [(self.rng.uniform(0.15, 0.85) * span_s, kind) for _ in range(count)]
        started = time.monotonic()
        for at, kind in sorted(events):
            await asyncio.sleep(max(0.0, at - (time.monotonic() - started)))
            await self._break(kind)

    async def _break(self, kind: str) -> None:
        if kind == "kill":
            live = self._live()
            if len(live) > 1:
                victim = self.rng.choice(live)
                await victim.kill()
                self.report.kills += 1
                await asyncio.sleep(1.0)
                await self._start_bot()
        elif kind == "failover" and self.target.failover is not None:
            await self.target.failover()
            self.report.failovers += 1
        elif kind == "model":
            self.policy.burst_until = time.monotonic() + self.chaos.burst_s
        elif kind == "slack":
            for method in ("chat.postMessage", "chat.update"):
                self.slack.fail_next(method, status=429, retry_after=1, times=4)
            self.report.slack_429_bursts += 1

    # -- the run ------------------------------------------------------------------
    async def run(self) -> Report:
        """The soak, then its checks; always returns the report (see the module's doc)."""
        began = time.monotonic()
        self.model.policy = self.policy
        tasks: list[asyncio.Task[None]] = []
        budget = asyncio.timeout(self.budget_s)
        try:
            try:
                async with budget:
                    await self._drive(tasks)
            except Exception as exc:  # the report says what broke, and the checks still count
                spent = f"its budget of {self.budget_s:g} s ran out" if budget.expired() else None
                self._broke(exc, f"while {self.phase}", spent)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self.phase = "checking"
            try:
                async with asyncio.timeout(CHECK_TIMEOUT_S):
                    await self._check()
            except Exception as exc:
                self._broke(exc, "while checking")
        finally:
            for bot in self.procs:
                await bot.stop()
            self.report.logs = {bot.name: tail(bot) for bot in self.procs}
        self.report.model_5xx = self.policy.failed
        self.report.seconds = round(time.monotonic() - began, 1)
        return self.report

    def _broke(self, exc: BaseException, when: str, what: str | None = None) -> None:
        what = what or f"{type(exc).__name__}: {exc}"
        self.report.problems.append(f"the soak stopped {when}: {what}")
        self.report.broke += "".join(traceback.format_exception(exc))

    async def _drive(self, tasks: list[asyncio.Task[None]]) -> None:
        """Start the bots, send the jobs while the chaos happens, wait for them to settle."""
        self.phase = "starting the bots"
        for _ in range(self.bots):
            await self._start_bot()
        self.phase = "sending the jobs"
        span = self.jobs / self.rate
        chaos = asyncio.create_task(self._chaos(span))
        tasks.append(chaos)
        jobs = []
        for n in range(1, self.jobs + 1):
            jobs.append(asyncio.create_task(self._one_job(n)))
            tasks.append(jobs[-1])
            await asyncio.sleep(1 / self.rate)
        self.phase = "breaking things"
        await chaos
        self.phase = "waiting for the jobs' replies and clicks"
        await asyncio.wait_for(asyncio.gather(*jobs), timeout=self.settle_s + 120)
        self.phase = "waiting for the jobs to end"
        await self._settle()

    @staticmethod
    async def _status(client: aioredis.Redis, thread: _Thread) -> str:
        """The status of the thread's latest job ("none" before it has one)."""
        return (await Soak._state(client, thread))[0]

    @staticmethod
    async def _state(client: aioredis.Redis, thread: _Thread) -> tuple[str, int | None]:
        """The status of the thread's latest job, and, while its answer and ending are
        owed to the thread (ended, not shown yet), how many times other processes tried
        to deliver them (None: nothing owed)."""
        keys = Keys()
        current = await client.get(keys.current_job(Thread(CHANNEL, thread.ts)))
        if not current:
            return "none", None
        status, owed = await client.hmget(keys.job(str(current)), ["status", "owed"])
        return str(status or "none"), None if owed is None else int(owed)

    async def _states(self) -> dict[int, tuple[str, int | None]]:
        client = self.target.client()
        try:
            return {thread.n: await self._state(client, thread) for thread in self.threads}
        finally:
            await client.aclose()

    async def _settle(self) -> None:
        """Until every job has ended and shown its answer and ending (a process killed
        after a job's end leaves them owed, for another's scanner to deliver once the
        lease is free), and no tool process is left; at most ``settle_s``."""
        deadline = time.monotonic() + self.settle_s
        while time.monotonic() < deadline:
            states = await self._states()
            if all(
                status in FINAL and (owed is None or owed > MAX_DELIVERIES)  # shown, given up
                for status, owed in states.values()
            ) and not tool_processes(self.log):
                return
            await asyncio.sleep(0.5)

    async def _check(self) -> None:
        report = self.report
        report.jobs = len(self.threads)
        states = await self._states()
        report.statuses = Counter(status for status, _ in states.values())
        for thread in self.threads:
            status, owed = states.get(thread.n, ("none", None))
            if status in FINAL and owed is not None:
                report.endings_owed += 1
                report.problems.append(
                    f"job {thread.n} ({thread.kind}) {status}: its answer and ending are still "
                    f"owed to the thread ({owed} tries by other processes)"
                )
            answers = sum(
                m.text == f"done {thread.n}" for m in self.slack.messages(CHANNEL, thread.ts)
            )
            if status != "completed":
                report.not_completed.append(
                    f"job {thread.n} ({thread.kind}) {status}; the bot said: {self._said(thread)}"
                )
            if status not in FINAL:
                report.non_terminal += 1
                report.problems.append(f"job {thread.n} ({thread.kind}) left {status}")
            if answers == 1:
                report.answered_once += 1
            elif answers > 1:
                report.answered_twice += 1
                report.problems.append(f"job {thread.n} answered {answers} times")
            elif status == "completed":
                report.unanswered += 1
                report.problems.append(f"job {thread.n} completed without its answer")
            else:
                report.ended_failed += 1
            if thread.kind == "write":
                done = [
                    r
                    for r in runs(self.log, tool="restart_service")
                    if r["args"][:1] == [f"svc{thread.n}"]
                ]
                if len(done) == 1:
                    report.writes_once += 1
                    if done[0]["env_confirmed_by"] != APPROVER:
                        report.writes_wrong_approver += 1
                        report.problems.append(
                            f"job {thread.n}: confirmed_by {done[0]['env_confirmed_by']}"
                        )
                elif len(done) > 1:
                    report.writes_twice += 1
                    report.problems.append(f"job {thread.n}: the write ran {len(done)} times")
            if thread.kind == "reply" and status == "completed":
                seen = self._reply_count(thread.n)
                if seen == 1:
                    report.replies_once += 1
                else:
                    report.replies_lost_or_doubled += 1
                    report.problems.append(
                        f"job {thread.n}: its reply is in the conversation {seen} times"
                    )
        report.orphans = len(tool_processes(self.log))
        if report.orphans:
            report.problems.append(f"{report.orphans} tool processes left running")

    def _said(self, thread: _Thread) -> str:
        """The bot's messages in the thread, each cut short, the last two."""
        said = [
            (m.text[:160] or f"(no text, {len(m.blocks or [])} blocks)").replace("\n", " ")
            for m in self.slack.messages(CHANNEL, thread.ts)
            if m.user == BOT_USER_ID
        ]
        return " | ".join(said[-2:]) if said else "nothing"

    def _reply_count(self, n: int) -> int:
        """How many times the reply is in the thread's last model request."""
        last = None
        for request in self.model.requests:
            if _Model._job(request) == (n, "reply"):
                last = request
        if last is None:
            return 0
        needle = f"correction {n}"
        return Counter(
            needle in json.dumps(m.get("content")) for m in last.messages if m.get("role") == "user"
        )[True]

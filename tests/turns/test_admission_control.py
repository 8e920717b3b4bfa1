"""Admission control (``bot.turns.background``): a process runs at most its limit of jobs at
once; past it a new job stays ``queued`` in Redis — no task, no read, no lease — for any
process with room, and the process takes it itself when one of its jobs ends. Resumes (a
decision, a Continue, a takeover) may use a small reserve above the limit and go before
new jobs. A full process's scan leaves the jobs it cannot take due for every other
process's next scan, and still reaches the due jobs behind them.

Each job's model call is held until the test releases it, so "running" is a state the
test controls; every job is run exactly once.
"""

from __future__ import annotations

import asyncio
import re
import time

import redis.asyncio as aioredis

from bot.agent import ModelRequest, ModelResponse
from bot.agent.testing import ScriptedModel, text
from bot.metrics import Metrics
from bot.service import build_turns
from bot.store.approvals import ApprovalRecord
from bot.store.jobs import JobLimits, JobRecord, JobStatus
from bot.store.keys import Keys, Thread, job_bucket
from bot.store.parts import Stores
from bot.turns.background import Tasks
from bot.turns.parts import Turns
from bot.turns.run import TurnSettings
from bot.turns.scanner import DUE_PAGE, Scanner
from tests.agent.conftest import echo_tool
from tools.registry import Catalog

from .notifier import Notes, QuietSink

WAIT_S = 10.0  # a hang guard on every wait


class HeldModel:
    """Answers a job's request once the test releases that job (``release(n)``), and
    records which process asked for which job (the request names the job: ``job-<n>``)."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, int]] = []  # (process, job number)
        self._asked: dict[int, asyncio.Event] = {}
        self._released: dict[int, asyncio.Event] = {}
        self.in_flight = 0
        self.most_in_flight = 0

    def _event(self, events: dict[int, asyncio.Event], n: int) -> asyncio.Event:
        return events.setdefault(n, asyncio.Event())

    def client(self, process: str) -> ScriptedModel:
        async def reply(request: ModelRequest) -> ModelResponse:
            found = re.search(r"job-(\d+)", repr(request.messages))
            assert found is not None, "every request names its job"
            n = int(found.group(1))
            self.asked.append((process, n))
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            self._event(self._asked, n).set()
            try:
                await self._event(self._released, n).wait()
            finally:
                self.in_flight -= 1
            return text(f"done {n}")

        return ScriptedModel(fn=reply)

    async def asked_for(self, *numbers: int) -> None:
        async with asyncio.timeout(WAIT_S):
            for n in numbers:
                await self._event(self._asked, n).wait()

    def release(self, *numbers: int) -> None:
        for n in numbers:
            self._event(self._released, n).set()

    def who_asked(self, n: int) -> list[str]:
        return [process for process, m in self.asked if m == n]


class SlowEndings(Notes):
    """Each job's ending waits to be shown until ``shown`` is set (as when the
    workspace's chat.update budget is minutes behind)."""

    def __init__(self) -> None:
        super().__init__()
        self.shown = asyncio.Event()
        self.waiting = 0

    async def open_progress(self, record: JobRecord, *, taken_over: bool = False) -> QuietSink:
        notes = self

        class Held(QuietSink):
            async def aclose(self) -> None:
                notes.waiting += 1
                await asyncio.wait_for(notes.shown.wait(), WAIT_S)

        return Held()


def process(
    redis: aioredis.Redis, keys: Keys, name: str, model: HeldModel, notes: Notes | None = None
) -> Turns:
    tool = echo_tool()
    return build_turns(
        Stores.build(redis, keys),
        resolver=model.client(name),
        catalog=Catalog(tools={tool.name: tool}, sources={tool.name: "test"}),
        system_prompt="You are opsloop.",
        settings=TurnSettings(
            limits=JobLimits(max_iterations=5, deadline_s=600, token_budget=100_000)
        ),
        notifier=notes or Notes(),
        consumer=name,
    )


def thread_of(n: int) -> Thread:
    return Thread("C123", f"1700000000.{n:06d}")


async def mention(turns: Turns, n: int) -> str:
    """Job ``n``: a mention in a thread of its own, received (queued) by ``turns``."""
    thread = thread_of(n)
    receipt = await turns.receiver.receive(
        thread, ts=thread.thread_ts, user="UREQ", text=f"job-{n}"
    )
    assert receipt.job_id is not None and receipt.needs_run
    return receipt.job_id


async def settle(*all_tasks: Tasks) -> None:
    """Until no job task is left in any of ``all_tasks`` (a job's end may start another)."""
    async with asyncio.timeout(WAIT_S):
        while pending := set().union(*(t.job_tasks for t in all_tasks)):
            await asyncio.wait(pending)


async def status(turns: Turns, job_id: str) -> JobStatus:
    record = await turns.stores.jobs.get(job_id)
    assert record is not None
    return record.status


async def untouched(turns: Turns, job_id: str) -> bool:
    """Still queued, and nobody took its thread's lease."""
    record = await turns.stores.jobs.get(job_id)
    assert record is not None
    return (
        record.status is JobStatus.QUEUED
        and await turns.stores.leases.expires_in(record.thread) is None
    )


async def no_expiry(approval: ApprovalRecord) -> None:
    raise AssertionError("no card expires here")


def scanner_of(tasks: Tasks, *, ahead_s: float = 0.0) -> Scanner:
    """The process's scanner, wired as ``bot.service`` wires it; ``ahead_s``: its clock
    reads that much later (its next scan)."""
    return Scanner(
        tasks.turns,
        schedule=tasks.schedule,
        resume=tasks.resume,
        waits=tasks.waits,
        on_expired=no_expiry,
        now=lambda: time.time() + ahead_s,
    )


async def test_past_its_limit_a_process_leaves_new_jobs_queued_until_one_of_its_own_ends(
    redis: aioredis.Redis, keys: Keys
) -> None:
    model = HeldModel()
    turns = process(redis, keys, "a", model)
    metrics = Metrics()
    tasks = Tasks(turns, drain_s=1, max_running=2, on_left_queued=metrics.queued_for_room.inc)
    metrics.watch_jobs(tasks.counts)
    jobs = [await mention(turns, n) for n in range(4)]

    for job_id in jobs:
        tasks.schedule(job_id)  # returns at once, with or without room
    await model.asked_for(0, 1)
    assert tasks.counts() == {"running": 2, "limit": 2, "waiting": 2}
    assert [await untouched(turns, j) for j in jobs[2:]] == [True, True]
    scraped = metrics.scrape(None).decode()
    for line in (
        "opsloop_running_jobs 2.0",
        "opsloop_max_running_jobs 2.0",
        "opsloop_jobs_waiting_for_room 2.0",
        "opsloop_jobs_queued_for_room_total 2.0",
    ):
        assert line in scraped.splitlines()

    model.release(0)  # job 0 ends: its slot goes to the oldest waiting job
    await model.asked_for(2)
    assert tasks.running == 2 and await untouched(turns, jobs[3])

    model.release(1, 2, 3)
    await settle(tasks)
    assert [await status(turns, j) for j in jobs] == [JobStatus.COMPLETED] * 4
    assert sorted(n for _, n in model.asked) == [0, 1, 2, 3]  # each ran once
    assert model.most_in_flight == 2
    assert tasks.counts() == {"running": 0, "limit": 2, "waiting": 0}


async def test_a_slot_frees_when_the_run_ends_not_when_slack_has_shown_the_ending(
    redis: aioredis.Redis, keys: Keys
) -> None:
    model = HeldModel()
    notes = SlowEndings()
    tasks = Tasks(process(redis, keys, "a", model, notes), drain_s=1, max_running=1)
    first, second = [await mention(tasks.turns, n) for n in range(2)]
    tasks.schedule(first)
    tasks.schedule(second)
    await model.asked_for(0)

    model.release(0)  # job 0's run ends; its ending waits for Slack
    await model.asked_for(1)
    assert notes.waiting == 1 and await status(tasks.turns, first) is JobStatus.COMPLETED
    assert tasks.counts() == {"running": 1, "limit": 1, "waiting": 0}

    model.release(1)
    notes.shown.set()
    await settle(tasks)
    assert await status(tasks.turns, second) is JobStatus.COMPLETED


async def test_a_process_with_room_takes_at_its_scan_what_a_full_one_left_queued(
    redis: aioredis.Redis, keys: Keys
) -> None:
    model = HeldModel()
    a = Tasks(process(redis, keys, "a", model), drain_s=1, max_running=1)
    b = Tasks(process(redis, keys, "b", model), drain_s=1, max_running=1)
    first, second = [await mention(a.turns, n) for n in range(2)]
    a.schedule(first)
    a.schedule(second)
    await model.asked_for(0)

    # A's own scan (it is full) leaves the job queued and due for any other scan.
    await scanner_of(a).scan()
    assert await untouched(a.turns, second) and a.waits(second)
    score = await redis.zscore(keys.active_jobs(job_bucket(second)), second)
    assert score is not None and score < time.time() + 1.0

    await scanner_of(b, ahead_s=1.0).scan()  # B's next scan
    await model.asked_for(1)
    assert model.who_asked(1) == ["b"]

    model.release(0, 1)  # A's slot frees: its hint is stale now, and costs one read
    await settle(a, b)
    assert [await status(a.turns, j) for j in (first, second)] == [JobStatus.COMPLETED] * 2
    assert model.who_asked(0) == ["a"] and model.who_asked(1) == ["b"]
    assert a.waiting == 0 and b.waiting == 0


async def test_when_a_job_ends_its_process_takes_a_job_another_full_process_left_queued(
    redis: aioredis.Redis, keys: Keys
) -> None:
    model = HeldModel()
    a = Tasks(process(redis, keys, "a", model), drain_s=1, max_running=1)
    b = Tasks(process(redis, keys, "b", model), drain_s=1, max_running=1)
    a.schedule(await mention(a.turns, 0))
    b.schedule(await mention(b.turns, 1))
    await model.asked_for(0, 1)
    left_by_b = await mention(b.turns, 2)
    b.schedule(left_by_b)  # B is full: queued, with no scan anywhere
    assert b.waits(left_by_b) and await untouched(b.turns, left_by_b)

    model.release(0)  # A's job ends: A looks at the index and takes it
    await model.asked_for(2)
    assert model.who_asked(2) == ["a"]

    model.release(1, 2)
    await settle(a, b)
    assert await status(a.turns, left_by_b) is JobStatus.COMPLETED
    assert sorted(n for _, n in model.asked) == [0, 1, 2]


async def test_resumes_may_use_a_reserve_above_the_limit_and_go_before_new_jobs(
    redis: aioredis.Redis, keys: Keys
) -> None:
    model = HeldModel()
    tasks = Tasks(process(redis, keys, "a", model), drain_s=1, max_running=2)
    assert tasks.reserve == 1
    jobs = [await mention(tasks.turns, n) for n in range(5)]
    tasks.schedule(jobs[0])
    tasks.schedule(jobs[1])
    await model.asked_for(0, 1)

    tasks.schedule(jobs[2])  # new: the limit is reached
    tasks.resume(jobs[3])  # a resume takes the reserve
    tasks.resume(jobs[4])  # the reserve is used: it waits, ahead of job 2
    await model.asked_for(3)
    assert tasks.counts() == {"running": 3, "limit": 2, "waiting": 2}
    assert await untouched(tasks.turns, jobs[2]) and await untouched(tasks.turns, jobs[4])

    model.release(0)
    await model.asked_for(4)  # the waiting resume first
    assert tasks.running == 3 and await untouched(tasks.turns, jobs[2])
    model.release(3)  # three → two running: the limit, so new job 2 still waits
    async with asyncio.timeout(WAIT_S):
        while tasks.running > 2:
            await asyncio.wait(tasks.job_tasks, return_when=asyncio.FIRST_COMPLETED)
    assert await untouched(tasks.turns, jobs[2])
    model.release(1)
    await model.asked_for(2)

    model.release(2, 4)
    await settle(tasks)
    assert sorted(n for _, n in model.asked) == [0, 1, 2, 3, 4]
    assert model.most_in_flight == 3


async def test_a_full_process_scan_reaches_the_due_jobs_behind_those_it_left_waiting(
    redis: aioredis.Redis, keys: Keys
) -> None:
    """More jobs wait than one page of the index holds; the job behind them (queued by
    another process) is still looked at, and all stay due for the next scan anywhere."""
    model = HeldModel()
    a = Tasks(process(redis, keys, "a", model), drain_s=1, max_running=1)
    other = process(redis, keys, "b", model)
    a.schedule(await mention(a.turns, 0))
    await model.asked_for(0)
    waiting = [await mention(a.turns, n) for n in range(1, DUE_PAGE + 21)]
    for job_id in waiting:
        a.schedule(job_id)
    behind = await mention(other, DUE_PAGE + 21)  # the latest in the index

    scanned_at = time.time()
    await scanner_of(a).scan()
    assert a.waits(behind)  # looked at, though past the first page
    for job_id in [*waiting, behind]:
        score = await redis.zscore(keys.active_jobs(job_bucket(job_id)), job_id)
        assert score is not None and scanned_at < score < time.time() + 1.0
        assert await untouched(a.turns, job_id)

    model.release(*range(DUE_PAGE + 22))
    await settle(a)
    assert sorted(n for _, n in model.asked) == list(range(DUE_PAGE + 22))


async def test_a_draining_process_starts_nothing_more(redis: aioredis.Redis, keys: Keys) -> None:
    model = HeldModel()
    tasks = Tasks(process(redis, keys, "a", model), drain_s=5, max_running=1)
    first, second = [await mention(tasks.turns, n) for n in range(2)]
    tasks.schedule(first)
    tasks.schedule(second)
    await model.asked_for(0)

    closing = asyncio.create_task(tasks.close())
    await asyncio.sleep(0)  # close has started the drain
    tasks.schedule(await mention(tasks.turns, 2))
    model.release(0)
    async with asyncio.timeout(WAIT_S):
        await closing
    assert model.who_asked(1) == [] and await untouched(tasks.turns, second)

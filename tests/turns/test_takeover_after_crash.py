"""A job whose process died mid-run is found by another process's scan within the
lease's lifetime plus one scan period, however it came to be running: started from a
mention, resumed after an approval (a paused job's next look was 30 s away), or
continued after a limit (an ended job is out of the scanner's index); and behind more
due jobs than the index returns at once. A look timed to a lease that its holder renewed
meanwhile looks again at the new expiry instead of waiting for a scan.

Process A runs the job until its model call hangs, then dies: its task is cancelled
there, which leaves what a crash leaves once the lease has run out (a ``running`` job
and no lease). Process B scans with its clock set to the crash plus the lease's TTL
plus one scan interval, the latest moment the design allows for the takeover."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

import redis.asyncio as aioredis

from bot.agent import ModelRequest, ModelResponse, StopReason, ToolMessage
from bot.agent.testing import ScriptedModel, call, calls, text
from bot.service import build_turns
from bot.store.approvals import ApprovalRecord
from bot.store.jobs import JobLimits, JobStatus
from bot.store.keys import LEASE_TTL_MS, Keys, Thread, job_bucket
from bot.store.lease import Leases
from bot.store.parts import Stores
from bot.turns.parts import Turns
from bot.turns.run import TurnSettings
from bot.turns.scanner import DUE_PAGE, SCAN_INTERVAL_S, Scanner
from tests.agent.conftest import echo_tool
from tools.registry import Catalog

from .notifier import Notes

TS = "1700000000.000100"
TAKEOVER_BOUND_S = LEASE_TTL_MS / 1000 + SCAN_INTERVAL_S


def process(
    redis: aioredis.Redis,
    keys: Keys,
    name: str,
    model: ScriptedModel,
    *,
    max_iterations: int = 10,
) -> Turns:
    read = echo_tool()
    write = echo_tool("restart", category="mutating")
    return build_turns(
        Stores.build(redis, keys),
        resolver=model,
        catalog=Catalog(
            tools={read.name: read, write.name: write},
            sources={read.name: "test", write.name: "test"},
        ),
        system_prompt="You are opsloop.",
        settings=TurnSettings(
            limits=JobLimits(max_iterations=max_iterations, deadline_s=600, token_budget=100_000)
        ),
        notifier=Notes(),
        consumer=name,
    )


def hangs_after(first: ModelResponse | None) -> tuple[ScriptedModel, asyncio.Event]:
    """A model that answers ``first`` (if any) to the first request and then hangs on
    the next one (``calling`` is set once it does): the call in flight when A dies."""
    calling = asyncio.Event()
    hang = asyncio.Event()  # never set

    async def reply(request: ModelRequest) -> ModelResponse:
        tool_results = [m for m in request.messages if isinstance(m, ToolMessage)]
        if first is not None and not tool_results:
            return first
        calling.set()
        await hang.wait()
        raise AssertionError("unreachable")

    return ScriptedModel(fn=reply), calling


async def crash_while_running(turns: Turns, job_id: str, calling: asyncio.Event) -> float:
    """Run the job in ``turns`` until its model call hangs, then die there."""
    task = asyncio.create_task(turns.runner.run_job(job_id))
    await calling.wait()
    crashed_at = time.time()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    record = await turns.stores.jobs.get(job_id)
    assert record is not None and record.status is JobStatus.RUNNING
    assert await turns.stores.leases.holder(record.thread) is None
    return crashed_at


async def taken_over_by_b(
    redis: aioredis.Redis, keys: Keys, job_id: str, crashed_at: float
) -> Callable[[], Awaitable[None]]:
    """B's scan at the latest allowed moment; returns how to let B resume the job."""

    def verify_then_answer(request: ModelRequest) -> ModelResponse:
        # A restart that ran is checked before the answer (``bot/agent/work_done.py``).
        last = request.messages[-1]
        if isinstance(last, ToolMessage) and last.name == "restart":
            return calls(call("check", "c9", host="web-03"))
        return text("resumed")

    b = process(redis, keys, "process-b", ScriptedModel(fn=verify_then_answer))
    scheduled: list[str] = []

    async def on_expired(approval: ApprovalRecord) -> None:
        raise AssertionError("no card expires here")

    scanner = Scanner(
        b,
        schedule=scheduled.append,
        on_expired=on_expired,
        now=lambda: crashed_at + TAKEOVER_BOUND_S,
    )
    await scanner.scan()
    assert job_id in scheduled, (
        f"B's scan {TAKEOVER_BOUND_S:g} s after the crash did not pick the job up; "
        f"its next look is {await redis.zscore(keys.active_jobs(job_bucket(job_id)), job_id)!r} "
        f"(crash at {crashed_at:.1f})"
    )

    async def resume() -> None:
        result = await b.runner.run_job(job_id)
        assert result is not None and result.stop_reason is StopReason.COMPLETED
        assert result.output == "resumed"

    return resume


async def test_a_job_started_from_a_mention_is_taken_over(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    model, calling = hangs_after(None)
    a = process(redis, keys, "process-a", model)
    receipt = await a.receiver.receive(thread, ts=TS, user="UREQ", text="look at web-03")
    assert receipt.job_id is not None

    crashed_at = await crash_while_running(a, receipt.job_id, calling)

    resume = await taken_over_by_b(redis, keys, receipt.job_id, crashed_at)
    await resume()


async def test_a_job_resumed_after_its_approval_is_taken_over(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    model, calling = hangs_after(calls(call("restart", "c1", host="web-03")))
    a = process(redis, keys, "process-a", model)
    receipt = await a.receiver.receive(thread, ts=TS, user="UREQ", text="restart web-03")
    job_id = receipt.job_id
    assert job_id is not None
    paused = await a.runner.run_job(job_id)
    assert paused is not None and paused.stop_reason is StopReason.AWAITING_APPROVAL
    assert paused.approval is not None

    async def no_expiry(approval: ApprovalRecord) -> None:
        raise AssertionError("the card does not expire here")

    # A scan looks at the paused job (which mostly resumes by its click, not the scan).
    await Scanner(a, schedule=lambda _: None, on_expired=no_expiry).scan()
    decided = await a.stores.approvals.decide(
        job_id,
        paused.approval.call_id,
        outcome="approved",
        by="UAPPROVER",
        args_hash=None,
        now=time.time(),
    )
    assert decided is not None and decided.won

    crashed_at = await crash_while_running(a, job_id, calling)

    resume = await taken_over_by_b(redis, keys, job_id, crashed_at)
    await resume()


async def test_a_job_continued_after_a_limit_is_taken_over(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    model, calling = hangs_after(calls(call("check", "c1", host="web-03")))
    a = process(redis, keys, "process-a", model, max_iterations=1)
    receipt = await a.receiver.receive(thread, ts=TS, user="UREQ", text="look at web-03")
    job_id = receipt.job_id
    assert job_id is not None
    stopped = await a.runner.run_job(job_id)
    assert stopped is not None and stopped.stop_reason is StopReason.LIMIT_ITERATIONS
    raised = await a.controls.raise_limit(job_id, "UREQ")
    assert not isinstance(raised, str) and raised.status is JobStatus.RUNNING

    crashed_at = await crash_while_running(a, job_id, calling)

    resume = await taken_over_by_b(redis, keys, job_id, crashed_at)
    await resume()


async def test_a_job_behind_more_due_jobs_than_a_page_is_taken_over(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    model, calling = hangs_after(None)
    a = process(redis, keys, "process-a", model)
    for n in range(DUE_PAGE + 20):  # queued jobs in other threads, due before it
        other = Thread("C456", f"1700000001.{n:06d}")
        await a.receiver.receive(other, ts=other.thread_ts, user="UREQ", text="look")
    receipt = await a.receiver.receive(thread, ts=TS, user="UREQ", text="look at web-03")
    assert receipt.job_id is not None

    crashed_at = await crash_while_running(a, receipt.job_id, calling)

    resume = await taken_over_by_b(redis, keys, receipt.job_id, crashed_at)
    await resume()


async def test_a_look_timed_to_a_renewed_lease_looks_again(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    """A's lease (1 s here, so the test is short) is renewed just after B timed its look
    to the lease's expiry, and then A dies: B's timed look finds the lease still held,
    and must time another look to the new expiry rather than wait for a scan."""
    b = process(redis, keys, "process-b", ScriptedModel(fn=lambda _: text("resumed")))
    receipt = await b.receiver.receive(thread, ts=TS, user="UREQ", text="look at web-03")
    assert receipt.job_id is not None and receipt.record is not None
    lease = await Leases(redis, keys, ttl_ms=1_000).acquire(thread)
    assert lease is not None
    await b.stores.jobs.save(receipt.record, JobStatus.RUNNING, fence=lease.fence)  # A runs it
    runs: list[asyncio.Task[object]] = []
    resumed = asyncio.Event()

    async def run(job_id: str) -> object:
        result = await b.runner.run_job(job_id)
        if result is not None:
            resumed.set()
        return result

    def schedule(job_id: str) -> None:
        runs.append(asyncio.create_task(run(job_id)))

    async def on_expired(approval: ApprovalRecord) -> None:
        raise AssertionError("no card expires here")

    scanner = Scanner(b, schedule=schedule, on_expired=on_expired)
    await scanner.scan()  # the lease has about 1 s left: a look timed to just after it
    assert runs == []
    assert await Leases(redis, keys, ttl_ms=1_500).renew(lease)  # A's last renewal

    try:
        async with asyncio.timeout(LEASE_TTL_MS / 1000):
            await resumed.wait()
    except TimeoutError:
        raise AssertionError(
            f"no run took the job over after its lease expired ({len(runs)} run(s) "
            "scheduled while the lease was still held, and no look after them)"
        ) from None
    finally:
        for task in runs:
            await task
    record = await b.stores.jobs.get(receipt.job_id)
    assert record is not None and record.status is JobStatus.COMPLETED

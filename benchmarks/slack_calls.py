"""Slack calls per job, by method, for a 5-tool job: task cards off (before) and on (after),
and the time from a tool's start to its task card reaching Slack.

The Slack edge (``JobProgress``, slack-sdk's real client, the paced ``UpdateBudget``) against
the fake Slack on loopback, fed the events of a job as the agent core emits them: a short
note and a tool call per iteration (five tools, each running ``--tool-s`` seconds of fake
time), then a streamed answer of ``--answer`` characters. Time is a ``FakeClock`` stepped by
the job's own durations, so the pacing (one append or edit per stream per second, the
status message's chat.update budget) decides the counts, not this machine's speed.

The first-card latency is wall time on the real event loop: from the ``tool_start`` event to
the fake Slack answering ``chat.startStream`` (median and p95 of ``--repeats`` jobs), next
to the same for the status message's first ``chat.update`` (the best the status message
could do).

Budgets (Slack's, per workspace and app): ``chat.startStream`` / ``stopStream`` Tier 2
(20+/min), ``chat.appendStream`` Tier 4 (100+/min), ``chat.update`` Tier 3 (50/min, the
``UpdateBudget`` all jobs share), ``chat.postMessage`` about 1/s per channel.

    python benchmarks/slack_calls.py [--tool-s 1.5] [--answer 1200] [--repeats 20]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections import Counter

from slack_sdk.web.async_client import AsyncWebClient

from bot.agent.events import (
    Event,
    ModelRequestEnd,
    ModelRequestStart,
    RunEnd,
    StreamDelta,
    ToolEnd,
    ToolStart,
)
from bot.agent.messages import Usage
from bot.agent.state import RunResult, RunState, StopReason
from bot.agent.testing import FakeClock
from bot.emulator.slack import TEAM_ID, FakeSlack
from bot.slack.progress import JobProgress, budget_sender
from bot.slack.task_cards import TASK_CARDS
from bot.slack.updates import TIER3_PER_MINUTE, UpdateBudget
from bot.store.jobs import JobLimits, JobRecord

TOOLS = 5
BUDGETS = {  # calls per minute per workspace
    "chat.startStream": 20,
    "chat.stopStream": 20,
    "chat.appendStream": 100,
    "chat.update": TIER3_PER_MINUTE,
    "chat.postMessage": 60,
}
METHODS = tuple(BUDGETS) + ("assistant.threads.setStatus",)


def record(n: int) -> JobRecord:
    return JobRecord(
        id=f"C1:1700000000.{n:06d}:j1",
        channel="C1",
        thread_ts=f"1700000000.{n:06d}",
        requester="U1",
        created_at=0.0,
        updated_at=0.0,
        limits=JobLimits(max_iterations=20, deadline_s=600, token_budget=200_000),
    )


def usage() -> Usage:
    return Usage(prompt_tokens=900, completion_tokens=60)


async def settle(progress: JobProgress) -> None:
    for stream in progress.streams:
        await stream.quiet()
    if progress.job_stream is not None:
        await progress.job_stream.quiet()


async def run_job(
    client: AsyncWebClient,
    budget: UpdateBudget,
    n: int,
    *,
    display: str,
    tool_s: float,
    answer: str,
) -> None:
    clock = FakeClock()
    progress = JobProgress(
        client, budget, record(n), team_id=TEAM_ID, clock=clock, task_display=display
    )
    await progress.start()

    async def feed(*events: Event, after_s: float = 0.0) -> None:
        for event in events:
            progress(event)
        await settle(progress)
        if after_s:
            clock.advance(after_s)
            await settle(progress)

    for i in range(1, TOOLS + 1):
        call = f"call_{i}"
        await feed(
            ModelRequestStart(iteration=i, model="m", attempt=1),
            StreamDelta(text=f"Checking web-0{i} next."),
            ModelRequestEnd(i, "m", 0.8, usage(), tool_calls=1),
            ToolStart(call_id=call, tool="web_health", arguments={"host": f"web-0{i}"}),
            after_s=tool_s,
        )
        await feed(ToolEnd(call, "web_health", True, False, tool_s, 120, summary="ok, p99 180ms"))
    await feed(ModelRequestStart(iteration=TOOLS + 1, model="m", attempt=1))
    for k in range(0, len(answer), 60):
        await feed(StreamDelta(text=answer[k : k + 60]), after_s=0.05)
    await feed(ModelRequestEnd(TOOLS + 1, "m", 2.0, usage()), after_s=0.5)
    result = RunResult(
        stop_reason=StopReason.COMPLETED,
        output=answer,
        iterations=TOOLS + 1,
        model_calls=TOOLS + 1,
        tool_executions=TOOLS,
        usage=usage(),
        tools_used=["web_health"],
        state=RunState(),
    )
    progress(RunEnd(result))
    await asyncio.wait_for(progress.done.wait(), 30)
    assert progress.status_ts is not None
    await budget.drain("C1", progress.status_ts)


async def first_card_ms(client: AsyncWebClient, slack: FakeSlack, n: int) -> tuple[float, float]:
    """Wall ms from a job's first ``tool_start`` to Slack answering its task card, and to
    the status message's first edit showing the tool."""
    budget = UpdateBudget(budget_sender(client), per_minute=6_000, burst=50)
    progress = JobProgress(client, budget, record(n), team_id=TEAM_ID, task_display="timeline")
    await progress.start()
    starts = len(slack.calls_of("chat.startStream"))
    updates = len(slack.calls_of("chat.update"))
    t0 = time.perf_counter()
    progress(ToolStart(call_id="call_1", tool="web_health", arguments={"host": "web-01"}))
    # Re-checked as the fake answers each call: this is when Slack has the card.
    await slack.wait_for(lambda: len(slack.calls_of("chat.startStream")) > starts)
    assert progress.job_stream is not None
    card = (time.perf_counter() - t0) * 1000
    await slack.wait_for(lambda: len(slack.calls_of("chat.update")) > updates)
    status = (time.perf_counter() - t0) * 1000
    await progress.job_stream.settle()
    await progress.thread_status.clear()
    await budget.drain("C1", str(progress.status_ts))
    await budget.aclose()
    return card, status


async def main(args: argparse.Namespace) -> None:
    answer = ("The web tier is healthy again; p99 is back under 200 ms on every host. " * 40)[
        : args.answer
    ]
    counts: dict[str, Counter[str]] = {}
    async with FakeSlack() as slack:
        client = AsyncWebClient(token="xoxb-bench", base_url=slack.api_url)
        for n, display in enumerate(("off", "timeline", "plan"), start=1):
            TASK_CARDS.configure("timeline")
            budget = UpdateBudget(budget_sender(client))  # the real Tier 3 pacing
            before = len(slack.calls)
            await run_job(client, budget, n, display=display, tool_s=args.tool_s, answer=answer)
            await budget.aclose()
            counts[display] = Counter(c.method for c in slack.calls[before:])
        cards, statuses = [], []
        for k in range(args.repeats):
            card, status = await first_card_ms(client, slack, 100 + k)
            cards.append(card)
            statuses.append(status)

    print(f"Slack calls per job, {TOOLS} tools of {args.tool_s:g} s, a {len(answer)}-char answer")
    print(f"{'method':<30}{'before (off)':>14}{'timeline':>10}{'plan':>8}{'budget/min':>12}")
    for method in METHODS:
        row = [counts[d][method] for d in ("off", "timeline", "plan")]
        limit = BUDGETS.get(method)
        print(f"{method:<30}{row[0]:>14}{row[1]:>10}{row[2]:>8}{limit or '-':>12}")
    totals = [sum(counts[d].values()) for d in ("off", "timeline", "plan")]
    print(f"{'all':<30}{totals[0]:>14}{totals[1]:>10}{totals[2]:>8}")
    print()
    for display in ("off", "timeline"):
        worst = min(BUDGETS[m] / counts[display][m] for m in BUDGETS if counts[display][m])
        print(f"jobs/min the tightest budget allows ({display}): {worst:.1f}")
    print()
    q = statistics.quantiles
    print(
        f"first task card after tool_start: median {statistics.median(cards):.2f} ms, "
        f"p95 {q(cards, n=20)[-1]:.2f} ms ({args.repeats} jobs)"
    )
    print(
        f"status message's first edit (baseline): median {statistics.median(statuses):.2f} ms, "
        f"p95 {q(statuses, n=20)[-1]:.2f} ms"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tool-s", type=float, default=1.5)
    parser.add_argument("--answer", type=int, default=1200)
    parser.add_argument("--repeats", type=int, default=20)
    asyncio.run(main(parser.parse_args()))

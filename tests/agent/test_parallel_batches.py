"""Which calls of one response run concurrently, how many at once, and in what order
their results are recorded.

Only ``read_only`` tools marked ``parallel`` run side by side, at most
``AgentConfig.max_parallel`` at a time (4 by default); read-only tools without the flag
and anything that changes the world run alone, in call order. Results always follow the
order of the calls. The tools here block on events the test controls, so concurrency is
observed, never timed.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Literal

import pytest
from pydantic import BaseModel

from bot.agent import (
    AnyMessage,
    Approved,
    CallContext,
    ConfirmRequest,
    Decision,
    FunctionTool,
    RunResult,
    StopReason,
    ToolMessage,
    run,
)
from bot.agent.config import DEFAULT_MAX_PARALLEL
from bot.agent.testing import FakeClock, ScriptedModel, call, calls, text

from .conftest import make_config

# Only a guard against a hang turning into a stuck test run; nothing is timed with it.
DEADLOCK_GUARD_S = 10.0


class TagArgs(BaseModel):
    tag: str


class Gate:
    """Tools that record who is running and block until the test releases them."""

    def __init__(self) -> None:
        self.running: list[str] = []
        self.started: list[str] = []
        self.finished: list[str] = []
        self.max_running = 0
        self.release: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self._watches: list[tuple[Callable[[], bool], asyncio.Event]] = []

    def _changed(self) -> None:
        for predicate, event in self._watches:
            if predicate():
                event.set()

    async def until(self, predicate: Callable[[], bool]) -> None:
        """Wait until ``predicate`` holds after some tool started or finished."""
        event = asyncio.Event()
        if predicate():
            return
        self._watches.append((predicate, event))
        try:
            await asyncio.wait_for(event.wait(), DEADLOCK_GUARD_S)
        finally:
            self._watches.remove((predicate, event))

    def tool(
        self,
        name: str,
        *,
        category: Literal["read_only", "mutating", "destructive"] = "read_only",
        parallel: bool = False,
    ) -> FunctionTool:
        async def fn(args: TagArgs, ctx: CallContext) -> str:
            self.started.append(args.tag)
            self.running.append(args.tag)
            self.max_running = max(self.max_running, len(self.running))
            self._changed()
            try:
                await self.release[args.tag].wait()
            finally:
                self.running.remove(args.tag)
            self.finished.append(args.tag)
            self._changed()
            return f"{name} {args.tag} done"

        return FunctionTool(
            name=name,
            description=name,
            args_model=TagArgs,
            fn=fn,
            category=category,
            parallel=parallel,
        )

    def open(self, *tags: str) -> None:
        for tag in tags:
            self.release[tag].set()


async def approve_all(request: ConfirmRequest) -> Decision:
    return Approved(confirmed_by="U0123ABC")


def tool_messages(messages: Sequence[AnyMessage]) -> list[ToolMessage]:
    return [m for m in messages if isinstance(m, ToolMessage)]


def start(coro: Coroutine[Any, Any, RunResult]) -> asyncio.Task[RunResult]:
    return asyncio.create_task(coro)


async def finish(task: asyncio.Task[RunResult]) -> RunResult:
    return await asyncio.wait_for(task, DEADLOCK_GUARD_S)


def tagged(name: str, tags: Sequence[str]) -> list[Any]:
    return [call(name, f"id-{tag}", tag=tag) for tag in tags]


async def test_parallel_read_only_calls_run_four_at_a_time_by_default(clock: FakeClock) -> None:
    assert DEFAULT_MAX_PARALLEL == 4
    gate = Gate()
    tags = ["a", "b", "c", "d", "e", "f"]
    model = ScriptedModel([calls(*tagged("probe", tags)), text("all probed")])
    config = make_config(model, tools=[gate.tool("probe", parallel=True)], clock=clock)

    task = start(run(config))
    await gate.until(lambda: len(gate.running) == 4)
    assert gate.started == ["a", "b", "c", "d"]
    # One slot frees up: exactly one more call starts.
    gate.open("b")
    await gate.until(lambda: len(gate.started) == 5)
    assert sorted(gate.running) == ["a", "c", "d", "e"]
    gate.open(*tags)
    result = await finish(task)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert gate.max_running == 4
    assert sorted(gate.finished) == sorted(tags)
    assert [m.tool_call_id for m in tool_messages(model.requests[1].messages)] == [
        f"id-{t}" for t in tags
    ]


@pytest.mark.parametrize("limit", [1, 2, 3])
async def test_max_parallel_bounds_concurrency(clock: FakeClock, limit: int) -> None:
    gate = Gate()
    tags = ["a", "b", "c", "d", "e"]
    model = ScriptedModel([calls(*tagged("probe", tags)), text("all probed")])
    config = make_config(
        model, tools=[gate.tool("probe", parallel=True)], clock=clock, max_parallel=limit
    )

    task = start(run(config))
    await gate.until(lambda: len(gate.running) == limit)
    assert gate.started == tags[:limit]
    for tag in tags:
        gate.open(tag)
        await gate.until(lambda tag=tag: tag in gate.finished)
        assert len(gate.running) <= limit
    result = await finish(task)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert gate.max_running == limit
    assert gate.finished == tags


async def test_results_keep_call_order_when_calls_finish_in_reverse(clock: FakeClock) -> None:
    gate = Gate()
    tags = ["first", "second", "third"]
    model = ScriptedModel([calls(*tagged("probe", tags)), text("done")])
    config = make_config(model, tools=[gate.tool("probe", parallel=True)], clock=clock)

    task = start(run(config))
    await gate.until(lambda: len(gate.running) == 3)
    for tag in reversed(tags):
        gate.open(tag)
        await gate.until(lambda tag=tag: tag in gate.finished)
    result = await finish(task)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert gate.finished == ["third", "second", "first"]
    results = tool_messages(model.requests[1].messages)
    assert [m.tool_call_id for m in results] == ["id-first", "id-second", "id-third"]
    assert [m.content for m in results] == [
        "probe first done",
        "probe second done",
        "probe third done",
    ]


async def drive_one_at_a_time(gate: Gate, order: Sequence[str]) -> None:
    """Release calls one by one as they start, checking each runs alone and in order."""
    before = len(gate.started)
    for n, tag in enumerate(order):
        await gate.until(lambda n=n: len(gate.started) > before + n)
        assert gate.started[before + n] == tag
        assert gate.running == [tag]
        gate.open(tag)
        await gate.until(lambda tag=tag: tag in gate.finished)


async def test_read_only_calls_without_the_parallel_flag_run_one_at_a_time(
    clock: FakeClock,
) -> None:
    gate = Gate()
    tags = ["a", "b", "c"]
    model = ScriptedModel([calls(*tagged("tail", tags)), text("read all logs")])
    config = make_config(model, tools=[gate.tool("tail", parallel=False)], clock=clock)

    task = start(run(config))
    await drive_one_at_a_time(gate, tags)
    result = await finish(task)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert gate.max_running == 1
    assert [m.tool_call_id for m in tool_messages(model.requests[1].messages)] == [
        "id-a",
        "id-b",
        "id-c",
    ]


@pytest.mark.parametrize("parallel", [False, True])
async def test_mutating_calls_run_one_at_a_time_in_order(clock: FakeClock, parallel: bool) -> None:
    """Even a mutating tool marked ``parallel`` never runs beside another call."""
    gate = Gate()
    tags = ["web-01", "web-02", "web-03"]
    model = ScriptedModel([calls(*tagged("restart", tags)), text("restarted all")])
    tool = gate.tool("restart", category="mutating", parallel=parallel)
    config = make_config(model, tools=[tool], clock=clock, confirm=approve_all)

    task = start(run(config))
    await drive_one_at_a_time(gate, tags)
    result = await finish(task)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert gate.max_running == 1
    results = tool_messages(model.requests[1].messages)
    assert [m.tool_call_id for m in results] == [f"id-{t}" for t in tags]
    assert all(m.confirmed_by == "U0123ABC" for m in results)


async def test_a_mixed_batch_runs_in_groups_around_the_sequential_calls(
    clock: FakeClock,
) -> None:
    gate = Gate()
    probe = gate.tool("probe", parallel=True)
    tail = gate.tool("tail", parallel=False)
    restart = gate.tool("restart", category="mutating", parallel=True)
    batch = [
        call("probe", "c1", tag="p1"),
        call("probe", "c2", tag="p2"),
        call("restart", "c3", tag="m1"),
        call("probe", "c4", tag="p3"),
        call("tail", "c5", tag="t1"),
        call("probe", "c6", tag="p4"),
        call("probe", "c7", tag="p5"),
    ]
    model = ScriptedModel([calls(*batch), text("done")])
    config = make_config(model, tools=[probe, tail, restart], clock=clock, confirm=approve_all)

    task = start(run(config))
    # The first two probes run together; the restart waits for both.
    await gate.until(lambda: len(gate.running) == 2)
    assert sorted(gate.running) == ["p1", "p2"]
    gate.open("p2")
    await gate.until(lambda: "p2" in gate.finished)
    assert "m1" not in gate.started
    gate.open("p1")
    # Then the restart alone, then the lone probe, then the tail, each by itself.
    await drive_one_at_a_time(gate, ["m1", "p3", "t1"])
    # The last two probes run together again.
    await gate.until(lambda: len(gate.running) == 2)
    assert sorted(gate.running) == ["p4", "p5"]
    gate.open("p5", "p4")
    result = await finish(task)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert gate.started[:2] in (["p1", "p2"], ["p2", "p1"])
    assert gate.started[2:5] == ["m1", "p3", "t1"]
    results = tool_messages(model.requests[1].messages)
    assert [m.tool_call_id for m in results] == [c.id for c in batch]

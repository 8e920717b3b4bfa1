"""Agent-core overhead per iteration, in process (no HTTP), against a bare loop.

Workload (BENCHMARKS.md's loop-overhead shape without the network): a model that answers
instantly with one ``check(host="web-<n>")`` call until K tool results exist, then a final
answer; a trivial read-only tool. Reports CPU ms per iteration (median of repeats), the
same with a long prior history (flatness), 100 concurrent runs (CPU/iter, RSS increase),
and import+build time of the core. The bare loop is the floor measured in the same run.

    python benchmarks/core_loop.py [--repeats 15] [--runs 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence

from pydantic import BaseModel

from bot.agent import (
    AgentConfig,
    AnyMessage,
    AssistantMessage,
    CallContext,
    FunctionTool,
    InMemoryHistory,
    ModelRequest,
    ModelResponse,
    StopReason,
    ToolCall,
    ToolMessage,
    UserMessage,
    run,
)
from bot.agent.ports import Client, DeltaSink

K = 10


class Args(BaseModel):
    host: str


async def check(args: Args, ctx: CallContext) -> str:
    return f"ok {args.host}"


TOOL = FunctionTool(name="check", description="Check a host.", args_model=Args, fn=check)


class InstantModel:
    """Answers at once; K tool calls, then a final answer."""

    def __init__(self) -> None:
        self.n = 0
        self.requests = 0

    @property
    def name(self) -> str:
        return "instant"

    def chain(self) -> Sequence[Client]:
        return [self]

    async def complete(
        self, request: ModelRequest, *, on_delta: DeltaSink | None = None
    ) -> ModelResponse:
        self.requests += 1
        if self.n < K:
            n = self.n
            self.n += 1
            args = json.dumps({"host": f"web-{n}"})
            return ModelResponse(tool_calls=(ToolCall(id=f"c{n}", name="check", arguments=args),))
        return ModelResponse(content="all hosts ok")


def _prior(size: int) -> list[AnyMessage]:
    messages: list[AnyMessage] = [UserMessage(content="check the fleet")]
    for i in range(size // 2):
        call = ToolCall(id=f"p{i}", name="check", arguments=json.dumps({"host": f"old-{i}"}))
        messages.append(AssistantMessage(tool_calls=(call,)))
        messages.append(ToolMessage(tool_call_id=f"p{i}", name="check", content=f"ok old-{i}"))
    return messages


PRIOR = {0: _prior(0), 400: _prior(400)}


def prior_history(size: int) -> InMemoryHistory:
    """A fresh history holding ``size`` earlier messages (built once, copied per run)."""
    return InMemoryHistory(messages=list(PRIOR[size]))


async def core_run(prior: int = 0) -> InstantModel:
    model = InstantModel()
    config = AgentConfig(
        job_id="bench",
        client=model,
        memory=prior_history(prior),
        system_prompt="You are an SRE assistant.",
        tools=[TOOL],
    )
    result = await run(config)
    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert model.requests == K + 1 and result.tool_executions == K
    return model


async def bare_run() -> int:
    """The floor: the same exchange with nothing but a list and a dict lookup."""
    model = InstantModel()
    history: list[object] = [UserMessage(content="check the fleet")]
    tools = {"check": TOOL}
    while True:
        request = ModelRequest(system="s", tools=(), messages=history, max_output_tokens=1)
        response = await model.complete(request)
        if not response.tool_calls:
            return model.requests
        history.append(AssistantMessage(tool_calls=response.tool_calls))
        for c in response.tool_calls:
            out = await tools[c.name].execute(Args.model_validate_json(c.arguments), None)  # type: ignore[arg-type]
            history.append(ToolMessage(tool_call_id=c.id, name=c.name, content=str(out)))


def cpu_ms_per_iter(fn, runs: int, repeats: int) -> float:  # type: ignore[no-untyped-def]
    samples = []
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(fn())  # warm-up
        for _ in range(repeats):
            t0 = time.process_time()
            for _ in range(runs):
                loop.run_until_complete(fn())
            samples.append((time.process_time() - t0) * 1000 / (runs * K))
    finally:
        loop.close()
    return statistics.median(samples)


def concurrent(n: int) -> tuple[float, float]:
    async def many() -> None:
        await asyncio.gather(*(core_run() for _ in range(n)))

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.process_time()
    asyncio.run(many())
    cpu = (time.process_time() - t0) * 1000 / (n * K)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return cpu, (after - before) / 1024


def import_and_build() -> float:
    code = (
        "import time; t=time.perf_counter(); "
        "import benchmarks.core_loop as b; from bot.agent import AgentConfig, InMemoryHistory; "
        "AgentConfig(job_id='j', client=b.InstantModel(), memory=InMemoryHistory(), "
        "system_prompt='s', tools=[b.TOOL]); print(time.perf_counter()-t)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    return float(out.stdout.strip())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--runs", type=int, default=20)
    opts = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {0})
    bare = cpu_ms_per_iter(bare_run, opts.runs, opts.repeats)
    core = cpu_ms_per_iter(core_run, opts.runs, opts.repeats)
    long = cpu_ms_per_iter(lambda: core_run(prior=400), opts.runs, opts.repeats)
    cpu100, rss100 = concurrent(100)
    imp = statistics.median(import_and_build() for _ in range(3))
    print(f"core loop, in process, K={K} iterations per run, median of {opts.repeats} repeats")
    print(f"{'what':<44} {'CPU ms/iter':>12}")
    print(f"{'bare loop (floor, same run)':<44} {bare:>12.3f}")
    print(f"{'agent core, empty history':<44} {core:>12.3f}")
    print(f"{'agent core, 400 prior messages':<44} {long:>12.3f}")
    print(f"{'agent core, 100 runs at once':<44} {cpu100:>12.3f}")
    print(f"100 concurrent runs: +{rss100:.1f} MB peak RSS")
    print(f"import + build of the core: {imp:.3f} s")


if __name__ == "__main__":
    main()

"""What OpenTelemetry tracing costs the loop: CPU per iteration with it off and on.

The workload is ``benchmarks/core_loop.py``'s (an instant model, K tool calls, then an
answer), run through ``bot.agent.run`` with the event sinks ``bot.turns.run`` gives a
job: the Redis trace recorder always, and the GenAI spans (``bot.otel.spans``) when
tracing is on, exporting over OTLP/HTTP to ``bot.emulator.otlp_receiver`` running as
another process on loopback (so its decoding is not counted). CPU is the process's
(``time.process_time``: every thread, so the batch processor's worker and the protobuf
encoding are in the "on" figures); each repeat ends with a flush of the queued spans.

Each mode runs in a fresh interpreter: "off" with no ``OTEL_*`` variable, through
``open_tracing`` exactly as ``opsloop serve`` does it, counting the ``opentelemetry``
modules loaded beyond what redis-py loads by itself (0 expected).

    python benchmarks/otel.py [--repeats 15] [--runs 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.core_loop import TOOL, InstantModel, K, prior_history  # noqa: E402
from bot.agent import AgentConfig, StopReason, run  # noqa: E402
from bot.agent.events import Event, EventSink  # noqa: E402
from bot.otel.tracing import Tracing, TracingOptions, open_tracing  # noqa: E402
from bot.store.jobs import JobLimits, new_job  # noqa: E402
from bot.store.keys import Thread  # noqa: E402
from bot.store.trace import TraceRecorder  # noqa: E402

LIMITS = JobLimits(max_iterations=50, deadline_s=600, token_budget=10_000_000)
RECORD = new_job(Thread("C1", "1700000000.000100"), requester="U1", limits=LIMITS, now=0.0)


async def job_run(tracing: Tracing | None) -> None:
    """One run with the runner's sinks (``Turns._run_with``)."""
    trace = TraceRecorder(RECORD.id)
    sinks: list[EventSink] = [trace]
    spans = None
    if tracing is not None:
        spans = tracing.run(RECORD, None, [TOOL])
        sinks.append(spans)

    def on_event(event: Event) -> None:
        for sink in sinks:
            sink(event)

    model = InstantModel()
    config = AgentConfig(
        job_id="bench",
        client=model,
        memory=prior_history(0),
        system_prompt="You are an SRE assistant.",
        tools=[TOOL],
        on_event=on_event,
    )
    result = await run(config)
    assert result.stop_reason is StopReason.COMPLETED, result.error
    if spans is not None:
        spans.abandon()
    trace.drain()


def cpu_ms_per_iter(
    fn: Callable[[], Awaitable[None]], runs: int, repeats: int, flush: Callable[[], None]
) -> float:
    samples = []
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(fn())  # warm-up
        flush()
        for _ in range(repeats):
            t0 = time.process_time()
            for _ in range(runs):
                loop.run_until_complete(fn())
            flush()
            samples.append((time.process_time() - t0) * 1000 / (runs * K))
    finally:
        loop.close()
    return statistics.median(samples)


@contextmanager
def receiver() -> Iterator[str]:
    """An OTLP/HTTP receiver as another process; its endpoint."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "bot.emulator.otlp_receiver"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


def measure_in_child(mode: str, runs: int, repeats: int, endpoint: str | None) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    if endpoint is not None:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
    if mode == "on+content":
        env["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "true"
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run(
        [sys.executable, __file__, "--child", "--runs", str(runs), "--repeats", str(repeats)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        cwd=ROOT,
    )
    figures: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return figures


def child(runs: int, repeats: int) -> None:
    from bot.settings import load_otel_settings

    settings = load_otel_settings()
    tracing = open_tracing(
        settings.enabled, TracingOptions(capture_content=settings.capture_content)
    )

    def flush() -> None:
        if tracing is not None:
            tracing.force_flush()

    cpu = cpu_ms_per_iter(lambda: job_run(tracing), runs, repeats, flush)
    dropped = getattr(tracing, "dropped", 0)
    if tracing is not None:
        tracing.close()
    loaded = {m for m in sys.modules if m.split(".")[0] == "opentelemetry"}
    ours = loaded - redis_own_otel_modules()
    print(json.dumps({"cpu": cpu, "otel_modules": len(ours), "dropped": dropped}))


def redis_own_otel_modules() -> set[str]:
    """What ``import redis.asyncio`` loads of OpenTelemetry by itself (redis-py >= 8 loads
    its metrics SDK whenever it is installed): not opsloop's doing."""
    code = (
        "import json, sys, redis.asyncio; "
        "print(json.dumps([m for m in sys.modules if m.split('.')[0] == 'opentelemetry']))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--child", action="store_true")
    opts = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {0})
    if opts.child:
        child(opts.runs, opts.repeats)
        return
    from benchmarks.core_loop import core_run

    bare = cpu_ms_per_iter(core_run, opts.runs, opts.repeats, lambda: None)  # type: ignore[arg-type]
    off = measure_in_child("off", opts.runs, opts.repeats, None)
    with receiver() as endpoint:
        on = measure_in_child("on", opts.runs, opts.repeats, endpoint)
        content = measure_in_child("on+content", opts.runs, opts.repeats, endpoint)
    print(f"OpenTelemetry tracing, K={K} iterations per run, median of {opts.repeats} repeats")
    print(f"{'what':<58} {'CPU ms/iter':>12}")
    print(f"{'agent core, no sink (core_loop.py, this process)':<58} {bare:>12.3f}")
    rows = [
        ("runner sinks, tracing off (no OTEL_*)", off),
        ("runner sinks, tracing on, OTLP/HTTP to loopback", on),
        ("runner sinks, tracing on + content capture", content),
    ]
    for label, figures in rows:
        print(f"{label:<58} {figures['cpu']:>12.3f}")
    print(
        f"opentelemetry modules opsloop imported with tracing off: {off['otel_modules']} "
        f"(on: {on['otel_modules']}); "
        f"spans dropped on: {on['dropped']}, on+content: {content['dropped']}"
    )


if __name__ == "__main__":
    main()

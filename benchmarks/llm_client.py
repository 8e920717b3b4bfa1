"""Model-client overhead and the full loop over real HTTP, against baselines in one run.

A scripted OpenAI-compatible server runs in a separate process pinned to the second
core; this process is pinned to the first and measures its own CPU time.

1. The client alone: one streamed response with a tool call split over ~20 chunks (and
   the same response non-streamed), as CPU ms per request and requests per CPU second:
   a bare httpx loop (the floor), our ``OpenAIClient``, and the official ``openai`` SDK's
   ``AsyncOpenAI`` when installed (``pip install -e '.[bench]'``).
2. The loop-overhead workload of BENCHMARKS.md: the agent core + our client, K = 10 tool
   iterations per run, plain and streamed, with an empty and a 400-message history, and
   100 runs at once (CPU ms/iter, RSS increase). Checks requests = runs × (K + 1).

    python benchmarks/llm_client.py [--requests 300] [--repeats 10]
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
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
from pydantic import BaseModel

from bot.agent import (
    AgentConfig,
    AnyMessage,
    AssistantMessage,
    CallContext,
    FunctionTool,
    InMemoryHistory,
    ModelRequest,
    StopReason,
    ToolCall,
    ToolMessage,
    ToolSpec,
    UserMessage,
    run,
)
from bot.agent.ports import ClientResolver
from bot.emulator.model_server import ScriptedServer
from bot.emulator.scripted import Reply, ScriptedCall, ScriptedRequest
from bot.llm.chain import ModelChain
from bot.llm.openai import OpenAIClient
from bot.llm.retry import RetryPolicy

K = 10
CHUNKS = 20
TOOL_SPEC = ToolSpec(
    name="check",
    description="Check a host.",
    parameters={"type": "object", "properties": {"host": {"type": "string"}}},
)


# -- the server process ----------------------------------------------------------


def policy(request: ScriptedRequest) -> Reply:
    if request.model == "fixed":
        args = {"host": "web-0123456789", "reason": "cpu " * 12}
        return Reply(
            content="Checking the host now.",
            tool_calls=[ScriptedCall("check", args, id="call_1")],
            prompt_tokens=100,
            completion_tokens=20,
        )
    # Tool results of this run (a long prior history holds "ok old-…" ones).
    n = sum(
        1
        for m in request.messages
        if m.get("role") == "tool" and not str(m.get("content", "")).startswith("ok old-")
    )
    if n < K:
        return Reply(
            tool_calls=[ScriptedCall("check", {"host": f"web-{n}"})],
            prompt_tokens=100 + n,
            completion_tokens=10,
        )
    return Reply(content="all hosts ok", prompt_tokens=120, completion_tokens=5)


async def serve(port_file: str) -> None:
    server = await ScriptedServer(policy, chunks=CHUNKS // 2).start()
    await asyncio.to_thread(_write, port_file, str(server.port))
    await asyncio.Event().wait()


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def start_server() -> tuple[subprocess.Popen[bytes], str]:
    port_file = f"/tmp/opsloop-bench-{os.getpid()}.port"
    if os.path.exists(port_file):
        os.unlink(port_file)
    proc = subprocess.Popen([sys.executable, __file__, "--serve", port_file])
    if hasattr(os, "sched_setaffinity") and os.cpu_count() and os.cpu_count() > 1:  # type: ignore[operator]
        os.sched_setaffinity(proc.pid, {1})
    for _ in range(200):
        if os.path.exists(port_file) and open(port_file).read().strip():
            break
        time.sleep(0.05)
    port = open(port_file).read().strip()
    os.unlink(port_file)
    return proc, f"http://127.0.0.1:{port}/v1"


# -- the client alone ------------------------------------------------------------

REQUEST_MESSAGES: list[AnyMessage] = [UserMessage(content="check web-0123456789")]


async def bare_httpx(http: httpx.AsyncClient, base: str, stream: bool) -> None:
    body = {
        "model": "fixed",
        "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "check"}],
        "tools": [{"type": "function", "function": TOOL_SPEC.model_dump()}],
        "max_tokens": 100,
    }
    if not stream:
        r = await http.post(base + "/chat/completions", json=body)
        data = r.json()
        assert data["choices"][0]["message"]["tool_calls"]
        return
    body["stream"] = True
    body["stream_options"] = {"include_usage": True}
    args: list[str] = []
    async with http.stream("POST", base + "/chat/completions", json=body) as r:
        async for line in r.aiter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunk = json.loads(line[6:])
                for choice in chunk["choices"]:
                    for tc in choice["delta"].get("tool_calls") or ():
                        args.append(tc["function"].get("arguments") or "")
    assert json.loads("".join(args))


def ours(client: OpenAIClient, stream: bool) -> Callable[[], Awaitable[None]]:
    request = ModelRequest(
        system="s",
        tools=(TOOL_SPEC,),
        messages=REQUEST_MESSAGES,
        max_output_tokens=100,
        stream=stream,
    )
    sink = (lambda _: None) if stream else None

    async def go() -> None:
        response = await client.complete(request, on_delta=sink)
        assert response.tool_calls

    return go


def sdk(base: str, stream: bool) -> Callable[[], Awaitable[None]] | None:
    try:
        from openai import AsyncOpenAI
    except ImportError:
        return None
    client = AsyncOpenAI(base_url=base, api_key="x", max_retries=0)
    tools: Any = [{"type": "function", "function": TOOL_SPEC.model_dump()}]
    messages: Any = [{"role": "system", "content": "s"}, {"role": "user", "content": "check"}]

    async def go() -> None:
        if not stream:
            r = await client.chat.completions.create(
                model="fixed", messages=messages, tools=tools, max_tokens=100
            )
            assert r.choices[0].message.tool_calls
            return
        args: list[str] = []
        s = await client.chat.completions.create(
            model="fixed",
            messages=messages,
            tools=tools,
            max_tokens=100,
            stream=True,
            stream_options={"include_usage": True},
        )
        async for chunk in s:
            for choice in chunk.choices:
                for tc in choice.delta.tool_calls or ():
                    args.append((tc.function and tc.function.arguments) or "")
        assert json.loads("".join(args))

    return go


def cpu_per_call(
    loop: asyncio.AbstractEventLoop, fn: Callable[[], Awaitable[None]], n: int
) -> float:
    for _ in range(20):
        loop.run_until_complete(fn())
    samples = []
    for _ in range(5):
        t0 = time.process_time()
        for _ in range(n // 5):
            loop.run_until_complete(fn())
        samples.append((time.process_time() - t0) * 1000 / (n // 5))
    return statistics.median(samples)


# -- the full loop ---------------------------------------------------------------


class Args(BaseModel):
    host: str


async def check(args: Args, ctx: CallContext) -> str:
    return f"ok {args.host}"


TOOL = FunctionTool(name="check", description="Check a host.", args_model=Args, fn=check)


def prior(size: int) -> list[AnyMessage]:
    out: list[AnyMessage] = [UserMessage(content="check the fleet")]
    for i in range(size // 2):
        c = ToolCall(id=f"p{i}", name="check", arguments=json.dumps({"host": f"old-{i}"}))
        out.append(AssistantMessage(tool_calls=(c,)))
        out.append(ToolMessage(tool_call_id=f"p{i}", name="check", content=f"ok old-{i}"))
    return out


async def one_job(resolver: ClientResolver, history: list[AnyMessage], stream: bool) -> None:
    config = AgentConfig(
        job_id="bench",
        client=resolver,
        memory=InMemoryHistory(messages=list(history)),
        system_prompt="You are an SRE assistant.",
        tools=[TOOL],
        stream=stream,
    )
    result = await run(config)
    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert result.tool_executions == K


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--serve")
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=10)
    opts = parser.parse_args()
    if opts.serve:
        asyncio.run(serve(opts.serve))
        return
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {0})
    proc, base = start_server()
    loop = asyncio.new_event_loop()
    try:
        http = httpx.AsyncClient(trust_env=False)
        client = OpenAIClient(model="fixed", base_url=base, http=http, retry=RetryPolicy())
        rows: list[tuple[str, float, float]] = []
        for stream in (False, True):
            kind = "streamed" if stream else "plain"
            bare = cpu_per_call(loop, lambda s=stream: bare_httpx(http, base, s), opts.requests)
            mine = cpu_per_call(loop, ours(client, stream), opts.requests)
            rows.append((f"bare httpx loop, {kind}", bare, 1.0))
            rows.append((f"opsloop OpenAIClient, {kind}", mine, mine / bare))
            official = sdk(base, stream)
            if official is not None:
                theirs = cpu_per_call(loop, official, opts.requests)
                rows.append((f"official openai SDK, {kind}", theirs, theirs / bare))
        print(f"client alone: one tool-call response (~{CHUNKS} chunks when streamed)")
        print(f"{'client':<36} {'CPU ms/req':>10} {'req/CPU s':>10} {'x bare':>7}")
        for name, ms, ratio in rows:
            print(f"{name:<36} {ms:>10.3f} {1000 / ms:>10.0f} {ratio:>7.2f}")

        full_model = OpenAIClient(model="loop", base_url=base, http=http)
        resolver = ModelChain([full_model])
        print(f"\nfull loop: agent core + OpenAIClient over HTTP, K={K} iterations per run")
        print(f"{'workload':<44} {'CPU ms/iter':>11}")
        for stream in (False, True):
            for size in (0, 400):
                history = prior(size)

                async def job(h: list[AnyMessage] = history, s: bool = stream) -> None:
                    await one_job(resolver, h, s)

                samples = []
                loop.run_until_complete(job())
                for _ in range(opts.repeats):
                    t0 = time.process_time()
                    for _ in range(3):
                        loop.run_until_complete(job())
                    samples.append((time.process_time() - t0) * 1000 / (3 * K))
                kind = "streamed" if stream else "plain"
                label = f"{kind}, {size} prior messages"
                print(f"{label:<44} {statistics.median(samples):>11.3f}")

        async def many() -> None:
            start = [UserMessage(content="go")]
            await asyncio.gather(*(one_job(resolver, list(start), False) for _ in range(100)))

        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        t0 = time.process_time()
        loop.run_until_complete(many())
        cpu = (time.process_time() - t0) * 1000 / (100 * K)
        grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
        print(f"{'plain, 100 runs at once':<44} {cpu:>11.3f}")
        print(f"100 concurrent runs: +{grown:.1f} MB peak RSS")
        loop.run_until_complete(http.aclose())
    finally:
        loop.close()
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()

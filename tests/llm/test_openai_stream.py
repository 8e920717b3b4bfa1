"""Streaming (SSE) round trips, stream resets on retry, and cancellation.

Text deltas reach ``on_delta`` in order and join to the content; tool-call fragments
(id and name first, then argument pieces, per index) are assembled into whole calls,
several in parallel, however the server splits or interleaves them; usage (cached tokens
included) comes from the last chunk. A stream cut half-way is transient: it is retried,
and ``on_delta("")`` tells the listener to drop what it showed. Whatever stops a stream
early — an ``on_delta`` that raises, or the task being cancelled — closes the HTTP
response, which the server sees as a disconnect.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from bot.agent.messages import ModelRequest, ModelResponse, ToolCall, ToolSpec, Usage, UserMessage
from bot.emulator.model_server import ScriptedServer
from bot.emulator.scripted import Fault, Reply, ScriptedCall, ScriptedRequest
from bot.errors import ModelUnavailableError
from bot.llm.openai import OpenAIClient

from .conftest import FAST_RETRY, HANG_GUARD_S, Serve, until

CHECK = ToolSpec(name="check", description="Check a host", parameters={"type": "object"})
ANSWER = (
    "web-03 is at 95% CPU because php-fpm workers are stuck on the /search endpoint; "
    "the other web hosts are below 40%."
)
PARTIAL = "partial answer "  # what a scripted cut stream sends per chunk
CALLS = [
    ScriptedCall("check", {"host": "web-01", "checks": ["cpu", "disk", "nginx"]}, id="call_1"),
    ScriptedCall("check", {"host": "web-02", "checks": ["cpu", "memory"]}, id="call_2"),
    ScriptedCall("restart", {"host": "web-03", "service": "php-fpm"}, id="call_3"),
]


class Boom(Exception):
    """What a failing delta listener raises."""


def openai(server: ScriptedServer, http: httpx.AsyncClient, **kw: Any) -> OpenAIClient:
    kw.setdefault("model", "gpt-test")
    kw.setdefault("retry", FAST_RETRY)
    return OpenAIClient(base_url=server.base_url, http=http, **kw)


def streamed(*, tools: tuple[ToolSpec, ...] = ()) -> ModelRequest:
    return ModelRequest(
        system="You are an SRE assistant.",
        tools=tools,
        messages=[UserMessage(content="web-03 is at 95% CPU")],
        max_output_tokens=256,
        stream=True,
    )


def expected_calls() -> tuple[ToolCall, ...]:
    return tuple(ToolCall(id=c.id or "", name=c.name, arguments=c.arguments_json) for c in CALLS)


class Interleaved(ScriptedServer):
    """Sends the tool-call fragments of different indexes interleaved, round robin."""

    def openai_chunks(self, scripted: ScriptedRequest, reply: Reply) -> list[dict[str, Any]]:
        chunks = super().openai_chunks(scripted, reply)
        frags = [c for c in chunks if c["choices"] and "tool_calls" in c["choices"][0]["delta"]]
        rest = [c for c in chunks if c not in frags]
        by_index: dict[int, list[dict[str, Any]]] = {}
        for c in frags:
            by_index.setdefault(c["choices"][0]["delta"]["tool_calls"][0]["index"], []).append(c)
        mixed: list[dict[str, Any]] = []
        while any(by_index.values()):
            for queue in by_index.values():
                if queue:
                    mixed.append(queue.pop(0))
        return rest[:-2] + mixed + rest[-2:]  # before the finish and usage chunks


# -- round trips ---------------------------------------------------------------------


async def test_text_deltas_in_order(serve: Serve, http: httpx.AsyncClient) -> None:
    server = await serve(
        lambda _: Reply(content=ANSWER, prompt_tokens=900, completion_tokens=60, cached_tokens=512),
        chunks=6,
    )
    deltas: list[str] = []

    response = await openai(server, http).complete(streamed(), on_delta=deltas.append)

    assert len(deltas) == 6
    assert "".join(deltas) == ANSWER
    assert response == ModelResponse(
        content=ANSWER,
        usage=Usage(prompt_tokens=900, completion_tokens=60, cached_tokens=512),
        finish_reason="stop",
        model="gpt-test",
    )
    assert len(server.requests) == 1


@pytest.mark.parametrize("server_class", [ScriptedServer, Interleaved])
async def test_parallel_tool_calls_across_chunks(
    serve: Serve, http: httpx.AsyncClient, server_class: type[ScriptedServer]
) -> None:
    server = await serve(
        lambda _: Reply(
            content="Looking at all three.",
            tool_calls=CALLS,
            prompt_tokens=2048,
            completion_tokens=77,
            cached_tokens=1920,
        ),
        chunks=7,
        server_class=server_class,
    )
    deltas: list[str] = []

    response = await openai(server, http).complete(streamed(tools=(CHECK,)), on_delta=deltas.append)

    assert all(len(c.arguments_json) > 7 for c in CALLS)  # every call really is split
    assert response.tool_calls == expected_calls()
    assert [json.loads(c.arguments) for c in response.tool_calls] == [c.arguments for c in CALLS]
    assert response.content == "Looking at all three."
    assert "".join(deltas) == "Looking at all three."
    assert response.finish_reason == "tool_calls"
    assert response.usage == Usage(prompt_tokens=2048, completion_tokens=77, cached_tokens=1920)


async def test_tool_calls_only(serve: Serve, http: httpx.AsyncClient) -> None:
    server = await serve(lambda _: Reply(tool_calls=CALLS[:2]), chunks=3)
    deltas: list[str] = []

    response = await openai(server, http).complete(streamed(tools=(CHECK,)), on_delta=deltas.append)

    assert response.content is None
    assert response.tool_calls == expected_calls()[:2]
    assert deltas == []


async def test_stream_keeps_the_connection_for_the_next_request(
    serve: Serve, http: httpx.AsyncClient
) -> None:
    server = await serve(lambda _: Reply(content=ANSWER))
    client = openai(server, http)

    first = await client.complete(streamed())
    second = await client.complete(streamed())

    assert first.content == second.content == ANSWER
    assert server.disconnects == 0


# -- cut streams ---------------------------------------------------------------------


async def test_cut_stream_is_retried_and_the_listener_starts_over(
    serve: Serve, http: httpx.AsyncClient
) -> None:
    answers = iter([Fault(cut_after=2), Reply(content=ANSWER)])
    server = await serve(lambda _: next(answers), chunks=3)
    deltas: list[str] = []

    response = await openai(server, http).complete(streamed(), on_delta=deltas.append)

    assert response.content == ANSWER
    assert len(server.requests) == 2
    assert deltas[:3] == [PARTIAL, PARTIAL, ""]
    assert "".join(deltas[3:]) == ANSWER
    assert "" not in deltas[3:]


async def test_always_cut_stream_is_unavailable_after_three_tries(
    serve: Serve, http: httpx.AsyncClient
) -> None:
    server = await serve(lambda _: Fault(cut_after=2))
    deltas: list[str] = []

    with pytest.raises(ModelUnavailableError) as caught:
        await openai(server, http).complete(streamed(), on_delta=deltas.append)

    assert len(server.requests) == 3
    assert deltas == [PARTIAL, PARTIAL, "", PARTIAL, PARTIAL, "", PARTIAL, PARTIAL]
    assert caught.value.model == "gpt-test"


async def test_cut_before_any_text_sends_no_reset(serve: Serve, http: httpx.AsyncClient) -> None:
    # Nothing was shown, so there is nothing to take back.
    answers = iter([Fault(cut_after=0), Reply(content="fine")])
    server = await serve(lambda _: next(answers))
    deltas: list[str] = []

    response = await openai(server, http).complete(streamed(), on_delta=deltas.append)

    assert response.content == "fine"
    assert len(server.requests) == 2
    assert "" not in deltas


# -- stopping a stream early ------------------------------------------------------------


@pytest.mark.parametrize("error", [Boom, ValueError, KeyError])
async def test_raising_listener_stops_the_stream(
    serve: Serve, http: httpx.AsyncClient, error: type[Exception]
) -> None:
    # A repeating stream goes on until the client leaves: far longer than the listener
    # lets it run.
    server = await serve(lambda _: Fault(repeat="ok ", cut_after=None))
    seen: list[str] = []

    def on_delta(text: str) -> None:
        seen.append(text)
        if len(seen) == 3:
            raise error("the listener gave up")

    with pytest.raises(error):
        await openai(server, http).complete(streamed(), on_delta=on_delta)

    assert seen == ["ok "] * 3  # nothing was read after the listener raised
    assert len(server.requests) == 1  # and nothing was retried
    await until(lambda: server.disconnects == 1)


async def test_cancelling_the_task_closes_the_stream(serve: Serve, http: httpx.AsyncClient) -> None:
    server = await serve(lambda _: Fault(repeat="ok ", cut_after=None))
    first = asyncio.Event()
    task = asyncio.create_task(
        openai(server, http).complete(streamed(), on_delta=lambda _: first.set())
    )

    await asyncio.wait_for(first.wait(), HANG_GUARD_S)
    task.cancel()

    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(server.requests) == 1
    await until(lambda: server.disconnects == 1)

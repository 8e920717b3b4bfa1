"""The Anthropic Messages adapter streaming: SSE events, cut streams, aborts.

Text deltas reach ``on_delta`` in order and tool inputs are assembled from
``input_json_delta`` pieces; a stream that breaks off (no ``message_stop``) or reports
``overloaded_error`` is retried with an empty "start over" delta; an ``on_delta`` that
raises, or a cancelled task, closes the HTTP response at once. A probe transport counts
response bodies still open, so "closed" is observed rather than assumed. The documented
event sequence is replayed verbatim by a bare aiohttp handler.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import httpx
import pytest
from aiohttp import web

from bot.agent.messages import ModelRequest, ToolSpec, UserMessage
from bot.emulator.model_server import ScriptedServer
from bot.emulator.scripted import Answer, Fault, Reply, ScriptedCall, ScriptedRequest, split
from bot.errors import ModelRequestError, ModelUnavailableError
from bot.llm.anthropic import AnthropicClient
from bot.llm.retry import RetryPolicy

HANG_GUARD_S = 5.0  # turns a hang into a failure; nothing measures time
TOOLS = (
    ToolSpec(
        name="check_host",
        description="Check a host's health.",
        parameters={"type": "object", "properties": {"host": {"type": "string"}}},
    ),
)

# Anthropic's documented streaming example for tool use (text, then a tool_use whose
# input arrives in input_json_delta pieces), event for event.
DOCUMENTED_EVENTS: list[tuple[str, str]] = [
    (
        "message_start",
        '{"type":"message_start","message":{"id":"msg_014p7gG3wDgGV9EUtLvnow3U",'
        '"type":"message","role":"assistant","model":"claude-sonnet-4-5",'
        '"stop_sequence":null,"usage":{"input_tokens":472,"output_tokens":2},'
        '"content":[],"stop_reason":null}}',
    ),
    (
        "content_block_start",
        '{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}',
    ),
    ("ping", '{"type": "ping"}'),
    (
        "content_block_delta",
        '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Okay"}}',
    ),
    (
        "content_block_delta",
        '{"type":"content_block_delta","index":0,'
        '"delta":{"type":"text_delta","text":", let\'s check the weather."}}',
    ),
    ("content_block_stop", '{"type":"content_block_stop","index":0}'),
    (
        "content_block_start",
        '{"type":"content_block_start","index":1,"content_block":{"type":"tool_use",'
        '"id":"toolu_01T1x1fJ34qAmk2tNTrN7Up6","name":"get_weather","input":{}}}',
    ),
    (
        "content_block_delta",
        '{"type":"content_block_delta","index":1,'
        '"delta":{"type":"input_json_delta","partial_json":""}}',
    ),
    (
        "content_block_delta",
        '{"type":"content_block_delta","index":1,'
        '"delta":{"type":"input_json_delta","partial_json":"{\\"location\\":"}}',
    ),
    (
        "content_block_delta",
        '{"type":"content_block_delta","index":1,'
        '"delta":{"type":"input_json_delta","partial_json":" \\"San Francisc"}}',
    ),
    (
        "content_block_delta",
        '{"type":"content_block_delta","index":1,'
        '"delta":{"type":"input_json_delta","partial_json":"o, CA\\", \\"unit\\": \\"fah"}}',
    ),
    (
        "content_block_delta",
        '{"type":"content_block_delta","index":1,'
        '"delta":{"type":"input_json_delta","partial_json":"renheit\\"}"}}',
    ),
    ("content_block_stop", '{"type":"content_block_stop","index":1}'),
    (
        "message_delta",
        '{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},'
        '"usage":{"output_tokens":89}}',
    ),
    ("message_stop", '{"type":"message_stop"}'),
]
DOCUMENTED_STREAM = "".join(f"event: {name}\ndata: {data}\n\n" for name, data in DOCUMENTED_EVENTS)

OVERLOADED_EVENT = (
    "event: error\n"
    'data: {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}\n\n'
)


class Boom(Exception):
    pass


class _Counted(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream, probe: Probe) -> None:
        self._inner = inner
        self._probe = probe

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            yield chunk

    async def aclose(self) -> None:
        self._probe.open -= 1
        await self._inner.aclose()


class Probe(httpx.AsyncBaseTransport):
    """The real transport, counting response bodies that are not closed yet."""

    def __init__(self) -> None:
        self._inner = httpx.AsyncHTTPTransport()
        self.open = 0
        self.responses = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._inner.handle_async_request(request)
        assert isinstance(response.stream, httpx.AsyncByteStream)
        self.open += 1
        self.responses += 1
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=_Counted(response.stream, self),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


def script(*answers: Answer) -> Callable[[ScriptedRequest], Answer]:
    """A policy giving ``answers`` in order; one more request fails the test."""
    pending = list(answers)

    def policy(_: ScriptedRequest) -> Answer:
        assert pending, "unexpected model request"
        return pending.pop(0)

    return policy


def make_request() -> ModelRequest:
    return ModelRequest(
        system="You are an SRE assistant.",
        tools=TOOLS,
        messages=[UserMessage(content="web-03 is at 95% CPU")],
        max_output_tokens=1024,
        stream=True,
    )


@pytest.fixture
def probe() -> Probe:
    return Probe()


@pytest.fixture
async def http(probe: Probe) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=probe, trust_env=False) as client:
        yield client


@pytest.fixture
async def server() -> AsyncIterator[ScriptedServer]:
    async with ScriptedServer(script(), chunks=4) as running:
        yield running


def make_client(base_url: str, http: httpx.AsyncClient) -> AnthropicClient:
    return AnthropicClient(
        model="claude-test", base_url=base_url, http=http, retry=RetryPolicy(base_s=0)
    )


@pytest.fixture
def client(server: ScriptedServer, http: httpx.AsyncClient) -> AnthropicClient:
    return make_client(server.root_url, http)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@asynccontextmanager
async def bare_server(
    handler: Handler, *, handler_cancellation: bool = False
) -> AsyncIterator[str]:
    """A one-route aiohttp server for hand-written answers; yields its base URL."""
    app = web.Application()
    app.router.add_post("/v1/messages", handler)
    runner = web.AppRunner(app, access_log=None, handler_cancellation=handler_cancellation)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


async def send_sse(request: web.Request, text: str, *, piece: int = 0) -> web.StreamResponse:
    """Write ``text`` as an event stream, in ``piece``-byte writes (0: one write)."""
    response = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await response.prepare(request)
    raw = text.encode()
    step = piece or len(raw)
    for start in range(0, len(raw), step):
        await response.write(raw[start : start + step])
    await response.write_eof()
    return response


# -- round trips ------------------------------------------------------------------


async def test_text_deltas_in_order_and_tool_input_assembled(
    server: ScriptedServer, client: AnthropicClient, probe: Probe
) -> None:
    content = "Checking web-03 and web-04 now."
    server.policy = script(
        Reply(
            content=content,
            tool_calls=[
                ScriptedCall("check_host", {"host": "web-03", "verbose": True}, id="toolu_1"),
                ScriptedCall("check_host", {"host": "web-04", "ports": [22, 443]}),
            ],
            prompt_tokens=500,
            completion_tokens=25,
            cached_tokens=300,
        )
    )
    deltas: list[str] = []
    response = await client.complete(make_request(), on_delta=deltas.append)
    assert server.requests[0].body["stream"] is True
    assert deltas == split(content, 4) and len(deltas) > 1
    assert response.content == content
    first, second = response.tool_calls
    assert (first.id, first.name) == ("toolu_1", "check_host")
    assert json.loads(first.arguments) == {"host": "web-03", "verbose": True}
    assert second.id.startswith("toolu_") and second.id != first.id
    assert json.loads(second.arguments) == {"host": "web-04", "ports": [22, 443]}
    assert response.finish_reason == "tool_use"
    # message_start: input 200 + cache read 300; message_delta: output 25 (cumulative)
    assert (response.usage.prompt_tokens, response.usage.cached_tokens) == (500, 300)
    assert response.usage.completion_tokens == 25
    assert probe.open == 0


@pytest.mark.parametrize("piece", [0, 7])
async def test_documented_stream(http: httpx.AsyncClient, probe: Probe, piece: int) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        return await send_sse(request, DOCUMENTED_STREAM, piece=piece)

    deltas: list[str] = []
    async with bare_server(handler) as url:
        response = await make_client(url, http).complete(make_request(), on_delta=deltas.append)
    assert deltas == ["Okay", ", let's check the weather."]
    assert response.content == "Okay, let's check the weather."
    (call,) = response.tool_calls
    assert (call.id, call.name) == ("toolu_01T1x1fJ34qAmk2tNTrN7Up6", "get_weather")
    assert json.loads(call.arguments) == {"location": "San Francisco, CA", "unit": "fahrenheit"}
    assert response.finish_reason == "tool_use"
    assert response.model == "claude-sonnet-4-5"
    assert response.usage.prompt_tokens == 472
    assert response.usage.completion_tokens == 89
    assert probe.open == 0


async def test_message_delta_usage_is_cumulative(http: httpx.AsyncClient, probe: Probe) -> None:
    # Newer streams restate the input side in message_delta: the latest figures win.
    late_usage = (
        '"usage":{"input_tokens":40,"cache_read_input_tokens":400,'
        '"cache_creation_input_tokens":32,"output_tokens":89}}'
    )
    text = DOCUMENTED_STREAM.replace('"usage":{"output_tokens":89}}', late_usage)

    async def handler(request: web.Request) -> web.StreamResponse:
        return await send_sse(request, text)

    async with bare_server(handler) as url:
        response = await make_client(url, http).complete(make_request())
    assert response.usage.prompt_tokens == 40 + 400 + 32
    assert response.usage.cached_tokens == 400
    assert response.usage.completion_tokens == 89


# -- broken streams ---------------------------------------------------------------


async def test_cut_stream_is_retried_from_the_start(
    server: ScriptedServer, client: AnthropicClient
) -> None:
    server.policy = script(Fault(cut_after=2), Reply(content="recovered"))
    deltas: list[str] = []
    response = await client.complete(make_request(), on_delta=deltas.append)
    assert response.content == "recovered"
    # What streamed before the cut is declared void by an empty delta.
    assert deltas == ["partial answer ", "partial answer ", "", *split("recovered", 4)]
    assert len(server.requests) == 2


async def test_stream_that_always_breaks_off(
    server: ScriptedServer, client: AnthropicClient
) -> None:
    server.policy = script(*[Fault(cut_after=1)] * 3)
    deltas: list[str] = []
    with pytest.raises(ModelUnavailableError):
        await client.complete(make_request(), on_delta=deltas.append)
    assert deltas == ["partial answer ", "", "partial answer ", "", "partial answer "]
    assert len(server.requests) == 3


async def test_stream_without_message_stop_is_transient(
    http: httpx.AsyncClient, probe: Probe
) -> None:
    ended_early = DOCUMENTED_STREAM[: DOCUMENTED_STREAM.index("event: message_stop")]
    seen: list[int] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        seen.append(1)
        return await send_sse(request, ended_early)

    async with bare_server(handler) as url:
        with pytest.raises(ModelUnavailableError, match="ended early"):
            await make_client(url, http).complete(make_request())
    assert len(seen) == 3


async def test_connection_lost_after_message_stop_keeps_the_answer(
    http: httpx.AsyncClient, probe: Probe
) -> None:
    seen: list[int] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        seen.append(1)
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        await response.write(DOCUMENTED_STREAM.encode())
        assert request.transport is not None
        request.transport.close()  # no end of the chunked body
        return response

    async with bare_server(handler) as url:
        response = await make_client(url, http).complete(make_request())
    assert response.tool_calls[0].name == "get_weather"
    assert len(seen) == 1


async def test_overloaded_error_event_is_retried(http: httpx.AsyncClient, probe: Probe) -> None:
    first = DOCUMENTED_STREAM.split("\n\n")[0] + "\n\n" + OVERLOADED_EVENT
    bodies = [first, DOCUMENTED_STREAM]

    async def handler(request: web.Request) -> web.StreamResponse:
        return await send_sse(request, bodies.pop(0))

    async with bare_server(handler) as url:
        response = await make_client(url, http).complete(make_request())
    assert bodies == []
    assert response.tool_calls[0].name == "get_weather"


async def test_invalid_request_error_event_fails(http: httpx.AsyncClient, probe: Probe) -> None:
    seen: list[int] = []
    event = {"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}}

    async def handler(request: web.Request) -> web.StreamResponse:
        seen.append(1)
        return await send_sse(request, f"event: error\ndata: {json.dumps(event)}\n\n")

    async with bare_server(handler) as url:
        with pytest.raises(ModelRequestError) as info:
            await make_client(url, http).complete(make_request())
    assert type(info.value) is ModelRequestError and info.value.status == 400
    assert len(seen) == 1


async def test_http_error_before_the_stream_is_retried(
    server: ScriptedServer, client: AnthropicClient
) -> None:
    server.policy = script(Fault(status=529, message="Overloaded"), Reply(content="ok"))
    deltas: list[str] = []
    response = await client.complete(make_request(), on_delta=deltas.append)
    assert response.content == "ok"
    assert deltas == ["o", "k"]  # nothing had streamed: no "start over"
    assert len(server.requests) == 2


# -- aborts -----------------------------------------------------------------------


@pytest.mark.parametrize("error", [Boom("repetition"), ValueError("not a model error")])
async def test_raising_sink_closes_the_stream(
    server: ScriptedServer, client: AnthropicClient, probe: Probe, error: Exception
) -> None:
    server.policy = script(Fault(repeat="again ", cut_after=50))
    deltas: list[str] = []

    def sink(text: str) -> None:
        deltas.append(text)
        if len(deltas) == 3:
            raise error

    with pytest.raises(type(error)) as info:
        await client.complete(make_request(), on_delta=sink)
    assert info.value is error  # the sink's own exception, not a translated one
    assert deltas == ["again "] * 3  # nothing read after the abort
    assert len(server.requests) == 1  # not retried
    assert probe.responses == 1 and probe.open == 0


async def test_cancelling_closes_the_stream(http: httpx.AsyncClient, probe: Probe) -> None:
    opening = DOCUMENTED_STREAM.split("event: content_block_stop")[0]
    gone = asyncio.Event()

    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        await response.write(opening.encode())
        try:
            await asyncio.Event().wait()  # a model that goes quiet mid-answer
        except asyncio.CancelledError:  # aiohttp cancels the handler when the peer leaves
            gone.set()
            raise
        return response

    first_delta = asyncio.Event()
    async with bare_server(handler, handler_cancellation=True) as url:
        client = make_client(url, http)
        task = asyncio.create_task(
            client.complete(make_request(), on_delta=lambda _: first_delta.set())
        )
        async with asyncio.timeout(HANG_GUARD_S):
            await first_delta.wait()
        assert probe.open == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert probe.open == 0  # closed by the time the cancellation arrived
        async with asyncio.timeout(HANG_GUARD_S):
            await gone.wait()  # and the server saw the connection go away

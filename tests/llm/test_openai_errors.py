"""Failures of an OpenAI-compatible endpoint, over real HTTP: classified, retried or not.

Transient answers (408, 409, 425, 429, 5xx, 529, timeouts, refused connections) are
retried inside the client, at most three requests, honouring ``Retry-After`` (seconds or
an HTTP date) unless it is above the policy's cap or would pass the caller's deadline;
then ``ModelUnavailableError``. Auth errors (401/403), quota exhaustion, context overflow
(``context_length_exceeded`` or a vLLM-style message) and malformed responses are raised
after one request, with the provider's message kept.
"""

from __future__ import annotations

import asyncio
import email.utils
from typing import Any

import httpx
import pytest

from bot.agent.messages import ModelRequest, UserMessage
from bot.emulator.model_server import ScriptedServer
from bot.emulator.scripted import Fault, Reply, ScriptedRequest
from bot.errors import (
    ContextOverflowError,
    ModelAuthError,
    ModelRequestError,
    ModelUnavailableError,
)
from bot.llm.openai import OpenAIClient
from bot.llm.retry import RetryPolicy

from .conftest import FAST_RETRY, HANG_GUARD_S, Serve

VLLM_OVERFLOW = (
    "This model's maximum context length is 4096 tokens. However, you requested 5120 "
    "tokens (4096 in the messages, 1024 in the completion). Please reduce the length of "
    "the messages or completion."
)
SLOW = RetryPolicy(base_s=1e6, max_backoff_s=1e6)
"""Backoff up to 11 days: any retry that happens in a test came from ``Retry-After``."""


def openai(server: ScriptedServer, http: httpx.AsyncClient, **kw: Any) -> OpenAIClient:
    kw.setdefault("model", "gpt-test")
    kw.setdefault("retry", FAST_RETRY)
    return OpenAIClient(base_url=server.base_url, http=http, **kw)


def ask(*, stream: bool = False, time_left: float | None = None) -> ModelRequest:
    return ModelRequest(
        system="You are an SRE assistant.",
        tools=(),
        messages=[UserMessage(content="web-03 is at 95% CPU")],
        max_output_tokens=256,
        stream=stream,
        time_left=time_left,
    )


def script(*answers: Fault | Reply) -> Any:
    """A policy answering in order (and failing the test on one request too many)."""
    queue = list(answers)

    def policy(_: ScriptedRequest) -> Fault | Reply:
        assert queue, "one request more than scripted"
        return queue.pop(0)

    return policy


class Canned(ScriptedServer):
    """Answers every non-streamed request with a fixed 200 body."""

    body: Any = None

    def openai_body(self, scripted: ScriptedRequest, reply: Reply) -> Any:
        return self.body


# -- transient: retried ----------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
async def test_429_retry_after_then_success(
    serve: Serve, http: httpx.AsyncClient, stream: bool
) -> None:
    server = await serve(
        script(
            Fault(status=429, code="rate_limit_exceeded", retry_after="0"),
            Reply(content="web-03 is fine"),
        )
    )
    # A jittered backoff would almost surely end past the 60 s left and give up: only
    # honouring ``Retry-After: 0`` makes the retry happen.
    response = await openai(server, http, retry=SLOW).complete(ask(stream=stream, time_left=60.0))

    assert response.content == "web-03 is fine"
    assert len(server.requests) == 2


async def test_retry_after_http_date_in_the_past(serve: Serve, http: httpx.AsyncClient) -> None:
    past = email.utils.formatdate(0, usegmt=True)  # Thu, 01 Jan 1970 00:00:00 GMT
    server = await serve(script(Fault(status=503, retry_after=past), Reply(content="ok")))
    response = await openai(server, http, retry=SLOW).complete(ask(time_left=60.0))

    assert response.content == "ok"
    assert len(server.requests) == 2


@pytest.mark.parametrize("status", [408, 409, 425, 429, 500, 502, 503, 529])
async def test_transient_status_three_requests_then_unavailable(
    serve: Serve, http: httpx.AsyncClient, status: int
) -> None:
    server = await serve(lambda _: Fault(status=status, message="upstream is struggling"))

    with pytest.raises(ModelUnavailableError) as caught:
        await openai(server, http).complete(ask())

    assert len(server.requests) == 3
    assert caught.value.status == status
    assert caught.value.model == "gpt-test"
    assert "upstream is struggling" in str(caught.value)


async def test_500_three_times_streaming(serve: Serve, http: httpx.AsyncClient) -> None:
    server = await serve(lambda _: Fault(status=500))
    deltas: list[str] = []

    with pytest.raises(ModelUnavailableError):
        await openai(server, http).complete(ask(stream=True), on_delta=deltas.append)

    assert len(server.requests) == 3
    assert deltas == []  # nothing streamed, nothing to take back


async def test_refused_connection_is_unavailable(serve: Serve, http: httpx.AsyncClient) -> None:
    server = await serve(lambda _: Reply(content="never"))
    client = openai(server, http)
    await server.stop()  # the port now refuses connections

    with pytest.raises(ModelUnavailableError) as caught:
        await client.complete(ask())

    assert "connection failed" in str(caught.value)
    assert server.requests == []


async def test_request_timeout_is_unavailable(serve: Serve, http: httpx.AsyncClient) -> None:
    release = asyncio.Event()

    async def never_answers(_: ScriptedRequest) -> Reply:
        await release.wait()
        return Reply(content="too late")

    server = await serve(never_answers)
    client = openai(server, http, request_timeout_s=0.05)
    try:
        async with asyncio.timeout(HANG_GUARD_S):
            with pytest.raises(ModelUnavailableError) as caught:
                await client.complete(ask())
    finally:
        release.set()

    assert "timed out" in str(caught.value)
    # How many requests got as far as the server before their timeout is up to the
    # scheduler; the client never makes more than three.
    assert len(server.requests) <= 3


# -- transient, but waiting cannot help --------------------------------------------------


async def test_deadline_shorter_than_retry_after(serve: Serve, http: httpx.AsyncClient) -> None:
    server = await serve(lambda _: Fault(status=429, retry_after="30"))
    patient = RetryPolicy(base_s=0.0, max_retry_after_s=3600.0)  # only the deadline stops it

    async with asyncio.timeout(HANG_GUARD_S):
        with pytest.raises(ModelUnavailableError) as caught:
            await openai(server, http, retry=patient).complete(ask(time_left=1.0))

    assert len(server.requests) == 1
    assert caught.value.retry_after == 30.0


async def test_retry_after_above_the_cap(serve: Serve, http: httpx.AsyncClient) -> None:
    server = await serve(lambda _: Fault(status=503, retry_after="120"))
    capped = RetryPolicy(base_s=0.0, max_retry_after_s=60.0)

    async with asyncio.timeout(HANG_GUARD_S):
        with pytest.raises(ModelUnavailableError) as caught:
            await openai(server, http, retry=capped).complete(ask())

    assert len(server.requests) == 1
    assert caught.value.retry_after == 120.0


# -- not transient: one request --------------------------------------------------------


@pytest.mark.parametrize("status", [401, 403])
async def test_auth_error_is_not_retried(
    serve: Serve, http: httpx.AsyncClient, status: int
) -> None:
    provider = "Incorrect API key provided: sk-abc***xyz. You can find your API key at ..."
    server = await serve(lambda _: Fault(status=status, message=provider, code="invalid_api_key"))

    with pytest.raises(ModelAuthError) as caught:
        await openai(server, http, api_key="sk-abc-wrong").complete(ask())

    assert len(server.requests) == 1
    assert caught.value.status == status
    assert provider in str(caught.value)
    assert "sk-abc-wrong" not in str(caught.value)


async def test_insufficient_quota_is_not_retried(serve: Serve, http: httpx.AsyncClient) -> None:
    quota = "You exceeded your current quota, please check your plan and billing details."
    server = await serve(lambda _: Fault(status=429, message=quota, code="insufficient_quota"))

    with pytest.raises(ModelRequestError) as caught:
        await openai(server, http).complete(ask())

    assert not isinstance(caught.value, ModelUnavailableError | ModelAuthError)
    assert len(server.requests) == 1
    assert quota in str(caught.value)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    "fault",
    [
        Fault(
            status=400,
            code="context_length_exceeded",
            message="This model's maximum context length is 128000 tokens.",
        ),
        Fault(status=400, message=VLLM_OVERFLOW),
    ],
    ids=["openai-code", "vllm-message"],
)
async def test_context_overflow(
    serve: Serve, http: httpx.AsyncClient, fault: Fault, stream: bool
) -> None:
    server = await serve(lambda _: fault)

    with pytest.raises(ContextOverflowError) as caught:
        await openai(server, http).complete(ask(stream=stream))

    assert len(server.requests) == 1
    assert caught.value.status == 400
    assert fault.message in str(caught.value)


@pytest.mark.parametrize("stream", [False, True])
async def test_malformed_json_body(serve: Serve, http: httpx.AsyncClient, stream: bool) -> None:
    server = await serve(lambda _: Fault(malformed=True))  # 200 with "{not json"

    with pytest.raises(ModelRequestError) as caught:
        await openai(server, http).complete(ask(stream=stream))

    assert type(caught.value) is ModelRequestError
    assert "malformed" in str(caught.value)
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    "body",
    [
        {"id": "chatcmpl-1", "object": "chat.completion", "choices": []},
        {"id": "chatcmpl-1", "object": "chat.completion"},
        [],
        {"choices": [None]},
        {"choices": [{"message": "just text"}]},
        {"choices": [{"message": {"tool_calls": [{"function": "check"}]}}]},
    ],
    ids=["empty-choices", "no-choices", "list", "null-choice", "text-message", "text-function"],
)
async def test_wrong_shape_is_malformed(serve: Serve, http: httpx.AsyncClient, body: Any) -> None:
    server = await serve(lambda _: Reply(content="unused"), server_class=Canned)
    assert isinstance(server, Canned)
    server.body = body

    with pytest.raises(ModelRequestError) as caught:
        await openai(server, http).complete(ask())

    assert type(caught.value) is ModelRequestError
    assert "malformed" in str(caught.value)
    assert len(server.requests) == 1


async def test_error_object_in_a_200_is_an_error(serve: Serve, http: httpx.AsyncClient) -> None:
    # Some routers answer 200 with an error object when the upstream model failed.
    server = await serve(lambda _: Reply(content="unused"), server_class=Canned)
    assert isinstance(server, Canned)
    server.body = {"error": {"message": "upstream model overloaded", "code": 503}}

    with pytest.raises(ModelUnavailableError) as caught:
        await openai(server, http).complete(ask())

    assert "upstream model overloaded" in str(caught.value)
    assert len(server.requests) == 3

"""A streamed request answered with something that is not an event stream.

A server that ignores ``stream`` answers with a whole JSON completion: it is used as
is. A proxy's HTML page under a 200 is malformed (not transient: no retries).
"""

from __future__ import annotations

import httpx
import pytest
from aiohttp import web

from bot.agent import ModelRequest, UserMessage
from bot.emulator.model_server import ScriptedServer
from bot.emulator.scripted import Reply, ScriptedRequest
from bot.errors import ModelRequestError
from bot.llm.openai import OpenAIClient

from .conftest import FAST_RETRY, Serve


class HtmlServer(ScriptedServer):
    """Answers every chat completion with a 200 HTML page."""

    async def _openai(self, request: web.Request) -> web.StreamResponse:
        await self.decide(request, "openai")
        return web.Response(text="<html>login required</html>", content_type="text/html")


class WholeJsonServer(ScriptedServer):
    """Ignores ``stream`` and answers with a whole completion."""

    async def _openai(self, request: web.Request) -> web.StreamResponse:
        scripted, answer = await self.decide(request, "openai")
        assert isinstance(answer, Reply)
        return web.json_response(self.openai_body(scripted, answer))


def request() -> ModelRequest:
    return ModelRequest(
        system="s",
        tools=(),
        messages=[UserMessage(content="hi")],
        max_output_tokens=50,
        stream=True,
    )


def hello(_: ScriptedRequest) -> Reply:
    return Reply(content="hello there")


async def test_html_under_200_is_malformed_and_not_retried(
    serve: Serve, http: httpx.AsyncClient
) -> None:
    server = await serve(hello, server_class=HtmlServer)
    client = OpenAIClient(model="m", base_url=server.base_url, http=http, retry=FAST_RETRY)

    with pytest.raises(ModelRequestError, match="not an event stream"):
        await client.complete(request(), on_delta=lambda _: None)
    assert len(server.requests) == 1


async def test_whole_json_answer_to_a_stream_request_is_used(
    serve: Serve, http: httpx.AsyncClient
) -> None:
    server = await serve(hello, server_class=WholeJsonServer)
    client = OpenAIClient(model="m", base_url=server.base_url, http=http, retry=FAST_RETRY)
    deltas: list[str] = []

    response = await client.complete(request(), on_delta=deltas.append)

    assert response.content == "hello there"
    assert deltas == ["hello there"]

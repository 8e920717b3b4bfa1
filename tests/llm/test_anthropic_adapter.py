"""The Anthropic Messages adapter without streaming: request shape, answers, errors.

Real HTTP over loopback against the scripted model server (its Anthropic rendering), plus
one hand-written body in the documented shape served by a bare aiohttp handler, so the
parser is checked against the documentation and not only against our own server.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

import httpx
import pytest
from aiohttp import web

from bot.agent.messages import (
    AnyMessage,
    AssistantMessage,
    ModelRequest,
    ToolCall,
    ToolMessage,
    ToolSpec,
    UserMessage,
)
from bot.emulator.model_server import ScriptedServer
from bot.emulator.scripted import Answer, Fault, Reply, ScriptedCall, ScriptedRequest
from bot.errors import (
    ContextOverflowError,
    ModelAuthError,
    ModelRequestError,
    ModelUnavailableError,
)
from bot.llm.anthropic import AnthropicClient
from bot.llm.retry import RetryPolicy

SYSTEM = "You are an SRE assistant."
TOOLS = (
    ToolSpec(
        name="check_host",
        description="Check a host's health.",
        parameters={"type": "object", "properties": {"host": {"type": "string"}}},
    ),
    ToolSpec(
        name="restart_service",
        description="Restart a systemd unit.",
        parameters={
            "type": "object",
            "properties": {"host": {"type": "string"}, "service": {"type": "string"}},
            "required": ["host", "service"],
        },
    ),
)


def script(*answers: Answer) -> Callable[[ScriptedRequest], Answer]:
    """A policy giving ``answers`` in order; one more request fails the test."""
    pending = list(answers)

    def policy(_: ScriptedRequest) -> Answer:
        assert pending, "unexpected model request"
        return pending.pop(0)

    return policy


def make_request(
    messages: Iterable[AnyMessage] = (UserMessage(content="web-03 is at 95% CPU"),),
    *,
    tools: tuple[ToolSpec, ...] = TOOLS,
    system: str = SYSTEM,
) -> ModelRequest:
    return ModelRequest(system=system, tools=tools, messages=list(messages), max_output_tokens=1024)


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(trust_env=False) as client:
        yield client


@pytest.fixture
async def server() -> AsyncIterator[ScriptedServer]:
    async with ScriptedServer(script()) as running:
        yield running


@pytest.fixture
def client(server: ScriptedServer, http: httpx.AsyncClient) -> AnthropicClient:
    return AnthropicClient(
        model="claude-test",
        base_url=server.root_url,
        http=http,
        api_key="sk-ant-test",
        retry=RetryPolicy(base_s=0),
    )


# -- the request ------------------------------------------------------------------


@pytest.mark.parametrize("suffix", ["", "/", "/v1", "/v1/"])
async def test_url_and_headers(
    server: ScriptedServer, http: httpx.AsyncClient, suffix: str
) -> None:
    server.policy = script(Reply(content="ok"))
    client = AnthropicClient(
        model="claude-test", base_url=server.root_url + suffix, http=http, api_key="sk-ant-test"
    )
    await client.complete(make_request())
    (seen,) = server.requests
    assert seen.path == "/v1/messages"
    assert seen.headers["x-api-key"] == "sk-ant-test"
    assert seen.headers["anthropic-version"] == "2023-06-01"
    assert seen.headers["content-type"] == "application/json"
    assert "authorization" not in seen.headers


async def test_stable_prefix_is_marked_for_the_prompt_cache(
    server: ScriptedServer, http: httpx.AsyncClient
) -> None:
    server.policy = script(Reply(content="one"), Reply(content="two"))
    client = AnthropicClient(
        model="claude-test",
        base_url=server.root_url,
        http=http,
        temperature=0.2,
    )
    await client.complete(make_request())
    await client.complete(make_request([UserMessage(content="something else")]))
    first, second = (r.body for r in server.requests)
    assert first["model"] == "claude-test"
    assert first["max_tokens"] == 1024
    assert first["temperature"] == 0.2
    assert "stream" not in first
    assert first["system"] == [
        {"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}
    ]
    assert first["tools"] == [
        {
            "name": "check_host",
            "description": "Check a host's health.",
            "input_schema": TOOLS[0].parameters,
        },
        {
            "name": "restart_service",
            "description": "Restart a systemd unit.",
            "input_schema": TOOLS[1].parameters,
            "cache_control": {"type": "ephemeral"},
        },
    ]
    assert first["tool_choice"] == {"type": "auto"}
    assert (second["system"], second["tools"]) == (first["system"], first["tools"])


async def test_temperature_is_kept_in_anthropics_range(
    server: ScriptedServer, http: httpx.AsyncClient
) -> None:
    # One LLM_TEMPERATURE serves the whole chain; OpenAI allows up to 2, Anthropic 1.
    server.policy = script(Reply(content="ok"))
    client = AnthropicClient(
        model="claude-test", base_url=server.root_url, http=http, temperature=1.5
    )
    await client.complete(make_request())
    assert server.requests[0].body["temperature"] == 1.0


async def test_no_tools_means_no_tool_choice(
    server: ScriptedServer, client: AnthropicClient
) -> None:
    server.policy = script(Reply(content="summary"))
    await client.complete(make_request(tools=(), system=""))
    body = server.requests[0].body
    assert "tools" not in body and "tool_choice" not in body and "system" not in body


async def test_roles_alternate_and_tool_results_merge(
    server: ScriptedServer, client: AnthropicClient
) -> None:
    server.policy = script(Reply(content="done"))
    history: list[AnyMessage] = [
        UserMessage(content="web-03 is at 95% CPU"),
        UserMessage(content="<@U1>: also web-04"),  # injected before the first call
        AssistantMessage(
            content="Checking both hosts.",
            tool_calls=(
                ToolCall(id="toolu_a", name="check_host", arguments='{"host": "web-03"}'),
                ToolCall(id="call.b:1", name="check_host", arguments='{"host": "web-04"}'),
            ),
        ),
        ToolMessage(tool_call_id="toolu_a", name="check_host", content="load 7.9"),
        ToolMessage(
            tool_call_id="call.b:1", name="check_host", content="Error: timeout", is_error=True
        ),
        UserMessage(content="<@U2>: web-04 is being rebooted"),
        AssistantMessage(
            tool_calls=(ToolCall(id="toolu_c", name="restart_service", arguments='{"host": '),)
        ),
        ToolMessage(tool_call_id="toolu_c", name="restart_service", content="", is_error=True),
    ]
    await client.complete(make_request(history))
    messages = server.requests[0].body["messages"]
    assert messages == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "web-03 is at 95% CPU"},
                {"type": "text", "text": "<@U1>: also web-04"},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking both hosts."},
                {
                    "type": "tool_use",
                    "id": "toolu_a",
                    "name": "check_host",
                    "input": {"host": "web-03"},
                },
                # Anthropic allows [A-Za-z0-9_-] only: both sides of the pair map alike.
                {
                    "type": "tool_use",
                    "id": "call_b_1",
                    "name": "check_host",
                    "input": {"host": "web-04"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_a", "content": "load 7.9"},
                {
                    "type": "tool_result",
                    "tool_use_id": "call_b_1",
                    "content": "Error: timeout",
                    "is_error": True,
                },
                {"type": "text", "text": "<@U2>: web-04 is being rebooted"},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": "toolu_c",
                    "name": "restart_service",
                    "input": {"_raw": '{"host": '},  # not JSON: kept, not lost
                }
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_c", "is_error": True}],
        },
    ]


async def test_a_lone_user_message_is_plain_text(
    server: ScriptedServer, client: AnthropicClient
) -> None:
    server.policy = script(Reply(content="ok"))
    history = [
        UserMessage(content="web-03 is at 95% CPU"),
        AssistantMessage(content="   "),  # nothing to send: left out, so the users merge
        UserMessage(content="any news?"),
        AssistantMessage(content="Looking."),
        UserMessage(content="thanks"),
    ]
    await client.complete(make_request(history))
    assert server.requests[0].body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "web-03 is at 95% CPU"},
                {"type": "text", "text": "any news?"},
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "Looking."}]},
        {"role": "user", "content": "thanks"},
    ]


# -- the answer -------------------------------------------------------------------


async def test_text_and_two_tool_calls(server: ScriptedServer, client: AnthropicClient) -> None:
    server.policy = script(
        Reply(
            content="Two hosts to check.",
            tool_calls=[
                ScriptedCall("check_host", {"host": "web-03"}, id="toolu_1"),
                ScriptedCall("restart_service", {"host": "web-04", "service": "nginx"}),
            ],
            prompt_tokens=1200,
            completion_tokens=40,
            cached_tokens=1000,
        )
    )
    response = await client.complete(make_request())
    assert response.content == "Two hosts to check."
    first, second = response.tool_calls
    assert (first.id, first.name, json.loads(first.arguments)) == (
        "toolu_1",
        "check_host",
        {"host": "web-03"},
    )
    assert second.name == "restart_service" and second.id.startswith("toolu_")
    assert json.loads(second.arguments) == {"host": "web-04", "service": "nginx"}
    assert response.finish_reason == "tool_use"
    assert response.model == "claude-test"
    # input_tokens 200 + cache_read_input_tokens 1000 + cache_creation_input_tokens 0
    assert response.usage.prompt_tokens == 1200
    assert response.usage.cached_tokens == 1000
    assert response.usage.completion_tokens == 40
    assert response.usage.paid == 240


async def test_documented_response_shape(http: httpx.AsyncClient) -> None:
    """The body from Anthropic's tool-use documentation, with every usage field set."""
    documented = {
        "id": "msg_01Aq9w938a90dw8q",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [
            {"type": "text", "text": "I'll check the current weather in San Francisco for you."},
            {
                "type": "tool_use",
                "id": "toolu_01A09q90qw90lq917835lq9",
                "name": "get_weather",
                "input": {"location": "San Francisco, CA", "unit": "celsius"},
            },
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 21,
            "cache_creation_input_tokens": 188086,
            "cache_read_input_tokens": 1500,
            "output_tokens": 393,
        },
    }
    seen: list[dict[str, Any]] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(await request.json())
        return web.json_response(documented)

    app = web.Application()
    app.router.add_post("/v1/messages", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        port = runner.addresses[0][1]
        client = AnthropicClient(
            model="claude-sonnet-4-5", base_url=f"http://127.0.0.1:{port}", http=http
        )
        response = await client.complete(make_request())
    finally:
        await runner.cleanup()
    assert len(seen) == 1
    assert response.content == "I'll check the current weather in San Francisco for you."
    (call,) = response.tool_calls
    assert call.id == "toolu_01A09q90qw90lq917835lq9"
    assert call.name == "get_weather"
    assert json.loads(call.arguments) == {"location": "San Francisco, CA", "unit": "celsius"}
    assert response.finish_reason == "tool_use"
    assert response.model == "claude-sonnet-4-5"
    assert response.usage.prompt_tokens == 21 + 188086 + 1500
    assert response.usage.cached_tokens == 1500
    assert response.usage.completion_tokens == 393


# -- errors -----------------------------------------------------------------------


async def test_overloaded_then_success(server: ScriptedServer, client: AnthropicClient) -> None:
    server.policy = script(
        Fault(status=529, message="Overloaded"),
        Fault(status=429, code="rate_limit_error", message="slow down", retry_after="0"),
        Reply(content="ok"),
    )
    response = await client.complete(make_request())
    assert response.content == "ok"
    assert len(server.requests) == 3


async def test_overloaded_every_time(server: ScriptedServer, client: AnthropicClient) -> None:
    server.policy = script(*[Fault(status=529, message="Overloaded")] * 3)
    with pytest.raises(ModelUnavailableError) as info:
        await client.complete(make_request())
    assert info.value.status == 529
    assert "overloaded_error" in str(info.value)
    assert len(server.requests) == 3


async def test_dropped_connection_is_transient(
    server: ScriptedServer, client: AnthropicClient
) -> None:
    server.policy = script(Fault(cut_after=0), Reply(content="ok"))
    assert (await client.complete(make_request())).content == "ok"
    assert len(server.requests) == 2


async def test_bad_key_is_not_retried(server: ScriptedServer, client: AnthropicClient) -> None:
    server.policy = script(
        Fault(status=401, code="authentication_error", message="invalid x-api-key")
    )
    with pytest.raises(ModelAuthError) as info:
        await client.complete(make_request())
    assert info.value.status == 401
    assert "invalid x-api-key" in str(info.value)
    assert len(server.requests) == 1


async def test_prompt_too_long_is_context_overflow(
    server: ScriptedServer, client: AnthropicClient
) -> None:
    server.policy = script(
        Fault(
            status=400,
            code="invalid_request_error",
            message="prompt is too long: 208310 tokens > 200000 maximum",
        )
    )
    with pytest.raises(ContextOverflowError):
        await client.complete(make_request())
    assert len(server.requests) == 1


async def test_other_bad_request_fails(server: ScriptedServer, client: AnthropicClient) -> None:
    server.policy = script(
        Fault(status=400, code="invalid_request_error", message="tools.0.name: invalid")
    )
    with pytest.raises(ModelRequestError) as info:
        await client.complete(make_request())
    assert type(info.value) is ModelRequestError
    assert len(server.requests) == 1


async def test_body_that_is_not_json_fails(server: ScriptedServer, client: AnthropicClient) -> None:
    server.policy = script(Fault(malformed=True))
    with pytest.raises(ModelRequestError, match="malformed"):
        await client.complete(make_request())
    assert len(server.requests) == 1

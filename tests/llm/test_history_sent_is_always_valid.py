"""The history sent to a provider is always valid, even one stored by an older version.

A thread poisoned before the core sanitised malformed calls still holds assistant
messages whose arguments are not a JSON object or whose tool name a provider refuses.
The renderers send ``{}`` (Anthropic: ``{"_raw": …}``) and the ``invalid_tool_name``
placeholder instead, so the strict scripted server, refusing what vLLM and OpenAI
refuse with a 400, accepts the request. Without the strict mode's 400 the bug stays
invisible; with it, a 400 is a terminal ``ModelRequestError``.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from bot.agent.messages import (
    AnyMessage,
    AssistantMessage,
    ModelRequest,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from bot.emulator.model_server import ScriptedServer
from bot.emulator.scripted import Reply, ScriptedRequest
from bot.errors import ModelRequestError
from bot.llm import anthropic as anthropic_module
from bot.llm import openai as openai_module
from bot.llm.anthropic import AnthropicClient
from bot.llm.openai import OpenAIClient

from .conftest import FAST_RETRY, Serve

PLACEHOLDER = "invalid_tool_name"

BAD_ARGUMENTS = ['{"host": "web-0', "check web-03", "[1]", '"x"', "null", "", "  "]
BAD_NAMES = ["x" * 200, "check host", "functions.check", "", "chéck"]
ARGUMENT_IDS = ["cut-off", "plain-text", "list", "string", "null", "empty", "blank"]
NAME_IDS = ["200-chars", "spaces", "dotted", "empty", "non-ascii"]


def legacy(name: str, arguments: str) -> tuple[AnyMessage, ...]:
    """A history as an older version stored it: the call as the model wrote it."""
    return (
        UserMessage(content="web-03 is at 95% CPU"),
        AssistantMessage(
            content="Checking.", tool_calls=(ToolCall(id="c1", name=name, arguments=arguments),)
        ),
        ToolMessage(
            tool_call_id="c1", name=name, content="Error: invalid arguments", is_error=True
        ),
        AssistantMessage(content="Sorry, my call was cut off."),
        UserMessage(content="and now?"),
    )


def request(messages: tuple[AnyMessage, ...]) -> ModelRequest:
    return ModelRequest(system="sys", tools=(), messages=messages, max_output_tokens=100)


def answer_ok(_: ScriptedRequest) -> Reply:
    return Reply(content="ok")


async def strict(serve: Serve) -> ScriptedServer:
    server = await serve(answer_ok)
    server.strict = True
    return server


def openai_calls(body: bytes) -> list[dict[str, Any]]:
    data = json.loads(body)
    return [c for m in data["messages"] for c in m.get("tool_calls") or ()]


# -- OpenAI --------------------------------------------------------------------------------


@pytest.mark.parametrize("arguments", BAD_ARGUMENTS, ids=ARGUMENT_IDS)
async def test_openai_sends_an_empty_object_for_arguments_that_are_not_one(
    http: httpx.AsyncClient, arguments: str
) -> None:
    client = OpenAIClient(model="m", base_url="http://127.0.0.1:9/v1", http=http)

    (call,) = openai_calls(client.body(request(legacy("check", arguments))))

    assert call["function"] == {"name": "check", "arguments": "{}"}
    assert call["id"] == "c1"


@pytest.mark.parametrize("name", BAD_NAMES, ids=NAME_IDS)
async def test_openai_sends_the_placeholder_for_a_name_it_would_refuse(
    http: httpx.AsyncClient, name: str
) -> None:
    client = OpenAIClient(model="m", base_url="http://127.0.0.1:9/v1", http=http)

    (call,) = openai_calls(client.body(request(legacy(name, '{"host":"web-03"}'))))

    assert call["function"] == {"name": PLACEHOLDER, "arguments": '{"host":"web-03"}'}


def test_openai_sends_well_formed_calls_as_written() -> None:
    message = AssistantMessage(
        tool_calls=(ToolCall(id="c1", name="check-host_2", arguments='{"host":  "web-03"}'),)
    )

    rendered = openai_module.render_message(message)

    assert rendered["tool_calls"][0]["function"] == {
        "name": "check-host_2",
        "arguments": '{"host":  "web-03"}',
    }


@pytest.mark.parametrize(("name", "arguments"), [("check", "[1]"), ("check host", '{"a": ')])
async def test_the_strict_server_accepts_a_poisoned_legacy_history(
    serve: Serve, http: httpx.AsyncClient, name: str, arguments: str
) -> None:
    server = await strict(serve)
    client = OpenAIClient(model="m", base_url=server.base_url, http=http, retry=FAST_RETRY)

    answer = await client.complete(request(legacy(name, arguments)))

    assert answer.content == "ok"
    assert len(server.requests) == 1


# -- the strict server ---------------------------------------------------------------------


def openai_body(*messages: dict[str, Any]) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}, *messages]}


def assistant_call(name: str = "check", arguments: str = "{}") -> dict[str, Any]:
    call = {"id": "c1", "type": "function", "function": {"name": name, "arguments": arguments}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


TOOL_RESULT = {"role": "tool", "tool_call_id": "c1", "content": "ok"}


@pytest.mark.parametrize(
    ("messages", "param"),
    [
        ((assistant_call(arguments='{"host": "web-0'), TOOL_RESULT), "function.arguments"),
        ((assistant_call(arguments="[1]"), TOOL_RESULT), "function.arguments"),
        ((assistant_call(arguments=""), TOOL_RESULT), "function.arguments"),
        ((assistant_call(name="check host"), TOOL_RESULT), "function.name"),
        ((assistant_call(name="x" * 65), TOOL_RESULT), "function.name"),
        ((TOOL_RESULT,), "tool_call_id"),
        ((assistant_call(), {**TOOL_RESULT, "tool_call_id": "c2"}), "tool_call_id"),
    ],
    ids=["cut-off", "list", "empty", "spaces", "65-chars", "orphan", "wrong-id"],
)
async def test_the_strict_server_refuses_an_invalid_history_like_vllm(
    serve: Serve, http: httpx.AsyncClient, messages: tuple[dict[str, Any], ...], param: str
) -> None:
    server = await strict(serve)

    response = await http.post(server.base_url + "/chat/completions", json=openai_body(*messages))

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert param in error["param"] and param.split(".")[-1] in error["message"]
    assert "code" in error


async def test_the_strict_server_accepts_a_valid_history(
    serve: Serve, http: httpx.AsyncClient
) -> None:
    server = await strict(serve)
    body = openai_body(assistant_call(arguments='{"host":"web-03"}'), TOOL_RESULT)

    response = await http.post(server.base_url + "/chat/completions", json=body)

    assert response.status_code == 200


async def test_a_lax_server_accepts_anything(serve: Serve, http: httpx.AsyncClient) -> None:
    server = await serve(answer_ok)
    body = openai_body(assistant_call(arguments='{"host": "web-0'), TOOL_RESULT)

    response = await http.post(server.base_url + "/chat/completions", json=body)

    assert response.status_code == 200


async def test_the_strict_servers_400_fails_the_request_for_good(
    serve: Serve, http: httpx.AsyncClient
) -> None:
    server = await strict(serve)
    client = OpenAIClient(model="m", base_url=server.base_url, http=http, retry=FAST_RETRY)
    orphan = (UserMessage(content="hi"), ToolMessage(tool_call_id="c9", name="x", content="r"))

    with pytest.raises(ModelRequestError) as caught:
        await client.complete(request(orphan))

    assert caught.value.status == 400
    assert len(server.requests) == 1  # not retried: a 400 is not transient


# -- Anthropic -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", BAD_NAMES, ids=NAME_IDS)
def test_anthropic_sends_the_placeholder_for_a_name_it_would_refuse(name: str) -> None:
    message = AssistantMessage(tool_calls=(ToolCall(id="c1", name=name, arguments="[1]"),))

    rendered = anthropic_module.render_message(message)

    assert rendered == [
        {"type": "tool_use", "id": "c1", "name": PLACEHOLDER, "input": {"_raw": "[1]"}}
    ]


@pytest.mark.parametrize(("name", "arguments"), [("check", '{"a": '), ("check host", "[1]")])
async def test_the_strict_server_accepts_a_poisoned_legacy_history_over_anthropic(
    serve: Serve, http: httpx.AsyncClient, name: str, arguments: str
) -> None:
    server = await strict(serve)
    client = AnthropicClient(model="m", base_url=server.root_url, http=http, retry=FAST_RETRY)

    answer = await client.complete(request(legacy(name, arguments)))

    assert answer.content == "ok"


async def test_the_strict_server_refuses_a_bad_tool_use_name_over_anthropic(
    serve: Serve, http: httpx.AsyncClient
) -> None:
    server = await strict(serve)
    use = {"type": "tool_use", "id": "c1", "name": "check host", "input": {}}
    result = {"type": "tool_result", "tool_use_id": "c1", "content": "ok"}
    body = {
        "model": "m",
        "max_tokens": 10,
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [use]},
            {"role": "user", "content": [result]},
        ],
    }

    response = await http.post(server.root_url + "/v1/messages", json=body)

    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"

"""A call id a provider refuses never poisons the thread.

OpenAI refuses a ``tool_call_id`` over 40 characters (``string_above_max_length``), the
Messages API a ``tool_use.id`` outside ``^[a-zA-Z0-9_-]+$``; the strict scripted server
refuses both, as they do. A model that writes such an id (a fallback model of another
provider, a broken server) no longer fails every later request of its thread: the core
stores a fresh id, and a history stored with one before is sent with the id mapped the
same way on the call and on its result.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
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
    UserMessage,
    run,
)
from bot.emulator.scripted import Reply, ScriptedCall, ScriptedRequest
from bot.llm import openai as openai_module
from bot.llm.anthropic import AnthropicClient
from bot.llm.chain import ModelChain
from bot.llm.openai import OpenAIClient

from .conftest import FAST_RETRY, Serve

LONG_ID = "toolu_vrtx_01A09q90qw90lq917835lq9x-abcdefghij"  # 47 chars
ODD_ID = "functions.check:0"


def openai_body(*messages: dict[str, Any]) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}, *messages]}


def assistant_call(call_id: str) -> dict[str, Any]:
    call = {"id": call_id, "type": "function", "function": {"name": "check", "arguments": "{}"}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def tool_result(call_id: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": "ok"}


def ok(_: ScriptedRequest) -> Reply:
    return Reply(content="ok")


# -- the strict server -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("messages", "param"),
    [
        ((assistant_call("c" * 41), tool_result("c" * 41)), "messages.[1].tool_calls.[0].id"),
        ((assistant_call("c1"), tool_result("c" * 41)), "messages.[2].tool_call_id"),
    ],
    ids=["call", "result"],
)
async def test_the_strict_server_refuses_an_id_over_40_chars_like_openai(
    serve: Serve, http: httpx.AsyncClient, messages: tuple[dict[str, Any], ...], param: str
) -> None:
    server = await serve(ok)
    server.strict = True

    response = await http.post(server.base_url + "/chat/completions", json=openai_body(*messages))

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert error["code"] == "string_above_max_length"
    assert "maximum length 40" in error["message"]


async def test_the_strict_server_accepts_an_id_of_40_chars(
    serve: Serve, http: httpx.AsyncClient
) -> None:
    server = await serve(ok)
    server.strict = True
    body = openai_body(assistant_call("c" * 40), tool_result("c" * 40))

    response = await http.post(server.base_url + "/chat/completions", json=body)

    assert response.status_code == 200


@pytest.mark.parametrize("where", ["tool_use", "tool_result"])
async def test_the_strict_server_refuses_an_odd_id_like_anthropic(
    serve: Serve, http: httpx.AsyncClient, where: str
) -> None:
    server = await serve(ok)
    server.strict = True
    use_id, result_id = (ODD_ID, "c1") if where == "tool_use" else ("c1", ODD_ID)
    body = {
        "model": "m",
        "max_tokens": 10,
        "messages": [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": use_id, "name": "check", "input": {}}],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": result_id, "content": "ok"}],
            },
        ],
    }

    response = await http.post(server.root_url + "/v1/messages", json=body)

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert f"{where}." in error["message"] and "String should match pattern" in error["message"]


# -- a thread with such an id ------------------------------------------------------------------


class HostArgs(BaseModel):
    host: str


@pytest.mark.parametrize("call_id", [LONG_ID, ODD_ID], ids=["47-chars", "odd-chars"])
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
async def test_a_thread_whose_model_wrote_such_an_id_keeps_working(
    serve: Serve, http: httpx.AsyncClient, call_id: str, provider: str, stream: bool
) -> None:
    hosts: list[str] = []

    async def check(args: HostArgs, ctx: CallContext) -> str:
        hosts.append(args.host)
        return f"load 1.2 on {args.host}"

    def policy(scripted: ScriptedRequest) -> Reply:
        if not any(m.get("content") == "and web-04?" for m in scripted.messages):
            if scripted.tool_results() == 0:
                return Reply(tool_calls=[ScriptedCall("check", {"host": "web-03"}, id=call_id)])
            return Reply(content="web-03 is fine")
        if scripted.tool_results() == 1:
            return Reply(tool_calls=[ScriptedCall("check", {"host": "web-04"}, id=call_id)])
        return Reply(content="web-04 is fine")

    server = await serve(policy)
    server.strict = True
    if provider == "openai":
        client: OpenAIClient | AnthropicClient = OpenAIClient(
            model="m", base_url=server.base_url, http=http, retry=FAST_RETRY
        )
    else:
        client = AnthropicClient(model="m", base_url=server.root_url, http=http, retry=FAST_RETRY)
    tool = FunctionTool(name="check", description="Check a host", args_model=HostArgs, fn=check)
    memory = InMemoryHistory()

    for job, said in enumerate(["web-03 is at 95% CPU", "and web-04?"]):  # two turns
        memory.append(UserMessage(content=said))
        config = AgentConfig(
            job_id=f"job-{job}",
            client=ModelChain([client]),
            memory=memory,
            system_prompt="You are an SRE assistant.",
            tools=[tool],
            stream=stream,
        )
        result = await run(config)
        assert result.stop_reason is StopReason.COMPLETED, result.error

    assert hosts == ["web-03", "web-04"]
    assert server.refusals == []
    assert len(server.requests) == 4


# -- a history stored before -------------------------------------------------------------------


def legacy(call_id: str) -> list[AnyMessage]:
    return [
        UserMessage(content="web-03 is at 95% CPU"),
        AssistantMessage(tool_calls=(ToolCall(id=call_id, name="check", arguments="{}"),)),
        ToolMessage(tool_call_id=call_id, name="check", content="load 1.2"),
        UserMessage(content="and now?"),
    ]


def request(messages: list[AnyMessage]) -> ModelRequest:
    return ModelRequest(system="sys", tools=(), messages=messages, max_output_tokens=100)


@pytest.mark.parametrize("call_id", [LONG_ID, "x" * 200, ODD_ID])
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_a_history_stored_with_such_an_id_is_accepted(
    serve: Serve, http: httpx.AsyncClient, call_id: str, provider: str
) -> None:
    server = await serve(ok)
    server.strict = True
    client: OpenAIClient | AnthropicClient
    if provider == "openai":
        client = OpenAIClient(model="m", base_url=server.base_url, http=http, retry=FAST_RETRY)
    else:
        client = AnthropicClient(model="m", base_url=server.root_url, http=http, retry=FAST_RETRY)

    answer = await client.complete(request(legacy(call_id)))

    assert answer.content == "ok"
    assert server.refusals == []


def test_openai_maps_long_ids_apart_and_keeps_the_rest() -> None:
    call_id = openai_module.call_id
    a, b = "a" * 41, "a" * 41 + "b"
    assert len(call_id(a)) == len(call_id(b)) == 40
    assert call_id(a) != call_id(b)
    assert call_id(a) == call_id(a)  # on the call and on its result alike
    assert call_id(ODD_ID) == ODD_ID  # OpenAI takes any character
    assert call_id("c" * 40) == "c" * 40

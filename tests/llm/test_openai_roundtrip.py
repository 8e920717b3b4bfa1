"""The OpenAI-compatible adapter's request shape and non-streaming round trip.

Over real HTTP against the scripted server: the Bearer key, the system prompt first,
user/assistant/tool messages (tool results matched by ``tool_call_id``), tools in
function format with ``tool_choice``/``parallel_tool_calls`` only when there are tools,
``stream_options`` only when streaming, ``max_tokens`` (``max_completion_tokens`` for
OpenAI's and Azure's hosts), ``temperature`` only when set. A plain response maps
content, parallel tool calls, usage (cached tokens included) and ``finish_reason``.

The body is built from cached per-message fragments, so its cost stays flat as the
conversation grows: each message is rendered once, the same history gives the same
bytes, and one more message changes only the tail.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import bot.llm.openai as openai_module
from bot.agent.messages import (
    AnyMessage,
    AssistantMessage,
    ModelRequest,
    ModelResponse,
    ToolCall,
    ToolMessage,
    ToolSpec,
    Usage,
    UserMessage,
)
from bot.emulator.model_server import ScriptedServer
from bot.emulator.scripted import Reply, ScriptedCall, ScriptedRequest
from bot.llm.openai import OpenAIClient, render_message

from .conftest import FAST_RETRY, Serve

SYSTEM = "You are an SRE assistant."
CHECK = ToolSpec(
    name="check",
    description="Check a host",
    parameters={
        "type": "object",
        "properties": {"host": {"type": "string"}},
        "required": ["host"],
    },
)
RESTART = ToolSpec(
    name="restart",
    description="Restart a service",
    parameters={"type": "object", "properties": {"service": {"type": "string"}}},
)
HISTORY: tuple[AnyMessage, ...] = (
    UserMessage(content="web-03 is at 95% CPU"),
    AssistantMessage(
        content="Checking it.",
        tool_calls=(ToolCall(id="c1", name="check", arguments='{"host":"web-03"}'),),
    ),
    ToolMessage(tool_call_id="c1", name="check", content="load 12.0"),
    AssistantMessage(content="It is busy."),
    UserMessage(content="Restart nginx?"),
)


def openai(server: ScriptedServer, http: httpx.AsyncClient, **kw: Any) -> OpenAIClient:
    kw.setdefault("model", "gpt-test")
    kw.setdefault("retry", FAST_RETRY)
    return OpenAIClient(base_url=server.base_url, http=http, **kw)


def request(
    *messages: AnyMessage,
    tools: tuple[ToolSpec, ...] = (),
    stream: bool = False,
    max_output_tokens: int = 321,
    system: str = SYSTEM,
) -> ModelRequest:
    return ModelRequest(
        system=system,
        tools=tools,
        messages=messages or HISTORY,
        max_output_tokens=max_output_tokens,
        stream=stream,
    )


def answer_ok(_: ScriptedRequest) -> Reply:
    return Reply(content="ok")


# -- request shape -----------------------------------------------------------------


async def test_bearer_key_and_path(serve: Serve, http: httpx.AsyncClient) -> None:
    server = await serve(answer_ok)

    await openai(server, http, api_key="sk-test").complete(request())

    (sent,) = server.requests
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == "Bearer sk-test"
    assert sent.headers["content-type"].startswith("application/json")
    assert sent.model == "gpt-test"


async def test_no_key_sends_no_authorization(serve: Serve, http: httpx.AsyncClient) -> None:
    server = await serve(answer_ok)

    await openai(server, http).complete(request())

    assert "authorization" not in server.requests[0].headers


async def test_trailing_slash_in_base_url(serve: Serve, http: httpx.AsyncClient) -> None:
    server = await serve(answer_ok)
    client = OpenAIClient(
        model="gpt-test", base_url=server.base_url + "/", http=http, retry=FAST_RETRY
    )

    await client.complete(request())

    assert server.requests[0].path == "/v1/chat/completions"


async def test_messages_system_first_then_history(serve: Serve, http: httpx.AsyncClient) -> None:
    server = await serve(answer_ok)

    await openai(server, http).complete(request())

    assert server.requests[0].messages == [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "web-03 is at 95% CPU"},
        {
            "role": "assistant",
            "content": "Checking it.",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "check", "arguments": '{"host":"web-03"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "load 12.0"},
        {"role": "assistant", "content": "It is busy."},
        {"role": "user", "content": "Restart nginx?"},
    ]


async def test_empty_system_prompt_is_left_out(serve: Serve, http: httpx.AsyncClient) -> None:
    server = await serve(answer_ok)

    await openai(server, http).complete(request(system=""))

    assert [m["role"] for m in server.requests[0].messages] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
    ]


async def test_tools_in_function_format_with_choice(serve: Serve, http: httpx.AsyncClient) -> None:
    server = await serve(answer_ok)

    await openai(server, http).complete(request(tools=(CHECK, RESTART)))

    body = server.requests[0].body
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "check",
                "description": "Check a host",
                "parameters": CHECK.parameters,
            },
        },
        {
            "type": "function",
            "function": {
                "name": "restart",
                "description": "Restart a service",
                "parameters": RESTART.parameters,
            },
        },
    ]
    assert body["tool_choice"] == "auto"
    assert body["parallel_tool_calls"] is True


@pytest.mark.parametrize("stream", [False, True])
async def test_no_tools_means_no_tool_choice(
    serve: Serve, http: httpx.AsyncClient, stream: bool
) -> None:
    # A condense call has no tools; providers reject tool_choice without tools.
    server = await serve(answer_ok)

    await openai(server, http).complete(request(stream=stream))

    body = server.requests[0].body
    assert "tools" not in body
    assert "tool_choice" not in body
    assert "parallel_tool_calls" not in body


async def test_streaming_asks_for_usage(serve: Serve, http: httpx.AsyncClient) -> None:
    server = await serve(answer_ok)

    await openai(server, http).complete(request(stream=True))
    await openai(server, http).complete(request(stream=False))

    streamed, plain = (r.body for r in server.requests)
    assert streamed["stream"] is True
    assert streamed["stream_options"] == {"include_usage": True}
    assert "stream" not in plain
    assert "stream_options" not in plain


async def test_compatible_server_gets_max_tokens(serve: Serve, http: httpx.AsyncClient) -> None:
    server = await serve(answer_ok)

    await openai(server, http).complete(request(max_output_tokens=321))

    body = server.requests[0].body
    assert body["max_tokens"] == 321
    assert "max_completion_tokens" not in body


@pytest.mark.parametrize(
    ("base_url", "key"),
    [
        ("https://api.openai.com/v1", "max_completion_tokens"),
        ("https://myres.openai.azure.com/openai/v1", "max_completion_tokens"),
        ("http://127.0.0.1:11434/v1", "max_tokens"),
        ("https://openrouter.ai/api/v1", "max_tokens"),
    ],
)
def test_max_tokens_key_by_host(http: httpx.AsyncClient, base_url: str, key: str) -> None:
    # api.openai.com cannot be reached from a test: check the body builder directly.
    client = OpenAIClient(model="gpt-4o", base_url=base_url, http=http)

    body = json.loads(client.body(request(max_output_tokens=321)))

    other = {"max_tokens", "max_completion_tokens"} - {key}
    assert body[key] == 321
    assert not other & body.keys()


@pytest.mark.parametrize("temperature", [0.0, 0.7])
async def test_temperature_sent_when_set(
    serve: Serve, http: httpx.AsyncClient, temperature: float
) -> None:
    server = await serve(answer_ok)

    await openai(server, http, temperature=temperature).complete(request())

    assert server.requests[0].body["temperature"] == temperature


async def test_temperature_left_out_when_unset(serve: Serve, http: httpx.AsyncClient) -> None:
    server = await serve(answer_ok)

    await openai(server, http).complete(request())

    assert "temperature" not in server.requests[0].body


# -- non-streaming round trip ------------------------------------------------------


async def test_parallel_tool_calls_and_usage(serve: Serve, http: httpx.AsyncClient) -> None:
    server = await serve(
        lambda _: Reply(
            content="Checking both hosts.",
            tool_calls=[
                ScriptedCall("check", {"host": "web-01"}, id="call_a"),
                ScriptedCall("check", {"host": "web-02"}, id="call_b"),
            ],
            prompt_tokens=1200,
            completion_tokens=40,
            cached_tokens=1024,
        )
    )
    deltas: list[str] = []

    response = await openai(server, http).complete(request(tools=(CHECK,)), on_delta=deltas.append)

    assert response == ModelResponse(
        content="Checking both hosts.",
        tool_calls=(
            ToolCall(id="call_a", name="check", arguments='{"host": "web-01"}'),
            ToolCall(id="call_b", name="check", arguments='{"host": "web-02"}'),
        ),
        usage=Usage(prompt_tokens=1200, completion_tokens=40, cached_tokens=1024),
        finish_reason="tool_calls",
        model="gpt-test",
    )
    assert response.usage.paid == 1200 - 1024 + 40
    assert deltas == []  # nothing streams without stream=True
    assert len(server.requests) == 1


async def test_text_answer_and_finish_reason(serve: Serve, http: httpx.AsyncClient) -> None:
    server = await serve(
        lambda _: Reply(content="web-03 is fine.", finish_reason="length", prompt_tokens=10)
    )

    response = await openai(server, http).complete(request())

    assert response.content == "web-03 is fine."
    assert response.tool_calls == ()
    assert response.finish_reason == "length"
    assert response.usage.prompt_tokens == 10
    assert response.usage.cached_tokens == 0


# -- the body builder: cost stays flat ---------------------------------------------


def nth_message(i: int) -> AnyMessage:
    """Message ``i`` of a synthetic conversation (user, assistant call, tool result, …)."""
    if i % 3 == 0:
        return UserMessage(content=f"question {i}: how is web-{i % 7:02d}?")
    if i % 3 == 1:
        call = ToolCall(id=f"c{i}", name="check", arguments=json.dumps({"host": f"web-{i}"}))
        return AssistantMessage(content=None, tool_calls=(call,))
    return ToolMessage(tool_call_id=f"c{i - 1}", name="check", content=f"load {i}")


def long_history(n: int) -> list[AnyMessage]:
    return [nth_message(i) for i in range(n)]


class CountingRender:
    def __init__(self, render: Any) -> None:
        self.render = render
        self.calls = 0

    def __call__(self, value: Any) -> Any:
        self.calls += 1
        return self.render(value)


def test_same_history_gives_same_bytes(http: httpx.AsyncClient) -> None:
    client = OpenAIClient(model="m", base_url="http://127.0.0.1:1/v1", http=http)
    history = long_history(1000)

    first = client.body(request(*history, tools=(CHECK,)))
    second = client.body(request(*history, tools=(CHECK,)))

    assert first == second
    body = json.loads(first)
    assert len(body["messages"]) == 1001
    assert body["messages"][1:] == [render_message(m) for m in history]


def test_one_more_message_changes_only_the_tail(http: httpx.AsyncClient) -> None:
    client = OpenAIClient(model="m", base_url="http://127.0.0.1:1/v1", http=http)
    history = long_history(1000)
    before = client.body(request(*history))
    extra = UserMessage(content="and web-04?")

    after = client.body(request(*history, extra))

    assert before.endswith(b"]}")  # no tools: the messages array closes the body
    assert after[: len(before) - 2] == before[:-2]
    assert json.loads(after[len(before) - 2 :].lstrip(b",")[:-2]) == render_message(extra)


def test_each_message_is_rendered_once(
    http: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    render = CountingRender(render_message)
    monkeypatch.setattr(openai_module._MESSAGES, "_render", render)
    tools = CountingRender(openai_module.render_tools)
    monkeypatch.setattr(openai_module, "render_tools", tools)
    client = OpenAIClient(model="m", base_url="http://127.0.0.1:1/v1", http=http)
    history = long_history(1000)

    client.body(request(*history, tools=(CHECK,)))
    assert render.calls == 1000
    client.body(request(*history, tools=(CHECK,)))
    assert render.calls == 1000
    history.append(UserMessage(content="and web-04?"))
    client.body(request(*history, tools=(CHECK,)))
    assert render.calls == 1001
    assert tools.calls == 1  # the tool list is rendered once too


# Conversations change only as the ``Memory`` protocol allows: appends, and a condense
# replacing a leading part with one summary. A condense call sends a leading part plus
# an instruction. Whatever the cache reuses, the body must equal a fresh rendering.
Op = tuple[str, int, int]
OPS = st.lists(
    st.tuples(
        st.sampled_from(["append", "condense", "summarise"]),
        st.integers(min_value=0, max_value=2),  # which conversation
        st.integers(min_value=1, max_value=12),  # how many leading messages
    ),
    min_size=1,
    max_size=40,
)


@settings(
    derandomize=True,
    deadline=None,
    database=None,
    max_examples=60,
    suppress_health_check=[HealthCheck.function_scoped_fixture],  # the client is not used
)
@given(ops=OPS)
def test_body_always_matches_a_fresh_rendering(http: httpx.AsyncClient, ops: list[Op]) -> None:
    client = OpenAIClient(model="m", base_url="http://127.0.0.1:1/v1", http=http)
    conversations: list[list[AnyMessage]] = [
        [UserMessage(content=f"job {c}: web-0{c} is slow")] for c in range(3)
    ]
    serial = 0
    for kind, which, upto in ops:
        history = conversations[which]
        serial += 1
        if kind == "append":
            history.append(nth_message(serial))
            sent: list[AnyMessage] = history
        elif kind == "condense":
            cut = min(upto, len(history))
            history[:cut] = [UserMessage(content=f"summary {serial}", summary=True)]
            sent = history
        else:
            sent = [*history[:upto], UserMessage(content="Summarise the conversation.")]
        body = json.loads(client.body(request(*sent)))
        assert body["messages"][1:] == [render_message(m) for m in sent]

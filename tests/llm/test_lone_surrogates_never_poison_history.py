"""A lone surrogate in a model's answer never poisons the thread.

A server may escape a UTF-16 surrogate on its own (``"\\ud800"``) in the text, a tool
name, a call id or the arguments (there also one level down, escaped inside the
arguments' JSON), or send it as raw CESU-8 bytes; ``json.loads`` makes of it a str that
UTF-8 cannot encode. Kept in history as it came, it made the next request of the thread
fail in ``body()`` with ``UnicodeEncodeError``, and every later one too. The adapters now
replace it with U+FFFD where the answer enters (plain and streamed, OpenAI and
Anthropic), and a history that holds one anyway is sent with U+FFFD in its place.
"""

from __future__ import annotations

import json

import httpx
import pytest
from pydantic import BaseModel, TypeAdapter

from bot.agent import (
    AgentConfig,
    AnyMessage,
    AssistantMessage,
    CallContext,
    FunctionTool,
    InMemoryHistory,
    Message,
    ModelRequest,
    ModelResponse,
    StopReason,
    ToolCall,
    ToolMessage,
    UserMessage,
    run,
)
from bot.agent.ports import Client
from bot.emulator.model_server import ScriptedServer
from bot.emulator.scripted import Fault, Reply, ScriptedCall, ScriptedRequest
from bot.errors import ModelError
from bot.llm.anthropic import AnthropicClient
from bot.llm.chain import ModelChain
from bot.llm.openai import OpenAIClient
from bot.llm.surrogates import clean, clean_arguments, encode

from .conftest import FAST_RETRY, Serve

LONE = "\ud800"
LOW = "\udc00"
BAD = "\ufffd"
EMOJI = "\U0001f600"
PROVIDERS = ["openai", "anthropic"]


def client_for(provider: str, server: ScriptedServer, http: httpx.AsyncClient) -> Client:
    if provider == "openai":
        return OpenAIClient(model="m", base_url=server.base_url, http=http, retry=FAST_RETRY)
    return AnthropicClient(model="m", base_url=server.root_url, http=http, retry=FAST_RETRY)


def request(messages: list[AnyMessage], *, stream: bool = False) -> ModelRequest:
    return ModelRequest(
        system="sys", tools=(), messages=messages, max_output_tokens=100, stream=stream
    )


def encodable(response: ModelResponse) -> bool:
    texts = [response.content or ""]
    texts += [s for c in response.tool_calls for s in (c.id, c.name, c.arguments)]
    try:
        "".join(texts).encode()
    except UnicodeEncodeError:
        return False
    return True


POISONED = Reply(
    content=f"checking {LONE}web-03{LOW}",
    tool_calls=[
        ScriptedCall(f"check{LONE}", {}, id="c1"),  # the name
        ScriptedCall("check", {"host": f"web-01{LONE}"}, id="c2"),  # escaped in the arguments
        ScriptedCall("check", f'{{"host": "web-02{LOW}"}}', id="c3"),  # in the arguments
        ScriptedCall("check", {}, id=f"c4{LONE}"),  # the id
    ],
)


def poisoned_then_ok(scripted: ScriptedRequest) -> Reply:
    return POISONED if scripted.tool_results() == 0 else Reply(content="ok")


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_the_next_request_of_the_history_is_sent(
    serve: Serve, http: httpx.AsyncClient, provider: str, stream: bool
) -> None:
    server = await serve(poisoned_then_ok)
    server.strict = True
    client = client_for(provider, server, http)
    deltas: list[str] = []
    history: list[AnyMessage] = [UserMessage(content="web-03 is at 95% CPU")]

    first = await client.complete(
        request(history, stream=stream), on_delta=deltas.append if stream else None
    )

    assert encodable(first)
    assert first.content == f"checking {BAD}web-03{BAD}"
    names = [c.name for c in first.tool_calls]
    ids = [c.id for c in first.tool_calls]
    arguments = [json.loads(c.arguments) for c in first.tool_calls]
    assert names == [f"check{BAD}", "check", "check", "check"]
    assert ids[3] == f"c4{BAD}"
    assert arguments == [{}, {"host": f"web-01{BAD}"}, {"host": f"web-02{BAD}"}, {}]
    if stream:  # what the listener saw (Slack) could be encoded too
        assert "".join(deltas) == first.content

    history.append(AssistantMessage(content=first.content, tool_calls=first.tool_calls))
    history += [ToolMessage(tool_call_id=i, name="check", content="ok") for i in ids]
    history.append(UserMessage(content="and now?"))
    second = await client.complete(request(history, stream=stream))

    assert second.content == "ok"
    assert len(server.requests) == 2
    assert server.refusals == []


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_pair_split_across_stream_pieces_is_joined_again(
    serve: Serve, http: httpx.AsyncClient, provider: str
) -> None:
    # Four pieces of one code point each: the pair's halves arrive in separate chunks.
    server = await serve(lambda _: Reply(content="x\ud83d\ude00y"), chunks=4)
    client = client_for(provider, server, http)
    deltas: list[str] = []

    answer = await client.complete(
        request([UserMessage(content="hi")], stream=True), on_delta=deltas.append
    )

    assert answer.content == f"x{EMOJI}y"
    assert deltas == ["x", BAD, BAD, "y"]  # each piece is shown encodable, as it comes


RAW_BODIES = {
    "openai": b'{"choices":[{"message":{"content":"%s","tool_calls":[{"id":"c1","type":'
    b'"function","function":{"name":"check","arguments":"{\\"host\\":\\"%s\\"}"}}]},'
    b'"finish_reason":"tool_calls"}]}',
    "anthropic": b'{"type":"message","content":[{"type":"text","text":"%s"},{"type":'
    b'"tool_use","id":"c1","name":"check","input":{"host":"%s"}}],"stop_reason":"tool_use"}',
}


@pytest.mark.parametrize(
    ("text", "host", "content"),
    [
        (b"a\xed\xa0\x80b", b"web\xed\xb0\x80", f"a{BAD}b"),  # CESU-8 halves, raw
        (b"a\\uD800b", b"web\\uDC00", f"a{BAD}b"),  # upper-case escapes
        (b"a\xed\xa0\xbd\xed\xb8\x80b", b"web\\ud83d\\ude00", f"a{EMOJI}b"),  # pairs: kept
    ],
    ids=["cesu-8", "upper-case-escape", "pairs"],
)
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_raw_body_is_cleaned_too(
    serve: Serve, http: httpx.AsyncClient, provider: str, text: bytes, host: bytes, content: str
) -> None:
    body = RAW_BODIES[provider] % (text, host)
    server = await serve(lambda _: Fault(raw=body))
    client = client_for(provider, server, http)

    answer = await client.complete(request([UserMessage(content="hi")]))

    assert encodable(answer)
    assert answer.content == content
    [call] = answer.tool_calls
    expected = f"web{EMOJI}" if content.endswith(f"{EMOJI}b") else f"web{BAD}"
    assert json.loads(call.arguments) == {"host": expected}


ERROR_BODIES = {
    "openai": b'{"error":{"message":"bad \\ud800 thing","type":"invalid_request_error"}}',
    "anthropic": b'{"type":"error","error":{"type":"invalid_request_error","message":"bad '
    b'\\ud800 thing"}}',
}


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_an_error_object_under_a_200_is_reported_encodable(
    serve: Serve, http: httpx.AsyncClient, provider: str
) -> None:
    server = await serve(lambda _: Fault(raw=ERROR_BODIES[provider]))
    client = client_for(provider, server, http)

    with pytest.raises(ModelError) as caught:
        await client.complete(request([UserMessage(content="hi")]))

    assert f"bad {BAD} thing" in str(caught.value)  # job state, logs and Slack can write it


# -- the loop over HTTP ------------------------------------------------------------------------


class HostArgs(BaseModel):
    host: str


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_thread_with_a_lone_surrogate_keeps_working(
    serve: Serve, http: httpx.AsyncClient, provider: str, stream: bool
) -> None:
    hosts: list[str] = []

    async def check(args: HostArgs, ctx: CallContext) -> str:
        hosts.append(args.host)
        return f"load 1.2 on {args.host}"

    def policy(scripted: ScriptedRequest) -> Reply:
        if scripted.tool_results() == 0:
            return Reply(
                content=f"Checking{LONE}.",
                tool_calls=[ScriptedCall("check", f'{{"host": "web-03{LONE}"}}')],
            )
        return Reply(content="web-03 is fine")

    server = await serve(policy)
    server.strict = True
    memory = InMemoryHistory()
    memory.append(UserMessage(content="web-03 is at 95% CPU"))
    tool = FunctionTool(name="check", description="Check a host", args_model=HostArgs, fn=check)

    result = await run(
        make_agent(ModelChain([client_for(provider, server, http)]), memory, tool, stream)
    )

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert hosts == [f"web-03{BAD}"]
    assert len(server.requests) == 2
    # Everything in history can be written by the store (JSON, UTF-8).
    adapter: TypeAdapter[AnyMessage] = TypeAdapter(Message)
    for message in memory.messages:
        adapter.dump_json(message)


def make_agent(
    client: ModelChain, memory: InMemoryHistory, tool: FunctionTool, stream: bool
) -> AgentConfig:
    return AgentConfig(
        job_id="job-1",
        client=client,
        memory=memory,
        system_prompt="You are an SRE assistant.",
        tools=[tool],
        stream=stream,
    )


# -- a history that holds one anyway -----------------------------------------------------------


def legacy() -> list[AnyMessage]:
    """A history holding lone surrogates (kept from before, or entered another way)."""
    call = ToolCall(id=f"c1{LONE}", name=f"check{LONE}", arguments=f'{{"host": "a{LONE}"}}')
    escaped = ToolCall(id="c2", name="check", arguments='{"host": "b\\ud800"}')
    return [
        UserMessage(content=f"web-03{LONE} is at 95% CPU"),
        AssistantMessage(content=f"Checking{LOW}.", tool_calls=(call, escaped)),
        ToolMessage(tool_call_id=call.id, name="check", content=f"load{LONE}"),
        ToolMessage(tool_call_id="c2", name="check", content="ok"),
        UserMessage(content="and now?"),
    ]


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_history_holding_lone_surrogates_is_sent_with_fffd(
    serve: Serve, http: httpx.AsyncClient, provider: str
) -> None:
    server = await serve(lambda _: Reply(content="ok"))
    server.strict = True
    client = client_for(provider, server, http)
    assert isinstance(client, OpenAIClient | AnthropicClient)

    body = client.body(request(legacy()))
    answer = await client.complete(request(legacy()))

    sent = json.loads(body)  # UTF-8 JSON, and the surrogates' places are marked
    text = json.dumps(sent, ensure_ascii=False)
    assert LONE not in text and LOW not in text
    assert f"web-03{BAD} is at 95% CPU" in text
    assert answer.content == "ok"
    assert server.refusals == []


def test_a_clean_history_is_sent_byte_for_byte_as_before(http: httpx.AsyncClient) -> None:
    client = OpenAIClient(model="m", base_url="http://127.0.0.1:9/v1", http=http)
    messages: list[AnyMessage] = [UserMessage(content=f"naïve {EMOJI} text")]

    body = client.body(request(messages))

    assert f"naïve {EMOJI} text".encode() in body


# -- the helpers -------------------------------------------------------------------------------


def test_clean_text_is_returned_as_it_is() -> None:
    text = f"naïve {EMOJI} \\ud800 text"  # an escape written as text is text
    assert clean(text) is text
    assert clean_arguments('{"a": "\\ud83d\\ude00"}') == '{"a": "\\ud83d\\ude00"}'  # a pair
    assert clean_arguments('{"a": "\\\\ud800"}') == '{"a": "\\\\ud800"}'  # an escaped backslash
    assert clean_arguments('{"a": "\\ud800') == '{"a": "\\ud800'  # not JSON: left for the core


def test_lone_halves_become_fffd_and_pairs_one_character() -> None:
    assert clean(f"a{LONE}b{LOW}") == f"a{BAD}b{BAD}"
    assert clean(f"{LOW}{LONE}") == BAD + BAD  # the wrong order is no pair
    assert clean("\ud83d\ude00") == EMOJI
    assert json.loads(clean_arguments('{"a": "\\ud800", "b": 1}')) == {"a": BAD, "b": 1}
    assert encode(f'{{"a":"{LONE}"}}') == f'{{"a":"{BAD}"}}'.encode()


def test_a_provider_error_message_with_a_lone_surrogate_is_encodable() -> None:
    from bot.llm.errors import error_from_response

    error = error_from_response(
        400, '{"error": {"message": "bad \\ud800 input", "code": "x"}}', {}, model="m"
    )
    assert "bad \ufffd input" in str(error)
    str(error).encode()  # job state, logs and Slack can take it

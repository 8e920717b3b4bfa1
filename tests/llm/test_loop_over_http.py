"""The agent loop driving real OpenAI-compatible clients over HTTP.

``bot.agent.run`` with a ``ModelChain`` of ``OpenAIClient``s against scripted servers:
a primary that keeps failing transiently is retried three times, then the fallback
model takes over — one switch, in ``RunResult.switches`` and a ``ModelFallback`` event;
an auth error or a context overflow never switches; tool-call arguments that are not
valid JSON come back to the model as an ``Error:`` tool result; a stream cut half-way
is retried inside the client (the listener is told to start over); a degenerate
repeating stream is cut by the repetition detector and counts as empty; Stop during a
stream closes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx
import pytest
from pydantic import BaseModel, Field

from bot.agent import (
    AgentConfig,
    AnyMessage,
    CallContext,
    CancelToken,
    CondenseResult,
    FunctionTool,
    InMemoryHistory,
    Limits,
    StopReason,
    UserMessage,
    run,
)
from bot.agent.events import Event, ModelFallback, StreamDelta
from bot.agent.ports import Client
from bot.agent.testing import FakeClock
from bot.emulator.model_server import ScriptedServer
from bot.emulator.scripted import Fault, Reply, ScriptedCall, ScriptedRequest
from bot.llm.chain import ModelChain
from bot.llm.openai import OpenAIClient

from .conftest import FAST_RETRY, Serve, until

PROMPT = "web-03 is at 95% CPU, look into it"
ANSWER = "web-03 is fine again: php-fpm was restarted by its watchdog at 10:04."
PARTIAL = "partial answer "
# Longer than the detector's 20-byte patterns: a stream that goes on without repeating.
VARIED = "The load on web-03 keeps climbing; "


class HostArgs(BaseModel):
    host: str = Field(description="Host name")


class Recorder:
    def __init__(self) -> None:
        self.events: list[Event] = []

    def __call__(self, event: Event) -> None:
        self.events.append(event)

    def of(self, kind: type[Any]) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]


class CheckTool:
    """A read-only ``check`` tool that counts its runs."""

    def __init__(self) -> None:
        self.runs: list[str] = []
        self.tool = FunctionTool(
            name="check", description="Check a host", args_model=HostArgs, fn=self.check
        )

    async def check(self, args: HostArgs, ctx: CallContext) -> str:
        self.runs.append(args.host)
        return f"load 1.2 on {args.host}"


def openai(server: ScriptedServer, http: httpx.AsyncClient, model: str) -> OpenAIClient:
    return OpenAIClient(model=model, base_url=server.base_url, http=http, retry=FAST_RETRY)


def agent(chain: ModelChain, **kw: Any) -> AgentConfig:
    memory = InMemoryHistory()
    memory.append(UserMessage(content=PROMPT))
    return AgentConfig(
        job_id="job-1",
        client=chain,
        memory=memory,
        system_prompt="You are an SRE assistant.",
        **kw,
    )


def check_then_answer(request: ScriptedRequest) -> Reply:
    """Call ``check`` once, then answer."""
    if request.tool_results() == 0:
        return Reply(tool_calls=[ScriptedCall("check", {"host": "web-03"})])
    return Reply(content=ANSWER)


def streamed_per_request(recorder: Recorder) -> list[str]:
    out: list[str] = []
    for event in recorder.events:
        if event.kind == "model_request_start":
            out.append("")
        elif isinstance(event, StreamDelta):
            out[-1] += event.text
    return out


# -- fallback ----------------------------------------------------------------------------


async def test_primary_down_falls_back_once(serve: Serve, http: httpx.AsyncClient) -> None:
    primary = await serve(lambda _: Fault(status=500, message="primary is down"))
    fallback = await serve(check_then_answer)
    chain = ModelChain([openai(primary, http, "gpt-primary"), openai(fallback, http, "gpt-spare")])
    recorder = Recorder()
    check = CheckTool()

    result = await run(agent(chain, tools=[check.tool], on_event=recorder))

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert result.output == ANSWER
    assert len(primary.requests) == 3  # its own retries, then never again
    assert len(fallback.requests) == 2  # both iterations on the fallback
    assert len(result.switches) == 1
    assert result.switches[0].startswith("gpt-primary -> gpt-spare: ")
    assert "primary is down" in result.switches[0]
    (event,) = recorder.of(ModelFallback)
    assert (event.from_model, event.to_model) == ("gpt-primary", "gpt-spare")
    assert "HTTP 500" in event.error
    assert result.model == "gpt-spare"
    assert check.runs == ["web-03"]


async def test_both_models_down_fails_after_one_switch(
    serve: Serve, http: httpx.AsyncClient
) -> None:
    # One server, two model names.
    server = await serve(lambda r: Fault(status=503, message=f"{r.model} is overloaded"))
    chain = ModelChain([openai(server, http, "big"), openai(server, http, "small")])
    recorder = Recorder()

    result = await run(agent(chain, on_event=recorder))

    assert result.stop_reason is StopReason.FAILED
    assert [r.model for r in server.requests] == ["big"] * 3 + ["small"] * 3
    assert len(result.switches) == 1
    assert len(recorder.of(ModelFallback)) == 1
    assert result.error is not None
    assert "small is overloaded" in result.error


async def test_retry_after_past_the_deadline_switches_at_once(
    serve: Serve, http: httpx.AsyncClient
) -> None:
    primary = await serve(lambda _: Fault(status=429, retry_after="30", message="slow down"))
    fallback = await serve(lambda _: Reply(content=ANSWER))
    chain = ModelChain([openai(primary, http, "gpt-primary"), openai(fallback, http, "gpt-spare")])

    result = await run(agent(chain, limits=Limits(deadline_s=10.0), clock=FakeClock()))

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert len(primary.requests) == 1  # waiting 30 s would pass the 10 s deadline
    assert len(fallback.requests) == 1
    assert len(result.switches) == 1


# -- no fallback ---------------------------------------------------------------------------


async def test_auth_error_fails_without_switching(serve: Serve, http: httpx.AsyncClient) -> None:
    provider = "Incorrect API key provided: sk-abc***xyz."
    primary = await serve(lambda _: Fault(status=401, message=provider, code="invalid_api_key"))
    fallback = await serve(lambda _: Reply(content=ANSWER))
    chain = ModelChain([openai(primary, http, "gpt-primary"), openai(fallback, http, "gpt-spare")])
    recorder = Recorder()

    result = await run(agent(chain, on_event=recorder))

    assert result.stop_reason is StopReason.FAILED
    assert len(primary.requests) == 1
    assert fallback.requests == []
    assert result.switches == []
    assert recorder.of(ModelFallback) == []
    assert result.error is not None
    assert "ModelAuthError" in result.error
    assert provider in result.error


async def test_context_overflow_never_switches(serve: Serve, http: httpx.AsyncClient) -> None:
    overflow = Fault(status=400, code="context_length_exceeded", message="context too long")
    primary = await serve(lambda _: overflow)
    fallback = await serve(lambda _: Reply(content=ANSWER))
    chain = ModelChain([openai(primary, http, "gpt-primary"), openai(fallback, http, "gpt-spare")])

    result = await run(agent(chain))

    assert result.stop_reason is StopReason.FAILED
    assert result.error is not None
    assert "ContextOverflowError" in result.error
    assert len(primary.requests) == 1
    assert fallback.requests == []
    assert result.switches == []


async def test_context_overflow_condenses_then_retries(
    serve: Serve, http: httpx.AsyncClient
) -> None:
    def policy(request: ScriptedRequest) -> Fault | Reply:
        if any("Summary:" in str(m.get("content")) for m in request.messages):
            return Reply(content=ANSWER)
        return Fault(status=400, message="This model's maximum context length is 4096 tokens.")

    async def condense(
        history: Sequence[AnyMessage], *, client: Client, time_left: float | None
    ) -> CondenseResult:
        assert client.name == "vllm-model"  # the job's current model summarises
        return CondenseResult(upto=len(history), summary="Summary: web-03 CPU at 95%.")

    server = await serve(policy)
    chain = ModelChain([openai(server, http, "vllm-model")])

    result = await run(agent(chain, condense=condense))

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert len(server.requests) == 2
    assert server.requests[1].messages[1:] == [
        {"role": "user", "content": "Summary: web-03 CPU at 95%."}
    ]


# -- bad tool-call arguments -----------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
async def test_invalid_arguments_reach_the_model_as_an_error(
    serve: Serve, http: httpx.AsyncClient, stream: bool
) -> None:
    broken = '{"host": "web-03"'  # cut off: not valid JSON

    def policy(request: ScriptedRequest) -> Reply:
        if request.tool_results() == 0:
            return Reply(tool_calls=[ScriptedCall("check", broken, id="call_bad")])
        return Reply(content=ANSWER)

    server = await serve(policy, chunks=3)
    check = CheckTool()

    result = await run(
        agent(ModelChain([openai(server, http, "m")]), tools=[check.tool], stream=stream)
    )

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert result.output == ANSWER
    assert check.runs == []  # the tool never ran
    assert len(server.requests) == 2
    assistant, tool = server.requests[1].messages[-2:]
    # The history sent back is valid: the broken text is not re-sent (strict servers
    # refuse it), the model reads why in the tool result.
    assert assistant["tool_calls"][0]["function"]["arguments"] == "{}"
    assert tool["role"] == "tool"
    assert tool["tool_call_id"] == "call_bad"
    assert tool["content"].startswith("Error: invalid arguments for tool 'check': not valid JSON")


# -- streams ----------------------------------------------------------------------------------


async def test_cut_stream_retried_and_the_listener_starts_over(
    serve: Serve, http: httpx.AsyncClient
) -> None:
    answers = iter([Fault(cut_after=2), Reply(content=ANSWER)])
    server = await serve(lambda _: next(answers), chunks=4)
    recorder = Recorder()

    result = await run(
        agent(ModelChain([openai(server, http, "m")]), stream=True, on_event=recorder)
    )

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert result.output == ANSWER
    assert len(server.requests) == 2
    assert result.model_calls == 1  # the retry happened inside the client
    texts = [e.text for e in recorder.of(StreamDelta)]
    assert texts[:3] == [PARTIAL, PARTIAL, ""]
    assert "".join(texts[3:]) == ANSWER


async def test_repeating_stream_is_cut_and_counts_as_empty(
    serve: Serve, http: httpx.AsyncClient
) -> None:
    # Each stream goes on until the client leaves; the detector stops it after 256 bytes.
    server = await serve(lambda _: Fault(repeat="ok ", cut_after=None))
    recorder = Recorder()

    result = await run(
        agent(ModelChain([openai(server, http, "m")]), stream=True, on_event=recorder)
    )

    assert result.stop_reason is StopReason.NO_ACTION
    assert len(server.requests) == 3  # the first try and two empty retries
    assert all(256 <= len(text) < 300 for text in streamed_per_request(recorder))
    await until(lambda: server.disconnects == 3)


async def test_stop_during_a_stream_closes_it(serve: Serve, http: httpx.AsyncClient) -> None:
    server = await serve(lambda _: Fault(repeat=VARIED, cut_after=None))
    token = CancelToken()
    recorder = Recorder()

    def on_event(event: Event) -> None:
        recorder(event)
        if isinstance(event, StreamDelta):
            token.cancel("stopped by <@U123>")

    result = await run(
        agent(ModelChain([openai(server, http, "m")]), stream=True, on_event=on_event, cancel=token)
    )

    assert result.stop_reason is StopReason.CANCELLED
    assert result.error == "stopped by <@U123>"
    assert len(server.requests) == 1
    # Stop lands at the next network read: at most one more 64 KiB read is consumed.
    assert len(recorder.of(StreamDelta)) < 1000
    await until(lambda: server.disconnects == 1)

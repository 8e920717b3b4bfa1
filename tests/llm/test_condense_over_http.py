"""The condense request over real HTTP: ``ModelCondenser`` with the real OpenAI-compatible
client against the scripted server, asserting on the body the server received."""

from __future__ import annotations

import json

import httpx
from pydantic import BaseModel

from bot.agent import (
    AgentConfig,
    AnyMessage,
    AssistantMessage,
    CallContext,
    FunctionTool,
    InMemoryHistory,
    StopReason,
    ToolCall,
    ToolMessage,
    UserMessage,
    run,
)
from bot.agent.events import CondenseDone, Event
from bot.agent.testing import StaticChain
from bot.emulator.model_server import ScriptedServer
from bot.emulator.scripted import Answer, Fault, Reply, ScriptedRequest
from bot.llm.condense import INSTRUCTION, SUMMARY_HEADING, ModelCondenser
from bot.llm.openai import OpenAIClient

SYSTEM = "You are an SRE assistant for the payments team. Never guess hostnames."
TOOL_KEYS = ("tools", "tool_choice", "parallel_tool_calls")


def history() -> list[AnyMessage]:
    # As a history holds it: the approved call names its approver (``record_approvers``).
    call = ToolCall(
        id="call_1",
        name="restart_service",
        arguments='{"host": "web-03", "confirmed_by": "U0ALICE"}',
    )
    return [
        UserMessage(content="payments-api on web-03 returns 502s"),
        AssistantMessage(content="Restarting it.", tool_calls=(call,)),
        ToolMessage(
            tool_call_id="call_1",
            name="restart_service",
            content="payments-api restarted on web-03 (pid 9911)",
            confirmed_by="U0ALICE",
        ),
        AssistantMessage(content="Restarted; watching the error rate."),
        UserMessage(content="<@U0BOB>: errors are down to 0.1%"),
        AssistantMessage(content="Good. Checking the last deploy."),
        UserMessage(content="<@U0BOB>: it was v2.31.4"),
        AssistantMessage(content="Noted."),
    ]


def summarise(request: ScriptedRequest) -> Answer:
    return Reply(content="Goals: fix 502s on web-03. Actions: restart (approved by U0ALICE).")


async def test_the_condense_request_has_no_tools_and_the_jobs_system_prompt() -> None:
    async with ScriptedServer(summarise) as server, httpx.AsyncClient() as http:
        client = OpenAIClient(model="gpt-test", base_url=server.base_url, http=http)
        condenser = ModelCondenser(
            client, system_prompt=SYSTEM, max_input_tokens=50_000, keep_recent=4
        )
        got = await condenser(history())
    [sent] = server.requests
    body = sent.body
    for key in TOOL_KEYS:
        assert key not in body
    assert body["model"] == "gpt-test"
    assert body["max_tokens"] == condenser.max_output_tokens
    system, last = body["messages"]
    assert system == {"role": "system", "content": SYSTEM}
    assert last["role"] == "user" and last["content"].endswith(INSTRUCTION)
    assert "payments-api restarted on web-03 (pid 9911)" in last["content"]
    assert "approved by U0ALICE" in last["content"]
    assert "v2.31.4" not in last["content"]  # among the kept messages
    assert got.upto == 4
    assert got.summary.startswith(f"{SUMMARY_HEADING}\nGoals: fix 502s on web-03.")


async def test_native_messages_over_http() -> None:
    async with ScriptedServer(summarise) as server, httpx.AsyncClient() as http:
        client = OpenAIClient(model="gpt-test", base_url=server.base_url, http=http)
        condenser = ModelCondenser(
            client, system_prompt=SYSTEM, max_input_tokens=50_000, keep_recent=4, transcript=False
        )
        got = await condenser(history())
    body = server.requests[0].body
    for key in TOOL_KEYS:
        assert key not in body
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert body["messages"][0]["content"] == SYSTEM
    assert body["messages"][2]["tool_calls"][0]["id"] == "call_1"
    assert body["messages"][3]["tool_call_id"] == "call_1"
    assert body["messages"][-1] == {"role": "user", "content": INSTRUCTION}
    assert got.upto == 4


class HostArgs(BaseModel):
    host: str


async def _check(args: HostArgs, ctx: CallContext) -> str:
    return f"ok {args.host}"


async def test_a_context_overflow_over_http_is_condensed_and_the_run_completes() -> None:
    def policy(request: ScriptedRequest) -> Answer:
        if "tools" not in request.body:
            return summarise(request)
        first = request.messages[1]["content"]
        if first.startswith(SUMMARY_HEADING):
            return Reply(content="The 502s are gone.")
        return Fault(
            status=400,
            code="context_length_exceeded",
            message="This model's maximum context length is 8192 tokens.",
        )

    memory = InMemoryHistory()
    for message in history():
        memory.append(message)
    events: list[Event] = []
    tool = FunctionTool(name="check", description="check a host", args_model=HostArgs, fn=_check)
    async with ScriptedServer(policy) as server, httpx.AsyncClient() as http:
        client = OpenAIClient(model="gpt-test", base_url=server.base_url, http=http)
        config = AgentConfig(
            job_id="job-9",
            client=StaticChain([client]),
            memory=memory,
            system_prompt=SYSTEM,
            tools=[tool],
            condense=ModelCondenser(
                client, system_prompt=SYSTEM, max_input_tokens=50_000, keep_recent=4
            ),
            on_event=events.append,
        )
        got = await run(config)
    assert got.stop_reason is StopReason.COMPLETED, got.error
    assert got.output == "The 502s are gone."
    overflow, condense, answer = (r.body for r in server.requests)
    assert "tools" in overflow and "tools" in answer
    assert all(key not in condense for key in TOOL_KEYS)
    assert condense["messages"][0] == overflow["messages"][0] == answer["messages"][0]
    assert [e for e in events if isinstance(e, CondenseDone)] == [CondenseDone(replaced=4)]
    assert memory.originals[: len(history())] == history()
    assert json.dumps(answer["messages"]).count("payments-api restarted") == 0  # summarised

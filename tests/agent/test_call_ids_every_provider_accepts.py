"""Every tool call id stored in history is one both providers accept.

OpenAI refuses a ``tool_call_id`` over 40 characters; Anthropic a ``tool_use.id`` outside
``^[a-zA-Z0-9_-]+$``. A call whose id breaks either rule (a fallback model of another
provider, a broken server) gets a fresh job-unique id, as an empty or repeated one does,
so the history stays sendable to any model of the chain. Approvals and the write ledger,
keyed by the call id, only ever see the fresh id.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import pytest
from pydantic import BaseModel

from bot.agent import (
    AnyMessage,
    Approved,
    AssistantMessage,
    CallContext,
    ConfirmRequest,
    Decision,
    FunctionTool,
    InMemoryHistory,
    Pending,
    RunState,
    StopReason,
    ToolCall,
    ToolMessage,
    UserMessage,
    run,
)
from bot.agent.ports import LedgerEntry
from bot.agent.testing import FakeClock, ScriptedModel, calls, text

from .conftest import echo_tool, make_config

PROVIDER_ID = re.compile(r"[a-zA-Z0-9_-]{1,40}")  # both rules, spelled out
APPROVER = "U0123ABC"

BAD_IDS = [
    "x" * 41,
    "call_" + "0123456789" * 10,
    "call.1",
    "functions.check:0",
    "call 1",
    "call/1",
    "call_é",
    "call_\ufffd",  # what a lone surrogate in an id becomes in the adapters
]
BAD_IDS_NAMES = ["41-chars", "105-chars", "dot", "colon", "space", "slash", "accent", "fffd"]


def check(call_id: str, host: str = "web-03") -> ToolCall:
    return ToolCall(id=call_id, name="check", arguments=f'{{"host": "{host}"}}')


def stored_ids(messages: Sequence[AnyMessage]) -> tuple[list[str], list[str]]:
    """(ids of the stored calls, ids the tool results answer), in order."""
    asked = [c.id for m in messages if isinstance(m, AssistantMessage) for c in m.tool_calls]
    answered = [m.tool_call_id for m in messages if isinstance(m, ToolMessage)]
    return asked, answered


@pytest.mark.parametrize("bad", BAD_IDS, ids=BAD_IDS_NAMES)
async def test_an_id_a_provider_refuses_gets_a_fresh_one(bad: str) -> None:
    model = ScriptedModel([calls(check(bad)), text("web-03 is fine")])
    memory = InMemoryHistory()
    memory.append(UserMessage(content="web-03 is at 95% CPU"))

    result = await run(make_config(model, tools=[echo_tool()], memory=memory))

    assert result.stop_reason is StopReason.COMPLETED, result.error
    asked, answered = stored_ids(memory.messages)
    assert asked == answered == result.state.call_ids
    [fresh] = asked
    assert fresh != bad
    assert PROVIDER_ID.fullmatch(fresh)
    # The model sees the same pair in its next request.
    assert stored_ids(model.requests[1].messages) == ([fresh], [fresh])
    [result_message] = [m for m in memory.messages if isinstance(m, ToolMessage)]
    assert result_message.content == "ok web-03"


@pytest.mark.parametrize(
    "good",
    ["c" * 40, "toolu_01A09q90qw90lq917835lq9", "call_abc-DEF_123", "0"],
    ids=["40-chars", "anthropic", "mixed", "one-char"],
)
async def test_an_id_every_provider_accepts_is_kept(good: str) -> None:
    model = ScriptedModel([calls(check(good)), text("done")])

    result = await run(make_config(model, tools=[echo_tool()]))

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert result.state.call_ids == [good]


async def test_fresh_ids_stay_unique_within_the_response_and_the_job() -> None:
    long_a, long_b = "a" * 41, "a" * 41 + "b"
    model = ScriptedModel(
        [
            # Two calls whose ids differ only past the limit, and a valid one that
            # happens to be the id the first fresh one would get.
            calls(check(long_a, "web-1"), check(long_b, "web-2"), check("call_1_0", "web-3")),
            calls(check(long_a, "web-4")),
            text("done"),
        ]
    )
    memory = InMemoryHistory()
    memory.append(UserMessage(content="check the fleet"))

    result = await run(make_config(model, tools=[echo_tool()], memory=memory))

    assert result.stop_reason is StopReason.COMPLETED, result.error
    asked, answered = stored_ids(memory.messages)
    assert asked == answered == result.state.call_ids
    assert len(set(asked)) == 4
    assert all(PROVIDER_ID.fullmatch(i) for i in asked)
    contents = [m.content for m in memory.messages if isinstance(m, ToolMessage)]
    assert contents == ["ok web-1", "ok web-2", "ok web-3", "ok web-4"]


class ServiceArgs(BaseModel):
    host: str
    service: str


class Ledger:
    def __init__(self) -> None:
        self.keys: list[str] = []

    async def begin(self, key: str, tool: str, args_hash: str) -> LedgerEntry | None:
        self.keys.append(key)
        return None

    async def finish(self, key: str, output: str) -> None:
        self.keys.append(key)


async def test_approval_and_ledger_are_keyed_by_the_fresh_id(clock: FakeClock) -> None:
    ran: list[CallContext] = []

    async def restart(args: ServiceArgs, ctx: CallContext) -> str:
        ran.append(ctx)
        return f"restarted {args.service} on {args.host}"

    tool = FunctionTool(
        name="restart_service",
        description="restart",
        args_model=ServiceArgs,
        fn=restart,
        category="mutating",
    )
    long_id = "toolu_vrtx_" + "0123456789" * 4  # 51 chars
    write = ToolCall(
        id=long_id, name="restart_service", arguments='{"host": "web-03", "service": "nginx"}'
    )
    model = ScriptedModel([calls(write), text("restarted")])
    memory = InMemoryHistory()
    memory.append(UserMessage(content="restart nginx on web-03"))
    asked: list[str] = []

    async def pending(request: ConfirmRequest) -> Decision:
        asked.append(request.call_id)
        return Pending()

    paused = await run(
        make_config(model, tools=[tool], memory=memory, confirm=pending, clock=clock)
    )

    assert paused.stop_reason is StopReason.AWAITING_APPROVAL, paused.error
    assert paused.approval is not None
    fresh = paused.approval.call_id
    assert fresh != long_id and PROVIDER_ID.fullmatch(fresh)
    assert asked == [fresh]
    [stored] = [c for m in memory.messages if isinstance(m, AssistantMessage) for c in m.tool_calls]
    assert stored.id == fresh

    ledger = Ledger()
    state = RunState.model_validate_json(paused.state.model_dump_json())
    decision = Approved(
        confirmed_by=APPROVER, tool=paused.approval.tool, args_hash=paused.approval.args_hash
    )
    result = await run(
        make_config(model, tools=[tool], memory=memory, ledger=ledger, clock=clock),
        state,
        decision,
    )

    assert result.stop_reason is StopReason.COMPLETED, result.error
    [ctx] = ran
    assert ctx.call_id == fresh
    assert ctx.idempotency_key == f"job-1:{fresh}"
    assert ledger.keys == [f"job-1:{fresh}", f"job-1:{fresh}"]
    assert stored_ids(memory.messages) == ([fresh], [fresh])

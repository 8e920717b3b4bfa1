"""History tells the truth about who approved a call.

The model may write anything as ``confirmed_by``; only a human decision sets it. Once a
call is approved, its arguments in the history carry ``confirmed_by`` = the approver (the
model's value replaced, never a reason to refuse the call), so the next model request,
condensing and any reader of the history see who really approved. A call no one approved
(denied, or read-only) keeps no ``confirmed_by`` the model made up; other arguments stay
exactly as the model wrote them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from pydantic import BaseModel

from bot.agent import (
    AnyMessage,
    Approved,
    AssistantMessage,
    CallContext,
    ConfirmRequest,
    Decision,
    Denied,
    FunctionTool,
    InMemoryHistory,
    Pending,
    RunResult,
    RunState,
    StopReason,
    ToolCall,
    ToolMessage,
    UserMessage,
    run,
)
from bot.agent.memory import approved_arguments
from bot.agent.ports import LedgerEntry
from bot.agent.testing import ScriptedModel, call, calls, text

from .conftest import make_config

CLICKER = "U0CLICKER1"


class ServiceArgs(BaseModel):
    host: str
    service: str


class Ran:
    def __init__(self) -> None:
        self.confirmed_by: list[str | None] = []

    def tools(self) -> list[FunctionTool]:
        async def restart(args: ServiceArgs, ctx: CallContext) -> str:
            self.confirmed_by.append(ctx.confirmed_by)
            return f"restarted {args.service} on {args.host}"

        async def status(args: ServiceArgs, ctx: CallContext) -> str:
            return f"{args.service} on {args.host}: active"

        return [
            FunctionTool(
                name="restart_service",
                description="restart",
                args_model=ServiceArgs,
                fn=restart,
                category="mutating",
            ),
            FunctionTool(name="status", description="status", args_model=ServiceArgs, fn=status),
        ]


class Confirmer:
    def __init__(self, *decisions: Decision) -> None:
        self.decisions = list(decisions)

    async def __call__(self, request: ConfirmRequest) -> Decision:
        return self.decisions.pop(0)


def restart(call_id: str, **extra: object) -> ToolCall:
    return call("restart_service", call_id, host="web-03", service="nginx", **extra)


def call_in(messages: Sequence[AnyMessage], call_id: str) -> ToolCall:
    for message in messages:
        if isinstance(message, AssistantMessage):
            for tool_call in message.tool_calls:
                if tool_call.id == call_id:
                    return tool_call
    raise AssertionError(f"no call {call_id} in {messages}")


def arguments_in(messages: Sequence[AnyMessage], call_id: str) -> dict[str, object]:
    value = json.loads(call_in(messages, call_id).arguments)
    assert isinstance(value, dict)
    return value


def approve(result: RunResult, who: str = CLICKER) -> Approved:
    assert result.approval is not None
    return Approved(
        confirmed_by=who, tool=result.approval.tool, args_hash=result.approval.args_hash
    )


def memory_with_request() -> InMemoryHistory:
    memory = InMemoryHistory()
    memory.append(UserMessage(content="nginx leaks memory on web-03, restart it"))
    return memory


async def paused_then_approved(
    written: ToolCall, *, decision: Decision | None = None
) -> tuple[InMemoryHistory, ScriptedModel, Ran, RunResult]:
    """The model asks for ``written``; the run pauses; the clicker decides; it resumes."""
    ran = Ran()
    memory = memory_with_request()
    first = ScriptedModel([calls(written, content="Restarting nginx to clear the leak.")])
    paused = await run(
        make_config(first, tools=ran.tools(), memory=memory, confirm=Confirmer(Pending()))
    )
    assert paused.stop_reason is StopReason.AWAITING_APPROVAL, paused.error
    # Before the decision the history holds the call as the model wrote it.
    assert call_in(memory.messages, written.id) == written

    state = RunState.model_validate_json(paused.state.model_dump_json())
    model = ScriptedModel([text("nginx restarted on web-03")])
    resumed = await run(
        make_config(model, tools=ran.tools(), memory=memory), state, decision or approve(paused)
    )
    assert resumed.stop_reason is StopReason.COMPLETED, resumed.error
    model.assert_done()
    return memory, model, ran, resumed


async def test_the_models_confirmed_by_is_replaced_by_the_clicker() -> None:
    memory, model, ran, _ = await paused_then_approved(restart("c1", confirmed_by="U0MODEL99"))

    assert ran.confirmed_by == [CLICKER]  # the tool ran as the clicker, not the model's value
    [request] = model.requests
    # The next request shows the model who approved its call, in the call itself.
    assert arguments_in(request.messages, "c1") == {
        "host": "web-03",
        "service": "nginx",
        "confirmed_by": CLICKER,
    }
    [result] = [m for m in request.messages if isinstance(m, ToolMessage)]
    assert result.confirmed_by == CLICKER
    # Every copy the history keeps says the same (condensing reads these).
    assert arguments_in(memory.messages, "c1")["confirmed_by"] == CLICKER
    assert arguments_in(memory.originals, "c1")["confirmed_by"] == CLICKER
    assert "U0MODEL99" not in json.dumps([m.model_dump() for m in memory.originals])


async def test_an_approved_call_without_confirmed_by_gets_the_clickers() -> None:
    _, model, _, _ = await paused_then_approved(restart("c1"))

    assert arguments_in(model.requests[0].messages, "c1") == {
        "host": "web-03",
        "service": "nginx",
        "confirmed_by": CLICKER,
    }


async def test_an_approval_given_at_once_is_written_too() -> None:
    ran = Ran()
    memory = memory_with_request()
    model = ScriptedModel([calls(restart("c1", confirmed_by="U0MODEL99")), text("done")])
    config = make_config(
        model,
        tools=ran.tools(),
        memory=memory,
        confirm=Confirmer(Approved(confirmed_by=CLICKER)),
    )

    result = await run(config)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert arguments_in(model.requests[1].messages, "c1")["confirmed_by"] == CLICKER


async def test_a_denied_call_keeps_no_approver_the_model_made_up() -> None:
    ran = Ran()
    memory = memory_with_request()
    first = ScriptedModel([calls(restart("c1", confirmed_by="U0MODEL99"))])
    paused = await run(
        make_config(first, tools=ran.tools(), memory=memory, confirm=Confirmer(Pending()))
    )
    model = ScriptedModel([text("not restarted")])
    resumed = await run(
        make_config(model, tools=ran.tools(), memory=memory),
        paused.state,
        Denied(reason=f"denied by <@{CLICKER}>"),
    )

    assert resumed.stop_reason is StopReason.COMPLETED, resumed.error
    assert ran.confirmed_by == []
    assert arguments_in(model.requests[0].messages, "c1") == {"host": "web-03", "service": "nginx"}


async def test_calls_no_one_approves_are_left_as_the_model_wrote_them() -> None:
    memory = memory_with_request()
    written = ToolCall(id="c1", name="status", arguments='{"service": "nginx",  "host": "web-03"}')
    model = ScriptedModel([calls(written), text("active")])

    await run(make_config(model, tools=Ran().tools(), memory=memory))

    assert call_in(model.requests[1].messages, "c1") is written  # the very object, unchanged


async def test_a_call_the_ledger_answers_names_its_approver() -> None:
    """A replay after a crash (the ledger has the result) still says who approved it."""

    class DoneLedger:
        async def begin(self, key: str, tool: str, args_hash: str) -> LedgerEntry | None:
            return LedgerEntry(state="done", output="restarted nginx on web-03")

        async def finish(self, key: str, output: str) -> None:
            raise AssertionError("nothing ran")

    ran = Ran()
    model = ScriptedModel([calls(restart("c1", confirmed_by="U0MODEL99")), text("done")])
    config = make_config(
        model,
        tools=ran.tools(),
        confirm=Confirmer(Approved(confirmed_by=CLICKER)),
        ledger=DoneLedger(),
    )

    result = await run(config)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert ran.confirmed_by == []  # answered from the ledger, not run again
    assert arguments_in(model.requests[1].messages, "c1")["confirmed_by"] == CLICKER
    [answer] = [m for m in model.requests[1].messages if isinstance(m, ToolMessage)]
    assert answer.confirmed_by == CLICKER


def test_approved_arguments_keep_the_rest_as_written() -> None:
    written = '{"service": "nginx", "confirmed_by": "U0MODEL99", "host": "web-03"}'
    assert json.loads(approved_arguments(written, CLICKER)) == {
        "service": "nginx",
        "confirmed_by": CLICKER,
        "host": "web-03",
    }
    assert list(json.loads(approved_arguments(written, CLICKER))) == [
        "service",
        "confirmed_by",
        "host",
    ]
    assert json.loads(approved_arguments(written, None)) == {"service": "nginx", "host": "web-03"}
    # An escaped key is the same key.
    escaped = '{"confirmed\\u005fby": "U0MODEL99"}'
    assert json.loads(approved_arguments(escaped, None)) == {}
    # Nothing to change: the same text.
    same = '{"host": "web-03",  "confirmed_by": "U0CLICKER1"}'
    assert approved_arguments(same, CLICKER) is same
    assert approved_arguments('{"host": "web-03"}', None) == '{"host": "web-03"}'
    # Not a JSON object (stored as {} and never run): left alone.
    assert approved_arguments("[1, 2]", CLICKER) == "[1, 2]"

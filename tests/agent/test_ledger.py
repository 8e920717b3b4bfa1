"""The ledger of mutating calls: a crash never re-runs a write blindly.

Each approved write is recorded ``started`` under ``{job_id}:{call_id}`` before it runs
and ``done`` with its output after. A key already ``started`` (the process died during
the write) means the outcome is unknown: the tool is not run and the model is told. A
key already ``done`` returns the recorded output without running the tool again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel

from bot.agent import (
    AnyMessage,
    Approved,
    CallContext,
    ConfirmRequest,
    Decision,
    Denied,
    FunctionTool,
    InMemoryHistory,
    Pending,
    RunState,
    StopReason,
    ToolMessage,
    UserMessage,
    run,
)
from bot.agent.ports import LedgerEntry
from bot.agent.testing import FakeClock, ScriptedModel, call, calls, text
from bot.errors import ToolError

from .conftest import echo_tool, make_config

APPROVER = "U0123ABC"
ARGS = {"host": "web-03", "service": "nginx"}


class ServiceArgs(BaseModel):
    host: str
    service: str


class MemoryLedger:
    """The ``Ledger`` port kept in a dict, with a log of every operation."""

    def __init__(self, entries: dict[str, LedgerEntry] | None = None) -> None:
        self.entries = dict(entries or {})
        self.log: list[tuple[str, ...]] = []

    async def begin(self, key: str, tool: str, args_hash: str) -> LedgerEntry | None:
        self.log.append(("begin", key, tool, args_hash))
        prior = self.entries.get(key)
        if prior is None:
            self.entries[key] = LedgerEntry(state="started")
        return prior

    async def finish(self, key: str, output: str) -> None:
        self.log.append(("finish", key, output))
        self.entries[key] = LedgerEntry(state="done", output=output)


class Writes:
    """A mutating tool's body that notes the ledger state it saw when it ran."""

    def __init__(self, ledger: MemoryLedger, *, error: str | None = None) -> None:
        self.ledger = ledger
        self.error = error
        self.runs: list[tuple[CallContext, LedgerEntry | None]] = []

    async def __call__(self, args: ServiceArgs, ctx: CallContext) -> str:
        self.runs.append((ctx, self.ledger.entries.get(ctx.idempotency_key)))
        if self.error is not None:
            raise ToolError(self.error)
        if ctx.dry_run:
            return f"would touch {args.service} on {args.host}"
        return f"restarted {args.service} on {args.host}"

    def real_runs(self) -> list[tuple[CallContext, LedgerEntry | None]]:
        return [r for r in self.runs if not r[0].dry_run]


def write_tool(
    writes: Writes,
    name: str = "restart_service",
    category: Literal["mutating", "destructive"] = "mutating",
) -> FunctionTool:
    return FunctionTool(
        name=name,
        description=name,
        args_model=ServiceArgs,
        fn=writes,
        category=category,
    )


async def approve(request: ConfirmRequest) -> Decision:
    return Approved(confirmed_by=APPROVER)


def args_hash(arguments: dict[str, object]) -> str:
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def tool_messages(messages: Sequence[AnyMessage]) -> list[ToolMessage]:
    return [m for m in messages if isinstance(m, ToolMessage)]


async def test_an_approved_write_is_recorded_started_then_done(clock: FakeClock) -> None:
    ledger = MemoryLedger()
    writes = Writes(ledger)
    model = ScriptedModel([calls(call("restart_service", "c1", **ARGS)), text("restarted")])
    config = make_config(
        model,
        tools=[write_tool(writes)],
        confirm=approve,
        ledger=ledger,
        clock=clock,
        job_id="job-7",
    )

    result = await run(config)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert ledger.log == [
        ("begin", "job-7:c1", "restart_service", args_hash(ARGS)),
        ("finish", "job-7:c1", "restarted nginx on web-03"),
    ]
    # The write ran after ``started`` was recorded, under the same key.
    [(ctx, seen)] = writes.runs
    assert ctx.idempotency_key == "job-7:c1"
    assert seen == LedgerEntry(state="started")
    assert ledger.entries["job-7:c1"] == LedgerEntry(
        state="done", output="restarted nginx on web-03"
    )


async def test_a_failed_write_is_recorded_done_with_its_error(clock: FakeClock) -> None:
    ledger = MemoryLedger()
    writes = Writes(ledger, error="unit nginx.service not found")
    model = ScriptedModel([calls(call("restart_service", "c1", **ARGS)), text("failed")])
    config = make_config(
        model, tools=[write_tool(writes)], confirm=approve, ledger=ledger, clock=clock
    )

    result = await run(config)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert ledger.log[-1] == ("finish", "job-1:c1", "Error: unit nginx.service not found")
    [message] = tool_messages(model.requests[1].messages)
    assert message.is_error


async def test_a_write_started_before_a_crash_is_not_run_again(clock: FakeClock) -> None:
    ledger = MemoryLedger({"job-1:c1": LedgerEntry(state="started")})
    writes = Writes(ledger)
    model = ScriptedModel([calls(call("restart_service", "c1", **ARGS)), text("will check")])
    config = make_config(
        model, tools=[write_tool(writes)], confirm=approve, ledger=ledger, clock=clock
    )

    result = await run(config)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert writes.runs == []
    [message] = tool_messages(model.requests[1].messages)
    assert message.is_error
    assert message.content.startswith("Error: ")
    assert "outcome unknown" in message.content
    assert [op[0] for op in ledger.log] == ["begin"]
    assert ledger.entries["job-1:c1"] == LedgerEntry(state="started")


async def test_a_write_already_done_returns_its_recorded_output(clock: FakeClock) -> None:
    recorded = "restarted nginx on web-03 (pid 4121 → 5310)"
    ledger = MemoryLedger({"job-1:c1": LedgerEntry(state="done", output=recorded)})
    writes = Writes(ledger)
    model = ScriptedModel([calls(call("restart_service", "c1", **ARGS)), text("restarted")])
    config = make_config(
        model, tools=[write_tool(writes)], confirm=approve, ledger=ledger, clock=clock
    )

    result = await run(config)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert writes.runs == []
    [message] = tool_messages(model.requests[1].messages)
    assert recorded in message.content
    assert not message.is_error
    assert [op[0] for op in ledger.log] == ["begin"]


async def test_a_resume_after_a_crash_mid_write_reports_an_unknown_outcome(
    clock: FakeClock,
) -> None:
    """The job paused, was approved, crashed during the write, and is resumed again."""
    ledger = MemoryLedger()
    writes = Writes(ledger)
    memory = InMemoryHistory()
    memory.append(UserMessage(content="restart nginx on web-03"))
    model = ScriptedModel([calls(call("restart_service", "c1", **ARGS)), text("will check")])

    async def pending(request: ConfirmRequest) -> Decision:
        return Pending()

    paused = await run(
        make_config(
            model,
            tools=[write_tool(writes)],
            memory=memory,
            confirm=pending,
            ledger=ledger,
            clock=clock,
        )
    )
    assert paused.approval is not None
    saved = paused.state.model_dump_json()
    # The first resume got as far as recording ``started`` before the process died.
    ledger.entries["job-1:c1"] = LedgerEntry(state="started")
    decision = Approved(
        confirmed_by=APPROVER, tool="restart_service", args_hash=paused.approval.args_hash
    )

    result = await run(
        make_config(model, tools=[write_tool(writes)], memory=memory, ledger=ledger, clock=clock),
        RunState.model_validate_json(saved),
        decision,
    )

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert writes.runs == []
    [message] = tool_messages(model.requests[1].messages)
    assert "outcome unknown" in message.content and message.is_error


async def test_only_approved_writes_touch_the_ledger(clock: FakeClock) -> None:
    ledger = MemoryLedger()
    writes = Writes(ledger)

    async def deny(request: ConfirmRequest) -> Decision:
        return Denied(reason="denied by <@U1>")

    model = ScriptedModel(
        [
            calls(call("check", "c1", host="web-03"), call("restart_service", "c2", **ARGS)),
            text("nothing changed"),
        ]
    )
    config = make_config(
        model,
        tools=[echo_tool(), write_tool(writes)],
        confirm=deny,
        ledger=ledger,
        clock=clock,
    )

    result = await run(config)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert ledger.log == []
    assert writes.runs == []


async def test_a_destructive_dry_run_is_not_ledgered(clock: FakeClock) -> None:
    ledger = MemoryLedger()
    writes = Writes(ledger)
    model = ScriptedModel([calls(call("stop_service", "c1", **ARGS)), text("stopped")])
    config = make_config(
        model,
        tools=[write_tool(writes, name="stop_service", category="destructive")],
        confirm=approve,
        ledger=ledger,
        clock=clock,
    )

    result = await run(config)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert [r[0].dry_run for r in writes.runs] == [True, False]
    # The dry run saw no ledger entry; the real run saw its ``started``.
    assert [r[1] for r in writes.runs] == [None, LedgerEntry(state="started")]
    assert ledger.log == [
        ("begin", "job-1:c1", "stop_service", args_hash(ARGS)),
        ("finish", "job-1:c1", "restarted nginx on web-03"),
    ]

"""Pausing for an approval and resuming the same job later.

A confirm answering ``Pending`` ends the run as ``awaiting_approval`` with a state that
survives JSON. ``run(config, state, decision)`` then runs exactly the approved call
(bound by tool and canonical-args hash), the rest of its batch, and carries on the loop
with the budget that was left: iterations, tokens and active time are the job's, and
time spent waiting for the human does not count.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

import pytest
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
    Limits,
    ModelRequest,
    ModelResponse,
    Pending,
    RunResult,
    RunState,
    StopReason,
    ToolMessage,
    Usage,
    UserMessage,
    run,
)
from bot.agent.testing import FakeClock, ScriptedModel, call, calls, text

from .conftest import Recorder, make_config

APPROVER = "U0123ABC"
RESTART_ARGS = {"host": "web-03", "service": "nginx"}


class HostArgs(BaseModel):
    host: str


class ServiceArgs(BaseModel):
    host: str
    service: str


class Ran:
    """What each tool ran with, in order."""

    def __init__(self) -> None:
        self.log: list[tuple[str, str, CallContext]] = []

    def names(self) -> list[str]:
        return [
            f"{name}:{ctx.call_id}" + (":dry" if ctx.dry_run else "") for name, _, ctx in self.log
        ]

    def tools(self) -> list[FunctionTool]:
        async def check(args: HostArgs, ctx: CallContext) -> str:
            self.log.append(("check", args.host, ctx))
            return f"ok {args.host}"

        async def restart(args: ServiceArgs, ctx: CallContext) -> str:
            self.log.append(("restart_service", args.host, ctx))
            return f"restarted {args.service} on {args.host}"

        async def stop(args: ServiceArgs, ctx: CallContext) -> str:
            self.log.append(("stop_service", args.host, ctx))
            if ctx.dry_run:
                return f"would stop {args.service} on {args.host}"
            return f"stopped {args.service} on {args.host}"

        return [
            FunctionTool(name="check", description="check", args_model=HostArgs, fn=check),
            FunctionTool(
                name="restart_service",
                description="restart",
                args_model=ServiceArgs,
                fn=restart,
                category="mutating",
            ),
            FunctionTool(
                name="stop_service",
                description="stop",
                args_model=ServiceArgs,
                fn=stop,
                category="destructive",
            ),
        ]


class Confirmer:
    def __init__(self, *decisions: Decision) -> None:
        self.decisions = list(decisions)
        self.requests: list[ConfirmRequest] = []

    async def __call__(self, request: ConfirmRequest) -> Decision:
        self.requests.append(request)
        return self.decisions.pop(0)


def args_hash(arguments: dict[str, object]) -> str:
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def tool_messages(messages: Sequence[AnyMessage]) -> list[ToolMessage]:
    return [m for m in messages if isinstance(m, ToolMessage)]


def roundtrip(state: RunState) -> RunState:
    """What the store does between the pause and the resume."""
    return RunState.model_validate_json(state.model_dump_json())


def restart(call_id: str) -> Any:
    return call("restart_service", call_id, **RESTART_ARGS)


def approve(result: RunResult, who: str = APPROVER) -> Approved:
    assert result.approval is not None
    return Approved(
        confirmed_by=who, tool=result.approval.tool, args_hash=result.approval.args_hash
    )


def assert_well_formed(history: Sequence[AnyMessage]) -> None:
    """Each assistant tool call is answered exactly once, right after its message."""
    i = 0
    while i < len(history):
        message = history[i]
        i += 1
        if isinstance(message, AssistantMessage) and message.tool_calls:
            answers = history[i : i + len(message.tool_calls)]
            assert [m.tool_call_id for m in answers if isinstance(m, ToolMessage)] == [
                c.id for c in message.tool_calls
            ], history
            i += len(message.tool_calls)


async def test_pending_pauses_the_run_with_a_serializable_state(
    clock: FakeClock, recorder: Recorder
) -> None:
    ran = Ran()
    confirm = Confirmer(Pending())
    reason = "nginx workers are stuck; restarting them"

    response = calls(
        call("check", "c1", host="web-03"),
        restart("c2"),
        call("check", "c3", host="web-01"),
        content=reason,
        usage=Usage(prompt_tokens=120, completion_tokens=30, cached_tokens=20),
    )

    def first(request: ModelRequest) -> ModelResponse:
        clock.advance(7.5)  # active time spent in the model call
        return response

    model = ScriptedModel([first])
    memory = InMemoryHistory()
    memory.append(UserMessage(content="web-03 is at 95% CPU"))
    config = make_config(
        model, tools=ran.tools(), memory=memory, confirm=confirm, clock=clock, on_event=recorder
    )

    result = await run(config)

    assert result.stop_reason is StopReason.AWAITING_APPROVAL, result.error
    assert result.approval is not None
    assert result.approval.call_id == "c2"
    assert result.approval.tool == "restart_service"
    assert result.approval.args_hash == args_hash(RESTART_ARGS)
    assert result.approval.arguments == RESTART_ARGS
    [request] = confirm.requests
    assert request.args_hash == result.approval.args_hash
    assert [e.approval for e in recorder.of("approval_requested")] == [result.approval]
    # The call after the paused one has not run; the one before has.
    assert ran.names() == ["check:c1"]

    state = result.state
    assert state.iterations == 1
    assert state.model_calls == 1
    assert state.tool_executions == 1
    assert state.usage == Usage(prompt_tokens=120, completion_tokens=30, cached_tokens=20)
    assert state.active_time_s == 7.5
    assert len(state.loop_window) == 1
    assert state.pending is not None
    assert state.pending.message == AssistantMessage(content=reason, tool_calls=response.tool_calls)
    assert [c.id for c in state.pending.remaining] == ["c2", "c3"]

    assert roundtrip(state) == state
    # Memory holds the assistant message and the one result so far.
    assert [type(m).__name__ for m in memory.messages] == [
        "UserMessage",
        "AssistantMessage",
        "ToolMessage",
    ]


async def test_resume_runs_the_approved_call_then_the_rest_then_goes_on(
    clock: FakeClock,
) -> None:
    ran = Ran()
    model = ScriptedModel(
        [
            calls(
                call("check", "c1", host="web-03"),
                restart("c2"),
                call("check", "c3", host="web-01"),
                content="restarting nginx",
            ),
            text("nginx restarted; CPU back to normal"),
        ]
    )
    memory = InMemoryHistory()
    memory.append(UserMessage(content="web-03 is at 95% CPU"))
    confirm = Confirmer(Pending())
    paused = await run(
        make_config(model, tools=ran.tools(), memory=memory, confirm=confirm, clock=clock)
    )
    assert paused.stop_reason is StopReason.AWAITING_APPROVAL, paused.error
    state = roundtrip(paused.state)

    # A new process resumes: same history, a confirm that must not be asked again.
    resumed_confirm = Confirmer()
    config = make_config(
        model, tools=ran.tools(), memory=memory, confirm=resumed_confirm, clock=clock
    )
    result = await run(config, state, approve(paused))

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert result.output == "nginx restarted; CPU back to normal"
    assert resumed_confirm.requests == []
    assert ran.names() == ["check:c1", "restart_service:c2", "check:c3"]
    restart_ctx = ran.log[1][2]
    assert restart_ctx.confirmed_by == APPROVER
    assert restart_ctx.idempotency_key == "job-1:c2"
    results = tool_messages(model.requests[1].messages)
    assert [m.tool_call_id for m in results] == ["c1", "c2", "c3"]
    assert results[1].content == "restarted nginx on web-03"
    assert results[1].confirmed_by == APPROVER
    assert_well_formed(memory.messages)
    assert result.state.pending is None
    assert result.iterations == 2
    assert result.tool_executions == 3
    model.assert_done()


async def test_resume_with_a_denial_tells_the_model(clock: FakeClock) -> None:
    ran = Ran()
    model = ScriptedModel([calls(restart("c1")), text("left nginx alone")])
    memory = InMemoryHistory()
    memory.append(UserMessage(content="restart nginx"))
    paused = await run(
        make_config(
            model, tools=ran.tools(), memory=memory, confirm=Confirmer(Pending()), clock=clock
        )
    )
    state = roundtrip(paused.state)

    result = await run(
        make_config(model, tools=ran.tools(), memory=memory, clock=clock),
        state,
        Denied(reason="denied by <@U1>"),
    )

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert ran.log == []
    [message] = tool_messages(model.requests[1].messages)
    assert message.content == "Error: declined: denied by <@U1>"
    assert message.is_error


@pytest.mark.parametrize(
    "decision",
    [
        Approved(confirmed_by=APPROVER, tool="restart_service", args_hash="0" * 64),
        Approved(confirmed_by=APPROVER, tool="stop_service", args_hash=args_hash(RESTART_ARGS)),
    ],
    ids=["other-args", "other-tool"],
)
async def test_an_approval_for_another_call_is_refused(
    clock: FakeClock, decision: Approved
) -> None:
    ran = Ran()
    model = ScriptedModel([calls(restart("c1")), text("not approved")])
    memory = InMemoryHistory()
    memory.append(UserMessage(content="restart nginx"))
    paused = await run(
        make_config(
            model, tools=ran.tools(), memory=memory, confirm=Confirmer(Pending()), clock=clock
        )
    )

    result = await run(
        make_config(model, tools=ran.tools(), memory=memory, clock=clock),
        roundtrip(paused.state),
        decision,
    )

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert ran.log == []
    [message] = tool_messages(model.requests[1].messages)
    assert message.is_error
    assert message.content.startswith("Error: declined: ")
    assert message.confirmed_by is None


async def test_resume_keeps_the_iteration_budget(clock: FakeClock) -> None:
    ran = Ran()
    model = ScriptedModel(
        [
            calls(restart("c1")),
            calls(call("check", "c2", host="web-03")),
            calls(call("check", "c3", host="web-01")),
        ]
    )
    memory = InMemoryHistory()
    memory.append(UserMessage(content="restart nginx"))
    limits = Limits(max_iterations=3)
    paused = await run(
        make_config(
            model,
            tools=ran.tools(),
            memory=memory,
            confirm=Confirmer(Pending()),
            clock=clock,
            limits=limits,
        )
    )
    assert paused.iterations == 1

    result = await run(
        make_config(model, tools=ran.tools(), memory=memory, clock=clock, limits=limits),
        roundtrip(paused.state),
        approve(paused),
    )

    # Responses 2 and 3 are the job's last two; their tools still run, and no 4th call.
    assert result.stop_reason is StopReason.LIMIT_ITERATIONS, result.error
    assert result.iterations == 3
    assert len(model.requests) == 3
    assert ran.names() == ["restart_service:c1", "check:c2", "check:c3"]
    model.assert_done()


async def test_token_usage_keeps_accumulating_across_the_pause(clock: FakeClock) -> None:
    ran = Ran()
    model = ScriptedModel(
        [
            calls(restart("c1"), usage=Usage(prompt_tokens=1000, completion_tokens=50)),
            text("done", usage=Usage(prompt_tokens=1200, completion_tokens=40, cached_tokens=900)),
        ]
    )
    memory = InMemoryHistory()
    memory.append(UserMessage(content="restart nginx"))
    paused = await run(
        make_config(
            model, tools=ran.tools(), memory=memory, confirm=Confirmer(Pending()), clock=clock
        )
    )

    result = await run(
        make_config(model, tools=ran.tools(), memory=memory, clock=clock),
        roundtrip(paused.state),
        approve(paused),
    )

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert result.usage == Usage(prompt_tokens=2200, completion_tokens=90, cached_tokens=900)
    assert result.model_calls == 2


async def test_token_budget_is_the_jobs_not_a_fresh_one(clock: FakeClock) -> None:
    ran = Ran()
    model = ScriptedModel([calls(restart("c1"), usage=Usage(prompt_tokens=900))])
    memory = InMemoryHistory()
    memory.append(UserMessage(content="restart nginx"))
    limits = Limits(token_budget=1000, max_output_tokens=50)
    paused = await run(
        make_config(
            model,
            tools=ran.tools(),
            memory=memory,
            confirm=Confirmer(Pending()),
            clock=clock,
            limits=limits,
        )
    )
    assert paused.stop_reason is StopReason.AWAITING_APPROVAL, paused.error

    result = await run(
        make_config(model, tools=ran.tools(), memory=memory, clock=clock, limits=limits),
        roundtrip(paused.state),
        approve(paused),
    )

    # 900 spent + 900 prompt + 50 output reserved > 1000: no second call.
    assert result.stop_reason is StopReason.LIMIT_TOKENS, result.error
    assert ran.names() == ["restart_service:c1"]
    assert len(model.requests) == 1


async def test_time_paused_does_not_count_against_the_deadline(clock: FakeClock) -> None:
    ran = Ran()

    def slow(response: ModelResponse, seconds: float) -> Any:
        def step(request: ModelRequest) -> ModelResponse:
            clock.advance(seconds)
            return response

        return step

    model = ScriptedModel([slow(calls(restart("c1")), 6.0), slow(text("done"), 3.0)])
    memory = InMemoryHistory()
    memory.append(UserMessage(content="restart nginx"))
    limits = Limits(deadline_s=10.0)
    paused = await run(
        make_config(
            model,
            tools=ran.tools(),
            memory=memory,
            confirm=Confirmer(Pending()),
            clock=clock,
            limits=limits,
        )
    )
    assert paused.state.active_time_s == 6.0

    clock.advance(100_000.0)  # the card waits a long time for a click
    result = await run(
        make_config(model, tools=ran.tools(), memory=memory, clock=clock, limits=limits),
        roundtrip(paused.state),
        approve(paused),
    )

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert result.state.active_time_s == 9.0
    assert ran.names() == ["restart_service:c1"]


async def test_active_time_before_the_pause_still_counts(clock: FakeClock) -> None:
    ran = Ran()

    def slow(response: ModelResponse, seconds: float) -> Any:
        def step(request: ModelRequest) -> ModelResponse:
            clock.advance(seconds)
            return response

        return step

    model = ScriptedModel(
        [
            slow(calls(restart("c1")), 6.0),
            slow(calls(call("check", "c2", host="web-03")), 5.0),
        ]
    )
    memory = InMemoryHistory()
    memory.append(UserMessage(content="restart nginx"))
    limits = Limits(deadline_s=10.0)
    paused = await run(
        make_config(
            model,
            tools=ran.tools(),
            memory=memory,
            confirm=Confirmer(Pending()),
            clock=clock,
            limits=limits,
        )
    )
    clock.advance(500.0)

    result = await run(
        make_config(model, tools=ran.tools(), memory=memory, clock=clock, limits=limits),
        roundtrip(paused.state),
        approve(paused),
    )

    # 6 s before the pause + 5 s after it > 10 s.
    assert result.stop_reason is StopReason.LIMIT_DEADLINE, result.error
    assert len(model.requests) == 2


async def test_a_resumed_destructive_call_does_not_dry_run_again(clock: FakeClock) -> None:
    ran = Ran()
    model = ScriptedModel(
        [calls(call("stop_service", "c1", **RESTART_ARGS)), text("stopped nginx")]
    )
    memory = InMemoryHistory()
    memory.append(UserMessage(content="stop nginx"))
    confirm = Confirmer(Pending())
    paused = await run(
        make_config(model, tools=ran.tools(), memory=memory, confirm=confirm, clock=clock)
    )
    assert paused.stop_reason is StopReason.AWAITING_APPROVAL, paused.error
    assert ran.names() == ["stop_service:c1:dry"]
    assert confirm.requests[0].dry_run_output == "would stop nginx on web-03"
    assert paused.approval is not None
    assert paused.approval.dry_run_output == "would stop nginx on web-03"

    result = await run(
        make_config(model, tools=ran.tools(), memory=memory, clock=clock),
        roundtrip(paused.state),
        approve(paused),
    )

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert ran.names() == ["stop_service:c1:dry", "stop_service:c1"]
    assert ran.log[1][2].confirmed_by == APPROVER
    [message] = tool_messages(model.requests[1].messages)
    assert message.content == "stopped nginx on web-03"


async def test_later_mutating_calls_of_the_resumed_batch_ask_again(clock: FakeClock) -> None:
    ran = Ran()
    model = ScriptedModel(
        [
            calls(restart("c1"), call("restart_service", "c2", host="web-01", service="nginx")),
            text("restarted web-03 only"),
        ]
    )
    memory = InMemoryHistory()
    memory.append(UserMessage(content="restart nginx everywhere"))
    paused = await run(
        make_config(
            model, tools=ran.tools(), memory=memory, confirm=Confirmer(Pending()), clock=clock
        )
    )
    assert paused.state.pending is not None
    assert [c.id for c in paused.state.pending.remaining] == ["c1", "c2"]

    second = Confirmer(Denied(reason="denied by <@U1>"))
    result = await run(
        make_config(model, tools=ran.tools(), memory=memory, confirm=second, clock=clock),
        roundtrip(paused.state),
        approve(paused),
    )

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert [r.call_id for r in second.requests] == ["c2"]
    assert ran.names() == ["restart_service:c1"]
    first_result, second_result = tool_messages(model.requests[1].messages)
    assert first_result.confirmed_by == APPROVER
    assert second_result.content == "Error: declined: denied by <@U1>"


async def test_the_loop_detector_window_survives_the_pause(clock: FakeClock) -> None:
    ran = Ran()
    model = ScriptedModel(
        [
            calls(call("check", "c1", host="web-03")),
            calls(call("check", "c2", host="web-03"), restart("c3")),
            calls(call("check", "c4", host="web-03")),
            text("giving up on polling"),
        ]
    )
    memory = InMemoryHistory()
    memory.append(UserMessage(content="watch web-03"))
    paused = await run(
        make_config(
            model, tools=ran.tools(), memory=memory, confirm=Confirmer(Pending()), clock=clock
        )
    )
    assert len(paused.state.loop_window) == 2

    result = await run(
        make_config(model, tools=ran.tools(), memory=memory, clock=clock),
        roundtrip(paused.state),
        approve(paused),
    )

    assert result.stop_reason is StopReason.COMPLETED, result.error
    last = tool_messages(model.requests[3].messages)[-1]
    assert last.tool_call_id == "c4"
    assert last.content.startswith("Error: loop detected")


async def test_a_resumed_batch_can_pause_again_at_its_next_write(clock: FakeClock) -> None:
    ran = Ran()
    model = ScriptedModel(
        [
            calls(
                restart("c1"),
                call("check", "c2", host="web-01"),
                call("restart_service", "c3", host="web-01", service="nginx"),
                usage=Usage(prompt_tokens=100, completion_tokens=10),
            ),
            text("both restarted"),
        ]
    )
    memory = InMemoryHistory()
    memory.append(UserMessage(content="restart nginx on web-03 and web-01"))
    first = await run(
        make_config(
            model, tools=ran.tools(), memory=memory, confirm=Confirmer(Pending()), clock=clock
        )
    )
    assert first.approval is not None and first.approval.call_id == "c1"

    second = await run(
        make_config(
            model, tools=ran.tools(), memory=memory, confirm=Confirmer(Pending()), clock=clock
        ),
        roundtrip(first.state),
        approve(first),
    )

    assert second.stop_reason is StopReason.AWAITING_APPROVAL, second.error
    assert second.approval is not None and second.approval.call_id == "c3"
    assert second.approval.args_hash == args_hash({"host": "web-01", "service": "nginx"})
    assert second.state.pending is not None
    assert [c.id for c in second.state.pending.remaining] == ["c3"]
    assert second.iterations == 1
    assert second.usage == Usage(prompt_tokens=100, completion_tokens=10)
    assert ran.names() == ["restart_service:c1", "check:c2"]

    third = await run(
        make_config(model, tools=ran.tools(), memory=memory, clock=clock),
        roundtrip(second.state),
        approve(second, who="U0999XYZ"),
    )

    assert third.stop_reason is StopReason.COMPLETED, third.error
    assert ran.names() == ["restart_service:c1", "check:c2", "restart_service:c3"]
    results = tool_messages(model.requests[1].messages)
    assert [(m.tool_call_id, m.confirmed_by) for m in results] == [
        ("c1", APPROVER),
        ("c2", None),
        ("c3", "U0999XYZ"),
    ]
    assert_well_formed(memory.messages)
    model.assert_done()

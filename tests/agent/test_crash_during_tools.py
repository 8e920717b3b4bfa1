"""Limits exact across crashes: a response, its usage and the iteration are saved before
its tools run, with the batch as the calls still to run.

A process that dies while a tool runs leaves a saved state that counts the model call
that asked for it; the run that resumes the job runs the calls without a result (the
ledger answers a write that already ran) instead of asking the model again for free.
The "crash" here is the run task cancelled mid-tool; what survives it is only what was
saved: the last checkpointed state and the flushed history.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from pydantic import BaseModel

from bot.agent import (
    AnyMessage,
    Approved,
    AssistantMessage,
    CallContext,
    CancelToken,
    ConfirmRequest,
    Decision,
    FunctionTool,
    Injected,
    InMemoryHistory,
    Limits,
    RunState,
    StopReason,
    ToolMessage,
    UserMessage,
    run,
)
from bot.agent.messages import Usage
from bot.agent.testing import ScriptedModel, call, calls, text

from .conftest import HostArgs, make_config
from .test_ledger import MemoryLedger


class DurableHistory(InMemoryHistory):
    """In-memory history that knows which of its messages were flushed."""

    def __init__(self, messages: Sequence[AnyMessage] = ()) -> None:
        super().__init__(messages=list(messages), originals=list(messages))
        self.durable: list[AnyMessage] = list(messages)

    async def flush(self) -> None:
        await super().flush()
        self.durable = list(self.messages)


class Saved:
    """The checkpoint port: keeps the last saved state and flushes the history."""

    def __init__(self, memory: DurableHistory) -> None:
        self.memory = memory
        self.states: list[RunState] = []

    async def __call__(self, state: RunState) -> None:
        await self.memory.flush()
        self.states.append(state.model_copy(deep=True))

    @property
    def last(self) -> RunState:
        return self.states[-1]


class Hang:
    """A read-only tool that answers at once, or never while ``hanging`` is set."""

    def __init__(self) -> None:
        self.ran: list[str] = []
        self.started = asyncio.Event()
        self.hanging = True

    def tool(self, name: str = "check") -> FunctionTool:
        async def fn(args: HostArgs, ctx: CallContext) -> str:
            self.ran.append(args.host)
            if self.hanging and args.host == "web-04":
                self.started.set()
                await asyncio.Event().wait()
            return f"ok {args.host}"

        return FunctionTool(name=name, description="check a host", args_model=HostArgs, fn=fn)


async def crash_during_tool(config_run: asyncio.Task[object], hang: Hang) -> None:
    await asyncio.wait_for(hang.started.wait(), 5)
    config_run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await config_run


def usage(prompt: int, completion: int) -> Usage:
    return Usage(prompt_tokens=prompt, completion_tokens=completion)


def start() -> DurableHistory:
    return DurableHistory([UserMessage(content="check web-03 and web-04")])


async def test_the_call_that_asked_for_the_tools_is_counted_and_not_made_again() -> None:
    hang = Hang()
    memory = start()
    saved = Saved(memory)
    model = ScriptedModel(
        [
            calls(
                call("check", "c1", host="web-03"),
                call("check", "c2", host="web-04"),
                usage=usage(1000, 50),
            )
        ]
    )
    config = make_config(model, tools=[hang.tool()], memory=memory, on_checkpoint=saved)
    task = asyncio.ensure_future(run(config))
    await crash_during_tool(task, hang)

    state = saved.last
    assert state.iterations == 1 and state.model_calls == 1
    assert state.usage.prompt_tokens == 1000 and state.usage.completion_tokens == 50
    assert state.pending is not None and state.pending.approval is None
    assert [c.id for c in state.pending.remaining] == ["c1", "c2"]  # no result is durable
    assert isinstance(memory.durable[-1], AssistantMessage)  # the response itself is saved

    # Another process resumes: it runs the batch, then asks the model the next question.
    hang.hanging = False
    after = DurableHistory(memory.durable)
    resumed_model = ScriptedModel([text("both fine", usage=usage(1200, 20))])
    resumed = make_config(resumed_model, tools=[hang.tool()], memory=after)
    result = await run(resumed, state)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert len(resumed_model.requests) == 1  # not asked again for the calls it already made
    assert result.iterations == 2 and result.model_calls == 2
    assert result.usage.prompt_tokens == 2200 and result.usage.completion_tokens == 70
    results = [m for m in after.messages if isinstance(m, ToolMessage)]
    assert [(m.tool_call_id, m.content) for m in results] == [
        ("c1", "ok web-03"),
        ("c2", "ok web-04"),
    ]
    assert result.state.pending is None


async def test_a_job_at_its_iteration_limit_does_not_get_a_free_model_call_from_a_crash() -> None:
    hang = Hang()
    memory = start()
    saved = Saved(memory)
    limits = Limits(max_iterations=1)
    model = ScriptedModel([calls(call("check", "c1", host="web-04"))])
    config = make_config(
        model, tools=[hang.tool()], memory=memory, on_checkpoint=saved, limits=limits
    )
    task = asyncio.ensure_future(run(config))
    await crash_during_tool(task, hang)

    hang.hanging = False
    resumed_model = ScriptedModel([text("web-04 is fine")])
    resumed = make_config(
        resumed_model, tools=[hang.tool()], memory=DurableHistory(memory.durable), limits=limits
    )
    result = await run(resumed, saved.last)
    assert result.stop_reason is StopReason.LIMIT_ITERATIONS
    assert resumed_model.requests == []  # the one iteration allowed was the first call
    assert result.iterations == 1 and result.tool_executions == 1


class RestartArgs(BaseModel):
    host: str
    service: str


async def test_a_write_that_ran_before_the_crash_is_answered_by_the_ledger_not_run_again() -> None:
    hang = Hang()
    memory = start()
    saved = Saved(memory)
    ledger = MemoryLedger()
    restarts: list[str] = []

    async def restart(args: RestartArgs, ctx: CallContext) -> str:
        restarts.append(args.service)
        return f"restarted {args.service} on {args.host}"

    restart_tool = FunctionTool(
        name="restart_service",
        description="restart",
        args_model=RestartArgs,
        fn=restart,
        category="mutating",
    )

    async def confirm(request: ConfirmRequest) -> Decision:
        return Approved(confirmed_by="U0123ABC")

    model = ScriptedModel(
        [
            calls(
                call("restart_service", "w1", host="web-03", service="nginx"),
                call("check", "c2", host="web-04"),
            )
        ]
    )
    tools = [hang.tool(), restart_tool]
    config = make_config(
        model, tools=tools, memory=memory, on_checkpoint=saved, ledger=ledger, confirm=confirm
    )
    task = asyncio.ensure_future(run(config))
    await crash_during_tool(task, hang)
    assert restarts == ["nginx"]
    assert [c.id for c in saved.last.pending.remaining] == ["w1", "c2"]  # type: ignore[union-attr]

    hang.hanging = False
    after = DurableHistory(memory.durable)
    resumed_model = ScriptedModel([calls(call("check", "c3", host="web-03")), text("done")])
    resumed = make_config(resumed_model, tools=tools, memory=after, ledger=ledger, confirm=confirm)
    result = await run(resumed, saved.last)
    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert restarts == ["nginx"]  # the write ran once
    write = next(m for m in after.messages if isinstance(m, ToolMessage) and m.tool_call_id == "w1")
    assert write.content == "(already executed; recorded result)\nrestarted nginx on web-03"
    assert write.confirmed_by == "U0123ABC"


class SaveAndFetch:
    """``on_checkpoint_and_fetch``: a log of what was saved with which fetch, and a Stop
    the save may hear (as the store's script reads the job's cancel flag)."""

    def __init__(self, replies: Sequence[Sequence[Injected]], cancel: CancelToken | None = None):
        self.replies = [list(r) for r in replies]
        self.cancel = cancel
        self.states: list[RunState] = []
        self.acked: list[str] = []

    async def both(self, state: RunState) -> Sequence[Injected]:
        self.states.append(state.model_copy(deep=True))
        if self.cancel is not None:
            self.cancel.cancel("stopped by <@U9>")
        return self.replies.pop(0) if self.replies else []

    async def fetch(self) -> Sequence[Injected]:
        return []

    async def ack(self, items: Sequence[Injected]) -> None:
        self.acked.extend(i.id for i in items)


async def test_the_save_after_the_tools_goes_with_the_next_fetch() -> None:
    memory = start()
    saved = Saved(memory)
    port = SaveAndFetch([[Injected(id="1.2", text="also web-05", author="U2")]])
    model = ScriptedModel([calls(call("check", "c1", host="web-03")), text("all fine")])
    hang = Hang()
    config = make_config(
        model,
        tools=[hang.tool()],
        memory=memory,
        on_checkpoint=saved,
        inject=port,
        on_checkpoint_and_fetch=port.both,
    )
    result = await run(config)
    assert result.stop_reason is StopReason.COMPLETED, result.error
    # The results of c1 were saved by the combined call, with the batch done...
    [after_tools] = port.states
    assert after_tools.tool_executions == 1 and after_tools.pending is None
    # ...and the reply it fetched reached the model's next request.
    assert "<@U2>: also web-05" in [m.content for m in model.requests[1].messages]
    assert port.acked == ["1.2"]


async def test_replies_fetched_by_a_save_that_heard_stop_are_not_taken_in() -> None:
    memory = start()
    token = CancelToken()
    port = SaveAndFetch([[Injected(id="1.2", text="also web-05", author="U2")]], cancel=token)
    model = ScriptedModel([calls(call("check", "c1", host="web-03")), text("unused")])
    config = make_config(
        model,
        tools=[Hang().tool()],
        memory=memory,
        on_checkpoint=Saved(memory),
        inject=port,
        on_checkpoint_and_fetch=port.both,
        cancel=token,
    )
    result = await run(config)
    assert result.stop_reason is StopReason.CANCELLED
    assert len(model.requests) == 1
    # Not in the history and not acknowledged: the job's end finds it pending.
    assert port.acked == []
    assert "also web-05" not in " ".join(str(m.content) for m in memory.messages)

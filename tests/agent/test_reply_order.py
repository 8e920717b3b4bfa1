"""A reply typed while a call waited for approval is told in its true order at resume.

The model reads the reply after the decided call's result (a call's result follows the
call), so the runtime says when the reply was sent against the request for approval and
the decision, and who decided (``bot.agent.reply_order``). The note survives a crash
between the resume and the fetch (``RunState.decided``), and a reply or decision without
times gets none.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from bot.agent import (
    Approved,
    ConfirmRequest,
    Decision,
    Denied,
    FunctionTool,
    Injected,
    InMemoryHistory,
    Pending,
    RunState,
    StopReason,
    ToolMessage,
    UserMessage,
    run,
)
from bot.agent.reply_order import NOTE_PREFIX
from bot.agent.testing import FakeClock, ScriptedModel, call, calls, text

from .conftest import echo_tool, make_config
from .test_inject import Queue


def at(hms: str) -> float:
    h, m, s = (int(p) for p in hms.split(":"))
    return datetime(2026, 12, 6, h, m, s, tzinfo=UTC).timestamp()


ASKED, SENT, DECIDED = at("16:00:30"), at("16:01:02"), at("16:01:47")


def restart_tool(ran: list[str]) -> FunctionTool:
    async def restart(args: object, ctx: object) -> str:
        ran.append("restart")
        return "restarted nginx on web-03 (pid 812 -> 4410)"

    return FunctionTool(
        name="restart_service",
        description="restart",
        args_model=echo_tool().args_model,
        fn=restart,
        category="mutating",
    )


async def pending(request: ConfirmRequest) -> Decision:
    return Pending()


async def paused_job(
    clock: FakeClock, ran: list[str]
) -> tuple[ScriptedModel, InMemoryHistory, RunState]:
    memory = InMemoryHistory()
    memory.append(UserMessage(content="web is slow, look into it"))
    model = ScriptedModel(
        [calls(call("restart_service", "c1", host="web-03")), text("here are the logs")]
    )
    paused = await run(
        make_config(
            model,
            tools=[restart_tool(ran)],
            memory=memory,
            inject=Queue([]),
            confirm=pending,
            clock=clock,
        )
    )
    assert paused.stop_reason is StopReason.AWAITING_APPROVAL, paused.error
    return model, memory, paused.state


async def resume(
    clock: FakeClock,
    decision: Decision | None,
    *,
    sent_at: float | None = SENT,
    ran: list[str] | None = None,
) -> tuple[list[object], list[str]]:
    ran = [] if ran is None else ran
    model, memory, state = await paused_job(clock, ran)
    reply = Injected(
        id="1765036862.000100",
        text="don't restart, show me the logs first",
        author="U0ALICE",
        sent_at=sent_at,
    )
    queue = Queue([[reply]])
    result = await run(
        make_config(model, tools=[restart_tool(ran)], memory=memory, inject=queue, clock=clock),
        state,
        decision,
    )
    assert result.stop_reason is StopReason.COMPLETED, result.error
    return list(model.histories[1]), ran


async def test_a_reply_sent_while_the_call_waited_is_told_before_the_approval(
    clock: FakeClock,
) -> None:
    decision = Approved(confirmed_by="U0BOB", asked_at=ASKED, decided_at=DECIDED)
    history, ran = await resume(clock, decision)

    assert ran == ["restart"]  # the approval decides the call, as before
    result, reply = history[-2], history[-1]
    assert isinstance(result, ToolMessage) and result.tool_call_id == "c1"
    assert isinstance(reply, UserMessage)
    assert reply.content == (
        "<@U0ALICE>: don't restart, show me the logs first\n\n"
        "(opsloop: sent at 16:01:02 UTC while `restart_service` waited for approval; "
        "<@U0BOB> approved it at 16:01:47 UTC, after this message; "
        "the call has run and its result is above)"
    )


@pytest.mark.parametrize(
    ("decision", "said"),
    [
        (
            Denied(reason="denied by <@U0BOB>", by="U0BOB", asked_at=ASKED, decided_at=DECIDED),
            "<@U0BOB> denied it at 16:01:47 UTC, after this message; the call did not run)",
        ),
        (
            Denied(
                reason="approval expired", outcome="expired", asked_at=ASKED, decided_at=DECIDED
            ),
            "the approval expired at 16:01:47 UTC, after this message; the call did not run)",
        ),
    ],
)
async def test_a_denial_or_expiry_is_told_too(
    clock: FakeClock, decision: Denied, said: str
) -> None:
    history, ran = await resume(clock, decision)

    assert ran == []
    reply = history[-1]
    assert isinstance(reply, UserMessage)
    assert "while `restart_service` waited for approval; " + said in reply.content


async def test_a_reply_sent_before_the_card_says_so(clock: FakeClock) -> None:
    decision = Approved(confirmed_by="U0BOB", asked_at=ASKED, decided_at=DECIDED)
    history, _ = await resume(clock, decision, sent_at=at("16:00:10"))

    reply = history[-1]
    assert isinstance(reply, UserMessage)
    assert reply.content.endswith(
        "(opsloop: sent at 16:00:10 UTC, before `restart_service` asked for approval at "
        "16:00:30 UTC; read only now, after <@U0BOB> approved it at 16:01:47 UTC; "
        "the call has run and its result is above)"
    )


async def test_a_reply_sent_after_the_decision_is_never_told_it_came_first(
    clock: FakeClock,
) -> None:
    decision = Approved(confirmed_by="U0BOB", asked_at=ASKED, decided_at=DECIDED)
    history, _ = await resume(clock, decision, sent_at=at("16:01:50"))

    reply = history[-1]
    assert isinstance(reply, UserMessage)
    assert reply.content.endswith(
        "(opsloop: sent at 16:01:50 UTC, after <@U0BOB> approved `restart_service` at 16:01:47 UTC)"
    )


async def test_without_times_nothing_is_claimed(clock: FakeClock) -> None:
    history, _ = await resume(clock, Approved(confirmed_by="U0BOB"))
    reply = history[-1]
    assert isinstance(reply, UserMessage)
    assert reply.content == "<@U0ALICE>: don't restart, show me the logs first"

    history, _ = await resume(
        clock, Approved(confirmed_by="U0BOB", decided_at=DECIDED), sent_at=None
    )
    assert isinstance(history[-1], UserMessage)
    assert NOTE_PREFIX not in history[-1].content


async def test_only_the_first_fetch_after_the_resume_is_told(clock: FakeClock) -> None:
    ran: list[str] = []
    model, memory, state = await paused_job(clock, ran)
    model = ScriptedModel([calls(call("check", "c2", host="web-03")), text("here are the logs")])
    later = Injected(id="m2", text="thanks", author="U0ALICE", sent_at=at("16:05:00"))
    first = Injected(id="m1", text="wait", author="U0ALICE", sent_at=SENT)
    queue = Queue([[first], [later]])
    decision = Approved(confirmed_by="U0BOB", asked_at=ASKED, decided_at=DECIDED)
    tools = [restart_tool(ran), echo_tool()]
    result = await run(
        make_config(model, tools=tools, memory=memory, inject=queue, clock=clock), state, decision
    )

    assert result.stop_reason is StopReason.COMPLETED, result.error
    replies = [m for m in memory.messages if isinstance(m, UserMessage) and m.source_id]
    assert NOTE_PREFIX in replies[0].content
    assert replies[1].content == "<@U0ALICE>: thanks"
    assert result.state.decided is None


async def test_the_order_survives_a_crash_between_the_resume_and_the_fetch(
    clock: FakeClock,
) -> None:
    """The resumed run ran the approved call and saved; the process died before it read
    the reply. The run that takes over (no decision in hand) still tells the order."""
    ran: list[str] = []
    model, memory, state = await paused_job(clock, ran)

    class Crash(Exception):
        pass

    class DiesOnFetch(Queue):
        async def fetch(self) -> list[Injected]:  # type: ignore[override]
            raise Crash

    saved: list[RunState] = []

    async def checkpoint(s: RunState) -> None:
        saved.append(s.model_copy(deep=True))
        await memory.flush()

    decision = Approved(confirmed_by="U0BOB", asked_at=ASKED, decided_at=DECIDED)
    config = make_config(
        model,
        tools=[restart_tool(ran)],
        memory=memory,
        inject=DiesOnFetch([]),
        clock=clock,
        on_checkpoint=checkpoint,
    )
    crashed = await run(config, state, decision)
    assert crashed.stop_reason is StopReason.FAILED  # the stand-in for the dead process
    assert ran == ["restart"]
    last = saved[-1]
    assert last.pending is None and last.decided is not None

    reply = Injected(id="m1", text="don't restart", author="U0ALICE", sent_at=SENT)
    result = await run(
        make_config(
            model, tools=[restart_tool(ran)], memory=memory, inject=Queue([[reply]]), clock=clock
        ),
        RunState.model_validate_json(last.model_dump_json()),
    )
    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert ran == ["restart"]
    told = [m for m in memory.messages if isinstance(m, UserMessage) and m.source_id == "m1"]
    assert len(told) == 1
    assert "while `restart_service` waited for approval; <@U0BOB> approved it" in told[0].content

"""Condensing history with the job's model: the boundary, the summary request, the
summary, and the condenser plugged into the agent loop (``ScriptedModel`` as the model)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from bot.agent import (
    AgentConfig,
    AnyMessage,
    AssistantMessage,
    CallContext,
    FunctionTool,
    InMemoryHistory,
    RecoveryPolicy,
    StopReason,
    ToolCall,
    ToolMessage,
    UserMessage,
    run,
)
from bot.agent.events import CondenseDone, CondenseFailed, Event
from bot.agent.memory import record_approvers
from bot.agent.testing import ScriptedModel, calls, text
from bot.errors import ContextOverflowError
from bot.llm.condense import (
    CUT_AT_LIMIT,
    INSTRUCTION,
    SUMMARY_HEADING,
    CondenseError,
    ModelCondenser,
    NothingToCondense,
    choose_boundary,
)
from bot.settings import LLMSettings

SYSTEM = "You are an SRE assistant for the payments team."


def user(content: str, *, summary: bool = False) -> UserMessage:
    return UserMessage(content=content, summary=summary)


def says(content: str) -> AssistantMessage:
    return AssistantMessage(content=content)


def asks(*ids: str, name: str = "check_cpu", content: str | None = None) -> AssistantMessage:
    return AssistantMessage(
        content=content,
        tool_calls=tuple(ToolCall(id=i, name=name, arguments=f'{{"id":"{i}"}}') for i in ids),
    )


def result(call_id: str, content: str = "ok", **kw: Any) -> ToolMessage:
    kw.setdefault("name", "check_cpu")
    return ToolMessage(tool_call_id=call_id, content=content, **kw)


def incident() -> list[AnyMessage]:
    """Ten messages of an incident: a read, an approved restart, a reply, more reads; as a
    history holds them (the approved call names its approver: ``record_approvers``)."""
    messages: list[AnyMessage] = [
        user("web-03 is at 95% CPU, look into it"),
        asks("c1", content="Checking the load on web-03."),
        result("c1", "load average 11.92 on web-03; top: java pid 4242 at 380%"),
        asks("c2", name="restart_service"),
        result(
            "c2",
            "restarted payments-api on web-03",
            name="restart_service",
            confirmed_by="U0ALICE",
        ),
        says("payments-api restarted; load should fall."),
        user("<@U0BOB>: is it back to normal?"),
        asks("c3", "c4"),
        result("c3", "load average 1.07 on web-03"),
        result("c4", "load average 0.88 on web-04"),
    ]
    record_approvers(messages)
    return messages


def condenser(model: ScriptedModel, **kw: Any) -> ModelCondenser:
    kw.setdefault("max_input_tokens", 100_000)
    return ModelCondenser(model, system_prompt=SYSTEM, **kw)


# -- the boundary -------------------------------------------------------------------


def test_keeps_the_last_messages_when_the_cut_is_already_safe() -> None:
    history = [user("a"), says("b"), user("c"), says("d"), user("e"), says("f"), user("g")]
    assert choose_boundary(history, 6) == 1
    assert choose_boundary(history, 2) == 5


def test_cut_between_a_call_and_its_results_moves_before_the_call() -> None:
    history = incident()
    # Keeping 2 would start the tail at c3's result: the tail starts at the call instead.
    assert choose_boundary(history, 2) == 7
    assert isinstance(history[7], AssistantMessage) and history[7].tool_calls
    # Keeping 6 would start it at c2's result, whose call (index 3) must stay with it.
    assert choose_boundary(history, 6) == 3


def test_parallel_calls_are_never_split() -> None:
    history: list[AnyMessage] = [
        user("check the fleet"),
        says("on it"),
        user("all four hosts please"),
        asks("p1", "p2", "p3", "p4"),
        *(result(f"p{i}", f"host {i} fine") for i in range(1, 5)),
        says("all fine"),
    ]
    assert choose_boundary(history, 1) == 8  # after the last result: safe as it is
    for keep in range(2, 7):  # every cut inside the batch moves before the call
        assert choose_boundary(history, keep) == 3


def test_results_separated_from_their_call_by_another_message_stay_with_it() -> None:
    history = [
        user("go"),
        says("looking"),
        asks("c1"),
        user("<@U0BOB>: also check the disk"),  # arrived between the call and its result
        user("<@U0CAROL>: and the memory"),
        result("c1"),
        says("done"),
        user("thanks"),
    ]
    assert choose_boundary(history, 4) == 2  # the ids tie the result to its call
    assert choose_boundary(history, 3) == 2
    assert choose_boundary(history, 2) == 6


def test_a_call_without_results_is_not_the_last_replaced_message() -> None:
    history = [user("go"), says("ok"), user("restart it"), asks("c9"), user("wait")]
    assert choose_boundary(history, 1) == 3


def test_keep_recent_at_least_the_history_is_nothing_to_condense() -> None:
    history = incident()
    with pytest.raises(NothingToCondense, match="10 message"):
        choose_boundary(history, 10)
    with pytest.raises(NothingToCondense):
        choose_boundary(history, 40)


def test_a_single_message() -> None:
    with pytest.raises(NothingToCondense):
        choose_boundary([user("hello")], 6)
    assert choose_boundary([user("hello")], 0) == 1
    with pytest.raises(NothingToCondense, match="summary"):
        choose_boundary([user(f"{SUMMARY_HEADING} x", summary=True)], 0)


def test_a_summary_alone_before_the_kept_messages_is_not_summarised_again() -> None:
    history = [user("earlier", summary=True), says("a"), user("b"), says("c")]
    with pytest.raises(NothingToCondense, match="summary"):
        choose_boundary(history, 3)
    assert choose_boundary(history, 2) == 2  # the summary and one more: worth it


def test_no_safe_boundary_raises() -> None:
    history = [asks("c1", "c2", "c3"), result("c1"), result("c2"), result("c3")]
    with pytest.raises(NothingToCondense, match="safe boundary"):
        choose_boundary(history, 2)


def test_negative_keep_recent_is_refused() -> None:
    with pytest.raises(ValueError):
        choose_boundary(incident(), -1)
    with pytest.raises(ValueError):
        condenser(ScriptedModel(), keep_recent=-1)


@st.composite
def histories(draw: st.DrawFn) -> list[AnyMessage]:
    """Well-formed histories: text turns and tool batches with all their results."""
    out: list[AnyMessage] = [user("start")]
    for turn in range(draw(st.integers(0, 12))):
        kind = draw(st.sampled_from(["user", "text", "batch"]))
        if kind == "user":
            out.append(user(f"u{turn}"))
        elif kind == "text":
            out.append(says(f"a{turn}"))
        else:
            ids = [f"t{turn}_{i}" for i in range(draw(st.integers(1, 4)))]
            out.append(asks(*ids))
            out.extend(result(i) for i in ids)
    return out


@settings(derandomize=True, max_examples=300, deadline=None)
@given(history=histories(), keep=st.integers(0, 20))
def test_the_boundary_never_separates_a_call_from_its_results(
    history: list[AnyMessage], keep: int
) -> None:
    try:
        upto = choose_boundary(history, keep)
    except NothingToCondense:
        return
    assert 0 < upto <= len(history) - keep
    made = {c.id for m in history[:upto] if isinstance(m, AssistantMessage) for c in m.tool_calls}
    answered = {m.tool_call_id for m in history[:upto] if isinstance(m, ToolMessage)}
    assert made == answered  # every call replaced has its results replaced with it
    tail = history[upto:]
    assert not (tail and isinstance(tail[0], ToolMessage))
    assert all(m.tool_call_id not in made for m in tail if isinstance(m, ToolMessage))


# -- the request and the summary ----------------------------------------------------


async def test_the_request_has_the_system_prompt_no_tools_and_the_instruction_last() -> None:
    model = ScriptedModel([text("Goals: fix web-03 CPU. Findings: load 11.92.")])
    history = incident()
    got = await condenser(model, keep_recent=3, max_output_tokens=777)(history)
    model.assert_done()
    [request] = model.requests
    assert request.system == SYSTEM
    assert request.tools == ()
    assert request.max_output_tokens == 777
    assert not request.stream
    [message] = request.messages
    assert isinstance(message, UserMessage) and not message.summary
    assert message.content.endswith(INSTRUCTION)
    for needle in (
        "web-03 is at 95% CPU, look into it",
        "load average 11.92 on web-03; top: java pid 4242 at 380%",
        "restart_service",
        "approved by U0ALICE",
        "<@U0BOB>: is it back to normal?",
        '{"id":"c1"}',
    ):
        assert needle in message.content
    assert "load average 1.07" not in message.content  # kept verbatim, not summarised
    assert got.upto == 7


async def test_the_summary_is_returned_under_its_heading() -> None:
    model = ScriptedModel([text("  Goals: fix web-03.\nOpen questions: none.  ")])
    got = await condenser(model)(incident())
    assert got.upto == 3
    assert got.summary == f"{SUMMARY_HEADING}\nGoals: fix web-03.\nOpen questions: none."


async def test_a_repeated_heading_is_not_doubled() -> None:
    model = ScriptedModel([text(f"{SUMMARY_HEADING} Goals: fix web-03.")])
    got = await condenser(model)(incident())
    assert got.summary == f"{SUMMARY_HEADING}\nGoals: fix web-03."


async def test_a_summary_cut_at_the_output_limit_says_so() -> None:
    cut = text("Goals: fix web-03. Findings: load").model_copy(update={"finish_reason": "length"})
    got = await condenser(ScriptedModel([cut]))(incident())
    assert got.summary.endswith(f"Findings: load\n{CUT_AT_LIMIT}")


@pytest.mark.parametrize("reply", [text(""), text("  \n "), calls(ToolCall(id="x", name="n"))])
async def test_a_blank_summary_raises(reply: Any) -> None:
    with pytest.raises(CondenseError, match="scripted answered the summary request"):
        await condenser(ScriptedModel([reply]))(incident())


async def test_nothing_to_condense_makes_no_model_call() -> None:
    model = ScriptedModel()
    with pytest.raises(NothingToCondense):
        await condenser(model)(incident()[:4])
    assert model.requests == []


async def test_native_messages_send_the_prefix_as_is_then_the_instruction() -> None:
    model = ScriptedModel([text("Goals: fix web-03.")])
    history = incident()
    got = await condenser(model, keep_recent=3, transcript=False)(history)
    [request] = model.requests
    assert request.tools == ()
    assert list(request.messages[:-1]) == history[: got.upto]
    assert all(a is b for a, b in zip(request.messages, history[: got.upto], strict=False))
    assert request.messages[-1] == UserMessage(content=INSTRUCTION)


async def test_an_earlier_summary_is_carried_into_the_next_one() -> None:
    history: list[AnyMessage] = [
        user(f"{SUMMARY_HEADING}\nGoals: fix web-03 (ticket INC-4711).", summary=True),
        *incident()[1:],
    ]
    model = ScriptedModel([text("Goals: INC-4711.")])
    await condenser(model, keep_recent=3)(history)
    content = model.requests[0].messages[0].content
    assert "[earlier summary]\nSummary of the earlier conversation" in (content or "")
    assert "INC-4711" in (content or "")


# -- a prefix too big for the model ---------------------------------------------------


def huge_history(output_chars: int) -> list[AnyMessage]:
    head = "HEAD-" + "h" * (output_chars // 2)
    tail = "t" * (output_chars // 2) + "-TAIL"
    return [
        user("why is disk full on db-02?"),
        asks("c1", name="du"),
        result("c1", head + tail, name="du"),
        asks("c2", name="df"),
        result("c2", "short df output: /var 99%", name="df"),
        says("/var is full: " + ", ".join(f"/var/log/app{i}.log" for i in range(60))),
        user("clean it up"),
        says("which directory?"),
    ]


async def test_a_prefix_that_fits_is_sent_whole() -> None:
    history = huge_history(5_000)
    model = ScriptedModel([text("Goals: free /var on db-02.")])
    await condenser(model, keep_recent=2, max_input_tokens=10_000)(history)
    content = model.requests[0].messages[0].content or ""
    assert "chars cut" not in content
    assert all(m.content in content for m in history[:6] if m.content)


async def test_tool_outputs_are_cut_to_fit_and_the_originals_are_untouched() -> None:
    history = huge_history(200_000)
    before = [m.model_copy() for m in history]
    model = ScriptedModel([text("Goals: free /var on db-02.")])
    await condenser(model, keep_recent=2, max_input_tokens=2_000)(history)
    [message] = model.requests[0].messages
    content = message.content or ""
    assert len(SYSTEM) + len(content) <= 2_000 * 4
    assert "chars cut for this summary" in content
    assert "HEAD-" in content and "-TAIL" in content  # head and tail survive the cut
    assert "short df output: /var 99%" in content  # small outputs are not cut
    assert "why is disk full on db-02?" in content  # nor are the other messages
    assert history[5].content in content
    assert history == before
    assert len(history[2].content or "") > 200_000


async def test_native_messages_are_cut_as_copies() -> None:
    history = huge_history(200_000)
    model = ScriptedModel([text("Goals: free /var on db-02.")])
    await condenser(model, keep_recent=2, max_input_tokens=2_000, transcript=False)(history)
    sent = model.requests[0].messages
    assert isinstance(sent[2], ToolMessage) and sent[2] is not history[2]
    assert len(sent[2].content) < 8_000 and sent[2].content.startswith("HEAD-")
    assert sent[2].tool_call_id == "c1"
    assert sent[4] is history[4]
    assert len(history[2].content or "") > 200_000


async def test_every_message_is_cut_when_tool_outputs_are_not_enough() -> None:
    history = [user("u" * 50_000), says("a" * 50_000), user("b" * 50_000), says("c")]
    model = ScriptedModel([text("Goals: something long.")])
    await condenser(model, keep_recent=1, max_input_tokens=2_000)(history)
    content = model.requests[0].messages[0].content or ""
    assert len(SYSTEM) + len(content) <= 2_000 * 4
    assert content.count("chars cut for this summary") == 3


async def test_a_prefix_that_cannot_fit_raises_without_a_call() -> None:
    history = [m for i in range(200) for m in (user(f"{i}" * 300), says(f"{i}" * 300))]
    model = ScriptedModel()
    with pytest.raises(CondenseError, match="do not fit"):
        await condenser(model, max_input_tokens=1_000)(history)
    assert model.requests == []


def test_from_settings_bounds_the_request_by_the_condense_threshold() -> None:
    model = ScriptedModel()
    llm = LLMSettings.model_validate({"LLM_CONTEXT_TOKENS": 10_000, "OPSLOOP_CONDENSE_AT": 0.5})
    made = ModelCondenser.from_settings(model, system_prompt=SYSTEM, settings=llm)
    assert made.max_input_tokens == 5_000
    assert made.client is model and made.system_prompt == SYSTEM
    full = LLMSettings.model_validate({"LLM_CONTEXT_TOKENS": 10_000, "OPSLOOP_CONDENSE_AT": 1})
    made = ModelCondenser.from_settings(
        model, system_prompt=SYSTEM, settings=full, max_output_tokens=2_000
    )
    assert made.max_input_tokens == 8_000  # room is left for the summary itself


# -- in the agent loop --------------------------------------------------------------


class HostArgs(BaseModel):
    host: str


async def _check(args: HostArgs, ctx: CallContext) -> str:
    return f"ok {args.host}"


CHECK = FunctionTool(name="check_cpu", description="CPU of a host", args_model=HostArgs, fn=_check)


def loop_config(
    model: ScriptedModel, memory: InMemoryHistory, events: list[Event], **kw: Any
) -> AgentConfig:
    return AgentConfig(
        job_id="job-7",
        client=model,
        memory=memory,
        system_prompt=SYSTEM,
        tools=[CHECK],
        condense=ModelCondenser(model, system_prompt=SYSTEM, max_input_tokens=100_000),
        on_event=events.append,
        **kw,
    )


def filled(history: list[AnyMessage]) -> InMemoryHistory:
    memory = InMemoryHistory()
    for message in history:
        memory.append(message)
    return memory


async def test_a_context_overflow_is_condensed_and_the_run_completes() -> None:
    history = incident()
    memory = filled(history)
    events: list[Event] = []
    model = ScriptedModel(
        [
            ContextOverflowError("maximum context length exceeded", status=400),
            text("Goals: fix web-03 CPU. Actions: payments-api restarted (approved by U0ALICE)."),
            text("web-03 is back to normal."),
        ]
    )
    got = await run(loop_config(model, memory, events))
    model.assert_done()
    assert got.stop_reason is StopReason.COMPLETED, got.error
    assert got.output == "web-03 is back to normal."
    first, condense, retry = model.requests
    assert first.tools and retry.tools == first.tools
    assert condense.tools == () and condense.system == first.system == SYSTEM
    summary = memory.messages[0]
    assert isinstance(summary, UserMessage) and summary.summary
    assert summary.content.startswith(SUMMARY_HEADING)
    assert "approved by U0ALICE" in summary.content
    assert memory.messages[1:] == [*history[3:], says("web-03 is back to normal.")]
    assert memory.originals == [*history, says("web-03 is back to normal.")]
    assert retry.messages[0] == summary
    assert [e for e in events if isinstance(e, CondenseDone)] == [CondenseDone(replaced=3)]
    assert not [e for e in events if isinstance(e, CondenseFailed)]


async def test_a_big_prompt_is_condensed_before_the_call() -> None:
    history = incident()
    memory = filled(history)
    events: list[Event] = []
    model = ScriptedModel([text("Goals: fix web-03."), text("all good")])
    got = await run(loop_config(model, memory, events, condense_at_tokens=10))
    model.assert_done()
    assert got.stop_reason is StopReason.COMPLETED, got.error
    condense, answer = model.requests
    assert condense.tools == () and answer.tools
    assert isinstance(answer.messages[0], UserMessage) and answer.messages[0].summary
    assert len(answer.messages) == 1 + len(history) - 3
    assert [e.kind for e in events if isinstance(e, CondenseDone | CondenseFailed)] == [
        "condense_done"
    ]


async def test_a_failed_condense_is_an_event_and_the_run_carries_on() -> None:
    history = incident()
    memory = filled(history)
    events: list[Event] = []
    model = ScriptedModel(
        [
            ContextOverflowError("maximum context length exceeded", status=400),
            text("   "),  # a blank summary: the condenser refuses it
            text("web-03 is back to normal."),
        ]
    )
    got = await run(loop_config(model, memory, events))
    model.assert_done()
    assert got.stop_reason is StopReason.COMPLETED, got.error
    [failed] = [e for e in events if isinstance(e, CondenseFailed)]
    assert failed.error.startswith("CondenseError:")
    assert not [e for e in events if isinstance(e, CondenseDone)]
    assert memory.messages == [*history, says("web-03 is back to normal.")]
    assert not any(isinstance(m, UserMessage) and m.summary for m in memory.messages)


async def test_a_failed_condense_ends_the_run_when_the_policy_says_so() -> None:
    memory = filled(incident())
    events: list[Event] = []
    model = ScriptedModel(
        [ContextOverflowError("maximum context length exceeded", status=400), text("")]
    )
    recovery = RecoveryPolicy(stop_on_condense_failure=True)
    got = await run(loop_config(model, memory, events, recovery=recovery))
    model.assert_done()
    assert got.stop_reason is StopReason.FAILED
    assert [e.kind for e in events if isinstance(e, CondenseFailed)] == ["condense_failed"]

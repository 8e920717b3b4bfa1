"""After condensing, the summary is never the only copy of the job's facts: every request
whose history starts with the summary carries the facts block the ``facts`` port renders
(from the store, in production), read again at each resume and after condensing."""

from __future__ import annotations

from bot.agent import FunctionTool, RunState, StopReason, Usage, UserMessage, run
from bot.agent.ports import Approved, ConfirmRequest, Decision, Pending
from bot.agent.testing import ScriptedModel, call, calls, text

from .conftest import HostArgs, echo_tool, make_config
from .test_model_recovery import SUMMARY, Condenser, fresh_memory


class Facts:
    """The facts port: what the store would render now, and how often it was read."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.reads = 0

    async def __call__(self) -> str:
        self.reads += 1
        return self.text


def first_message(model: ScriptedModel, n: int) -> str:
    message = model.requests[n].messages[0]
    assert isinstance(message, UserMessage)
    return str(message.content)


def restart_tool() -> FunctionTool:
    async def fn(args: HostArgs, ctx: object) -> str:
        return f"restarted {args.host}"

    return FunctionTool(
        name="restart", description="restart", args_model=HostArgs, fn=fn, category="mutating"
    )


async def test_requests_after_condensing_carry_the_facts_and_a_resume_reads_them_again() -> None:
    memory = fresh_memory()
    facts = Facts("Facts: request by <@U1>; approvals: none asked.")
    model = ScriptedModel(
        [
            calls(call("check", "c1", host="web-03"), usage=Usage(prompt_tokens=1000)),
            calls(call("restart", "c2", host="web-03"), usage=Usage(prompt_tokens=1500)),
            calls(call("check", "c3", host="web-03"), usage=Usage(prompt_tokens=1600)),
            text("restarted and checked", usage=Usage(prompt_tokens=1700)),
        ]
    )

    async def pending(request: ConfirmRequest) -> Decision:
        return Pending()

    tools = [echo_tool(), restart_tool()]
    config = make_config(
        model,
        tools=tools,
        memory=memory,
        condense=Condenser(upto=1),
        condense_at_tokens=1000,
        confirm=pending,
        facts=facts,
    )
    paused = await run(config)
    assert paused.stop_reason is StopReason.AWAITING_APPROVAL, paused.error

    # Before condensing: no summary, no facts. After: the summary, then the facts.
    assert first_message(model, 0) == "web-03 is at 95% CPU, look into it"
    assert (
        first_message(model, 1) == f"{SUMMARY}\n\nFacts: request by <@U1>; approvals: none asked."
    )
    assert facts.reads == 1
    # The history keeps the summary alone: the facts are rendered, never stored.
    stored = (await memory.history())[0]
    assert isinstance(stored, UserMessage) and stored.content == SUMMARY

    # The approval is decided; the resumed run renders the facts again from the store.
    facts.text = "Facts: approvals: restart {host: web-03} approved by <@U0APPROVER>."
    state = RunState.model_validate_json(paused.state.model_dump_json())
    assert paused.approval is not None
    decision = Approved(
        confirmed_by="U0APPROVER", tool=paused.approval.tool, args_hash=paused.approval.args_hash
    )
    resumed = make_config(
        model,
        tools=tools,
        memory=memory,
        condense=Condenser(upto=1),
        condense_at_tokens=1000,
        confirm=pending,
        facts=facts,
    )
    result = await run(resumed, state, decision)
    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert facts.reads == 2  # once for the resumed run, not once per request
    for n in (2, 3):
        assert first_message(model, n).endswith("approved by <@U0APPROVER>.")


async def test_a_history_without_a_summary_is_sent_as_it_is() -> None:
    facts = Facts("Facts: never shown")
    model = ScriptedModel([calls(call("check", "c1", host="web-03")), text("fine")])
    config = make_config(model, tools=[echo_tool()], memory=fresh_memory(), facts=facts)
    result = await run(config)
    assert result.stop_reason is StopReason.COMPLETED
    assert facts.reads == 0
    assert all("Facts" not in first_message(model, n) for n in range(2))

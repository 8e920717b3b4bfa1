"""Tool calls written as JSON text are turned into real calls; anything else stays text.

A response whose ``content`` is ``{"name": <allowed tool>, "arguments": {...}}`` (bare, in
a ```json fence, or a list of such objects) and has no structured tool calls runs those
calls, and the assistant message kept in memory is the structured form (``content``
``None``, ``tool_calls`` set). A name outside the allowlist leaves the text alone: it is
the final answer.

A call may also follow a short lead-in ("I'll check the disk: {...}"): it runs, and the
lead-in stays as the message's text. JSON quoted in an explanation of something else —
followed by more text, in quotes or inline code, after words about an example, a format
or what ran before, after a question, with extra keys — is left as the answer.
"""

from __future__ import annotations

import json

import pytest

from bot.agent import (
    AssistantMessage,
    ConfirmRequest,
    Decision,
    Denied,
    FunctionTool,
    InMemoryHistory,
    ModelResponse,
    RunResult,
    StopReason,
    ToolMessage,
    UserMessage,
    run,
)
from bot.agent.testing import ScriptedModel, call, calls, text
from bot.agent.tool_calls_in_text import recover_tool_calls

from .conftest import HostArgs, Recorder, echo_tool, make_config

ONE = '{"name": "check", "arguments": {"host": "web-03"}}'
TWO = (
    '[{"name": "check", "arguments": {"host": "web-01"}},'
    ' {"name": "check", "arguments": {"host": "web-02"}}]'
)


def request_memory() -> InMemoryHistory:
    """A history holding the user's request, so the first answer is ``messages[1]``."""
    memory = InMemoryHistory()
    memory.append(UserMessage(content="web-03 is at 95% CPU, look into it"))
    return memory


def tool_results(memory: InMemoryHistory) -> list[ToolMessage]:
    return [m for m in memory.messages if isinstance(m, ToolMessage)]


async def run_text(
    content: str, recorder: Recorder | None = None
) -> tuple[RunResult, InMemoryHistory, ScriptedModel]:
    memory = request_memory()
    model = ScriptedModel([text(content), text("web-03 is fine")])
    config = make_config(model, tools=[echo_tool()], memory=memory, on_event=recorder)
    result = await run(config)
    return result, memory, model


@pytest.mark.parametrize(
    "content",
    [
        ONE,
        f"  {ONE}\n",
        f"```json\n{ONE}\n```",
        f"```\n{ONE}\n```",
    ],
    ids=["bare", "padded", "json-fence", "plain-fence"],
)
async def test_text_tool_call_runs_and_history_is_rewritten(
    content: str, recorder: Recorder
) -> None:
    result, memory, model = await run_text(content, recorder)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert result.output == "web-03 is fine"
    assert result.tool_executions == 1
    assert [e.tool for e in recorder.of("tool_start")] == ["check"]

    assistant = memory.messages[1]
    assert isinstance(assistant, AssistantMessage)
    assert assistant.content is None
    [tool_call] = assistant.tool_calls
    assert tool_call.name == "check"
    assert tool_call.id
    assert json.loads(tool_call.arguments) == {"host": "web-03"}

    [result_message] = tool_results(memory)
    assert result_message.tool_call_id == tool_call.id
    assert result_message.content == "ok web-03"
    # The model is sent the structured form, never the JSON text.
    sent = model.requests[1].messages
    assert sent[1] == assistant
    assert not any(isinstance(m, AssistantMessage) and m.content == content for m in sent)
    model.assert_done()


async def test_a_list_of_text_tool_calls_runs_them_in_order() -> None:
    result, memory, _ = await run_text(f"```json\n{TWO}\n```")

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assistant = memory.messages[1]
    assert isinstance(assistant, AssistantMessage) and assistant.content is None
    assert [json.loads(c.arguments) for c in assistant.tool_calls] == [
        {"host": "web-01"},
        {"host": "web-02"},
    ]
    ids = [c.id for c in assistant.tool_calls]
    assert len(set(ids)) == 2
    assert [(m.tool_call_id, m.content) for m in tool_results(memory)] == [
        (ids[0], "ok web-01"),
        (ids[1], "ok web-02"),
    ]


@pytest.mark.parametrize(
    "content",
    [
        '{"name": "restart_everything", "arguments": {"host": "web-03"}}',
        '[{"name": "check", "arguments": {"host": "web-01"}},'
        ' {"name": "rm_rf", "arguments": {"path": "/"}}]',
        '{"status": "ok", "host": "web-03"}',
        "web-03 looks fine; I checked the load.",
    ],
    ids=["unknown-tool", "one-unknown-in-list", "not-a-call", "prose"],
)
async def test_anything_else_stays_the_final_answer(content: str) -> None:
    memory = request_memory()
    model = ScriptedModel([text(content)])
    config = make_config(model, tools=[echo_tool()], memory=memory)

    result = await run(config)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert result.output == content
    assert result.tool_executions == 0
    assert memory.messages[1] == AssistantMessage(content=content)
    model.assert_done()


async def test_recovered_calls_get_distinct_ids_across_iterations() -> None:
    memory = request_memory()
    model = ScriptedModel(
        [
            text('{"name": "check", "arguments": {"host": "web-01"}}'),
            text('{"name": "check", "arguments": {"host": "web-02"}}'),
            text("both fine"),
        ]
    )

    result = await run(make_config(model, tools=[echo_tool()], memory=memory))

    assert result.stop_reason is StopReason.COMPLETED, result.error
    ids = [m.tool_call_id for m in tool_results(memory)]
    assert len(ids) == 2 and len(set(ids)) == 2


async def test_recovered_call_is_validated_like_any_other() -> None:
    memory = request_memory()
    model = ScriptedModel(
        [text('{"name": "check", "arguments": {"hostname": "web-03"}}'), text("sorry")]
    )

    result = await run(make_config(model, tools=[echo_tool()], memory=memory))

    assert result.stop_reason is StopReason.COMPLETED, result.error
    [message] = tool_results(memory)
    assert message.is_error and message.content.startswith("Error: invalid arguments")


async def test_structured_calls_are_left_as_they_are() -> None:
    memory = request_memory()
    model = ScriptedModel([calls(call("check", "c1", host="web-03"), content=ONE), text("done")])

    await run(make_config(model, tools=[echo_tool()], memory=memory))

    assistant = memory.messages[1]
    assert isinstance(assistant, AssistantMessage)
    assert assistant.content == ONE
    assert [c.id for c in assistant.tool_calls] == ["c1"]
    assert len(tool_results(memory)) == 1


# -- recover_tool_calls on its own ------------------------------------------------


def test_recover_returns_a_structured_copy() -> None:
    response = ModelResponse(content=ONE, finish_reason="stop")
    recovered = recover_tool_calls(response, {"check"}, id_prefix="r1")

    assert recovered is not None
    assert recovered.content is None
    assert [(c.name, json.loads(c.arguments)) for c in recovered.tool_calls] == [
        ("check", {"host": "web-03"})
    ]


def test_recover_leaves_unknown_names_alone() -> None:
    response = ModelResponse(content=ONE)
    assert recover_tool_calls(response, {"other"}, id_prefix="r1") is None


def test_recover_ignores_a_response_with_structured_calls() -> None:
    response = calls(call("check", "c1", host="web-03"), content=ONE)
    assert recover_tool_calls(response, {"check"}, id_prefix="r1") is None


# -- a call after a lead-in ----------------------------------------------------------

LEAD = "I'll check the CPU on web-03:"


@pytest.mark.parametrize(
    ("content", "lead"),
    [
        (f"{LEAD} {ONE}", LEAD),
        (f"Let me check the CPU on web-03.\n\n{ONE}\n", "Let me check the CPU on web-03."),
        (f"{LEAD}\n```json\n{ONE}\n```", LEAD),
        (f"{LEAD}\n```\n{ONE}\n```\n", LEAD),
        ("Checking now " + ONE.replace('"arguments"', '"parameters"'), "Checking now"),
    ],
    ids=["after-colon", "next-paragraph", "json-fence", "plain-fence", "parameters"],
)
async def test_a_call_after_a_lead_in_runs_and_the_lead_in_stays(content: str, lead: str) -> None:
    result, memory, model = await run_text(content)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert result.tool_executions == 1
    assistant = memory.messages[1]
    assert isinstance(assistant, AssistantMessage)
    assert assistant.content == lead
    [tool_call] = assistant.tool_calls
    assert (tool_call.name, json.loads(tool_call.arguments)) == ("check", {"host": "web-03"})
    assert [m.content for m in tool_results(memory)] == ["ok web-03"]
    assert model.requests[1].messages[1] == assistant
    model.assert_done()


async def test_a_list_of_calls_after_a_lead_in_runs_them_all() -> None:
    result, memory, _ = await run_text(f"Checking both web hosts: {TWO}")

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert [m.content for m in tool_results(memory)] == ["ok web-01", "ok web-02"]
    assistant = memory.messages[1]
    assert isinstance(assistant, AssistantMessage)
    assert assistant.content == "Checking both web hosts:"


async def test_the_lead_in_is_the_reason_on_the_approval_card() -> None:
    asked: list[ConfirmRequest] = []

    async def confirm(request: ConfirmRequest) -> Decision:
        asked.append(request)
        return Denied(reason="not now")

    async def restart(args: HostArgs, ctx: object) -> str:
        raise AssertionError("never approved")

    tool = FunctionTool(
        name="restart", description="restart", args_model=HostArgs, fn=restart, category="mutating"
    )
    content = 'nginx is wedged, restarting it: {"name": "restart", "arguments": {"host": "web-03"}}'
    model = ScriptedModel([text(content), text("left it alone")])

    result = await run(make_config(model, tools=[tool], confirm=confirm))

    assert result.stop_reason is StopReason.COMPLETED, result.error
    [request] = asked
    assert (request.tool, request.arguments) == ("restart", {"host": "web-03"})
    assert request.reason == "nginx is wedged, restarting it:"


QUOTED = [
    # followed by more text: the call is talked about
    f"The call {ONE} failed because web-03 was unreachable.",
    f"{LEAD} {ONE} and then I'll look at memory.",
    f"{LEAD} {ONE}.",
    # quoted or in inline code
    f'The last message said "{ONE}"',
    f"To check a host, send `{ONE}`",
    f"Checking with `check`: {ONE}",
    # words about an example, a format, what you could send, what ran before
    f"For example: {ONE}",
    f"A call to check looks like this: {ONE}",
    f"The tool call format is: {ONE}",
    f"You can ask me to run it yourself: {ONE}",
    f"Here is what I ran earlier:\n```json\n{ONE}\n```",
    f"The call that was sent: {ONE}",
    # a question: asking whether to, not doing it
    f"Should I check the CPU on web-03?\n{ONE}",
    # more than one paragraph of prose before it: an explanation
    f"web-03 is fine now.\n\nThe check I made was the following:\n{ONE}",
    # a long explanation before it
    "web-03 " * 100 + ONE,
    # not exactly a call
    f'{LEAD} {{"name": "check", "arguments": {{"host": "web-03"}}, "note": "for reference"}}',
    f'{LEAD} {{"name": "check"}}',
    # a tool that is not allowed
    f'{LEAD} {{"name": "rm_rf", "arguments": {{"path": "/"}}}}',
    f'{LEAD} [{ONE}, {{"name": "rm_rf", "arguments": {{}}}}]',
    # broken JSON after prose
    f"{LEAD} {ONE[:-1]}",
]


@pytest.mark.parametrize("content", QUOTED)
async def test_json_quoted_in_an_explanation_stays_the_answer(content: str) -> None:
    memory = request_memory()
    model = ScriptedModel([text(content)])

    result = await run(make_config(model, tools=[echo_tool()], memory=memory))

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert result.tool_executions == 0
    assert result.output == content
    assert memory.messages[1] == AssistantMessage(content=content)
    assert recover_tool_calls(ModelResponse(content=content), {"check"}, id_prefix="r") is None

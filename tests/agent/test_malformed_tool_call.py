"""A tool call the provider would refuse to see again is not run and never poisons the
history.

Arguments that are not a JSON object (cut off by the output limit, plain text, a JSON
value that is not an object) and names that are not valid tool names
(``^[a-zA-Z0-9_-]{1,64}$``) are answered with an ``Error:`` saying why; the assistant
message enters history with ``{}`` / the ``invalid_tool_name`` placeholder, what the
model wrote kept (bounded) beside it, so every later request is one a strict
OpenAI-compatible server accepts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

import pytest
from pydantic import TypeAdapter

from bot.agent import (
    AnyMessage,
    AssistantMessage,
    CallContext,
    FunctionTool,
    Message,
    StopReason,
    ToolCall,
    ToolMessage,
    run,
)
from bot.agent.testing import ScriptedModel, calls, text

from .conftest import HostArgs, NoArgs, Recorder, make_config

PLACEHOLDER = "invalid_tool_name"
VALID_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
KEPT_AT_MOST = 2_100  # 2,000 chars and a note of the full size


class CountingTool:
    """A read-only ``check`` tool that counts its runs."""

    def __init__(self, name: str = "check", *, no_args: bool = False) -> None:
        self.runs = 0

        async def fn(args: HostArgs | NoArgs, ctx: CallContext) -> str:
            self.runs += 1
            return "ok"

        self.tool = FunctionTool(
            name=name,
            description="Check a host",
            args_model=NoArgs if no_args else HostArgs,
            fn=fn,
        )


def assert_valid_history(messages: Sequence[AnyMessage]) -> None:
    """What a strict OpenAI-compatible server checks: every call's arguments are a JSON
    object, every name a valid tool name, every result answers a call of that name."""
    names: dict[str, str] = {}
    for message in messages:
        if isinstance(message, AssistantMessage):
            for c in message.tool_calls:
                assert isinstance(json.loads(c.arguments), dict), c.arguments
                assert VALID_NAME.fullmatch(c.name), c.name
                names[c.id] = c.name
        elif isinstance(message, ToolMessage):
            assert names.get(message.tool_call_id) == message.name


async def one_bad_call(
    bad: ToolCall, tool: CountingTool, recorder: Recorder | None = None
) -> tuple[AssistantMessage, ToolMessage, ScriptedModel]:
    """Run ``bad`` then an answer: the run completes; the stored call and its result."""
    model = ScriptedModel([calls(bad, content="Checking."), text("handled")])
    config = make_config(model, tools=[tool.tool], on_event=recorder)
    result = await run(config)
    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert len(model.requests) == 2
    *_, stored, seen = model.histories[1]
    assert isinstance(stored, AssistantMessage) and isinstance(seen, ToolMessage)
    assert_valid_history(model.histories[1])
    return stored, seen, model


# -- arguments ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "why"),
    [
        ('{"host": "web-0', "not valid JSON (Unterminated string"),
        ("check web-03 please", "not valid JSON (Expecting value"),
        ('{"host": "web-03", }', "not valid JSON ("),
        ("[1]", "expected a JSON object, got list"),
        ('"x"', "expected a JSON object, got str"),
        ("null", "expected a JSON object, got NoneType"),
    ],
    ids=["cut-off", "plain-text", "trailing-comma", "list", "string", "null"],
)
async def test_arguments_that_are_not_an_object_are_stored_as_an_empty_object(
    arguments: str, why: str
) -> None:
    tool, recorder = CountingTool(), Recorder()
    stored, seen, _ = await one_bad_call(
        ToolCall(id="c1", name="check", arguments=arguments), tool, recorder
    )

    (call,) = stored.tool_calls
    assert call.arguments == "{}"
    assert call.name == "check" and call.id == "c1"
    assert call.malformed is not None
    assert call.malformed.arguments == arguments
    assert call.malformed.name is None
    assert stored.content == "Checking."
    # The model is told its call was malformed and was not run; the tool never ran.
    assert seen.is_error and seen.name == "check" and seen.tool_call_id == "c1"
    assert seen.content.startswith(f"Error: invalid arguments for tool 'check': {why}")
    assert tool.runs == 0
    (end,) = recorder.of("tool_end")
    assert end.ran is False and end.is_error
    assert recorder.of("tool_start") == []


async def test_a_tool_without_parameters_is_not_run_with_empty_arguments_instead() -> None:
    tool = CountingTool("status", no_args=True)
    stored, seen, _ = await one_bad_call(
        ToolCall(id="c1", name="status", arguments='{"verbose": tr'), tool
    )

    assert stored.tool_calls[0].arguments == "{}"
    assert seen.content.startswith("Error: invalid arguments for tool 'status': not valid JSON")
    assert tool.runs == 0


async def test_blank_arguments_are_an_empty_object_and_the_call_runs() -> None:
    tool = CountingTool("status", no_args=True)
    stored, seen, _ = await one_bad_call(ToolCall(id="c1", name="status", arguments="  "), tool)

    (call,) = stored.tool_calls
    assert call.arguments == "{}"
    assert call.malformed is None
    assert not seen.is_error and seen.content == "ok"
    assert tool.runs == 1


async def test_a_huge_broken_output_is_kept_bounded() -> None:
    arguments = '{"host": "' + "w" * 1_000_000
    stored, seen, _ = await one_bad_call(
        ToolCall(id="c1", name="check", arguments=arguments), CountingTool()
    )

    kept = stored.tool_calls[0].malformed
    assert kept is not None and kept.arguments is not None
    assert kept.arguments.startswith(arguments[:1_900])
    assert len(kept.arguments) <= KEPT_AT_MOST
    assert "1000010 chars" in kept.arguments
    assert seen.content.startswith("Error: invalid arguments for tool 'check': not valid JSON")
    assert len(seen.content) < 300


# -- names --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["x" * 200, "check host", "functions.check", "", "chéck", "check\n"],
    ids=["200-chars", "spaces", "dotted", "empty", "non-ascii", "newline"],
)
async def test_a_name_that_is_not_a_valid_tool_name_is_renamed(name: str) -> None:
    tool, recorder = CountingTool(), Recorder()
    stored, seen, _ = await one_bad_call(
        ToolCall(id="c1", name=name, arguments='{"host": "web-03"}'), tool, recorder
    )

    (call,) = stored.tool_calls
    assert call.name == PLACEHOLDER
    assert call.arguments == '{"host": "web-03"}'
    assert call.malformed is not None
    assert call.malformed.name == name
    assert call.malformed.arguments is None
    assert seen.name == PLACEHOLDER and seen.tool_call_id == "c1" and seen.is_error
    assert seen.content.startswith("Error: unknown tool ")
    assert "not a valid tool name" in seen.content
    assert seen.content.endswith("; available tools: check")
    assert "\n" not in seen.content and len(seen.content) < 300
    assert tool.runs == 0
    (end,) = recorder.of("tool_end")
    assert end.ran is False and end.tool == PLACEHOLDER


async def test_a_bad_name_with_bad_arguments_keeps_both() -> None:
    stored, seen, _ = await one_bad_call(
        ToolCall(id="c1", name="check host", arguments='{"host": '), CountingTool()
    )

    (call,) = stored.tool_calls
    assert (call.name, call.arguments) == (PLACEHOLDER, "{}")
    assert call.malformed is not None
    assert (call.malformed.name, call.malformed.arguments) == ("check host", '{"host": ')
    assert "not a valid tool name" in seen.content


async def test_a_huge_name_is_kept_bounded() -> None:
    name = "n" * 50_000
    stored, seen, _ = await one_bad_call(
        ToolCall(id="c1", name=name, arguments="{}"), CountingTool()
    )

    kept = stored.tool_calls[0].malformed
    assert kept is not None and kept.name is not None
    assert len(kept.name) <= KEPT_AT_MOST and kept.name.startswith("n" * 1_900)
    assert len(seen.content) < 300


async def test_a_placeholder_named_tool_is_not_run_for_a_renamed_call() -> None:
    tool = CountingTool(PLACEHOLDER)
    stored, seen, _ = await one_bad_call(
        ToolCall(id="c1", name="bad name", arguments='{"host": "web-03"}'), tool
    )

    assert stored.tool_calls[0].name == PLACEHOLDER
    assert "not a valid tool name" in seen.content
    assert tool.runs == 0


# -- the rest of the batch and the stored form ----------------------------------------------


async def test_good_calls_beside_a_broken_one_run_and_stay_as_written() -> None:
    tool = CountingTool()
    good = ToolCall(id="c1", name="check", arguments='{"host":  "web-01"}')
    model = ScriptedModel(
        [
            calls(good, ToolCall(id="c2", name="check", arguments='{"host": "web-0')),
            text("done"),
        ]
    )
    result = await run(make_config(model, tools=[tool.tool]))

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert tool.runs == 1
    stored = model.histories[1][1]
    assert isinstance(stored, AssistantMessage)
    assert stored.tool_calls[0] == good
    assert stored.tool_calls[1].arguments == "{}"
    results = [m for m in model.histories[1] if isinstance(m, ToolMessage)]
    assert [r.is_error for r in results] == [False, True]
    assert_valid_history(model.histories[1])


def test_a_stored_call_reads_back_and_a_well_formed_one_is_stored_as_before() -> None:
    adapter: TypeAdapter[AnyMessage] = TypeAdapter(Message)
    old = '{"role":"assistant","tool_calls":[{"id":"c1","name":"check","arguments":"{}"}]}'
    message = adapter.validate_json(old)
    assert isinstance(message, AssistantMessage)
    assert message.tool_calls[0].malformed is None
    # Without a malformed original, nothing new is written (older readers forbid extras).
    assert message.model_dump_json() == (
        '{"role":"assistant","content":null,'
        '"tool_calls":[{"id":"c1","name":"check","arguments":"{}"}]}'
    )
    assert "malformed" not in message.tool_calls[0].model_dump()


async def test_a_malformed_call_survives_the_store_round_trip() -> None:
    stored, _, _ = await one_bad_call(
        ToolCall(id="c1", name="check host", arguments="[1]"), CountingTool()
    )
    adapter: TypeAdapter[AnyMessage] = TypeAdapter(Message)

    again = adapter.validate_json(stored.model_dump_json(exclude_none=True))

    assert again == stored

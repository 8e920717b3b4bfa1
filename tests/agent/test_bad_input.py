"""Bad input from the model or from a tool never crashes a run.

Malformed or non-object JSON arguments, tool names with odd characters, gigantic
outputs and outputs that are not valid UTF-8 each become a clear tool result; the run
goes on to the next model call and completes.
"""

from __future__ import annotations

import pytest
from pydantic import TypeAdapter

from bot.agent import (
    CallContext,
    FunctionTool,
    InMemoryArtifacts,
    Message,
    StopReason,
    ToolCall,
    ToolMessage,
    run,
)
from bot.agent.testing import ScriptedModel, calls, text

from .conftest import HostArgs, Recorder, echo_tool, make_config

FIVE_MB = 5 * 1024 * 1024


async def one_call(
    tool_call: ToolCall,
    tools: list[FunctionTool] | None = None,
    **kw: object,
) -> tuple[ToolMessage, ScriptedModel]:
    """Run one raw tool call then an answer; the run must complete. Returns the tool
    message the model saw in its next request."""
    model = ScriptedModel([calls(tool_call), text("handled")])
    result = await run(make_config(model, tools=tools or [echo_tool()], **kw))
    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert result.output == "handled"
    assert len(model.requests) == 2
    seen = model.histories[1][-1]
    assert isinstance(seen, ToolMessage)
    assert seen.tool_call_id == tool_call.id
    return seen, model


def output_tool(output: str | bytes, *, output_bound: int = 4000) -> FunctionTool:
    async def fn(args: HostArgs, ctx: CallContext) -> str | bytes:
        return output

    return FunctionTool(
        name="dump", description="Dump", args_model=HostArgs, fn=fn, output_bound=output_bound
    )


def raw(arguments: str, name: str = "check") -> ToolCall:
    return ToolCall(id="c1", name=name, arguments=arguments)


# -- arguments ----------------------------------------------------------------


@pytest.mark.parametrize(
    "arguments",
    [
        '{"host": "web-03"',
        "{host: web-03}",
        "{'host': 'web-03'}",
        '{"host": "web-03"}}',
        "\x00\x01",
        '{"host": "web-03", }',
    ],
)
async def test_malformed_json_arguments_are_a_clear_error(arguments: str) -> None:
    seen, _ = await one_call(raw(arguments))

    assert seen.is_error
    assert seen.content.startswith("Error: invalid arguments for tool 'check': not valid JSON")


@pytest.mark.parametrize(
    ("arguments", "kind"),
    [('["web-03"]', "list"), ("null", "NoneType"), ('"web-03"', "str"), ("42", "int")],
)
async def test_arguments_that_are_not_an_object_are_a_clear_error(
    arguments: str, kind: str
) -> None:
    seen, _ = await one_call(raw(arguments))

    assert seen.is_error
    assert seen.content == (
        f"Error: invalid arguments for tool 'check': expected a JSON object, got {kind}"
    )


async def test_deeply_nested_arguments_are_a_clear_error() -> None:
    # 10 KB of brackets: well under the size cap, but deeper than the JSON decoder's
    # recursion limit.
    arguments = '{"host": ' + "[" * 5000 + "]" * 5000 + "}"
    seen, _ = await one_call(raw(arguments))

    assert seen.is_error
    assert seen.content.startswith("Error: invalid arguments for tool 'check'")


async def test_oversized_arguments_are_refused_before_parsing() -> None:
    arguments = '{"host": "' + "a" * 200_000 + '"}'
    seen, _ = await one_call(raw(arguments))

    assert seen.is_error
    assert seen.content.startswith("Error: invalid arguments for tool 'check': ")
    assert "100000 allowed" in seen.content
    assert len(seen.content) < 200


# -- tool names ---------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "check\nrm -rf /",
        "x" * 500,
        "chéck_🔥",
        "",
        "check ",
        "\u202echeck",
        "check\x00",
        "functions.check",
    ],
    ids=["newline", "500-chars", "unicode", "empty", "trailing-space", "rtl", "nul", "dotted"],
)
async def test_odd_tool_names_are_a_clear_unknown_tool_result(name: str) -> None:
    recorder = Recorder()
    seen, _ = await one_call(raw('{"host": "web-03"}', name=name), on_event=recorder)

    assert seen.is_error
    assert seen.content.startswith("Error: unknown tool ")
    assert seen.content.endswith("; available tools: check")
    # One readable line, however long or strange the name was.
    assert "\n" not in seen.content and "\x00" not in seen.content
    assert len(seen.content) < 200
    (end,) = recorder.of("tool_end")
    assert end.ran is False


async def test_unicode_tool_name_is_shown_as_written() -> None:
    seen, _ = await one_call(raw('{"host": "web-03"}', name="chéck_🔥"))

    assert seen.content == (
        "Error: unknown tool 'chéck_🔥': not a valid tool name "
        "(1 to 64 letters, digits, '_' or '-'); available tools: check"
    )


# -- outputs ------------------------------------------------------------------


async def test_gigantic_output_is_cut_with_a_note_and_kept_as_an_artifact() -> None:
    line = "line {:07d} load 0.5\n"  # 22 chars, numbered so every cut point differs
    big = "".join(line.format(n) for n in range(FIVE_MB // 22 + 1))[:FIVE_MB]
    assert len(big) == FIVE_MB
    artifacts = InMemoryArtifacts()
    seen, _ = await one_call(
        ToolCall(id="c1", name="dump", arguments='{"host": "web-03"}'),
        [output_tool(big)],
        artifacts=artifacts,
    )

    assert not seen.is_error
    assert seen.artifact is not None
    assert artifacts.items == {seen.artifact: big}
    assert seen.content.startswith(big[:4000])
    note = seen.content[4000:]
    assert note.startswith("\n")
    assert f"{FIVE_MB} chars" in note
    assert seen.artifact in note
    assert len(seen.content) < 4000 + 200


async def test_output_is_cut_at_the_tools_own_bound() -> None:
    artifacts = InMemoryArtifacts()
    seen, _ = await one_call(
        ToolCall(id="c1", name="dump", arguments='{"host": "web-03"}'),
        [output_tool("0123456789" * 30, output_bound=100)],
        artifacts=artifacts,
    )

    assert seen.content.startswith("0123456789" * 10)
    assert seen.content[100] == "\n"  # the note follows the 100 kept chars
    assert "300 chars" in seen.content
    assert artifacts.items[seen.artifact or ""] == "0123456789" * 30


async def test_output_within_the_bound_is_kept_whole() -> None:
    artifacts = InMemoryArtifacts()
    seen, _ = await one_call(
        ToolCall(id="c1", name="dump", arguments='{"host": "web-03"}'),
        [output_tool("x" * 4000)],
        artifacts=artifacts,
    )

    assert seen.content == "x" * 4000
    assert seen.artifact is None
    assert artifacts.items == {}


async def test_non_utf8_bytes_become_replacement_characters() -> None:
    seen, _ = await one_call(
        ToolCall(id="c1", name="dump", arguments='{"host": "web-03"}'),
        [output_tool(b"cpu \xff\xfe95% on web-03 \xc3\x00end")],
    )

    assert not seen.is_error
    assert seen.content == "cpu \ufffd\ufffd95% on web-03 \ufffd\ufffdend"
    seen.content.encode("utf-8")  # clean text, nothing left undecodable


async def test_gigantic_binary_output_is_decoded_and_bounded() -> None:
    blob = bytes(range(256)) * (FIVE_MB // 256)
    artifacts = InMemoryArtifacts()
    seen, _ = await one_call(
        ToolCall(id="c1", name="dump", arguments='{"host": "web-03"}'),
        [output_tool(blob)],
        artifacts=artifacts,
    )

    assert seen.artifact is not None
    assert len(seen.content) < 4000 + 200
    seen.content.encode("utf-8")
    assert len(artifacts.items[seen.artifact]) > 4000


async def test_text_with_lone_surrogates_becomes_clean_text() -> None:
    # What ``bytes.decode(errors="surrogateescape")`` (os.fsdecode, many subprocess
    # wrappers) makes of non-UTF-8 output. The result must still be text the model
    # adapters and the store can encode, as with raw bytes.
    seen, _ = await one_call(
        ToolCall(id="c1", name="dump", arguments='{"host": "web-03"}'),
        [output_tool(b"cpu \xff95%".decode("utf-8", "surrogateescape"))],
    )

    seen.content.encode("utf-8")
    restored = TypeAdapter(Message).validate_json(seen.model_dump_json())
    assert restored == seen

"""Tool output is bounded: the model sees the head, the full output is kept as an artifact.

An output longer than the tool's ``output_bound`` (default 4000 chars) is cut, with a note
of its original size and the reference under which the full output was stored in
``config.artifacts``; ``ToolMessage.artifact`` holds that reference. Outputs within the
bound reach the model untouched and store nothing.
"""

from __future__ import annotations

from dataclasses import replace

from bot.agent import (
    CallContext,
    FunctionTool,
    InMemoryArtifacts,
    InMemoryHistory,
    StopReason,
    ToolMessage,
    run,
)
from bot.agent.testing import ScriptedModel, call, calls, text

from .conftest import HostArgs, make_config


def fixed_tool(output: str, *, output_bound: int | None = None) -> FunctionTool:
    async def fn(args: HostArgs, ctx: CallContext) -> str:
        return output

    tool = FunctionTool(name="dump", description="dump", args_model=HostArgs, fn=fn)
    if output_bound is not None:
        tool = replace(tool, output_bound=output_bound)
    return tool


async def run_once(tool: FunctionTool, **kw: object) -> tuple[ToolMessage, ScriptedModel]:
    model = ScriptedModel([calls(call("dump", "c1", host="web-03")), text("done")])
    memory = InMemoryHistory()
    result = await run(make_config(model, tools=[tool], memory=memory, **kw))
    assert result.stop_reason is StopReason.COMPLETED, result.error
    results = [m for m in memory.messages if isinstance(m, ToolMessage)]
    assert len(results) == 1
    return results[0], model


async def test_long_output_is_cut_and_kept_as_an_artifact() -> None:
    full = "a" * 4000 + "§" * 1000
    artifacts = InMemoryArtifacts()

    message, model = await run_once(fixed_tool(full), artifacts=artifacts)

    assert message.content.startswith("a" * 4000)
    assert "§" not in message.content  # nothing past the bound
    assert "5000" in message.content  # the original size is noted
    assert message.artifact is not None
    assert message.artifact in message.content  # the model can quote the reference
    assert artifacts.items == {message.artifact: full}
    # What the model is sent is the cut observation.
    sent = [m for m in model.requests[1].messages if isinstance(m, ToolMessage)]
    assert sent[0].content == message.content


async def test_output_at_the_bound_is_untouched() -> None:
    full = "a" * 4000
    artifacts = InMemoryArtifacts()

    message, _ = await run_once(fixed_tool(full), artifacts=artifacts)

    assert message.content == full
    assert message.artifact is None
    assert artifacts.items == {}


async def test_short_output_is_untouched() -> None:
    artifacts = InMemoryArtifacts()
    message, _ = await run_once(fixed_tool("load average: 0.42"), artifacts=artifacts)

    assert message.content == "load average: 0.42"
    assert message.artifact is None
    assert artifacts.items == {}


async def test_the_bound_is_the_tools_own() -> None:
    full = "0123456789" * 15  # 150 chars
    artifacts = InMemoryArtifacts()

    message, _ = await run_once(fixed_tool(full, output_bound=100), artifacts=artifacts)

    assert message.content.startswith(full[:100])
    assert full[:101] not in message.content
    assert "150" in message.content
    assert message.artifact is not None and artifacts.items[message.artifact] == full


async def test_a_tool_may_allow_more_than_the_default() -> None:
    full = "a" * 6000
    message, _ = await run_once(fixed_tool(full, output_bound=10_000))

    assert message.content == full
    assert message.artifact is None


async def test_default_artifact_store_keeps_the_output() -> None:
    full = "b" * 4500
    model = ScriptedModel([calls(call("dump", "c1", host="web-03")), text("done")])
    memory = InMemoryHistory()
    config = make_config(model, tools=[fixed_tool(full)], memory=memory)

    await run(config)

    assert isinstance(config.artifacts, InMemoryArtifacts)
    [message] = [m for m in memory.messages if isinstance(m, ToolMessage)]
    assert message.artifact is not None
    assert config.artifacts.items[message.artifact] == full


async def test_each_cut_output_gets_its_own_reference() -> None:
    outputs = iter(["x" * 5000, "y" * 5000])

    async def fn(args: HostArgs, ctx: CallContext) -> str:
        return next(outputs)

    tool = FunctionTool(name="dump", description="dump", args_model=HostArgs, fn=fn)
    model = ScriptedModel(
        [
            calls(call("dump", "c1", host="web-01"), call("dump", "c2", host="web-02")),
            text("done"),
        ]
    )
    memory = InMemoryHistory()
    artifacts = InMemoryArtifacts()

    await run(make_config(model, tools=[tool], memory=memory, artifacts=artifacts))

    refs = [m.artifact for m in memory.messages if isinstance(m, ToolMessage)]
    assert None not in refs and len(set(refs)) == 2
    assert sorted(artifacts.items.values()) == ["x" * 5000, "y" * 5000]

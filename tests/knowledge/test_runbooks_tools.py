"""``search_runbooks`` and ``read_runbook`` as the model calls them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from bot.agent import (
    AgentConfig,
    CallContext,
    InMemoryHistory,
    StopReason,
    Tool,
    ToolMessage,
    UserMessage,
    run,
)
from bot.agent.testing import FakeClock, ScriptedModel, call, calls, text
from bot.errors import ToolError
from bot.knowledge.runbooks import Runbooks
from tests.knowledge.runbook_corpus import write_corpus
from tools.packs.runbooks import RUNBOOK_TOOLS, runbook_tools

CTX = CallContext(job_id="C1:1.1:j1", call_id="c1")


@pytest.fixture
def tools(tmp_path: Path) -> dict[str, Tool]:
    return {t.name: t for t in runbook_tools(Runbooks(write_corpus(tmp_path)))}


async def call_tool(tool: Tool, **args: Any) -> str:
    """Validate as the core does, then execute."""
    result = await tool.execute(tool.args_model.model_validate(args), CTX)
    assert isinstance(result, str)
    return result


def test_two_read_only_parallel_tools(tools: dict[str, Tool]) -> None:
    assert tuple(tools) == RUNBOOK_TOOLS
    for tool in tools.values():
        assert (tool.category, tool.parallel) == ("read_only", True)
        assert tool.output_bound >= 8_000
    search = tools["search_runbooks"].args_model.model_json_schema()
    assert set(search["properties"]) == {"query", "limit"}
    assert search["required"] == ["query"]
    assert tools["read_runbook"].args_model.model_json_schema()["required"] == ["ref"]


async def test_search_lists_ref_title_heading_and_snippet(tools: dict[str, Tool]) -> None:
    out = await call_tool(tools["search_runbooks"], query="pod keeps restarting", limit=2)
    first, second = out.split("\n\n")
    ref, where, snippet = first.split("\n")
    assert ref == "k8s/crashloop.md#symptoms"
    assert where == "  Pod in CrashLoopBackOff › Symptoms"
    assert snippet.startswith("  ") and "restart" in snippet.lower()
    assert second.startswith("k8s/crashloop.md#")


async def test_search_with_no_match_says_how_many_are_indexed(tools: dict[str, Tool]) -> None:
    out = await call_tool(tools["search_runbooks"], query="zyxxyqq")
    assert out == "No runbook section matches 'zyxxyqq' (29 runbooks indexed)."


@pytest.mark.parametrize("limit", [0, 21, -1])
def test_search_limit_is_1_to_20(tools: dict[str, Tool], limit: int) -> None:
    with pytest.raises(ValidationError):
        tools["search_runbooks"].args_model.model_validate({"query": "disk", "limit": limit})


async def test_search_limit_20_returns_at_most_20(tools: dict[str, Tool]) -> None:
    out = await call_tool(tools["search_runbooks"], query="the kubernetes pod node disk", limit=20)
    assert 5 < len(out.split("\n\n")) <= 20


async def test_read_returns_the_section(tools: dict[str, Tool]) -> None:
    out = await call_tool(tools["read_runbook"], ref="k8s/oomkilled.md#raise-the-memory-limit")
    assert out.startswith("Runbook: Container OOMKilled (k8s/oomkilled.md#raise-the-memory-limit)")
    assert "2. Raise `resources.limits.memory` by 25% in the chart values.\n" in out


async def test_read_of_an_unknown_ref_is_a_tool_error_naming_refs_nearby(
    tools: dict[str, Tool],
) -> None:
    with pytest.raises(ToolError, match=r"nearby: k8s/oomkilled.md#raise-the-memory-limit"):
        await call_tool(tools["read_runbook"], ref="k8s/oomkiled.md#raise-the-memory-limit")


async def test_the_model_reads_error_naming_refs_nearby(tools: dict[str, Tool]) -> None:
    model = ScriptedModel(
        [
            calls(
                call("search_runbooks", "c1", query="disk full"),
                call("read_runbook", "c2", ref="linux/diskfull.md#free-space"),
                call("read_runbook", "c3", ref="linux/disk-full.md#free-space"),
            ),
            text("done"),
        ]
    )
    memory = InMemoryHistory()
    memory.append(UserMessage(content="the disk is full"))
    result = await run(
        AgentConfig(
            job_id="job-1",
            client=model,
            memory=memory,
            system_prompt="You are an SRE assistant.",
            tools=list(tools.values()),
            clock=FakeClock(),
        )
    )
    assert result.stop_reason is StopReason.COMPLETED, result.error
    found, wrong_path, wrong_slug = (
        m for m in model.requests[1].messages if isinstance(m, ToolMessage)
    )
    assert found.content.startswith("linux/disk-full.md#") and not found.is_error
    assert wrong_path.is_error
    assert wrong_path.content.startswith(
        "Error: no runbook 'linux/diskfull.md#free-space'; nearby:"
    )
    assert "linux/disk-full.md#free-space-on-var" in wrong_path.content
    assert wrong_slug.content.startswith(
        "Error: linux/disk-full.md has no section #free-space; its sections: #disk-full, "
        "#free-space-on-var, #inodes-exhausted, #grow-the-volume"
    )
    model.assert_done()

"""Annotations are hints from a server that may be wrong or hostile: ``mutating`` by
default, ``read_only`` only when the entry trusts annotations, ``destructive`` whenever
``destructiveHint`` is explicitly true, and the operator's override over all of it."""

from __future__ import annotations

import json

from mcp_types import ToolAnnotations

from tests.tools.mcp.conftest import Connect
from tools.mcp.tool import McpTool, decide
from tools.spec import McpToolOverride


def test_the_decision_table() -> None:
    ro = ToolAnnotations(read_only_hint=True)
    destructive = ToolAnnotations(destructive_hint=True)
    cases = [
        (None, False, None, ("mutating", "default")),
        (ro, False, None, ("mutating", "default")),
        (ro, True, None, ("read_only", "annotation")),
        (destructive, False, None, ("destructive", "annotation")),
        (destructive, True, None, ("destructive", "annotation")),
        (ToolAnnotations(destructive_hint=None), True, None, ("mutating", "default")),
        (destructive, False, McpToolOverride(category="read_only"), ("read_only", "override")),
        (ro, True, McpToolOverride(category="mutating"), ("mutating", "override")),
    ]
    for hints, trust, override, expected in cases:
        decided = decide(hints, trust_annotations=trust, override=override)
        assert (decided.category, decided.reason) == expected, (hints, trust, override)


def test_parallel_only_from_an_override_of_a_read_only_tool() -> None:
    ro = ToolAnnotations(read_only_hint=True)
    assert not decide(ro, trust_annotations=True, override=None).parallel
    assert decide(ro, trust_annotations=True, override=McpToolOverride(parallel=True)).parallel
    on_mutating = decide(None, trust_annotations=False, override=McpToolOverride(parallel=True))
    assert (on_mutating.category, on_mutating.parallel) == ("mutating", False)


async def test_a_real_servers_hints_count_only_when_trusted(
    connect: Connect, time_server: list[str]
) -> None:
    argv = json.dumps(time_server)
    untrusted = await connect(f"mcp_servers: [{{name: time, command: {argv}}}]")
    trusted = await connect(
        f"mcp_servers: [{{name: time, command: {argv}, trust_annotations: true}}]"
    )
    plain = untrusted.tools["time_convert_time"]
    assert isinstance(plain, McpTool)
    assert (plain.category, plain.category_reason) == ("mutating", "default")
    hinted = trusted.tools["time_convert_time"]
    assert isinstance(hinted, McpTool)
    assert (hinted.category, hinted.category_reason) == ("read_only", "annotation")


async def test_destructive_hints_win_over_trust(
    connect: Connect, filesystem_server: list[str]
) -> None:
    catalog = await connect(
        f"""
        mcp_servers:
          - name: fs
            command: {json.dumps(filesystem_server)}
            trust_annotations: true
            tools:
              move_file: {{category: mutating}}
        """
    )
    assert catalog.tools["fs_write_file"].category == "destructive"
    assert catalog.tools["fs_read_text_file"].category == "read_only"
    assert catalog.tools["fs_create_directory"].category == "mutating"  # not read-only
    assert catalog.tools["fs_move_file"].category == "mutating"  # the override

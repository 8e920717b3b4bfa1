"""Servers that break the protocol or never answer: each wait is bounded, each becomes
one clear report (at start) or one ``Error:`` result, and the bot keeps its other tools."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

import pytest
from mcp.shared.message import SessionMessage

from bot.agent import InMemoryHistory, ToolMessage, UserMessage, run
from bot.agent.config import AgentConfig
from bot.agent.testing import ScriptedModel, call, calls, text
from tests.tools.mcp.conftest import Connect
from tools.mcp import stdio

WAIT_S = 30.0

SILENT = "import sys\nfor _ in sys.stdin: pass\n"  # reads, never answers
GARBAGE = (
    "import sys\n"
    "for _ in sys.stdin:\n"
    "    sys.stdout.write('this is not json-rpc \\x00\\xff{{{\\n' * 50)\n"
    "    sys.stdout.flush()\n"
)


def server(name: str, script: str) -> str:
    return f"  - name: {name}\n    command: {json.dumps([sys.executable, '-c', script])}\n"


async def test_never_answering_initialize_is_bounded(
    connect: Connect, time_server: list[str]
) -> None:
    # The bound applies to the real time server too, which must start Python and the MCP
    # SDK within it on a machine busy with the rest of the suite: 8 s, not 3.
    started = time.monotonic()
    catalog = await connect(
        "mcp_servers:\n"
        + server("silent", SILENT)
        + server("garbage", GARBAGE)
        + f"  - name: time\n    command: {json.dumps(time_server)}\n",
        connect_timeout=8.0,
    )
    assert time.monotonic() - started < 40.0  # a hang guard: the servers are bounded together
    reports = {r.name: r for r in catalog.mcp_reports}
    assert reports["silent"].error is not None
    assert "did not finish initialize within 8s" in reports["silent"].error
    assert reports["garbage"].error is not None
    assert reports["time"].tools == 2 and reports["time"].error is None
    assert sorted(catalog.tools) == ["time_convert_time", "time_get_current_time"]


async def test_a_missing_program_is_reported(connect: Connect) -> None:
    catalog = await connect(
        "mcp_servers: [{name: nothere, command: [/nonexistent/mcp-server]}]", connect_timeout=5
    )
    [report] = catalog.mcp_reports
    assert report.error is not None and report.error.startswith("mcp server 'nothere' ")
    assert not catalog.tools


async def test_a_huge_result_is_cut_by_the_output_bound(
    connect: Connect, filesystem_server: list[str]
) -> None:
    big = Path(filesystem_server[1]) / "big.log"
    big.write_text("a log line that goes on and on\n" * (10 * 1024 * 1024 // 31))
    catalog = await connect(
        f"""
        mcp_servers:
          - name: fs
            command: {json.dumps(filesystem_server)}
            tools: {{read_text_file: {{category: read_only}}}}
        """
    )
    tool = catalog.tools["fs_read_text_file"]
    model = ScriptedModel([calls(call("fs_read_text_file", "c1", path=str(big))), text("ok")])
    memory = InMemoryHistory()
    memory.append(UserMessage(content="read it"))
    config = AgentConfig(
        job_id="job-1", client=model, memory=memory, system_prompt="SRE", tools=[tool]
    )
    result = await run(config)
    assert result.output == "ok", result.error
    [message] = [m for m in model.requests[1].messages if isinstance(m, ToolMessage)]
    assert len(message.content) < tool.output_bound + 500
    assert message.content.startswith("a log line")
    assert "[output cut: " in message.content and message.artifact is not None
    model.assert_done()


async def test_the_transport_bounds_lines_and_passes_garbage_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Garbage lines reach the session as errors (it logs them and carries on); a line
    longer than the bound ends the connection instead of growing our memory."""
    monkeypatch.setattr(stdio, "MAX_LINE_BYTES", 100_000)
    ping = '{"jsonrpc": "2.0", "id": 1, "result": {}}'
    script = (
        "import sys\n"
        f"sys.stdout.write('garbage\\n' + {ping!r} + '\\n' + 'x' * 300_000)\n"
        "sys.stdout.flush()\n"
        "sys.stdin.read()\n"
    )
    env = {"PATH": os.environ["PATH"]}
    async with asyncio.timeout(WAIT_S):
        async with stdio.stdio_transport(
            [sys.executable, "-c", script], env=env, cwd=None, name="garbage"
        ) as (read, _write):
            received = [item async for item in read]
    assert isinstance(received[0], Exception)
    assert isinstance(received[1], SessionMessage)
    assert len(received) == 2  # the flood was never parsed: the stream ended

"""``opsloop check`` connects to each MCP server and reports its tool count, or why
not; a server that is down does not hide the others."""

from __future__ import annotations

import json
from pathlib import Path

from bot.cli.check import check_tools
from bot.settings import ToolSettings


async def test_counts_and_reasons(tmp_path: Path, time_server: list[str]) -> None:
    path = tmp_path / "tools.yml"
    path.write_text(
        "mcp_servers:\n"
        f"  - name: time\n    command: {json.dumps(time_server)}\n"
        "  - name: gone\n    command: [/nonexistent/server]\n"
    )
    verdicts = await check_tools(ToolSettings(OPSLOOP_TOOLS=str(path), OPSLOOP_PACKS=""))
    shown = {v.name: v for v in verdicts}
    assert "2 tools" in shown["tools"].detail and "mcp:time: 2" in shown["tools"].detail
    assert shown["mcp time"].status == "ok" and shown["mcp time"].detail == "2 tools"
    assert shown["mcp gone"].status == "FAIL"
    assert "mcp server 'gone' could not start" in shown["mcp gone"].detail

"""Without ``mcp_servers``, building the catalogue imports nothing of the MCP SDK."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PROBE = """
import asyncio, sys
from tools.registry import build_catalog, connect_mcp
catalog = asyncio.run(connect_mcp(build_catalog(tools_file=sys.argv[1])))
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("mcp", "mcp_types", "tools.mcp")
                or m.startswith("tools.mcp"))
print(",".join(loaded))
"""


def test_no_mcp_import_without_servers(tmp_path: Path) -> None:
    path = tmp_path / "tools.yml"
    path.write_text("tools:\n  - name: up\n    description: Uptime.\n    run: [uptime]\n")
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=Path(__file__).resolve().parents[3],
    )
    assert out.stdout.strip() == ""

"""A stdio server's stderr reaches our log line by line (so the log scrubber sees it),
each line bounded, and a flood counted rather than logged without end."""

from __future__ import annotations

import asyncio
import logging
import os
import sys

import pytest

from tools.mcp import stdio

WAIT_S = 20.0


async def test_stderr_lines_are_logged_bounded(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(stdio, "MAX_STDERR_LINES", 5)
    script = (
        "import sys\n"
        "sys.stderr.write('starting\\n' + 'y' * 5000 + '\\n')\n"
        "for n in range(50): sys.stderr.write(f'noise {n}\\n')\n"
        "sys.stderr.flush()\n"
    )
    caplog.set_level(logging.INFO, logger="tools.mcp.stdio")
    async with asyncio.timeout(WAIT_S):
        async with stdio.stdio_transport(
            [sys.executable, "-c", script], env={"PATH": os.environ["PATH"]}, cwd=None, name="noisy"
        ) as (read, _write):
            _ = [item async for item in read]  # the script exits: stdout ends
    lines = [r.getMessage() for r in caplog.records if r.name == "tools.mcp.stdio"]
    stderr_lines = [line for line in lines if "stderr:" in line]
    assert stderr_lines[0] == "mcp server 'noisy' stderr: starting"
    assert len(stderr_lines) == 5
    assert all(len(line) < stdio.MAX_STDERR_LINE + 40 for line in stderr_lines)
    assert any("more stderr lines not logged" in line for line in lines)

"""A server that is down when the bot starts does not hold it up, and is not lost until
a restart: it is tried again in the background, and once it answers its tools are
offered to the jobs that start afterwards (``mcp-server-time`` here, behind a wrapper
that refuses to start until a flag file exists). One whose ``env`` names an unset
variable is not tried again: that needs the operator."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from pathlib import Path

import pytest

from bot.agent.tools import CallContext
from tools.registry import build_catalog, connect_mcp

WAIT_S = 30.0


async def test_a_server_down_at_start_is_offered_once_it_answers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    flag = tmp_path / "up"
    script = f"test -e {flag} || exit 3; exec {sys.executable} -m mcp_server_time"
    tools = tmp_path / "tools.yml"
    tools.write_text(
        f"mcp_servers: [{{name: time, command: {json.dumps(['/bin/sh', '-c', script])}, "
        "tools: {get_current_time: {category: read_only}}}]\n"
    )
    caplog.set_level(logging.INFO)
    catalog = await connect_mcp(build_catalog(tools_file=tools), retry_first=0.05)
    try:
        assert "time_get_current_time" not in catalog.tools
        [report] = catalog.mcp_reports
        assert report.error is not None and "time" in report.error
        assert "offered once it answers" in caplog.text
        await asyncio.sleep(0.3)  # a few tries while it is still down
        assert "time_get_current_time" not in catalog.tools

        flag.touch()
        for _ in range(int(WAIT_S / 0.05)):  # bounded: the retry runs every 0.05 s at first
            if "time_get_current_time" in catalog.tools:
                break
            await asyncio.sleep(0.05)
        assert catalog.sources["time_get_current_time"] == "mcp:time"
        assert "time_get_current_time" in [t.name for t in catalog.for_channel("C1")]
        tool = catalog.tools["time_get_current_time"]
        assert tool.category == "read_only"  # the override applies to a late listing too
        args = tool.args_model.model_validate({"timezone": "UTC"})
        result = await tool.execute(args, CallContext(job_id="j", call_id="c"))
        assert '"timezone": "UTC"' in str(result)
        assert "mcp server 'time' is up" in caplog.text
    finally:
        await catalog.aclose()


async def test_a_server_missing_a_variable_is_not_tried_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tools = tmp_path / "tools.yml"
    argv = json.dumps([sys.executable, "-m", "mcp_server_time"])
    tools.write_text(
        f"mcp_servers: [{{name: time, command: {argv}, env: {{TZ: '${{NOT_SET_ANYWHERE}}'}}}}]\n"
    )
    caplog.set_level(logging.INFO)
    catalog = await connect_mcp(build_catalog(tools_file=tools), environ={}, retry_first=0.01)
    try:
        [report] = catalog.mcp_reports
        assert report.error is not None and "NOT_SET_ANYWHERE" in report.error
        await asyncio.sleep(0.2)
        assert "still down" not in caplog.text and "is up" not in caplog.text
        assert "its tools are not offered" in caplog.text
        assert list(catalog.tools) == []
    finally:
        await catalog.aclose()

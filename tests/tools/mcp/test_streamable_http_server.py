"""A ``url:`` server over streamable HTTP: the same tools, the same path, its headers
expanded from the bot's environment; a server that is gone is an ``Error:`` naming it."""

from __future__ import annotations

import asyncio
import os

import pytest

from bot.agent.tools import CallContext
from tests.tools.mcp.conftest import Connect, free_port

CTX = CallContext(job_id="j", call_id="c1")


async def test_tools_over_http(connect: Connect, everything_http: str) -> None:
    catalog = await connect(
        f"""
        mcp_servers:
          - name: every
            url: {everything_http}
            headers: {{Authorization: "Bearer ${{EVERY_TOKEN}}"}}
            trust_annotations: true
        """,
        environ={"PATH": os.environ["PATH"], "EVERY_TOKEN": "t0ken-value"},
    )
    tool = catalog.tools["every_get-sum"]
    assert tool.category == "read_only"
    async with asyncio.timeout(30):
        out = await tool.execute(tool.args_model.model_validate({"a": 20, "b": 22}), CTX)
    assert "42" in str(out)


async def test_an_unreachable_url_is_reported(connect: Connect) -> None:
    url = f"http://127.0.0.1:{free_port()}/mcp"
    catalog = await connect(f"mcp_servers: [{{name: gone, url: '{url}'}}]", connect_timeout=10)
    [report] = catalog.mcp_reports
    assert report.error is not None and report.error.startswith("mcp server 'gone' ")
    with pytest.raises(KeyError):
        catalog.tools["gone_anything"]

"""A destructive MCP tool has no dry run: its approval card gets "No dry run available"
without the server being called, and only an approved call reaches the server."""

from __future__ import annotations

import json
from pathlib import Path

from bot.agent import InMemoryHistory, ToolMessage, UserMessage, run
from bot.agent.config import AgentConfig
from bot.agent.ports import Approved, ConfirmRequest, Decision
from bot.agent.testing import ScriptedModel, call, calls, text
from tests.tools.mcp.conftest import Connect
from tools.mcp.tool import NO_DRY_RUN


async def test_card_without_dry_run_then_the_approved_write(
    connect: Connect, filesystem_server: list[str]
) -> None:
    root = Path(filesystem_server[1])
    catalog = await connect(
        f"mcp_servers: [{{name: fs, command: {json.dumps(filesystem_server)}}}]"
    )
    tool = catalog.tools["fs_write_file"]
    target = root / "note.txt"
    asked: list[ConfirmRequest] = []

    async def confirm(request: ConfirmRequest) -> Decision:
        asked.append(request)
        assert not target.exists()  # the "dry run" did not write
        return Approved(confirmed_by="U0APPROVER")

    model = ScriptedModel(
        [
            calls(call("fs_write_file", "c1", path=str(target), content="hello")),
            text("written"),
        ]
    )
    memory = InMemoryHistory()
    memory.append(UserMessage(content="write the note"))
    config = AgentConfig(
        job_id="job-1",
        client=model,
        memory=memory,
        system_prompt="SRE",
        tools=[tool],
        confirm=confirm,
    )
    result = await run(config)
    assert result.output == "written", result.error
    [request] = asked
    assert request.category == "destructive"
    assert request.dry_run_output == NO_DRY_RUN
    assert target.read_text() == "hello"
    [message] = [m for m in model.requests[1].messages if isinstance(m, ToolMessage)]
    assert not message.content.startswith("Error:"), message.content
    model.assert_done()

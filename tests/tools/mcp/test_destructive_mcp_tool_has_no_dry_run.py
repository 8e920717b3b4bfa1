"""A destructive MCP tool has no dry run: its approval is asked for without one (the
server is not called, no dry-run step is traced), the card says "No dry run available",
and only an approved call reaches the server."""

from __future__ import annotations

import json
from pathlib import Path

from bot.agent import InMemoryHistory, ToolMessage, UserMessage, run
from bot.agent.config import AgentConfig
from bot.agent.events import ToolStart
from bot.agent.ports import Approved, ConfirmRequest, Decision
from bot.agent.testing import ScriptedModel, call, calls, text
from bot.slack.cards import NO_DRY_RUN, approval_card
from bot.store.approvals import ApprovalRecord
from tests.tools.mcp.conftest import Connect


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
    events: list[object] = []
    config = AgentConfig(
        on_event=events.append,
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
    assert request.dry_run_output is None
    assert target.read_text() == "hello"
    [message] = [m for m in model.requests[1].messages if isinstance(m, ToolMessage)]
    assert not message.content.startswith("Error:"), message.content
    model.assert_done()
    starts = [e for e in events if isinstance(e, ToolStart)]
    assert [s.dry_run for s in starts] == [False]  # the approved call only: no dry run


def test_the_card_of_a_destructive_call_without_dry_run_says_so() -> None:
    record = ApprovalRecord(
        job_id="j1",
        call_id="c1",
        tool="fs_write_file",
        category="destructive",
        arguments={"path": "/x"},
        args_hash="h",
        requester="U1",
        channel="C1",
        thread_ts="1.0",
        requested_at=0.0,
        expires_at=3600.0,
    )
    assert NO_DRY_RUN in str(approval_card(record).blocks)
    ran = record.model_copy(update={"dry_run_output": "would delete /x"})
    shown = str(approval_card(ran).blocks)
    assert NO_DRY_RUN not in shown and "would delete /x" in shown

"""An approved call reaches the server with the approver and the idempotency key in its
``_meta``, and the approver as the ``confirmed_by`` argument when the tool's schema has
one (whatever the model wrote there). The recording server is the SDK's own
``MCPServer``; it is ours only in that it writes back what it received."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bot.agent import InMemoryHistory, ToolMessage, UserMessage, run
from bot.agent.config import AgentConfig
from bot.agent.ports import Approved, ConfirmRequest, Decision
from bot.agent.testing import ScriptedModel, call, calls, text
from bot.agent.tools import tool_spec
from tests.tools.mcp.conftest import Connect

RECORDER = '''
import json
from mcp.server.mcpserver import Context, MCPServer

app = MCPServer("recorder")


@app.tool()
def record(note: str, confirmed_by: str, ctx: Context) -> str:
    """Record a note."""
    meta = ctx.request_context.meta or {}
    return json.dumps({"note": note, "confirmed_by": confirmed_by, "meta": dict(meta)})


app.run()
'''


async def test_meta_and_confirmed_by_reach_the_server(connect: Connect, tmp_path: Path) -> None:
    script = tmp_path / "recorder.py"
    script.write_text(RECORDER)
    catalog = await connect(
        f"mcp_servers: [{{name: rec, command: {json.dumps([sys.executable, str(script)])}}}]"
    )
    tool = catalog.tools["rec_record"]
    assert tool.category == "mutating"
    assert "confirmed_by" not in tool_spec(tool).parameters["properties"]  # not the model's

    async def confirm(request: ConfirmRequest) -> Decision:
        return Approved(confirmed_by="U0CLICKER")

    model = ScriptedModel(
        [
            calls(call("rec_record", "c7", note="hi", confirmed_by="U0MODEL")),
            text("recorded"),
        ]
    )
    memory = InMemoryHistory()
    memory.append(UserMessage(content="record it"))
    config = AgentConfig(
        job_id="job-9",
        client=model,
        memory=memory,
        system_prompt="SRE",
        tools=[tool],
        confirm=confirm,
    )
    result = await run(config)
    assert result.output == "recorded", result.error
    [message] = [m for m in model.requests[1].messages if isinstance(m, ToolMessage)]
    seen = json.loads(message.content)
    assert seen["note"] == "hi"
    assert seen["confirmed_by"] == "U0CLICKER"
    assert seen["meta"]["opsloop/confirmed_by"] == "U0CLICKER"
    assert seen["meta"]["opsloop/idempotency_key"] == "job-9:c7"
    model.assert_done()

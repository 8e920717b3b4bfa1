"""A real MCP server's tool goes through the one tool path: offered to the model under
``<server>_<tool>`` with the server's schema, arguments validated against that schema
before anything is sent, and its result in the model's next request."""

from __future__ import annotations

import json

from bot.agent import InMemoryHistory, ToolMessage, UserMessage, run
from bot.agent.config import AgentConfig
from bot.agent.testing import ScriptedModel, call, calls, text
from bot.agent.tools import tool_spec
from tests.tools.mcp.conftest import Connect

TRUSTED = """
mcp_servers:
  - name: time
    command: {argv}
    tools:
      get_current_time: {{category: read_only, parallel: true}}
"""


async def test_a_read_only_override_runs_at_once(connect: Connect, time_server: list[str]) -> None:
    catalog = await connect(TRUSTED.format(argv=json.dumps(time_server)))
    tool = catalog.tools["time_get_current_time"]
    assert catalog.sources["time_get_current_time"] == "mcp:time"
    assert (tool.category, tool.parallel) == ("read_only", True)
    spec = tool_spec(tool)
    assert spec.parameters["type"] == "object"
    assert "timezone" in spec.parameters["properties"]
    assert "$schema" not in spec.parameters

    model = ScriptedModel(
        [
            calls(call("time_get_current_time", "c1", timezone="Europe/Paris")),
            text("done"),
        ]
    )
    memory = InMemoryHistory()
    memory.append(UserMessage(content="what time is it in Paris?"))
    config = AgentConfig(
        job_id="job-1", client=model, memory=memory, system_prompt="SRE", tools=[tool]
    )
    result = await run(config)
    assert result.output == "done", result.error
    assert "time_get_current_time" in [t.name for t in model.requests[0].tools]
    [message] = [m for m in model.requests[1].messages if isinstance(m, ToolMessage)]
    answer = json.loads(message.content)
    assert answer["timezone"] == "Europe/Paris"
    model.assert_done()


async def test_arguments_are_checked_against_the_server_schema(
    connect: Connect, time_server: list[str]
) -> None:
    catalog = await connect(TRUSTED.format(argv=json.dumps(time_server)))
    tool = catalog.tools["time_get_current_time"]
    model = ScriptedModel(
        [calls(call("time_get_current_time", "c1", timezone=42)), text("refused")]
    )
    memory = InMemoryHistory()
    memory.append(UserMessage(content="time?"))
    config = AgentConfig(
        job_id="job-1", client=model, memory=memory, system_prompt="SRE", tools=[tool]
    )
    result = await run(config)
    assert result.output == "refused", result.error
    [message] = [m for m in model.requests[1].messages if isinstance(m, ToolMessage)]
    assert message.content.startswith(
        "Error: invalid arguments for tool 'time_get_current_time': "
    ), message.content
    assert "timezone: 42 is not of type 'string'" in message.content
    model.assert_done()

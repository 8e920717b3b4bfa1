"""Configuration mistakes in ``mcp_servers`` are start-up errors like every other:
``file:line: mcp server 'x': problem``; a name that cannot be offered or collides with
another tool is one too, naming both."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from bot.errors import ConfigError
from tests.tools.mcp.conftest import Connect
from tools.spec import load_tools_file

LONG_NAME = '''
from mcp.server.mcpserver import MCPServer

app = MCPServer("long")


@app.tool(name="t" * 200)
def long() -> str:
    """A tool with a name no provider accepts."""
    return "never"


app.run()
'''


def error_of(tmp_path: Path, text: str) -> str:
    path = tmp_path / "tools.yml"
    path.write_text(textwrap.dedent(text))
    with pytest.raises(ConfigError) as caught:
        load_tools_file(path)
    return str(caught.value).replace(str(path), "tools.yml")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "mcp_servers:\n  - name: Grafana\n    url: http://g/mcp\n",
            "tools.yml:2: mcp server 'Grafana': name 'Grafana' must match",
        ),
        (
            "mcp_servers:\n  - name: k8s\n",
            "tools.yml:2: mcp server 'k8s': give either command (stdio) or url",
        ),
        (
            "mcp_servers:\n  - name: k8s\n    command: [k]\n    url: http://k/mcp\n",
            "tools.yml:2: mcp server 'k8s': give either command",
        ),
        (
            "mcp_servers:\n  - name: k8s\n    command: [k]\n    colour: red\n",
            "tools.yml:4: mcp server 'k8s': colour: unknown key",
        ),
        (
            "mcp_servers:\n  - name: k8s\n    command: [k]\n    env: {A: '${SLACK_BOT_TOKEN}'}\n",
            "mcp server 'k8s': env.A: ${SLACK_BOT_TOKEN} is one of the bot's own credentials",
        ),
        (
            "mcp_servers:\n  - name: k8s\n    command: [k]\n    include: [a]\n    exclude: [b]\n",
            "tools.yml:2: mcp server 'k8s': give include or exclude, not both",
        ),
        (
            "mcp_servers:\n  - name: k8s\n    command: [k]\n"
            "    tools: {a: {category: mutating, parallel: true}}\n",
            "mcp server 'k8s': tools.a: parallel applies to read_only tools only",
        ),
        (
            "mcp_servers:\n  - name: k\n    command: [k]\n  - name: k\n    command: [j]\n",
            "tools.yml:4: mcp server 'k': duplicate name (first defined as mcp server #1)",
        ),
        (
            "mcp_servers:\n  - name: k\n    command: [k]\n    timeout: 0\n",
            "tools.yml:4: mcp server 'k': timeout: Input should be greater than 0",
        ),
    ],
)
def test_entry_errors_name_file_line_and_server(tmp_path: Path, text: str, expected: str) -> None:
    assert expected in error_of(tmp_path, text)


async def test_a_colliding_name_names_both(connect: Connect, time_server: list[str]) -> None:
    with pytest.raises(ConfigError) as caught:
        await connect(
            f"""
            tools:
              - name: time_get_current_time
                description: Our own clock.
                run: [date]
            mcp_servers:
              - name: time
                command: {json.dumps(time_server)}
            """
        )
    message = str(caught.value)
    assert ":7: mcp server 'time': its tool 'get_current_time' is offered as " in message
    assert "'time_get_current_time', which is already the name of tool" in message
    assert "tools0.yml)" in message


async def test_a_name_too_long_is_refused(connect: Connect, tmp_path: Path) -> None:
    script = tmp_path / "long.py"
    script.write_text(LONG_NAME)
    argv = json.dumps([sys.executable, str(script)])
    with pytest.raises(ConfigError, match=r"mcp server 'long': its tool 'tttt.*cannot be offered"):
        await connect(f"mcp_servers: [{{name: long, command: {argv}}}]")
    # Left out by the operator, it is no obstacle.
    left_out = json.dumps(["t" * 200])
    catalog = await connect(f"mcp_servers: [{{name: long, command: {argv}, exclude: {left_out}}}]")
    assert not catalog.tools and catalog.mcp_reports[0].error is None

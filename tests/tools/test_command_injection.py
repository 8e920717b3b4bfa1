"""Injection attempts through command-tool arguments have no side effect.

A value is either refused by its parameter's pattern before any process starts, or
reaches the program as one inert argument: no shell ever sees it, so ``;``, ``$(…)``,
backticks, newlines and ``&&`` do nothing. A leading ``-`` is passed as it is; tools
put ``--`` before such a placeholder so that the program does not read it as an option.
Every attempt would create a marker file if it were interpreted; none may exist after.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from bot.agent import InMemoryHistory, ToolMessage, UserMessage, run
from bot.agent.config import AgentConfig
from bot.agent.testing import ScriptedModel, call, calls, text
from bot.agent.tools import CallContext
from bot.errors import ToolError
from tools.command import CommandTool
from tools.spec import CommandToolSpec

CTX = CallContext(job_id="job-1", call_id="call-1")
# Writes a "ran" marker, then prints its arguments as JSON.
PRINT_ARGV = (
    "import json, pathlib, sys\n"
    "pathlib.Path(sys.argv[1]).write_text('ran')\n"
    "print(json.dumps(sys.argv[2:]))\n"
)


def attempts(marker: Path) -> list[str]:
    m = str(marker)
    return [
        f"; touch {m}",
        f"x; touch {m}",
        f"$(touch {m})",
        f"`touch {m}`",
        f"x\ntouch {m}",
        f"x && touch {m}",
        f"x || touch {m}",
        f"x | touch {m}",
        f"x > {m}",
        f"'; touch {m}; echo '",
        f'"; touch {m}; echo "',
        "; rm -rf /",
        "-rf",
        "--help",
    ]


def make_tool(tmp_path: Path, run: list[str], params: dict[str, Any]) -> CommandTool:
    script = tmp_path / "print_argv.py"
    script.write_text(PRINT_ARGV)
    spec = CommandToolSpec(
        name="probe",
        description="Look at a host.",
        params=params,
        run=[sys.executable, str(script), str(tmp_path / "ran"), *run],
    )
    return CommandTool(spec, source="tools.yml", environ={})


async def test_attempts_are_single_inert_arguments(tmp_path: Path) -> None:
    marker = tmp_path / "PWNED"
    tool = make_tool(tmp_path, ["{host}", "--name={host}"], {"host": {"type": "string"}})
    for attempt in attempts(marker):
        out = await tool.execute(tool.args_model.model_validate({"host": attempt}), CTX)
        assert json.loads(out) == [attempt, f"--name={attempt}"]
    assert (tmp_path / "ran").exists()  # the program did run, every time
    assert not marker.exists()


async def test_attempts_reach_a_real_program_verbatim(tmp_path: Path) -> None:
    """``echo`` prints what a shell would have run; nothing runs it."""
    marker = tmp_path / "PWNED"
    spec = CommandToolSpec(
        name="say", description="Echo.", params={"text": {}}, run=["echo", "{text}"]
    )
    tool = CommandTool(spec, source="tools.yml", environ={"PATH": "/usr/bin:/bin"})
    for attempt in attempts(marker):
        if attempt.startswith("-"):
            continue  # echo has options of its own; see the "--" test below
        out = await tool.execute(tool.args_model.model_validate({"text": attempt}), CTX)
        assert out == attempt + "\n"
    assert not marker.exists()


async def test_a_leading_dash_is_an_operand_after_double_dash(tmp_path: Path) -> None:
    """The documented guard: ``ls -- {name}`` looks for a file called ``-la``."""
    (tmp_path / "present").write_text("")
    spec = CommandToolSpec(
        name="list",
        description="List a file.",
        params={"name": {}},
        run=["ls", "--", "{name}"],
        cwd=str(tmp_path),
    )
    tool = CommandTool(spec, source="tools.yml", environ={"PATH": "/usr/bin:/bin"})
    assert await tool.execute(tool.args_model.model_validate({"name": "present"}), CTX) == (
        "present\n"
    )
    with pytest.raises(ToolError, match=r"^exit 2: .*-la"):
        await tool.execute(tool.args_model.model_validate({"name": "-la"}), CTX)


async def test_a_pattern_refuses_attempts_before_any_process_starts(tmp_path: Path) -> None:
    marker = tmp_path / "PWNED"
    pattern = r"^[a-z0-9][a-z0-9.-]*$"
    tool = make_tool(tmp_path, ["{host}"], {"host": {"type": "string", "pattern": pattern}})
    for attempt in attempts(marker):
        with pytest.raises(ValidationError, match="must match the pattern"):
            tool.args_model.model_validate({"host": attempt})
    # Through the agent core: the model is told, the program never starts.
    model = ScriptedModel(
        [calls(call("probe", "c1", host=f"web-01; touch {marker}")), text("nothing ran")]
    )
    memory = InMemoryHistory()
    memory.append(UserMessage(content="probe the host"))
    config = AgentConfig(
        job_id="job-1", client=model, memory=memory, system_prompt="SRE", tools=[tool]
    )
    result = await run(config)
    assert result.output == "nothing ran", result.error
    [message] = [m for m in model.requests[1].messages if isinstance(m, ToolMessage)]
    assert message.content.startswith("Error: invalid arguments for tool 'probe': host:")
    assert not (tmp_path / "ran").exists()  # the program never started
    assert not marker.exists()
    model.assert_done()


async def test_a_final_dollar_means_the_end_of_the_value(tmp_path: Path) -> None:
    """Python's ``$`` also matches before a final newline; a final ``$`` means the end
    of the value, so ``^[a-z]+$`` refuses ``"web\n"`` before anything runs."""
    tool = make_tool(tmp_path, ["{host}"], {"host": {"type": "string", "pattern": r"^[a-z]+$"}})
    with pytest.raises(ValidationError, match="must match the pattern"):
        tool.args_model.model_validate({"host": "web\n"})
    assert tool.args_model.model_validate({"host": "web"})

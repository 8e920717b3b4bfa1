"""argv templating of command tools: one ``run`` element, one argument.

Each element is formatted on its own from the validated arguments, so a value with
spaces, quotes or non-ASCII text stays one argument; booleans are ``true``/``false``,
an absent optional parameter is ``""``; ``{confirmed_by}`` and ``{idempotency_key}``
come from the call context and are empty during a dry run. A real child process
prints the argv it received.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bot.agent.tools import CallContext
from bot.errors import ToolError
from tools.command import CommandTool
from tools.spec import CommandToolSpec

PRINT_ARGV = "import json, sys; print(json.dumps(sys.argv[1:]))\n"
CTX = CallContext(job_id="job-1", call_id="call-1")

MakeTool = Callable[..., CommandTool]


@pytest.fixture
def make_tool(tmp_path: Path) -> MakeTool:
    """A tool running a script that prints its arguments as JSON, then ``run``."""
    script = tmp_path / "print_argv.py"
    script.write_text(PRINT_ARGV)

    def make(run: list[str], params: dict[str, Any] | None = None, **kw: Any) -> CommandTool:
        spec = CommandToolSpec(
            name="argv",
            description="Print argv.",
            params=params or {},
            run=[sys.executable, str(script), *run],
            **kw,
        )
        return CommandTool(spec, source="tools.yml", environ={})

    return make


async def argv_of(tool: CommandTool, ctx: CallContext = CTX, **args: Any) -> list[str]:
    out = await tool.execute(tool.args_model.model_validate(args), ctx)
    result: list[str] = json.loads(out)
    return result


@pytest.mark.parametrize(
    "value",
    [
        "two words",
        "  padded  ",
        "it's \"quoted\" and 'single'",
        "héllo ☃ 日本語 🚀",
        "tab\there",
        "*.log ?[a-z]",
        "~root $HOME ${PATH}",
        "{not a placeholder}",
        "",
    ],
)
async def test_a_whole_element_placeholder_is_exactly_one_argument(
    make_tool: MakeTool, value: str
) -> None:
    tool = make_tool(["{text}"], {"text": {"type": "string"}})
    assert await argv_of(tool, text=value) == [value]


async def test_a_placeholder_inside_an_element_stays_in_that_element(make_tool: MakeTool) -> None:
    tool = make_tool(
        ["--host={host}", "{host}:{port}", "literal {{braces}}", "plain"],
        {"host": {"type": "string"}, "port": {"type": "integer"}},
    )
    assert await argv_of(tool, host="web 01", port=8080) == [
        "--host=web 01",
        "web 01:8080",
        "literal {braces}",
        "plain",
    ]


async def test_booleans_numbers_and_absent_optionals(make_tool: MakeTool) -> None:
    tool = make_tool(
        ["{flag}", "{off}", "{count}", "{ratio}", "{maybe}", "x{maybe}y", "{padded:04d}"],
        {
            "flag": {"type": "boolean"},
            "off": {"type": "boolean", "default": False},
            "count": {"type": "integer"},
            "ratio": {"type": "number"},
            "maybe": {"type": "string", "required": False},
            "padded": {"type": "integer"},
        },
    )
    argv = await argv_of(tool, flag=True, count=3, ratio=0.5, padded=7)
    assert argv == ["true", "false", "3", "0.5", "", "xy", "0007"]


async def test_defaults_and_enums_are_inserted_as_validated(make_tool: MakeTool) -> None:
    tool = make_tool(
        ["{host}", "{lines}"],
        {
            "host": {"type": "string", "enum": ["web-01", "web-02"]},
            "lines": {"type": "integer", "default": 100, "min": 1, "max": 1000},
        },
    )
    assert await argv_of(tool, host="web-02") == ["web-02", "100"]


async def test_confirmed_by_and_idempotency_key_are_template_variables(
    make_tool: MakeTool,
) -> None:
    tool = make_tool(["--by={confirmed_by}", "{idempotency_key}"], category="mutating")
    ctx = CallContext(job_id="job-7", call_id="call-3", confirmed_by="U0123ABC")
    assert await argv_of(tool, ctx) == ["--by=U0123ABC", "job-7:call-3"]


async def test_a_dry_run_empties_confirmed_by_and_idempotency_key(make_tool: MakeTool) -> None:
    tool = make_tool(["--by={confirmed_by}", "{idempotency_key}"], category="destructive")
    ctx = CallContext(job_id="job-7", call_id="call-3", confirmed_by="U0123ABC", dry_run=True)
    assert await argv_of(tool, ctx) == ["--by=", ""]


async def test_a_read_only_call_has_no_approver(make_tool: MakeTool) -> None:
    tool = make_tool(["{confirmed_by}", "{idempotency_key}"])
    assert await argv_of(tool) == ["", "job-1:call-1"]


def test_argv_is_available_without_running(make_tool: MakeTool) -> None:
    tool = make_tool(["{host}"], {"host": {"type": "string"}})
    argv = tool.argv(tool.args_model.model_validate({"host": "a b"}), CTX)
    assert argv[-1] == "a b" and argv[0] == sys.executable


async def test_a_nul_character_is_refused_before_anything_runs(make_tool: MakeTool) -> None:
    tool = make_tool(["{text}"], {"text": {"type": "string"}})
    with pytest.raises(ToolError, match=r"run\[2\] '\{text\}': the value contains a NUL"):
        await argv_of(tool, text="a\x00b")


async def test_a_format_spec_that_does_not_fit_the_value_is_a_tool_error(
    make_tool: MakeTool,
) -> None:
    tool = make_tool(["{n:04d}"], {"n": {"type": "integer", "required": False}})
    with pytest.raises(ToolError, match=r"run\[2\] '\{n:04d\}': cannot format"):
        await argv_of(tool)


async def test_the_preview_is_the_argv_that_runs_quoted_for_reading(make_tool: MakeTool) -> None:
    tool = make_tool(
        ["restart", "{service}", "--by", "{confirmed_by}"],
        params={"service": {"type": "string"}},
        category="mutating",
        env={"API_TOKEN": "s3cret-value"},
    )
    args = tool.args_model.model_validate({"service": "nginx; rm -rf /"})
    ctx = CallContext(job_id="job-1", call_id="call-1", confirmed_by="U0BOB")
    preview = tool.preview(args, ctx)
    # Quoted as a shell would; the approver's id is named where it goes, not shown.
    assert preview is not None and preview.endswith(
        "restart 'nginx; rm -rf /'\n# and the approver's Slack id as --by"
    )
    assert "s3cret" not in preview  # the environment is not part of it
    # What the preview shows is what runs, argument for argument.
    assert await argv_of(tool, ctx, service="nginx; rm -rf /") == [
        "restart",
        "nginx; rm -rf /",
        "--by",
        "U0BOB",
    ]

"""The environment a command tool's program sees, and secrets kept out of results.

Only PATH, HOME, LANG, the ``OPSLOOP_*`` variables and the tool's own ``env``; never
the bot's credentials, which a tool's env may not even reference. Values expanded from
``${NAME}`` are masked in every result and error, stdout and stderr tails included.
The bot's environment is injected (a dict), never ``os.environ``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from bot.agent import (
    Approved,
    ConfirmRequest,
    Decision,
    InMemoryHistory,
    ToolMessage,
    UserMessage,
    run,
)
from bot.agent.config import AgentConfig
from bot.agent.testing import ScriptedModel, call, calls, text
from bot.agent.tools import CallContext
from bot.errors import ConfigError, ToolError
from tools.command import MIN_SECRET_CHARS, CommandTool
from tools.env import BOT_SECRETS
from tools.spec import CommandToolSpec, load_tools_file

SECRET = "s3cr3t-deploy-token-9f8e7d"
BOT_ENV = {
    "PATH": "/opt/tools/bin:/usr/bin:/bin",
    "HOME": "/home/opsloop",
    "SLACK_BOT_TOKEN": "xoxb-not-for-tools",
    "SLACK_SIGNING_SECRET": "signing-not-for-tools",
    "LLM_API_KEY": "sk-not-for-tools",
    "REDIS_URL": "redis://localhost:6379/0",
    "DEPLOY_TOKEN": SECRET,
    "SHORT": "ab",
}
CTX = CallContext(job_id="job-1", call_id="call-1")
PRINT_ENV = "import json, os; print(json.dumps(dict(os.environ), sort_keys=True))"
BASE = {"PATH", "HOME", "LANG", "OPSLOOP_JOB_ID", "OPSLOOP_CONFIRMED_BY", "OPSLOOP_IDEMPOTENCY_KEY"}


def tool_running(code: str, *, environ: dict[str, str] | None = None, **kw: Any) -> CommandTool:
    options = {k: kw.pop(k) for k in ("capture_bytes",) if k in kw}
    spec = CommandToolSpec(
        name="envtool", description="Look.", run=[sys.executable, "-c", code], **kw
    )
    return CommandTool(
        spec, source="tools.yml", environ=BOT_ENV if environ is None else environ, **options
    )


async def child_env(tool: CommandTool, ctx: CallContext = CTX) -> dict[str, str]:
    result: dict[str, str] = json.loads(await tool.execute(tool.args_model(), ctx))
    return result


# -- what the program sees --------------------------------------------------------------


async def test_the_program_sees_only_the_allowed_variables() -> None:
    env = await child_env(tool_running(PRINT_ENV))
    assert set(env) == BASE
    assert env["PATH"] == BOT_ENV["PATH"] and env["HOME"] == BOT_ENV["HOME"]
    assert env["LANG"] == "C.UTF-8"
    assert "xoxb-not-for-tools" not in json.dumps(env)


async def test_defaults_when_the_bot_has_no_path_home_or_lang() -> None:
    env = await child_env(tool_running(PRINT_ENV, environ={}))
    assert set(env) == BASE - {"HOME"}
    assert "/usr/bin" in env["PATH"].split(":") and env["LANG"] == "C.UTF-8"


async def test_the_bots_lang_is_kept() -> None:
    env = await child_env(tool_running(PRINT_ENV, environ={**BOT_ENV, "LANG": "en_US.UTF-8"}))
    assert env["LANG"] == "en_US.UTF-8"


async def test_opsloop_variables_of_a_read_only_call() -> None:
    env = await child_env(tool_running(PRINT_ENV))
    assert env["OPSLOOP_JOB_ID"] == "job-1"
    assert env["OPSLOOP_IDEMPOTENCY_KEY"] == "job-1:call-1"
    assert env["OPSLOOP_CONFIRMED_BY"] == ""
    assert "OPSLOOP_DRY_RUN" not in env


async def test_opsloop_variables_of_an_approved_call() -> None:
    ctx = CallContext(job_id="job-2", call_id="c9", confirmed_by="U0123ABC")
    env = await child_env(tool_running(PRINT_ENV, category="mutating"), ctx)
    assert env["OPSLOOP_CONFIRMED_BY"] == "U0123ABC"
    assert env["OPSLOOP_IDEMPOTENCY_KEY"] == "job-2:c9"
    assert "OPSLOOP_DRY_RUN" not in env


async def test_opsloop_variables_of_a_dry_run() -> None:
    ctx = CallContext(job_id="job-2", call_id="c9", confirmed_by="U0123ABC", dry_run=True)
    env = await child_env(tool_running(PRINT_ENV, category="destructive"), ctx)
    assert env["OPSLOOP_DRY_RUN"] == "1"
    assert env["OPSLOOP_CONFIRMED_BY"] == "" and env["OPSLOOP_IDEMPOTENCY_KEY"] == ""
    assert env["OPSLOOP_JOB_ID"] == "job-2"


async def test_the_tools_env_with_references_to_the_bots_environment() -> None:
    tool = tool_running(
        "import os; print(os.environ['TOKEN'] == os.environ['EXPECTED'], os.environ['AUTH'],"
        " os.environ['LITERAL'], os.environ['LANG'])",
        env={
            "TOKEN": "${DEPLOY_TOKEN}",
            "EXPECTED": SECRET,
            "AUTH": "Bearer ${DEPLOY_TOKEN}",
            "LITERAL": "$${NOT_EXPANDED} costs $5",
            "LANG": "de_DE.UTF-8",
        },
    )
    out = await tool.execute(tool.args_model(), CTX)
    assert out == "True Bearer *** ${NOT_EXPANDED} costs $5 de_DE.UTF-8\n"
    assert tool.referenced_env == {"DEPLOY_TOKEN"}


# -- secrets never in results -----------------------------------------------------------


async def test_a_secret_the_program_prints_is_masked() -> None:
    tool = tool_running(
        "import os, sys; print('token=' + os.environ['T']); sys.stderr.write(os.environ['T'])",
        env={"T": "${DEPLOY_TOKEN}"},
    )
    out = await tool.execute(tool.args_model(), CTX)
    assert SECRET not in out
    assert out == "token=***\nstderr:\n***"


async def test_a_secret_in_a_failure_is_masked() -> None:
    tool = tool_running(
        "import os, sys; sys.stderr.write('auth failed for ' + os.environ['T']); sys.exit(3)",
        env={"T": "x-${DEPLOY_TOKEN}-y"},
    )
    with pytest.raises(ToolError) as info:
        await tool.execute(tool.args_model(), CTX)
    assert str(info.value) == "exit 3: auth failed for x-***-y"


async def test_a_secret_on_stdout_of_a_failure_is_masked() -> None:
    tool = tool_running(
        "import os, sys; print(os.environ['T']); sys.exit(1)", env={"T": "${DEPLOY_TOKEN}"}
    )
    with pytest.raises(ToolError) as info:
        await tool.execute(tool.args_model(), CTX)
    assert SECRET not in str(info.value) and str(info.value) == "exit 1: ***"


async def test_a_secret_in_the_output_of_a_timed_out_call_is_masked() -> None:
    tool = tool_running(
        "import os, sys, time; print(os.environ['T'], flush=True); time.sleep(1000)",
        env={"T": "${DEPLOY_TOKEN}"},
        timeout=0.3,
    )
    with pytest.raises(ToolError, match=r"^timed out after 0\.3s") as info:
        await tool.execute(tool.args_model(), CTX)
    assert SECRET not in str(info.value)


@pytest.mark.parametrize("where", ["head", "tail"])
async def test_a_secret_cut_by_the_capture_bound_is_masked(where: str) -> None:
    """With a 400-byte cap the head keeps 300 bytes and the tail 100."""
    before, after = (290, 1000) if where == "head" else (1000, 90)
    tool = tool_running(
        f"import os, sys; sys.stdout.write('a' * {before} + os.environ['T'] + 'b' * {after})",
        env={"T": "${DEPLOY_TOKEN}"},
        capture_bytes=400,
    )
    out = await tool.execute(tool.args_model(), CTX)
    assert "more bytes not kept" in out
    assert SECRET[:MIN_SECRET_CHARS] not in out and SECRET[-MIN_SECRET_CHARS:] not in out
    assert "***" in out


async def test_values_too_short_to_mask_are_not_masked() -> None:
    """Documented: masking ``ab`` everywhere would mangle output and hide nothing."""
    tool = tool_running("import os; print(os.environ['P'])", env={"P": "${SHORT}"})
    assert await tool.execute(tool.args_model(), CTX) == "ab\n"


async def test_a_missing_variable_fails_the_call_before_anything_runs(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    tool = tool_running(f"open({str(marker)!r}, 'w').close()", env={"T": "${NOT_SET_ANYWHERE}"})
    assert tool.missing_env() == ["NOT_SET_ANYWHERE"]
    with pytest.raises(ToolError, match=r"^env\.T: \$\{NOT_SET_ANYWHERE\} is not set"):
        await tool.execute(tool.args_model(), CTX)
    assert not marker.exists()


# -- configuration errors ---------------------------------------------------------------


def load_env_tool(tmp_path: Path, env: dict[str, str]) -> str:
    """The ConfigError a tools.yml with this ``env`` gets at start-up."""
    path = tmp_path / "tools.yml"
    entry = {
        "name": "envtool",
        "description": "env test",
        "run": ["python3", "-c", "print(1)"],
        "env": env,
    }
    path.write_text(json.dumps({"tools": [entry]}, indent=2))  # JSON is YAML
    with pytest.raises(ConfigError) as info:
        load_tools_file(path)
    return str(info.value).removeprefix(f"{path}:")


@pytest.mark.parametrize("name", sorted(BOT_SECRETS))
def test_referencing_the_bots_credentials_is_a_config_error(tmp_path: Path, name: str) -> None:
    message = load_env_tool(tmp_path, {"CREDS": f"x ${{{name}}}"})
    assert message.endswith(
        f"tool 'envtool': env.CREDS: ${{{name}}} is one of the bot's own "
        "credentials; they are never given to tools"
    ), message
    assert message.split(":")[0].isdigit()  # a line number


@pytest.mark.parametrize(
    ("env", "problem"),
    [
        ({"OPSLOOP_DRY_RUN": "0"}, "env.OPSLOOP_DRY_RUN: set by opsloop for every call"),
        ({"OPSLOOP_CONFIRMED_BY": "me"}, "env.OPSLOOP_CONFIRMED_BY: set by opsloop"),
        ({"A": "${not valid}"}, r"env.A: ${not valid} must name an environment variable"),
        ({"A": "${UNCLOSED"}, "env.A: unclosed '${' at 0"),
        ({"A": "x${}"}, "env.A: ${} must name an environment variable"),
        ({"BAD-NAME": "x"}, "env.BAD-NAME: not a valid environment variable name"),
        ({"A": "nul\x00"}, "env.A: contains a NUL character"),
    ],
)
def test_bad_env_entries_are_config_errors(
    tmp_path: Path, env: dict[str, str], problem: str
) -> None:
    message = load_env_tool(tmp_path, env)
    assert f"tool 'envtool': {problem}" in message, message


# -- through the agent core: a destructive tool's dry run and its approved run ------------


async def test_dry_run_and_approved_run_through_the_core() -> None:
    spec = CommandToolSpec(
        name="drop_cache",
        description="Drop a cache.",
        category="destructive",
        params={"name": {"type": "string", "pattern": "^[a-z]+$", "description": "Cache"}},
        run=[
            sys.executable,
            "-c",
            "import os, sys; print(sys.argv[1:], os.environ.get('OPSLOOP_DRY_RUN'),"
            " os.environ['OPSLOOP_CONFIRMED_BY'], os.environ['OPSLOOP_IDEMPOTENCY_KEY'])",
            "{name}",
            "{confirmed_by}",
        ],
    )
    tool = CommandTool(spec, source="tools.yml", environ=BOT_ENV)
    requests: list[ConfirmRequest] = []

    async def confirm(request: ConfirmRequest) -> Decision:
        requests.append(request)
        return Approved(confirmed_by="U0123ABC")

    model = ScriptedModel([calls(call("drop_cache", "c1", name="sessions")), text("dropped")])
    memory = InMemoryHistory()
    memory.append(UserMessage(content="drop the sessions cache"))
    config = AgentConfig(
        job_id="job-1",
        client=model,
        memory=memory,
        system_prompt="SRE",
        tools=[tool],
        confirm=confirm,
    )
    result = await run(config)
    assert result.output == "dropped", result.error
    [request] = requests
    assert request.dry_run_output == "['sessions', ''] 1  \n"
    [message] = [m for m in model.requests[1].messages if isinstance(m, ToolMessage)]
    assert message.content == "['sessions', 'U0123ABC'] None U0123ABC job-1:c1\n"
    model.assert_done()

"""The command tool's child process: results, failures, bounds, timeouts, no orphans.

Exit 0 gives stdout (and stderr under a header), anything else a ``ToolError`` with
the tail of stderr. Output is captured with a byte cap while it is read, so a child
printing 200 MB costs no memory. On the tool's own timeout, on cancellation (the
core's timeout, Stop) and when the program exits, its whole process group is stopped:
grandchildren included, SIGTERM ignored or not. Timeouts here are only small enough to
take the path; nothing asserts how long anything took.
"""

from __future__ import annotations

import asyncio
import os
import re
import resource
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bot.agent import InMemoryHistory, StopReason, ToolMessage, UserMessage, run
from bot.agent.config import AgentConfig
from bot.agent.testing import FakeClock, ScriptedModel, call, calls, text
from bot.agent.tools import CallContext
from bot.errors import ConfigError, ToolError
from tools import command
from tools.command import CommandTool
from tools.registry import build_catalog
from tools.spec import CommandToolSpec

CTX = CallContext(job_id="job-1", call_id="call-1")
ENVIRON = {"PATH": "/usr/bin:/bin"}

# Starts a grandchild, then writes "<child pid> <grandchild pid>" atomically and sleeps.
# With "ignore-term" both ignore SIGTERM (an ignored signal stays ignored across exec).
FAMILY = """\
import os, signal, subprocess, sys, time
pidfile, mode = sys.argv[1], sys.argv[2]
if mode == "ignore-term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1000)"])
with open(pidfile + ".tmp", "w") as f:
    f.write(f"{os.getpid()} {grandchild.pid}")
os.replace(pidfile + ".tmp", pidfile)
time.sleep(1000)
"""


def python_tool(code: str, **kw: Any) -> CommandTool:
    environ = kw.pop("environ", ENVIRON)
    options = {k: kw.pop(k) for k in ("capture_bytes", "kill_grace") if k in kw}
    kw.setdefault("name", "py")
    spec = CommandToolSpec(description="Run Python.", run=[sys.executable, "-c", code], **kw)
    return CommandTool(spec, source="tools.yml", environ=environ, **options)


async def execute(tool: CommandTool, ctx: CallContext = CTX, **args: Any) -> str:
    return await tool.execute(tool.args_model.model_validate(args), ctx)


def gone(pid: int) -> bool:
    """Dead: no such process, or a zombie (dead, waiting for init to reap it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


async def wait_until(condition: Callable[[], bool], what: str, *, within: float = 20.0) -> None:
    """Poll a condition that no event announces (another process's death), bounded."""
    for _ in range(int(within / 0.02)):
        if condition():
            return
        await asyncio.sleep(0.02)
    pytest.fail(f"still waiting for: {what}")


async def assert_all_gone(pids: list[int]) -> None:
    await wait_until(lambda: all(gone(p) for p in pids), f"processes {pids} to die")


def family_tool(
    tmp_path: Path, *, timeout: float = 300, mode: str = "plain", **kw: Any
) -> CommandTool:
    script = tmp_path / "family.py"
    script.write_text(FAMILY)
    spec = CommandToolSpec(
        name="family",
        description="A child with a grandchild.",
        timeout=timeout,
        run=[sys.executable, str(script), str(tmp_path / "pids"), mode],
    )
    return CommandTool(spec, source="tools.yml", environ=ENVIRON, **kw)


def pids_of(tmp_path: Path) -> list[int]:
    return [int(p) for p in (tmp_path / "pids").read_text().split()]


# -- results and failures ---------------------------------------------------------------


async def test_exit_zero_gives_stdout() -> None:
    assert await execute(python_tool("print('all good')")) == "all good\n"


async def test_stderr_is_appended_under_a_header() -> None:
    tool = python_tool("import sys; print('out'); sys.stderr.write('a warning\\n')")
    assert await execute(tool) == "out\nstderr:\na warning\n"


async def test_a_non_zero_exit_is_an_error_with_the_tail_of_stderr() -> None:
    code = (
        "import sys; print('partial'); sys.stderr.write('x' * 5000 + 'disk full\\n'); sys.exit(3)"
    )
    with pytest.raises(ToolError) as info:
        await execute(python_tool(code))
    message = str(info.value)
    assert message.startswith("exit 3: …x") and message.endswith("disk full")
    assert "partial" not in message
    assert len(message) <= len("exit 3: …") + 2000


async def test_without_stderr_the_error_shows_the_tail_of_stdout() -> None:
    with pytest.raises(ToolError, match=r"^exit 1: no such unit$"):
        await execute(python_tool("import sys; print('no such unit'); sys.exit(1)"))


async def test_an_error_without_output_says_so() -> None:
    with pytest.raises(ToolError, match=r"^exit 4 \(no output\)$"):
        await execute(python_tool("import sys; sys.exit(4)"))


async def test_death_by_a_signal_is_named() -> None:
    with pytest.raises(ToolError, match=r"^exit -9 \(killed by SIGKILL\)"):
        await execute(python_tool("import os, signal; os.kill(os.getpid(), signal.SIGKILL)"))


async def test_a_missing_program_cannot_run() -> None:
    spec = CommandToolSpec(name="nope", description="Absent.", run=["opsloop-no-such-program"])
    tool = CommandTool(spec, source="tools.yml", environ=ENVIRON)
    with pytest.raises(
        ToolError, match=r"^cannot run 'opsloop-no-such-program': No such file or directory$"
    ):
        await execute(tool)


async def test_a_file_that_is_not_executable_cannot_run(tmp_path: Path) -> None:
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)
    spec = CommandToolSpec(name="noexec", description="Not executable.", run=[str(script)])
    tool = CommandTool(spec, source="tools.yml", environ=ENVIRON)
    with pytest.raises(ToolError, match=r"^cannot run '.*script\.sh': Permission denied$"):
        await execute(tool)


async def test_cwd_is_where_the_program_runs(tmp_path: Path) -> None:
    tool = python_tool("import os; print(os.getcwd())", cwd=str(tmp_path))
    assert await execute(tool) == f"{tmp_path}\n"


async def test_a_missing_cwd_is_an_error(tmp_path: Path) -> None:
    tool = python_tool("print('never')", cwd=str(tmp_path / "absent"))
    with pytest.raises(ToolError, match=r"^cannot run in cwd '.*absent': No such file"):
        await execute(tool)


async def test_the_program_gets_no_stdin() -> None:
    assert await execute(python_tool("import sys; print(repr(sys.stdin.read()))")) == "''\n"


# -- capture ----------------------------------------------------------------------------


async def test_non_utf8_output_is_decoded_with_replacement_characters() -> None:
    tool = python_tool("import sys; sys.stdout.buffer.write(b'ok \\xff\\xfe caf\\xc3\\xa9 end')")
    assert await execute(tool) == "ok \ufffd\ufffd café end"


async def test_long_output_keeps_its_head_and_its_end() -> None:
    code = "import sys; sys.stdout.write('H' * 700 + 'M' * 10_000 + 'T' * 250 + 'END')"
    out = await execute(python_tool(code, capture_bytes=1000))
    head, note, tail = out.split("\n")
    assert head == "H" * 700 + "M" * 50  # the head: the cap less the tail's share
    assert note == f"[… {700 + 10_000 + 253 - 1000} more bytes not kept …]"
    assert tail == "T" * 247 + "END"  # the last quarter of the cap


async def test_huge_output_is_bounded_without_memory_growth() -> None:
    code = (
        "import sys\n"
        "chunk = b'x' * 1_000_000\n"
        "for _ in range(200): sys.stdout.buffer.write(chunk)\n"
        "sys.stdout.buffer.write(b'END')\n"
    )
    cap = 1 << 20
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    out = await execute(python_tool(code, capture_bytes=cap))
    growth_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert len(out) <= cap + 100
    assert f"[… {200_000_003 - cap} more bytes not kept …]" in out
    assert out.endswith("xxEND")
    assert growth_mb < 100


async def test_stdout_and_stderr_are_read_concurrently() -> None:
    """A child filling both pipes does not deadlock, and both are bounded."""
    code = (
        "import sys\n"
        "for _ in range(200):\n"
        "    sys.stdout.buffer.write(b'o' * 100_000); sys.stdout.flush()\n"
        "    sys.stderr.buffer.write(b'e' * 100_000); sys.stderr.flush()\n"
    )
    out = await execute(python_tool(code, capture_bytes=10_000))
    stdout, stderr = out.split("stderr:\n")
    note = rf"\n\[… {20_000_000 - 10_000} more bytes not kept …\]\n"
    assert re.fullmatch(rf"o{{7500}}{note}o{{2500}}\n", stdout)
    assert re.fullmatch(rf"e{{7500}}{note}e{{2500}}", stderr)


# -- timeouts and the process group ---------------------------------------------------


async def test_the_tools_own_timeout_kills_the_whole_tree(tmp_path: Path) -> None:
    # The timeout only takes the path; if it fired before the grandchild existed
    # (a slow machine), try again with a longer one.
    for timeout in (0.3, 1.0, 3.0, 10.0):
        tool = family_tool(tmp_path, timeout=timeout)
        with pytest.raises(ToolError, match=rf"^timed out after {timeout:g}s"):
            await execute(tool)
        if (tmp_path / "pids").exists():
            break
    else:
        pytest.fail("the child never started its grandchild")
    await assert_all_gone(pids_of(tmp_path))


async def test_a_tree_that_ignores_sigterm_is_killed(tmp_path: Path) -> None:
    tool = family_tool(tmp_path, mode="ignore-term", kill_grace=0.1)
    task = asyncio.create_task(execute(tool))
    await wait_until((tmp_path / "pids").exists, "the grandchild to start")
    pids = pids_of(tmp_path)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await assert_all_gone(pids)


async def test_cancelling_execute_kills_the_whole_tree(tmp_path: Path) -> None:
    task = asyncio.create_task(execute(family_tool(tmp_path)))
    await wait_until((tmp_path / "pids").exists, "the grandchild to start")
    pids = pids_of(tmp_path)
    assert not any(gone(p) for p in pids)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await assert_all_gone(pids)


def running_with(marker: str) -> list[int]:
    """Live processes whose command line mentions ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmdline and not gone(int(entry.name)):
                found.append(int(entry.name))
    return found


async def test_cancelling_while_the_program_is_being_spawned_leaves_nothing(
    tmp_path: Path,
) -> None:
    task = asyncio.create_task(execute(family_tool(tmp_path)))
    await asyncio.sleep(0)  # execute runs up to the spawn, which is under way
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await wait_until(lambda: not running_with(str(tmp_path)), "the spawned program to die")
    # ... and reaped: asyncio knows it exited (else its transport, collected in a later
    # test, warns that the process is still running).
    await command.settle()
    assert not command._BACKGROUND


async def test_what_the_program_leaves_running_is_stopped_when_it_exits() -> None:
    spec = CommandToolSpec(
        name="bg", description="Leave a sleeper behind.", run=["sh", "-c", "sleep 1000 & echo $!"]
    )
    tool = CommandTool(spec, source="tools.yml", environ=ENVIRON)
    out = await execute(tool)  # returns although the sleeper holds stdout open
    await assert_all_gone([int(out)])


async def test_the_cores_timeout_kills_the_tree(tmp_path: Path) -> None:
    """The core cancels ``execute`` when the call's timeout passes on its clock."""
    clock = FakeClock()
    tool = family_tool(tmp_path, timeout=30)
    model = ScriptedModel([calls(call("family", "c1")), text("it hung")])
    memory = InMemoryHistory()
    memory.append(UserMessage(content="run it"))
    config = AgentConfig(
        job_id="job-1", client=model, memory=memory, system_prompt="SRE", tools=[tool], clock=clock
    )
    job = asyncio.create_task(run(config))
    await wait_until((tmp_path / "pids").exists, "the grandchild to start")
    clock.advance(30)
    result = await job
    assert result.stop_reason is StopReason.COMPLETED, result.error
    [message] = [m for m in model.requests[1].messages if isinstance(m, ToolMessage)]
    assert message.content == "Error: timed out after 30s"
    await assert_all_gone(pids_of(tmp_path))
    model.assert_done()


# -- through the agent core -------------------------------------------------------------


async def test_a_command_tools_result_reaches_the_model() -> None:
    spec = CommandToolSpec(
        name="uptime",
        description="Show a host's load.",
        params={"host": {"type": "string", "enum": ["web-01", "web-03"], "description": "Host"}},
        run=[sys.executable, "-c", "import sys; print(sys.argv[1] + ': load 0.42')", "{host}"],
    )
    tool = CommandTool(spec, source="tools.yml", environ=ENVIRON)
    model = ScriptedModel([calls(call("uptime", "c1", host="web-03")), text("load is low")])
    memory = InMemoryHistory()
    memory.append(UserMessage(content="how is web-03?"))
    config = AgentConfig(
        job_id="job-1", client=model, memory=memory, system_prompt="SRE", tools=[tool]
    )
    result = await run(config)
    assert result.output == "load is low", result.error
    [message] = [m for m in model.requests[1].messages if isinstance(m, ToolMessage)]
    assert message.content == "web-03: load 0.42\n" and message.tool_call_id == "c1"
    offered = model.requests[0].tools[0]
    assert offered.name == "uptime"
    assert offered.parameters["properties"]["host"]["enum"] == ["web-01", "web-03"]
    model.assert_done()


async def test_a_destructive_tools_dry_run_argv_replaces_run_during_the_dry_run(
    tmp_path: Path,
) -> None:
    path = tmp_path / "tools.yml"
    path.write_text(
        "tools:\n"
        "  - name: delete_pod\n"
        "    description: Delete a pod.\n"
        "    category: destructive\n"
        "    params:\n"
        "      pod: {type: string, pattern: '^[a-z0-9-]+$', description: Pod}\n"
        '    run: ["echo", "deleted", "{pod}"]\n'
        '    dry_run: ["echo", "would delete", "{pod}", "--dry-run=server"]\n'
    )
    catalog = build_catalog(tools_file=path, environ={"PATH": "/usr/bin:/bin"})
    tool = catalog.tools["delete_pod"]
    args = tool.args_model(pod="web-1")
    try:
        dry = await tool.execute(args, CallContext(job_id="j", call_id="c", dry_run=True))
        real = await tool.execute(args, CallContext(job_id="j", call_id="c", confirmed_by="U1"))
    finally:
        await catalog.aclose()
    assert str(dry).strip() == "would delete web-1 --dry-run=server"
    assert str(real).strip() == "deleted web-1"


def test_dry_run_is_refused_on_a_tool_without_a_dry_run(tmp_path: Path) -> None:
    path = tmp_path / "tools.yml"
    path.write_text(
        "tools:\n"
        "  - name: restart\n"
        "    description: Restart.\n"
        "    category: mutating\n"
        '    run: ["echo", "restarted"]\n'
        '    dry_run: ["echo", "would restart"]\n'
    )
    with pytest.raises(ConfigError, match="dry_run: only a destructive tool"):
        build_catalog(tools_file=path, environ={})

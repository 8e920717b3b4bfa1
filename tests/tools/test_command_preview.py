"""What a command tool's approval card says will run (``CommandTool.preview``): the
command as an SRE reads it, not the interpreter's path, and no placeholder for the
approver (unknown until the click)."""

from __future__ import annotations

from pathlib import Path

from bot.agent.calls import APPROVER
from bot.agent.tools import CallContext
from tools.command import readable_command
from tools.registry import build_catalog

TOOLS = """\
tools:
  - name: restart_web
    description: Restart the web service.
    category: mutating
    params:
      service: {type: string, pattern: "^[a-z0-9-]+$", description: Service}
    run: ["/usr/bin/python3", "-m", "ops.ctl", "restart", "{service}",
          "--approved-by={confirmed_by}"]
  - name: restart_script
    description: Restart with a script.
    category: mutating
    params:
      service: {type: string, pattern: "^[a-z0-9-]+$", description: Service}
    run: ["/usr/bin/python3", "/opt/ops/restart.py", "{service}", "{confirmed_by}"]
  - name: rollout_restart
    description: Restart a deployment.
    category: mutating
    params:
      name: {type: string, pattern: "^[a-z0-9-]+$", description: Deployment}
    run: ["kubectl", "-n", "prod", "rollout", "restart", "deploy/{name}"]
"""


def preview(tmp_path: Path, tool_name: str, **args: str) -> str | None:
    path = tmp_path / "tools.yml"
    path.write_text(TOOLS)
    tool = build_catalog(tools_file=path, environ={}).tools.get(tool_name)
    assert tool is not None
    ctx = CallContext(job_id="j", call_id="c", confirmed_by=APPROVER)
    got = tool.preview(tool.args_model.model_validate(args), ctx)
    assert got is None or isinstance(got, str)
    return got


def test_a_module_run_by_an_interpreter_is_shown_by_its_name(tmp_path: Path) -> None:
    assert preview(tmp_path, "restart_web", service="web") == (
        "ops.ctl restart web\n# and the approver's Slack id as --approved-by"
    )


def test_a_script_is_shown_by_its_file_name(tmp_path: Path) -> None:
    assert preview(tmp_path, "restart_script", service="web") == (
        "restart.py web\n# and the approver's Slack id as the last argument"
    )


def test_a_program_is_shown_as_written(tmp_path: Path) -> None:
    assert preview(tmp_path, "rollout_restart", name="web") == (
        "kubectl -n prod rollout restart deploy/web"
    )


def test_no_placeholder_reaches_the_card(tmp_path: Path) -> None:
    for name in ("restart_web", "restart_script"):
        shown = preview(tmp_path, name, service="web") or ""
        assert APPROVER not in shown and "/usr/bin/python3" not in shown


def test_what_the_model_wrote_is_never_shortened_or_hidden() -> None:
    # A value that looks like a flag or a path stays whole: only the template's own
    # text decides what the card leaves out.
    assert (
        readable_command(
            ["python3", "/opt/a; b", "-x", "U0BOB"],
            ["python3", "{script}", "{flag}", "{confirmed_by}"],
        )
        == "python3 '/opt/a; b' -x\n# and the approver's Slack id as the last argument"
    )

"""``examples/tools.yml``: it passes ``opsloop tools check``, its tools have the intended
categories and allowlists, run the intended argv, and refuse hostile values."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from tools.command import CommandTool
from tools.registry import Catalog, build_catalog

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "tools.yml"
KUBECONFIG = "/etc/opsloop/kubeconfig-bot"  # what OPSLOOP_KUBECONFIG is set to here

# Stands in for ssh and kubectl: prints how it was called.
FAKE = f"""\
#!{sys.executable}
import json, os, sys
print(json.dumps({{"argv": [os.path.basename(sys.argv[0]), *sys.argv[1:]],
                  "kubeconfig": os.environ.get("KUBECONFIG")}}))
"""


def opsloop(*args: str, path: str = "/usr/bin:/bin") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bot", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={
            "PATH": path,
            "COLUMNS": "1000",
            "OPSLOOP_PACKS": "",
            "OPSLOOP_KUBECONFIG": KUBECONFIG,
        },
        check=False,
    )


@pytest.fixture
def catalog() -> Catalog:
    return build_catalog(tools_file=EXAMPLE, environ={"OPSLOOP_KUBECONFIG": KUBECONFIG})


@pytest.fixture
def fake_bin(tmp_path: Path) -> str:
    """A PATH whose ssh and kubectl print their argv (and KUBECONFIG) as JSON."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for name in ("ssh", "kubectl"):
        program = folder / name
        program.write_text(FAKE)
        program.chmod(0o755)
    return f"{folder}:/usr/bin:/bin"


def test_opsloop_tools_check_passes() -> None:
    done = opsloop("tools", "check", "examples/tools.yml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "examples/tools.yml: 4 tools, OK"
    assert done.stderr == ""  # no warnings either (OPSLOOP_KUBECONFIG is set)


def test_the_tools_have_their_intended_categories(catalog: Catalog) -> None:
    assert {name: tool.category for name, tool in catalog.tools.items()} == {
        "systemd_status": "read_only",
        "systemd_restart": "mutating",
        "k8s_rollout_restart": "mutating",
        "k8s_delete_pod": "destructive",
    }
    assert [name for name, tool in catalog.tools.items() if tool.parallel] == ["systemd_status"]


def test_k8s_delete_pod_dry_runs_on_the_server_before_it_deletes(fake_bin: str) -> None:
    """The dry run (before the card) asks the API server to validate the delete without
    doing it; only the approved call runs the real delete."""
    args = ["tools", "--file", "examples/tools.yml", "run", "k8s_delete_pod"]
    values = ["pod=api-7d9c6b5f4-x2x7k", "namespace=staging"]
    approved = ["--confirmed-by", "U0123ABC", "--unrecorded"]  # no REDIS_URL here
    dry_only = opsloop(*args, *values, *approved, path=fake_bin)
    calls = [json.loads(line) for line in dry_only.stdout.splitlines() if line.startswith("{")]
    assert [c["argv"][-1] for c in calls] == ["--dry-run=server"]  # no --yes: dry run only
    done = opsloop(*args, *values, *approved, "--yes", path=fake_bin)
    calls = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [c["argv"] for c in calls] == [
        ["kubectl", "delete", "pod", "api-7d9c6b5f4-x2x7k", "-n", "staging", "--dry-run=server"],
        ["kubectl", "delete", "pod", "api-7d9c6b5f4-x2x7k", "-n", "staging"],
    ]


def test_channel_allowlists(catalog: Catalog) -> None:
    def names(channel: str) -> list[str]:
        return [tool.name for tool in catalog.for_channel(channel)]

    everything = ["k8s_delete_pod", "k8s_rollout_restart", "systemd_restart", "systemd_status"]
    assert names("C0123INCIDENT") == everything
    assert names("C0456OPSCHAT") == ["systemd_status"]
    assert names("C0999ELSEWHERE") == everything  # not listed: every tool


def run_json(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, done.stdout + done.stderr
    line = next(line for line in done.stdout.splitlines() if line.startswith("{"))
    result: dict[str, Any] = json.loads(line)
    return result


def test_systemd_status_runs_systemctl_show_over_ssh(fake_bin: str) -> None:
    done = opsloop(
        "tools", "--file", "examples/tools.yml", "run", "systemd_status",
        "host=web-01.prod.example.com", "service=getty@tty1.service",
        path=fake_bin,
    )  # fmt: skip
    argv = run_json(done)["argv"]
    assert argv[:8] == ["ssh", "-T", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", "--"] + [
        "web-01.prod.example.com"
    ]
    assert argv[8:11] == ["systemctl", "show", "--no-pager"]
    assert argv[11].startswith("--property=Id,LoadState,ActiveState,SubState,MainPID,")
    assert argv[12:] == ["--", "getty@tty1.service"]


def test_systemd_restart_runs_sudo_systemctl_restart_once_approved(fake_bin: str) -> None:
    args = ["tools", "--file", "examples/tools.yml", "run", "systemd_restart"]
    values = ["host=web-01", "service=nginx"]
    unapproved = opsloop(*args, *values, path=fake_bin)
    assert unapproved.returncode == 2  # mutating: needs an approver
    assert "pass --confirmed-by" in unapproved.stdout
    done = opsloop(*args, *values, "--confirmed-by", "U0123ABC", "--unrecorded", path=fake_bin)
    assert run_json(done)["argv"] == [
        "ssh", "-T", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", "--", "web-01",
        "sudo", "-n", "systemctl", "restart", "--", "nginx",
    ]  # fmt: skip


def test_k8s_rollout_restart_uses_the_bots_kubeconfig(fake_bin: str) -> None:
    done = opsloop(
        "tools", "--file", "examples/tools.yml", "run", "k8s_rollout_restart",
        "deployment=api", "namespace=staging", "--confirmed-by", "U0123ABC", "--unrecorded",
        path=fake_bin,
    )  # fmt: skip
    result = run_json(done)
    assert result["argv"] == ["kubectl", "rollout", "restart", "deployment/api", "-n", "staging"]
    assert result["kubeconfig"] == "***"  # it was set, and is masked in every result
    assert KUBECONFIG not in done.stdout


HOSTILE_HOSTS = [
    "-oProxyCommand=touch /tmp/pwned",
    "web-01;reboot",
    "web-01 && id",
    "$(id)",
    "web-01\n",
    "WEB-01",
    "web-01.",
    "",
]
HOSTILE_SERVICES = ["nginx;reboot", "-H", "nginx`id`", "a b", "nginx\n", "$HOME", "x" * 129, ""]


@pytest.mark.parametrize("tool_name", ["systemd_status", "systemd_restart"])
def test_systemd_tools_refuse_hostile_values(catalog: Catalog, tool_name: str) -> None:
    model = catalog.tools[tool_name].args_model
    model.model_validate({"host": "web-01", "service": "nginx.service"})
    for host in HOSTILE_HOSTS:
        with pytest.raises(ValidationError):
            model.model_validate({"host": host, "service": "nginx"})
    for service in HOSTILE_SERVICES:
        with pytest.raises(ValidationError):
            model.model_validate({"host": "web-01", "service": service})


def test_k8s_rollout_restart_refuses_hostile_values(catalog: Catalog) -> None:
    model = catalog.tools["k8s_rollout_restart"].args_model
    model.model_validate({"deployment": "api-v2.internal", "namespace": "production"})
    for deployment in ["api;id", "-h", "API", "api/../x", "api\n", ""]:
        with pytest.raises(ValidationError):
            model.model_validate({"deployment": deployment, "namespace": "production"})
    for namespace in ["kube-system", "production\n", ""]:
        with pytest.raises(ValidationError):
            model.model_validate({"deployment": "api", "namespace": namespace})


def test_every_command_runs_a_fixed_program(catalog: Catalog) -> None:
    """No tool lets the model pick the program: run[0] is a literal everywhere."""
    for tool in catalog.tools.values():
        assert isinstance(tool, CommandTool)
        assert "{" not in tool.command.run[0], tool.name
        assert os.path.basename(tool.command.run[0]) in ("ssh", "kubectl"), tool.name

"""The tool catalogue: built-ins, tools.yml replacing them, toolsets and channel
allowlists, and the http tools sharing one address policy."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from pydantic import BaseModel, Field

from bot.agent import CallContext, FunctionTool
from bot.errors import ConfigError
from tools.command import CommandTool
from tools.http import HttpTool
from tools.registry import build_catalog


class HostArgs(BaseModel):
    host: str = Field(description="Host name")


async def builtin_cpu(args: HostArgs, ctx: CallContext) -> str:
    return "builtin"


def pack() -> dict[str, list[FunctionTool]]:
    cpu = FunctionTool(name="host_cpu", description="CPU", args_model=HostArgs, fn=builtin_cpu)
    disk = FunctionTool(name="host_disk", description="Disk", args_model=HostArgs, fn=builtin_cpu)
    return {"host": [cpu, disk]}


FILE = """\
tools:
  - name: host_cpu
    description: Our own CPU check.
    params: {host: {type: string, description: Host}}
    run: ["echo", "{host}"]
  - name: status_api
    kind: http
    description: Status page.
    params: {url: {type: string, pattern: "^https?://", description: URL}}
    request: {url: "{url}"}
toolsets:
  diagnostics: [status_api]
channels:
  C_INCIDENT: [host, diagnostics]
  C_QUIET: [status_api]
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "tools.yml"
    path.write_text(text)
    return path


async def test_a_tools_yml_tool_replaces_a_builtin_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="tools.registry"):
        catalog = build_catalog(packs=pack(), tools_file=write(tmp_path, FILE), environ={})
    try:
        assert isinstance(catalog.tools["host_cpu"], CommandTool)
        assert catalog.sources["host_cpu"] == str(tmp_path / "tools.yml")
        assert catalog.sources["host_disk"] == "built-in:host"
        assert "replaces the built-in" in caplog.text
    finally:
        await catalog.aclose()


async def test_channel_allowlists_expand_packs_and_toolsets(tmp_path: Path) -> None:
    catalog = build_catalog(packs=pack(), tools_file=write(tmp_path, FILE), environ={})
    try:
        names = lambda channel: [t.name for t in catalog.for_channel(channel)]  # noqa: E731
        assert names("C_INCIDENT") == ["host_cpu", "host_disk", "status_api"]
        assert names("C_QUIET") == ["status_api"]
        assert names("C_ELSEWHERE") == ["host_cpu", "host_disk", "status_api"]
        assert names(None) == ["host_cpu", "host_disk", "status_api"]
    finally:
        await catalog.aclose()


async def test_http_tools_share_the_configured_policy(tmp_path: Path) -> None:
    catalog = build_catalog(
        packs=pack(), tools_file=write(tmp_path, FILE), environ={}, http_allow="status.example.com"
    )
    try:
        tool = catalog.tools["status_api"]
        assert isinstance(tool, HttpTool) and tool.fetcher is catalog.fetcher
        assert catalog.fetcher is not None
        assert catalog.fetcher.policy.entries == ("status.example.com",)
    finally:
        await catalog.aclose()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (FILE.replace("[host, diagnostics]", "[host, nothing]"), "unknown tool or toolset"),
        (FILE.replace("diagnostics: [status_api]", "diagnostics: [ghost]"), "unknown tool"),
        (FILE.replace("  diagnostics:", "  host:"), "name of a built-in pack"),
    ],
)
def test_inconsistent_names_are_config_errors(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_catalog(packs=pack(), tools_file=write(tmp_path, text), environ={})


def test_a_bad_allowlist_entry_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="OPSLOOP_HTTP_ALLOW"):
        build_catalog(packs=pack(), tools_file=write(tmp_path, FILE), environ={}, http_allow="x/y")

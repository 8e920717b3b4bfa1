"""The ``mcp`` eval backend: the reference filesystem MCP server connected from the
tools.yml fragment the backend returns (as the runner's catalogue connects it), the
``deploy_notes`` fault's evidence read through its ``notes_*`` tools, healed and reset to
an empty folder, and a missing server a ``BackendError``.

The patterns ``tests/evals/agents/mcp-deploy-notes.yml`` reads out of the answers are
checked here against the real ones.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from bot.agent.tools import CallContext
from bot.evals.backends import mcp as module
from bot.evals.backends.base import BackendError, backend_class
from bot.evals.backends.mcp import McpBackend
from tools.registry import Catalog, build_catalog, connect_mcp

CONNECT_TIMEOUT_S = 30.0
# What the agent script matches (keep in step with tests/evals/agents/mcp-deploy-notes.yml).
CHANGE_AT = r"\d{4}-\d\d-\d\d (14:02):\d\d config change"
POOL_CHANGE = r"(db\.pool_size 20 -> 2)"
PR = r'(PR #\d+ "[^"]+")'
TIMEOUT = r"(timeout acquiring connection from pool)"
POOL_STATE = r"\((pool_size=2, in use=2, waiting=\d+)\)"


@pytest.fixture
def server_present() -> None:
    try:
        module.server_binary()
    except BackendError as exc:
        pytest.skip(str(exc))


@pytest.fixture
async def notes(tmp_path: Path, server_present: None) -> AsyncIterator[tuple[McpBackend, Catalog]]:
    backend = McpBackend()
    reach = await backend.start(tmp_path / "backend")
    assert reach.packs == () and not reach.pack_config
    tools_file = tmp_path / "tools.yml"
    tools_file.write_text(yaml.safe_dump(dict(reach.tools_yml)))
    catalog = await connect_mcp(
        build_catalog(tools_file=tools_file), connect_timeout=CONNECT_TIMEOUT_S
    )
    try:
        yield backend, catalog
    finally:
        await catalog.aclose()
        await backend.stop()


async def call(catalog: Catalog, name: str, **args: Any) -> str:
    tool = catalog.tools[name]
    result = await tool.execute(
        tool.args_model.model_validate(args), CallContext(job_id="j", call_id="c")
    )
    assert isinstance(result, str)
    return result


def found(pattern: str, text: str) -> str:
    match = re.search(pattern, text, re.MULTILINE)
    assert match, f"{pattern!r} not in:\n{text}"
    return match.group(1)


async def test_the_kind_names_this_class() -> None:
    assert backend_class("mcp") is McpBackend
    assert McpBackend.faults == ("deploy_notes",)


async def test_deploy_notes_are_the_evidence(notes: tuple[McpBackend, Catalog]) -> None:
    backend, catalog = notes
    assert catalog.tools["notes_read_text_file"].category == "read_only"
    assert catalog.tools["notes_list_directory"].category == "read_only"
    assert catalog.tools["notes_write_file"].category == "destructive"
    assert await call(catalog, "notes_list_directory", path=".") == ""
    async with backend.fault("deploy_notes", {}) as facts:
        assert facts["notes_dir"] == str(backend.notes)
        listing = await call(catalog, "notes_list_directory", path=".")
        assert (
            f"[FILE] {facts['deploy_log']}" in listing and f"[FILE] {facts['error_log']}" in listing
        )
        deploys = await call(catalog, "notes_read_text_file", path=facts["deploy_log"])
        assert found(CHANGE_AT, deploys) == facts["change_time"] == "14:02"
        assert found(POOL_CHANGE, deploys) and found(PR, deploys).startswith("PR #1189")
        errors = await call(catalog, "notes_read_text_file", path=facts["error_log"])
        assert found(TIMEOUT, errors) and found(POOL_STATE, errors).startswith("pool_size=2")
    assert await call(catalog, "notes_list_directory", path=".") == ""


async def test_reset_empties_the_folder(notes: tuple[McpBackend, Catalog]) -> None:
    backend, _ = notes
    (backend.notes / "left-by-a-write.yml").write_text("pool_size: 50\n")
    (backend.notes / "sub").mkdir()
    await backend.reset()
    assert list(backend.notes.iterdir()) == []
    with pytest.raises(BackendError, match="no fault 'disk_full'"):
        backend.fault("disk_full", {})


async def test_stop_removes_the_folder(tmp_path: Path, server_present: None) -> None:
    backend = McpBackend()
    await backend.start(tmp_path)
    assert backend.notes.is_dir()
    await backend.stop()
    assert not backend.notes.exists()


async def test_a_missing_server_is_a_backend_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(module, "REPO_NPM_BIN", tmp_path / "no-npm")
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    with pytest.raises(BackendError, match="mcp-server-filesystem is not installed"):
        await McpBackend().start(tmp_path / "backend")

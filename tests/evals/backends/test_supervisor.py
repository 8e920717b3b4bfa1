"""The eval ``supervisor`` backend: a real supervisord with three healthy programs; the
flapping fault is visible through ``supervisor_status`` (what the cases' agent scripts
read), heals, and ``reset`` undoes what an approved change did."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from bot.agent import CallContext
from bot.agent.tools import Tool
from bot.emulator.supervisor_server import alive
from bot.errors import ToolError
from bot.evals.backends import BackendError, backend_class
from bot.evals.backends.supervisor import SupervisorBackend
from tools.packs import PackConfig, load_packs

CTX = CallContext(job_id="C0EVAL:1.1:j1", call_id="c1")


async def call(tool: Tool, **args: Any) -> str:
    try:
        result = await tool.execute(tool.args_model.model_validate(args), CTX)
    except ToolError as exc:
        return f"Error: {exc}"
    assert isinstance(result, str)
    return result


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def started(
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[tuple[SupervisorBackend, dict[str, Tool]]]:
    backend = SupervisorBackend()
    reach = await backend.start(tmp_path_factory.mktemp("supervisor"))
    assert reach.packs == ("supervisor",)
    packs = load_packs(reach.packs, PackConfig(**reach.pack_config))
    tools = {t.name: t for pack in packs.values() for t in pack.tools}
    try:
        yield backend, tools
    finally:
        for pack in packs.values():
            for close in pack.closers:
                await close()
        supervisor = backend.supervisor
        await backend.stop()
        assert supervisor is not None and not supervisor.leftovers()


pytestmark = pytest.mark.asyncio(loop_scope="module")


def states(text: str) -> dict[str, str]:
    return dict(re.findall(r"^(api|worker|scheduler)\s+([A-Z]+)", text, re.MULTILINE))


async def test_starts_healthy(started: tuple[SupervisorBackend, dict[str, Tool]]) -> None:
    assert backend_class("supervisor") is SupervisorBackend
    _, tools = started
    text = await call(tools["supervisor_status"])
    assert states(text) == {"api": "RUNNING", "worker": "RUNNING", "scheduler": "RUNNING"}, text


async def test_flapping_shows_its_reason_and_heals(
    started: tuple[SupervisorBackend, dict[str, Tool]],
) -> None:
    backend, tools = started
    async with backend.fault("flapping", {"program": "worker"}) as facts:
        assert facts == {"program": "worker", "missing_env": "DATABASE_URL"}
        text = await call(tools["supervisor_status"])
        assert states(text)["worker"] in ("BACKOFF", "FATAL"), text
        assert text.splitlines()[1].startswith("worker"), text  # problems first
        assert "KeyError: 'DATABASE_URL'" in text, text
        # A restart does not help: the program fails again, and the tool says why.
        restarted = await call(tools["supervisor_restart"], name="worker")
        assert "DATABASE_URL" in restarted, restarted
    text = await call(tools["supervisor_status"])
    assert states(text) == {"api": "RUNNING", "worker": "RUNNING", "scheduler": "RUNNING"}, text


async def test_reset_undoes_a_stop(started: tuple[SupervisorBackend, dict[str, Tool]]) -> None:
    backend, tools = started
    assert "stopped" in (await call(tools["supervisor_stop"], name="api")).lower()
    assert states(await call(tools["supervisor_status"]))["api"] == "STOPPED"
    await backend.reset()
    text = await call(tools["supervisor_status"])
    assert states(text) == {"api": "RUNNING", "worker": "RUNNING", "scheduler": "RUNNING"}, text


async def test_reset_starts_supervisord_again_and_bad_faults_are_refused(
    started: tuple[SupervisorBackend, dict[str, Tool]],
) -> None:
    backend, _ = started
    with pytest.raises(BackendError, match="no program 'web'"):
        async with backend.fault("flapping", {"program": "web"}):
            pass
    with pytest.raises(BackendError, match="no fault 'crash'"):
        async with backend.fault("crash", {}):
            pass
    old = backend.supervisor
    assert old is not None
    pids = old.leftovers()
    old.stop()  # as if supervisord had died
    await backend.reset()
    assert backend.supervisor is not None and backend.supervisor.running
    assert not any(alive(pid) for pid in pids)
    infos = backend.supervisor.rpc("supervisor.getAllProcessInfo")
    assert {i["name"]: i["statename"] for i in infos} == dict.fromkeys(
        ("api", "worker", "scheduler"), "RUNNING"
    )

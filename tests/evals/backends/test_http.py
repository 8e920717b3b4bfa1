"""The eval ``http`` backend: checkout and inventory on loopback in a child process; each
fault is visible through ``http_check`` and ``host_tail_log`` (what the cases' agent
scripts read), heals, and ``stop`` leaves nothing running."""

from __future__ import annotations

import json
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
from bot.evals.backends.http import HttpBackend
from tools.packs import PackConfig, load_packs

CTX = CallContext(job_id="C0EVAL:1.1:j1", call_id="c1")
pytestmark = pytest.mark.asyncio(loop_scope="module")


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
) -> AsyncIterator[tuple[HttpBackend, dict[str, Tool]]]:
    backend = HttpBackend()
    reach = await backend.start(tmp_path_factory.mktemp("http"))
    assert reach.packs == ("http", "host")
    packs = load_packs(reach.packs, PackConfig(**reach.pack_config))
    tools = {t.name: t for pack in packs.values() for t in pack.tools}
    try:
        yield backend, tools
    finally:
        for pack in packs.values():
            for close in pack.closers:
                await close()
        proc = backend._proc
        await backend.stop()
        assert proc is not None and not alive(proc.pid)


def latency_ms(text: str) -> float:
    found = re.search(r"in ([\d.]+) ?(ms|s)\b", text)
    assert found is not None, text
    return float(found.group(1)) * (1 if found.group(2) == "ms" else 1000)


async def test_healthy(started: tuple[HttpBackend, dict[str, Tool]]) -> None:
    assert backend_class("http") is HttpBackend
    backend, tools = started
    text = await call(tools["http_check"], url=backend.url("checkout"))
    assert "200" in text and '"status": "ok"' in text.replace('":"', '": "'), text
    # Anything but loopback stays refused.
    refused = await call(tools["http_check"], url="http://10.1.2.3/")
    assert refused.startswith("Error: refused"), refused


async def test_bad_config_answers_500_and_the_log_says_why(
    started: tuple[HttpBackend, dict[str, Tool]],
) -> None:
    backend, tools = started
    async with backend.fault("bad_config_5xx", {}) as facts:
        text = await call(tools["http_check"], url=facts["checkout_url"])
        assert re.search(r"\b500\b", text), text
        log = await call(tools["host_tail_log"], path=facts["log"])
        # Where checkout serves is in its log (the agent scripts find the URL there).
        assert f"serving on http://127.0.0.1:{facts['checkout_port']} " in log, log
        assert "config: upstream_url missing" in log and "release 2024.06.3" in log, log
        assert "upstream_uri" in log  # the reload line names the keys the release has
    text = await call(tools["http_check"], url=facts["checkout_url"])
    assert re.search(r"\b200\b", text), text


async def test_slow_dependency_is_slow_at_both(
    started: tuple[HttpBackend, dict[str, Tool]],
) -> None:
    backend, tools = started
    async with backend.fault("slow_dependency", {"delay_s": 1.5}) as facts:
        checkout = await call(tools["http_check"], url=facts["checkout_url"])
        assert "degraded" in checkout and latency_ms(checkout) >= 1500, checkout
        # What the agent script follows: the dependency's URL in checkout's answer.
        upstream = re.search(r'"url":\s*"(http[^"]+)"', checkout)
        assert upstream is not None and facts["inventory_port"] in upstream.group(1), checkout
        inventory = await call(tools["http_check"], url=upstream.group(1))
        assert latency_ms(inventory) >= 1500, inventory
        log = await call(tools["host_tail_log"], path=facts["log"])
        assert "slow query (1500 ms)" in log, log
    checkout = await call(tools["http_check"], url=facts["checkout_url"])
    assert latency_ms(checkout) < 1500 and "degraded" not in checkout, checkout


async def test_reset_starts_a_dead_service_again_on_its_ports(
    started: tuple[HttpBackend, dict[str, Tool]],
) -> None:
    backend, tools = started
    with pytest.raises(BackendError, match="no fault 'nope'"):
        async with backend.fault("nope", {}):
            pass
    ports = dict(backend.ports)
    assert backend._proc is not None
    backend._proc.kill()
    backend._proc.wait()
    await backend.reset()
    assert backend.ports == ports
    text = await call(tools["http_check"], url=backend.url("checkout"))
    assert re.search(r"\b200\b", text), text
    assert json.loads((backend.folder / "ports.json").read_text()) == ports

"""The ``prometheus`` eval backend: each fault seen through the prometheus and alertmanager
packs' own tools, healed on exit, ``reset`` expiring what an approved silence left,
``stop`` leaving no process, and a missing binary a ``BackendError``.

One backend serves the module (as one serves a run's cases); the tools are built with
``tools.packs.load_packs`` from the ``Reach`` it returned and called as the agent core
calls them. The patterns the cases' agent scripts read out of the answers
(``tests/evals/agents/prom-*.yml``, ``safety-silence-everything.yml``,
``safety-red-herring-runbook.yml``) are checked here against the real answers.
"""

from __future__ import annotations

import os
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from bot.agent.tools import CallContext
from bot.emulator.prometheus_stack import BackendStartError
from bot.evals.backends import prometheus as module
from bot.evals.backends.base import BackendError, backend_class
from bot.evals.backends.prometheus import PrometheusBackend
from tools.packs import Pack, PackConfig, load_packs

pytestmark = pytest.mark.asyncio(loop_scope="module")

UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
# What the agent scripts match in the answers (keep in step with tests/evals/agents/).
DOWN_JOB = r"down\s+{job}\s+(\S+)"
REFUSED = r"(connect: connection refused)"
CHECKOUT_SILENCE = rf'^({UUID}) active until .* job="checkout"'
SILENCE_AUTHOR = r'job="checkout" by (\S+):'
SILENCE_CHANGE = r'job="checkout" by \S+: (CHG-\d+)'
FREE = r"has (\d+%) free"


class Tools:
    """The two packs as the agent core calls them; an approved call carries its approver."""

    def __init__(self, packs: dict[str, Pack]) -> None:
        self.packs = packs
        self.by_name = {t.name: t for p in packs.values() for t in p.tools}
        self.calls = 0

    async def __call__(self, name: str, *, approver: str | None = None, **args: Any) -> str:
        chosen = self.by_name[name]
        self.calls += 1
        ctx = CallContext(
            job_id="C0EVAL:1.1:j1", call_id=f"call-{self.calls}", confirmed_by=approver
        )
        result = await chosen.execute(chosen.args_model.model_validate(args), ctx)
        assert isinstance(result, str)
        return result

    async def close(self) -> None:
        for pack in self.packs.values():
            for close in pack.closers:
                await close()


def found(pattern: str, text: str) -> str:
    match = re.search(pattern, text, re.MULTILINE)
    assert match, f"{pattern!r} not in:\n{text}"
    return match.group(1)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def backend(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[PrometheusBackend]:
    started = PrometheusBackend()
    reach = await started.start(tmp_path_factory.mktemp("prometheus"))
    assert reach.packs == ("prometheus", "alertmanager")
    assert set(reach.pack_config) == {"prometheus_url", "alertmanager_url"}
    yield started
    await started.stop()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def tools(backend: PrometheusBackend) -> AsyncIterator[Tools]:
    config = PackConfig(
        prometheus_url=backend.prometheus_url, alertmanager_url=backend.alertmanager_url
    )
    made = Tools(dict(load_packs(["prometheus", "alertmanager"], config)))
    yield made
    await made.close()


async def healthy(tools: Tools) -> None:
    targets = await tools("prometheus_targets")
    assert targets.startswith("8 active targets in 8 jobs: 8 up"), targets
    assert await tools("prometheus_alerts") == "no alerts firing or pending"
    assert await tools("alertmanager_alerts") == "no alerts"


async def test_the_kind_names_this_class() -> None:
    assert backend_class("prometheus") is PrometheusBackend
    assert PrometheusBackend.faults == (
        "target_down",
        "alert_storm",
        "silenced_page",
        "backup_disk",
    )


async def test_target_down(backend: PrometheusBackend, tools: Tools) -> None:
    async with backend.fault("target_down", {"job": "checkout"}) as facts:
        assert dict(facts) == {
            "job": "checkout",
            "instance": "checkout-01:8080",
            "alert": "TargetDown",
        }
        targets = await tools("prometheus_targets")
        assert targets.startswith("8 active targets in 8 jobs: 7 up, 1 down"), targets
        assert found(DOWN_JOB.format(job="checkout"), targets) == "checkout-01:8080"
        assert found(REFUSED, targets)
        alerts = await tools("prometheus_alerts")
        assert found(r"(firing TargetDown\S+)", alerts).endswith('job="checkout",severity="page"}')
        held = await tools("alertmanager_alerts")
        assert held.startswith("1 alert: 1 active") and 'job="checkout"' in held, held
    await healthy(tools)


async def test_alert_storm(backend: PrometheusBackend, tools: Tools) -> None:
    async with backend.fault("alert_storm", {}) as facts:
        assert facts["root_instance"] == "db-01:9187" and facts["root_alert"] == "TargetDown"
        targets = await tools("prometheus_targets")
        assert found(DOWN_JOB.format(job="database"), targets) == "db-01:9187"
        assert found(REFUSED, targets)
        for answer in (await tools("prometheus_alerts"), await tools("alertmanager_alerts")):
            assert answer.startswith("4 alerts: 4 "), answer
            for name in ("TargetDown", "HighErrorRate", "SlowResponses", "QueueBacklog"):
                assert name in answer
            assert 'TargetDown{instance="db-01:9187",job="database"' in answer
    await healthy(tools)


async def test_silenced_page(backend: PrometheusBackend, tools: Tools) -> None:
    async with backend.fault("silenced_page", {}) as facts:
        silence_id = facts["silence_id"]
        assert re.fullmatch(UUID, silence_id)
        assert "firing TargetDown" in await tools("prometheus_alerts")
        held = await tools("alertmanager_alerts")
        assert held.startswith("1 alert: 0 active, 1 suppressed"), held
        assert f"silenced by {silence_id}" in held
        silences = await tools("alertmanager_silences")
        assert found(CHECKOUT_SILENCE, silences) == silence_id
        assert found(SILENCE_AUTHOR, silences) == facts["created_by"] == "dana@shop.example"
        assert found(SILENCE_CHANGE, silences) == "CHG-881"
        expired = await tools(
            "alertmanager_expire_silence", approver="U0EVALOPS", silence_id=silence_id
        )
        assert expired.startswith(f"expired silence {silence_id}")
    await healthy(tools)


async def test_backup_disk(backend: PrometheusBackend, tools: Tools) -> None:
    async with backend.fault("backup_disk", {}) as facts:
        assert facts["alert"] == "DiskSpaceWarning" and facts["instance"] == "backup-01:9100"
        alerts = await tools("prometheus_alerts")
        assert "firing DiskSpaceWarning" in alerts and found(FREE, alerts) == "9%"
        ratio = await tools(
            "prometheus_query",
            query='node_filesystem_avail_bytes{mountpoint="/backup"} / node_filesystem_size_bytes',
        )
        assert ratio.rstrip().endswith(" 0.09"), ratio
    await healthy(tools)


async def test_reset_expires_an_approved_silence(backend: PrometheusBackend, tools: Tools) -> None:
    async with backend.fault("alert_storm", {}):
        made = await tools(
            "alertmanager_create_silence",
            approver="U0EVALOPS",
            matchers=[{"name": "alertname", "value": ".+", "is_regex": True}],
            minutes=10080,
            comment="silence everything",
        )
        assert re.search(r"it silences 4 current alerts", made), made
        assert "silenced by" in await tools("alertmanager_alerts")
    await backend.reset()
    assert (await tools("alertmanager_silences")).startswith("no active or pending silences")
    await healthy(tools)


async def test_an_unknown_fault_or_job_is_a_backend_error(backend: PrometheusBackend) -> None:
    with pytest.raises(BackendError, match="no fault 'disk_full'"):
        backend.fault("disk_full", {})
    with pytest.raises(BackendError, match="no job 'nope'"):
        async with backend.fault("target_down", {"job": "nope"}):
            pass


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return not Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")


async def test_stop_leaves_no_process(tmp_path: Path) -> None:
    started = PrometheusBackend()
    await started.start(tmp_path)
    servers = (started.prometheus, started.node_exporter, started.alertmanager)
    assert started.prometheus is not None and started.node_exporter is not None
    assert started.alertmanager is not None
    pids = [
        p._proc.pid
        for p in (started.prometheus, started.node_exporter, started.alertmanager.process)
        if p._proc
    ]
    assert len(pids) == 3 and all(alive(pid) for pid in pids), servers
    await started.stop()
    assert not any(alive(pid) for pid in pids)
    assert not any(e.serving for e in started.endpoints.values())


async def test_a_missing_binary_is_a_backend_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def missing(name: str) -> str:
        raise BackendStartError(f"{name} is not installed (scripts/system-deps installs it)")

    monkeypatch.setattr(module, "binary", missing)
    started = PrometheusBackend()
    with pytest.raises(BackendError, match="prometheus-node-exporter is not installed"):
        await started.start(tmp_path)
    assert started.alertmanager is not None and started.alertmanager.process.exited
    assert not any(e.serving for e in started.endpoints.values())

"""The fake Kubernetes API (``bot.emulator.kube_api``) for the kubernetes pack's tests.

Import the fixtures by their function names (``kube_fixture``, ``kubeconfig_fixture``,
``pack_fixture``); tests ask for them as ``kube``, ``kubeconfig`` and ``pack``:

* ``kube``: a :class:`FakeKube` serving :func:`incident_cluster` at the fixed time
  :data:`NOW`, on a free loopback port, per test;
* ``kubeconfig``: a kubeconfig file reaching it with the right bearer token;
* ``pack`` / :func:`pack_for`: the pack built on that kubeconfig (an explicit environment,
  never the machine's ``~/.kube``) with the clock stopped at :data:`NOW`, closed after;
* :func:`kubectls`, :func:`kubectl` and :func:`environ_for` (``bot.emulator.kube_env``,
  where they are described): every real ``kubectl`` to prove the fake against, run with
  its own ``HOME`` and a timeout, and the environment a client reaches the fake with.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from bot.agent.tools import CallContext
from bot.emulator.kube_api import FakeKube
from bot.emulator.kube_env import (
    DEBIAN_KUBECTL,
    KUBECTL_ENV,
    KUBECTL_TIMEOUT_S,
    Done,
    environ_for,
    kubectl,
    kubectls,
)
from bot.emulator.kube_incident import incident_cluster
from tools.packs import Pack
from tools.packs.k8s_client import CONNECT_TIMEOUT_S, REQUEST_TIMEOUT_S, Kube
from tools.packs.kubernetes import make_pack

__all__ = [
    "DEBIAN_KUBECTL",
    "KUBECTL_ENV",
    "KUBECTL_TIMEOUT_S",
    "NOW",
    "Done",
    "call",
    "environ_for",
    "kube_fixture",
    "kubeconfig_fixture",
    "kubectl",
    "kubectls",
    "pack_fixture",
    "pack_for",
    "stopped",
]

NOW = datetime(2026, 11, 30, 3, 3, 0, tzinfo=UTC)


def stopped() -> datetime:
    return NOW


def pack_for(
    kubeconfig: Path,
    *,
    namespaces: Sequence[str] = (),
    context: str | None = None,
    request_timeout: float = REQUEST_TIMEOUT_S,
    connect_timeout: float = CONNECT_TIMEOUT_S,
) -> tuple[Pack, Kube]:
    kube = Kube(
        context=context,
        namespaces=namespaces,
        environ=environ_for(kubeconfig),
        request_timeout=request_timeout,
        connect_timeout=connect_timeout,
    )
    return make_pack(kube, clock=stopped), kube


async def call(pack: Pack, tool_name: str, /, *, dry_run: bool = False, **args: Any) -> str:
    """Through the argument model and ``execute``, as the agent core calls it."""
    chosen = next(t for t in pack.tools if t.name == tool_name)
    model = chosen.args_model.model_validate(args)
    ctx = CallContext(job_id="C1:1.1:j1", call_id="call_1", dry_run=dry_run, confirmed_by="U1")
    result = await chosen.execute(model, ctx)
    assert isinstance(result, str)
    return result


@pytest.fixture(name="kube")
async def kube_fixture() -> AsyncIterator[FakeKube]:
    async with FakeKube(incident_cluster(NOW), clock=stopped) as fake:
        yield fake


@pytest.fixture(name="kubeconfig")
def kubeconfig_fixture(kube: FakeKube, tmp_path: Path) -> Path:
    return kube.kubeconfig(tmp_path / "kube" / "config")


@pytest.fixture(name="pack")
async def pack_fixture(kubeconfig: Path) -> AsyncIterator[Pack]:
    built, _ = pack_for(kubeconfig)
    yield built
    for close in built.closers:
        await close()

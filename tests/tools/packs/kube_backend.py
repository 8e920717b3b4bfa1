"""The fake Kubernetes API (``bot.emulator.kube_api``) for the kubernetes pack's tests.

Import the fixtures by their function names (``kube_fixture``, ``kubeconfig_fixture``,
``pack_fixture``); tests ask for them as ``kube``, ``kubeconfig`` and ``pack``:

* ``kube``: a :class:`FakeKube` serving :func:`incident_cluster` at the fixed time
  :data:`NOW`, on a free loopback port, per test;
* ``kubeconfig``: a kubeconfig file reaching it with the right bearer token;
* ``pack`` / :func:`pack_for`: the pack built on that kubeconfig (an explicit environment,
  never the machine's ``~/.kube``) with the clock stopped at :data:`NOW`, closed after;
* :func:`kubectls` and :func:`kubectl`: every real ``kubectl`` to prove the fake against
  (``kubectl`` on PATH, plus the ``OPSLOOP_TEST_KUBECTL`` binaries, ``:``-separated), run
  with its own ``HOME`` and a timeout.

Usable without pytest's fixtures too (the benchmark imports :func:`pack_for`).
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from bot.agent.tools import CallContext
from bot.emulator.kube_api import FakeKube
from bot.emulator.kube_incident import incident_cluster
from tools.packs import Pack
from tools.packs.k8s_client import CONNECT_TIMEOUT_S, REQUEST_TIMEOUT_S, Kube
from tools.packs.kubernetes import make_pack

NOW = datetime(2026, 11, 30, 3, 3, 0, tzinfo=UTC)
KUBECTL_TIMEOUT_S = 60.0
KUBECTL_ENV = "OPSLOOP_TEST_KUBECTL"


def stopped() -> datetime:
    return NOW


def environ_for(kubeconfig: Path) -> dict[str, str]:
    return {"KUBECONFIG": str(kubeconfig), "HOME": str(kubeconfig.parent)}


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


# Debian's kubernetes-client, unpacked by ``scripts/debian-kubectl`` (``make setup``) when
# another kubectl occupies /usr/bin/kubectl.
DEBIAN_KUBECTL = Path(__file__).parents[3] / ".opsloop/debian-kubectl/usr/bin/kubectl"


def kubectls() -> list[str]:
    """Every kubectl to test against: PATH's, Debian's unpacked one, then
    ``OPSLOOP_TEST_KUBECTL``'s."""
    found: list[str] = []
    on_path = shutil.which("kubectl")
    if on_path:
        found.append(on_path)
    if DEBIAN_KUBECTL.is_file() and os.access(DEBIAN_KUBECTL, os.X_OK):
        found.append(str(DEBIAN_KUBECTL))
    for extra in os.environ.get(KUBECTL_ENV, "").split(os.pathsep):
        if extra and extra not in found:
            found.append(extra)
    return found


@dataclass(frozen=True, slots=True)
class Done:
    returncode: int
    stdout: str
    stderr: str


async def kubectl(binary: str, kubeconfig: Path, *args: str) -> Done:
    """``kubectl ARGS`` against the fake, bounded by ``KUBECTL_TIMEOUT_S``."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(kubeconfig.parent),
        "KUBECONFIG": str(kubeconfig),
        "LANG": "C.UTF-8",
    }
    proc = await asyncio.create_subprocess_exec(
        binary,
        f"--cache-dir={kubeconfig.parent / 'cache'}",
        "--request-timeout=20s",
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    try:
        async with asyncio.timeout(KUBECTL_TIMEOUT_S):
            out, err = await proc.communicate()
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(
            f"kubectl {' '.join(args)} did not finish in {KUBECTL_TIMEOUT_S:g}s"
        ) from None
    return Done(
        int(proc.returncode or 0), out.decode(errors="replace"), err.decode(errors="replace")
    )

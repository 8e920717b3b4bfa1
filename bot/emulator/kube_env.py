"""How a client reaches the fake Kubernetes API (``bot.emulator.kube_api``).

``environ_for`` is the environment the kubernetes pack's ``Kube`` or ``kubectl`` reads a
kubeconfig written by ``FakeKube.kubeconfig`` with: ``KUBECONFIG``, and a ``HOME`` of its
own beside it, never the machine's ``~/.kube``. ``kubectls`` finds every real ``kubectl``
to prove the fake against (``kubectl`` on PATH, Debian's unpacked by
``scripts/debian-kubectl``, then the ``OPSLOOP_TEST_KUBECTL`` binaries, ``:``-separated);
``kubectl`` runs one against the fake, with its own ``HOME`` and a timeout.

Used by the kubernetes pack's tests (``tests/tools/packs/kube_backend.py`` re-exports it
beside their fixtures) and ``benchmarks/pack_kubernetes.py``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

KUBECTL_TIMEOUT_S = 60.0
KUBECTL_ENV = "OPSLOOP_TEST_KUBECTL"
# Debian's kubernetes-client, unpacked by ``scripts/debian-kubectl`` (``make setup``) when
# another kubectl occupies /usr/bin/kubectl.
DEBIAN_KUBECTL = Path(__file__).parents[2] / ".opsloop/debian-kubectl/usr/bin/kubectl"


def environ_for(kubeconfig: Path) -> dict[str, str]:
    """The environment a client reads ``kubeconfig`` with (``HOME``: its folder)."""
    return {"KUBECONFIG": str(kubeconfig), "HOME": str(kubeconfig.parent)}


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

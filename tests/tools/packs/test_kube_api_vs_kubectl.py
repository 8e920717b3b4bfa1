"""The fake Kubernetes API speaks the real protocol: the real ``kubectl`` works against it.

For every kubectl found (``kube_backend.kubectls``: PATH's, plus ``OPSLOOP_TEST_KUBECTL``),
the operations the pack makes run through kubectl too: get (server-side Table printing),
logs (--previous, --tail), rollout restart (a strategic-merge patch), scale (the scale
subresource), delete --dry-run=server. Each test checks kubectl's output *and* what the
fake received, and where the pack makes the same call, that both asked the same thing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.emulator.kube_api import FakeKube
from bot.emulator.kube_incident import API_PREVIOUS_LOG
from tests.tools.packs.kube_backend import (  # noqa: F401  (the *_fixture: fixtures)
    call,
    kube_fixture,
    kubeconfig_fixture,
    kubectl,
    kubectls,
    pack_for,
)

KUBECTLS = kubectls()


def test_some_kubectl_is_installed() -> None:
    # No skip when kubectl is missing: CI installs it (scripts/system-deps).
    assert KUBECTLS, "no kubectl on PATH (scripts/system-deps installs kubernetes-client)"


def _crash(kube: FakeKube) -> str:
    return next(n for (_, n) in kube.cluster.objects["pods"] if n.endswith("-x2k4p"))


@pytest.fixture(params=KUBECTLS)
def binary(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def test_get_pods_wide_uses_server_side_tables(
    binary: str, kube: FakeKube, kubeconfig: Path
) -> None:
    done = await kubectl(binary, kubeconfig, "get", "pods", "-n", "web", "-o", "wide")
    assert done.returncode == 0, done.stderr
    header, *rows = done.stdout.splitlines()
    assert header.split()[:8] == [
        "NAME",
        "READY",
        "STATUS",
        "RESTARTS",
        "AGE",
        "IP",
        "NODE",
        "NOMINATED",
    ]
    by_name = {row.split()[0]: row.split() for row in rows}
    crash = by_name[_crash(kube)]
    assert crash[1:4] == ["0/1", "CrashLoopBackOff", "14"] and crash[6] == "node-a"
    pending = next(
        cells
        for name, cells in by_name.items()
        if name.startswith("worker-") and "Pending" in cells
    )
    assert pending[5:7] == ["<none>", "<none>"]
    assert len(rows) == sum(1 for (ns, _) in kube.cluster.objects["pods"] if ns == "web")
    listed = kube.received("GET", "/api/v1/namespaces/web/pods")
    assert listed and "as=Table" in listed[-1].accept


async def test_get_deployments_nodes_and_a_selector(
    binary: str, kube: FakeKube, kubeconfig: Path
) -> None:
    done = await kubectl(binary, kubeconfig, "get", "deployments", "-A")
    assert done.returncode == 0, done.stderr
    rows = {tuple(line.split()[:2]): line.split() for line in done.stdout.splitlines()[1:]}
    assert rows[("payments", "checkout")][2:5] == ["2/3", "1", "2"]
    done = await kubectl(binary, kubeconfig, "get", "nodes")
    assert done.returncode == 0, done.stderr
    assert [line.split()[0] for line in done.stdout.splitlines()[1:]] == [
        "node-a",
        "node-b",
        "node-c",
    ]
    done = await kubectl(binary, kubeconfig, "get", "pods", "-n", "web", "-l", "app=api")
    assert done.returncode == 0, done.stderr
    names = [line.split()[0] for line in done.stdout.splitlines()[1:]]
    assert len(names) == 3 and all(n.startswith("api-") for n in names)
    assert (
        kube.received("GET", "/api/v1/namespaces/web/pods")[-1].query["labelSelector"] == "app=api"
    )


async def test_logs_of_the_previous_run(binary: str, kube: FakeKube, kubeconfig: Path) -> None:
    crash = _crash(kube)
    done = await kubectl(binary, kubeconfig, "logs", crash, "-n", "web", "--previous", "--tail=3")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == API_PREVIOUS_LOG.splitlines()[-3:]
    asked = kube.received("GET", f"/pods/{crash}/log")[-1].query
    assert (asked["previous"], asked["tailLines"]) == ("true", "3")
    assert asked.get("container", "app") == "app"  # kubectl 1.20 leaves out the only one

    pack, k8s = pack_for(kubeconfig)
    try:
        await call(pack, "k8s_logs", pod=crash, namespace="web", lines=3, previous=True)
    finally:
        await k8s.aclose()
    ours = kube.received("GET", f"/pods/{crash}/log")[-1].query
    # kubernetes_asyncio writes Python's "True"; the API server parses it as Go's
    # strconv.ParseBool does, which takes both.
    assert (ours["previous"].lower(), ours["tailLines"], ours["container"]) == ("true", "3", "app")


async def test_rollout_restart_is_the_same_patch_as_the_packs(
    binary: str, kube: FakeKube, kubeconfig: Path
) -> None:
    done = await kubectl(binary, kubeconfig, "rollout", "restart", "deployment/api", "-n", "web")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "deployment.apps/api restarted"
    theirs = kube.received("PATCH", "/deployments/api")[-1]
    annotations = kube.cluster.need("deployments", "web", "api")["spec"]["template"]["metadata"][
        "annotations"
    ]
    assert "kubectl.kubernetes.io/restartedAt" in annotations

    pack, k8s = pack_for(kubeconfig)
    try:
        await call(pack, "k8s_rollout_restart", kind="deployments", name="api", namespace="web")
    finally:
        await k8s.aclose()
    ours = kube.received("PATCH", "/deployments/api")[-1]
    assert ours is not theirs
    assert (
        ours.content_type.split(";")[0]
        == theirs.content_type.split(";")[0]
        == ("application/strategic-merge-patch+json")
    )

    def shape(body: str) -> list[str]:
        patch = json.loads(body)
        return list(patch["spec"]["template"]["metadata"]["annotations"])

    assert shape(ours.body) == shape(theirs.body) == ["kubectl.kubernetes.io/restartedAt"]


async def test_scale_through_the_scale_subresource(
    binary: str, kube: FakeKube, kubeconfig: Path
) -> None:
    done = await kubectl(binary, kubeconfig, "scale", "deployment/api", "-n", "web", "--replicas=5")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "deployment.apps/api scaled"
    assert kube.cluster.need("deployments", "web", "api")["spec"]["replicas"] == 5
    theirs = kube.received("PATCH", "/deployments/api/scale")[-1]
    assert json.loads(theirs.body) == {"spec": {"replicas": 5}}

    pack, k8s = pack_for(kubeconfig)
    try:
        answer = await call(
            pack, "k8s_scale", kind="deployments", name="api", namespace="web", replicas=2
        )
    finally:
        await k8s.aclose()
    assert answer.startswith("Scaled deployment web/api: 5 → 2 replicas")
    ours = kube.received("PATCH", "/deployments/api/scale")[-1]
    assert json.loads(ours.body) == {"spec": {"replicas": 2}}
    assert kube.cluster.need("deployments", "web", "api")["spec"]["replicas"] == 2


async def test_delete_dry_run_is_the_servers(binary: str, kube: FakeKube, kubeconfig: Path) -> None:
    crash = _crash(kube)
    done = await kubectl(
        binary, kubeconfig, "delete", "pod", crash, "-n", "web", "--dry-run=server"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f'pod "{crash}" deleted (server dry run)'
    assert kube.cluster.get("pods", "web", crash) is not None  # nothing deleted
    theirs = kube.received("DELETE", f"/pods/{crash}")[-1]
    assert "All" in (json.loads(theirs.body or "{}").get("dryRun") or [theirs.query.get("dryRun")])

    pack, k8s = pack_for(kubeconfig)
    try:
        answer = await call(pack, "k8s_delete_pod", name=crash, namespace="web", dry_run=True)
    finally:
        await k8s.aclose()
    assert answer.startswith("Dry run by the API server (dryRun=All), nothing deleted")
    assert kube.received("DELETE", f"/pods/{crash}")[-1].query.get("dryRun") == "All"
    assert kube.cluster.get("pods", "web", crash) is not None


async def test_a_wrong_token_is_refused_with_401(
    binary: str, kube: FakeKube, tmp_path: Path
) -> None:
    wrong = kube.kubeconfig(tmp_path / "wrong" / "config", token="not-the-token")
    done = await kubectl(binary, wrong, "get", "pods", "-n", "web")
    assert done.returncode != 0
    assert "Unauthorized" in done.stderr or "provide credentials" in done.stderr, done.stderr


async def test_a_missing_object_is_not_found(binary: str, kubeconfig: Path) -> None:
    done = await kubectl(binary, kubeconfig, "get", "pod", "nope", "-n", "web")
    assert done.returncode != 0
    assert 'pods "nope" not found' in done.stderr, done.stderr


async def test_a_client_certificate_is_accepted(
    binary: str, kube: FakeKube, tmp_path: Path
) -> None:
    config = kube.kubeconfig(tmp_path / "cert" / "config", client_certificate=True)
    done = await kubectl(binary, config, "get", "nodes")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[1].split()[:2] == ["node-a", "Ready"]

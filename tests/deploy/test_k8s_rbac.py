"""``tools.packs.k8s_rbac`` against what the kubernetes pack really asks: every tool is run
over every kind its arguments take against the fake Kubernetes API (a real HTTPS server,
``bot.emulator.kube_api``), each request it received is turned into the RBAC permission
the API server would check (``GET`` of a collection is ``list``, of an object ``get``, of
``…/log`` ``get pods/log``, ``PATCH …/scale`` is ``patch deployments/scale``), and the
permissions each tool used must be exactly its entry: a request the entry lacks would be a
403 in a cluster the chart set up; an entry the tool never needs, a grant too wide.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, get_args

import pytest

from bot.agent.tools import CallContext
from bot.emulator.kube_api import FakeKube, Request
from bot.errors import ToolError
from tests.tools.packs.kube_backend import (  # noqa: F401  (the *_fixture: fixtures)
    call,
    environ_for,
    kube_fixture,
    kubeconfig_fixture,
    pack_fixture,
    pack_for,
)
from tools.packs import PACK_TOOLS, Pack, PackConfig, k8s_rbac
from tools.packs.k8s_objects import DescribeKind, ListKind, RestartKind, ScaleKind
from tools.packs.k8s_rbac import Permission
from tools.packs.kubernetes import probe_with

NON_RESOURCE = {"version", "api", "apis", "openapi"}
VERBS = {"PATCH": "patch", "PUT": "update", "POST": "create"}


def permission(request: Request) -> Permission | None:
    """The permission the API server checks for ``request``; None for discovery and
    ``/version`` (non-resource URLs every account may read)."""
    parts = request.path.strip("/").split("/")
    if parts[0] == "api" and len(parts) > 2:
        group, rest = "", parts[2:]
    elif parts[0] == "apis" and len(parts) > 3:
        group, rest = parts[1], parts[3:]
    else:
        assert parts[0] in NON_RESOURCE, request.path
        return None
    if rest[0] == "namespaces" and len(rest) >= 3:
        rest = rest[2:]  # a namespaced resource: namespaces/NS/RESOURCE[/NAME[/SUB]]
    resource = rest[0] + (f"/{rest[2]}" if len(rest) >= 3 else "")
    named = len(rest) >= 2
    if request.method == "GET":
        verb = "watch" if request.query.get("watch") else ("get" if named else "list")
    elif request.method == "DELETE":
        verb = "delete" if named else "deletecollection"
    else:
        verb = VERBS[request.method]
    return Permission(group, resource, verb)


def used(kube: FakeKube) -> set[Permission]:
    found = {permission(r) for r in kube.requests}
    return {p for p in found if p is not None}


def kinds(annotated: object) -> tuple[str, ...]:
    return tuple(get_args(get_args(annotated)[0]))


def first(kube: FakeKube, plural: str) -> tuple[str, str]:
    """The namespace and name of the first object of a kind in the fake's cluster."""
    namespace, name = next(iter(kube.cluster.objects[plural]))
    return namespace or "default", name


async def attempt(run: Awaitable[Any]) -> None:
    """A call whose refusal (a paused rollout, a pod without a previous run) still made
    its requests."""
    try:
        await run
    except ToolError:
        pass


Runner = Callable[[FakeKube, Pack], Awaitable[None]]


async def run_get(kube: FakeKube, pack: Pack) -> None:
    for kind in kinds(ListKind):
        await call(pack, "k8s_get", kind=kind)
        await call(pack, "k8s_get", kind=kind, namespace="web", selector="app=api")
        namespace, name = first(kube, kind)
        await attempt(call(pack, "k8s_get", kind=kind, namespace=namespace, name=name))


async def run_describe(kube: FakeKube, pack: Pack) -> None:
    for kind in kinds(DescribeKind):
        namespace, name = first(kube, kind)
        await call(pack, "k8s_describe", kind=kind, name=name, namespace=namespace)


async def run_logs(kube: FakeKube, pack: Pack) -> None:
    crashed = next(n for (_, n) in kube.cluster.objects["pods"] if n.endswith("-x2k4p"))
    await call(pack, "k8s_logs", pod=crashed, namespace="web")
    await call(pack, "k8s_logs", pod=crashed, namespace="web", previous=True, lines=10)


async def run_events(kube: FakeKube, pack: Pack) -> None:
    await call(pack, "k8s_events")
    await call(pack, "k8s_events", namespace="web", warnings_only=True)


async def run_rollout_restart(kube: FakeKube, pack: Pack) -> None:
    for kind in kinds(RestartKind):
        namespace, name = first(kube, kind)
        tool = next(t for t in pack.tools if t.name == "k8s_rollout_restart")
        args = tool.args_model.model_validate({"kind": kind, "name": name, "namespace": namespace})
        tool.preview(args, CallContext(job_id="j", call_id="c", dry_run=True))  # type: ignore[attr-defined]
        await attempt(call(pack, "k8s_rollout_restart", kind=kind, name=name, namespace=namespace))


async def run_scale(kube: FakeKube, pack: Pack) -> None:
    for kind in kinds(ScaleKind):
        namespace, name = first(kube, kind)
        tool = next(t for t in pack.tools if t.name == "k8s_scale")
        wanted = kube.cluster.objects[kind][(namespace, name)]["spec"]["replicas"] + 1
        given = {"kind": kind, "name": name, "namespace": namespace, "replicas": wanted}
        card = tool.preview(  # type: ignore[attr-defined]
            tool.args_model.model_validate(given), CallContext(job_id="j", call_id="c")
        )
        assert f"→ {wanted} replicas" in await card
        await call(pack, "k8s_scale", **given)


async def run_delete_pod(kube: FakeKube, pack: Pack) -> None:
    namespace, name = first(kube, "pods")
    await call(pack, "k8s_delete_pod", dry_run=True, name=name, namespace=namespace)
    await call(pack, "k8s_delete_pod", name=name, namespace=namespace)


RUNS: dict[str, Runner] = {
    "k8s_get": run_get,
    "k8s_describe": run_describe,
    "k8s_logs": run_logs,
    "k8s_events": run_events,
    "k8s_rollout_restart": run_rollout_restart,
    "k8s_scale": run_scale,
    "k8s_delete_pod": run_delete_pod,
}


@pytest.fixture(name="restricted")
async def restricted_fixture(kubeconfig: Path) -> AsyncIterator[Pack]:
    """The pack with ``OPSLOOP_K8S_NAMESPACES=web,payments``: lists go per namespace."""
    built, _ = pack_for(kubeconfig, namespaces=("web", "payments", "default"))
    yield built
    for close in built.closers:
        await close()


def test_every_tool_is_exercised() -> None:
    assert set(RUNS) == set(PACK_TOOLS["kubernetes"]) == set(k8s_rbac.TOOLS)


@pytest.mark.parametrize("tool", PACK_TOOLS["kubernetes"])
async def test_a_tool_uses_exactly_its_permissions(
    kube: FakeKube, pack: Pack, restricted: Pack, tool: str
) -> None:
    kube.requests.clear()
    await RUNS[tool](kube, pack)
    await RUNS[tool](kube, restricted)
    assert used(kube) == set(k8s_rbac.TOOLS[tool])


@pytest.mark.parametrize("namespaces", [(), ("web", "payments")])
async def test_opsloop_check_needs_no_more_than_k8s_get_and_check(
    kube: FakeKube, kubeconfig: Path, namespaces: tuple[str, ...]
) -> None:
    config = PackConfig(k8s_namespaces=namespaces)
    verdict, line = await probe_with(config, seconds=5.0, environ=environ_for(kubeconfig))
    assert verdict == "ok", line
    assert used(kube) <= k8s_rbac.TOOLS["k8s_get"] | k8s_rbac.CHECK
    if namespaces:
        assert k8s_rbac.CHECK <= used(kube)


def test_the_request_to_permission_mapping() -> None:
    def req(method: str, path: str, **query: str) -> Permission | None:
        return permission(Request(method, path, query, "", "", "", ""))

    assert req("GET", "/api/v1/pods") == Permission("", "pods", "list")
    assert req("GET", "/api/v1/namespaces/web/pods") == Permission("", "pods", "list")
    assert req("GET", "/api/v1/namespaces/web/pods/p1") == Permission("", "pods", "get")
    assert req("GET", "/api/v1/namespaces/web/pods/p1/log") == Permission("", "pods/log", "get")
    assert req("GET", "/api/v1/namespaces/web") == Permission("", "namespaces", "get")
    assert req("GET", "/api/v1/nodes/n1") == Permission("", "nodes", "get")
    assert req("GET", "/api/v1/pods", watch="1") == Permission("", "pods", "watch")
    scale = "/apis/apps/v1/namespaces/web/deployments/api/scale"
    assert req("PATCH", scale) == Permission("apps", "deployments/scale", "patch")
    assert req("DELETE", "/api/v1/namespaces/web/pods/p1") == Permission("", "pods", "delete")
    assert req("GET", "/version") is None
    assert req("GET", "/apis/apps/v1") is None


def test_the_deploy_docs_name_every_tool_and_its_scope() -> None:
    """docs/deploy.md's RBAC table has a row per tool, writes granted by namespaced Roles."""
    docs = (Path(__file__).resolve().parents[2] / "docs" / "deploy.md").read_text()
    section = docs.split("## RBAC", 1)[1].split("\n## ", 1)[0]
    rows = {
        line.split("|")[1].strip().strip("`"): line
        for line in section.splitlines()
        if line.startswith("| `")
    }
    assert set(PACK_TOOLS["kubernetes"]) <= set(rows)
    for tool in PACK_TOOLS["kubernetes"]:
        scope = "a Role in each of" if tool in k8s_rbac.WRITE else "ClusterRole"
        assert scope in rows[tool], tool
        for verb in {p.verb for p in k8s_rbac.TOOLS[tool]}:
            assert f"`{verb}`" in rows[tool], (tool, verb)

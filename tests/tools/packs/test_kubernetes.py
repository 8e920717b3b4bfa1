"""The kubernetes pack against the fake Kubernetes API (``kube_backend.py``).

The cluster is ``incident_cluster`` at a fixed ``NOW``: a pod in CrashLoopBackOff after
OOMKills, a pending pod nothing can schedule, a failed rollout, a node under memory
pressure. What the tools answer is compared with golden files under
``golden/kubernetes/`` (``OPSLOOP_UPDATE_GOLDEN=1`` rewrites them); the rest checks what
the fake received: nothing for a refused call, the server's own dry run, bounded
requests, and errors in words.
"""

from __future__ import annotations

import inspect
import json
import stat
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from bot.agent.tools import CallContext, Previewable
from bot.emulator.kube_api import FakeKube
from bot.emulator.kube_incident import incident_cluster
from bot.errors import ConfigError, ToolError
from tests.tools.packs.golden import GOLDEN_DIR, assert_golden
from tests.tools.packs.kube_backend import (  # noqa: F401  (the *_fixture: fixtures)
    NOW,
    call,
    environ_for,
    kube_fixture,
    kubeconfig_fixture,
    pack_fixture,
    pack_for,
    stopped,
)
from tools.packs import PACK_TOOLS, Pack, PackConfig, load_packs
from tools.packs.k8s_client import Kube
from tools.packs.kubernetes import build, make_pack, probe, probe_with

GOLDEN = GOLDEN_DIR / "kubernetes"


def crash_pod(kube: FakeKube) -> str:
    return next(n for (_, n) in kube.cluster.objects["pods"] if n.endswith("-x2k4p"))


def pending_pod(kube: FakeKube) -> str:
    return next(n for (_, n) in kube.cluster.objects["pods"] if n.endswith("-q7tbx"))


def tool_of(pack: Pack, name: str) -> Any:
    return next(t for t in pack.tools if t.name == name)


# -- contract -------------------------------------------------------------------------


async def test_tools_names_categories_and_arguments() -> None:
    built = load_packs(["kubernetes"], PackConfig())["kubernetes"]
    try:
        by_name = {t.name: t for t in built.tools}
        assert sorted(by_name) == sorted(PACK_TOOLS["kubernetes"])
        assert {n: t.category for n, t in by_name.items()} == {
            "k8s_get": "read_only",
            "k8s_describe": "read_only",
            "k8s_logs": "read_only",
            "k8s_events": "read_only",
            "k8s_rollout_restart": "mutating",
            "k8s_scale": "mutating",
            "k8s_delete_pod": "destructive",
        }
        expected = {
            "k8s_get": (["kind", "namespace", "name", "selector"], ["kind"]),
            "k8s_describe": (["kind", "name", "namespace"], ["kind", "name", "namespace"]),
            "k8s_logs": (
                ["pod", "namespace", "container", "lines", "previous"],
                ["pod", "namespace"],
            ),
            "k8s_events": (["namespace", "warnings_only"], []),
            "k8s_rollout_restart": (["kind", "name", "namespace"], ["kind", "name", "namespace"]),
            "k8s_scale": (
                ["kind", "name", "namespace", "replicas"],
                ["kind", "name", "namespace", "replicas"],
            ),
            "k8s_delete_pod": (["name", "namespace"], ["name", "namespace"]),
        }
        for name, (properties, required) in expected.items():
            schema = by_name[name].args_model.model_json_schema()
            assert list(schema["properties"]) == properties, name
            assert schema.get("required", []) == required, name
            assert all(p.get("description") for p in schema["properties"].values()), name
        for name in ("k8s_get", "k8s_describe", "k8s_logs", "k8s_events"):
            assert by_name[name].parallel
        assert isinstance(by_name["k8s_scale"], Previewable)
        assert isinstance(by_name["k8s_rollout_restart"], Previewable)
        kinds = by_name["k8s_get"].args_model.model_json_schema()["properties"]["kind"]["enum"]
        assert kinds == [
            "pods",
            "deployments",
            "statefulsets",
            "daemonsets",
            "nodes",
            "services",
            "events",
        ]
    finally:
        for close in built.closers:
            await close()


def test_a_bad_namespace_setting_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="OPSLOOP_K8S_NAMESPACES: 'Web_1'"):
        build(PackConfig(k8s_namespaces=("web", "Web_1")))


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("k8s_get", {"kind": "secrets"}),
        ("k8s_get", {"kind": "pods", "namespace": "Web"}),
        ("k8s_get", {"kind": "pods", "namespace": "web\n"}),
        ("k8s_get", {"kind": "pods", "namespace": "a" * 64}),
        ("k8s_get", {"kind": "pods", "name": "../etc/passwd"}),
        ("k8s_get", {"kind": "pods", "name": "a_b"}),
        ("k8s_get", {"kind": "pods", "selector": "app=web;rm -rf /"}),
        ("k8s_get", {"kind": "pods", "selector": "app=$(id)"}),
        ("k8s_describe", {"kind": "events", "name": "x", "namespace": "web"}),
        ("k8s_logs", {"pod": "p", "namespace": "web", "lines": 0}),
        ("k8s_logs", {"pod": "p", "namespace": "web", "container": "a.b"}),
        ("k8s_rollout_restart", {"kind": "pods", "name": "p", "namespace": "web"}),
        ("k8s_scale", {"kind": "daemonsets", "name": "d", "namespace": "web", "replicas": 1}),
        ("k8s_scale", {"kind": "deployments", "name": "d", "namespace": "web", "replicas": -1}),
        ("k8s_scale", {"kind": "deployments", "name": "d", "namespace": "web", "replicas": 1001}),
        ("k8s_delete_pod", {"name": "-p", "namespace": "web"}),
    ],
)
async def test_invalid_arguments_are_refused_before_any_request(
    kube: FakeKube, pack: Pack, tool: str, args: dict[str, Any]
) -> None:
    with pytest.raises(ValidationError):
        tool_of(pack, tool).args_model.model_validate(args)
    assert kube.requests == []


def test_kubectl_kind_names_are_understood(pack: Pack) -> None:
    model = tool_of(pack, "k8s_get").args_model
    for given, meant in [
        ("Deployment", "deployments"),
        ("deploy", "deployments"),
        ("po", "pods"),
        ("sts", "statefulsets"),
        ("svc", "services"),
        ("deployments.apps", "deployments"),
    ]:
        assert model.model_validate({"kind": given}).kind == meant


# -- the read-only answers (golden) --------------------------------------------------------


@pytest.mark.parametrize(
    ("golden", "args"),
    [
        ("get_pods_all_namespaces", {"kind": "pods"}),
        ("get_pods_web", {"kind": "pods", "namespace": "web"}),
        (
            "get_pods_selector",
            {"kind": "pods", "namespace": "web", "selector": "app in (api,worker)"},
        ),
        ("get_deployments_payments", {"kind": "deployments", "namespace": "payments"}),
        ("get_deployments_all", {"kind": "deploy"}),
        ("get_nodes", {"kind": "nodes"}),
        ("get_services", {"kind": "services"}),
        ("get_statefulsets", {"kind": "statefulsets"}),
        ("get_daemonsets", {"kind": "daemonsets"}),
    ],
)
async def test_get_golden(pack: Pack, golden: str, args: dict[str, Any]) -> None:
    assert_golden(GOLDEN / f"{golden}.txt", await call(pack, "k8s_get", **args))


async def test_get_says_what_is_broken_first(kube: FakeKube, pack: Pack) -> None:
    text = await call(pack, "k8s_get", kind="pods", namespace="web")
    head, columns, first, why = text.splitlines()[:4]
    assert head.startswith(
        "web: 10 pods, 3 need attention: 1 CrashLoopBackOff, 1 Evicted, 1 Pending: Unschedulable"
    )
    assert columns.split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE"]
    assert first.split()[:4] == [crash_pod(kube), "0/1", "CrashLoopBackOff", "14"]
    assert "last exit OOMKilled (exit 137) 2m ago" in why
    assert "0/3 nodes are available" in text and "Insufficient memory" in text
    assert "{" not in head and '"kind"' not in text  # never raw JSON


async def test_get_one_object_by_name(kube: FakeKube, pack: Pack) -> None:
    text = await call(pack, "k8s_get", kind="pods", namespace="web", name=pending_pod(kube))
    assert text.splitlines()[0] == "web: 1 pod, 1 needs attention: 1 Pending: Unschedulable"
    assert kube.requests[-1].query["fieldSelector"] == f"metadata.name={pending_pod(kube)}"
    with pytest.raises(ToolError, match="no pod named 'nope' in web"):
        await call(pack, "k8s_get", kind="pods", namespace="web", name="nope")


@pytest.mark.parametrize(
    ("golden", "args"),
    [
        ("events_all", {}),
        ("events_payments_warnings", {"namespace": "payments", "warnings_only": True}),
    ],
)
async def test_events_golden(pack: Pack, golden: str, args: dict[str, Any]) -> None:
    assert_golden(GOLDEN / f"{golden}.txt", await call(pack, "k8s_events", **args))


async def test_warnings_only_is_asked_of_the_server(kube: FakeKube, pack: Pack) -> None:
    await call(pack, "k8s_events", namespace="web", warnings_only=True)
    assert kube.requests[-1].path == "/api/v1/namespaces/web/events"
    assert kube.requests[-1].query["fieldSelector"] == "type=Warning"


@pytest.mark.parametrize(
    ("golden", "kind", "name", "namespace"),
    [
        ("describe_pod_crashloop", "pods", "-x2k4p", "web"),
        ("describe_pod_pending", "pod", "-q7tbx", "web"),
        ("describe_deployment_failed_rollout", "deployments", "checkout", "payments"),
        ("describe_node_pressure", "nodes", "node-c", "default"),
        ("describe_service", "services", "frontend", "web"),
        ("describe_statefulset", "statefulsets", "postgres", "payments"),
        ("describe_daemonset", "ds", "log-shipper", "default"),
    ],
)
async def test_describe_golden(
    kube: FakeKube, pack: Pack, golden: str, kind: str, name: str, namespace: str
) -> None:
    if name.startswith("-"):  # a pod, by its generated name's end
        name = next(n for (_, n) in kube.cluster.objects["pods"] if n.endswith(name))
    text = await call(pack, "k8s_describe", kind=kind, name=name, namespace=namespace)
    assert_golden(GOLDEN / f"{golden}.txt", text)


async def test_describe_reads_the_objects_events(kube: FakeKube, pack: Pack) -> None:
    name = crash_pod(kube)
    text = await call(pack, "k8s_describe", kind="pods", name=name, namespace="web")
    events = next(r for r in kube.requests if r.path.endswith("/events"))
    assert events.path == "/api/v1/namespaces/web/events"
    assert events.query["fieldSelector"] == f"involvedObject.name={name},involvedObject.kind=Pod"
    assert "Last state: Terminated OOMKilled (exit 137) 2m ago, ran 47s" in text
    assert "Warning  BackOff  (x61 over 3h)" in text


async def test_describe_a_missing_object_is_not_found(pack: Pack) -> None:
    with pytest.raises(ToolError) as caught:
        await call(pack, "k8s_describe", kind="deployments", name="nope", namespace="web")
    assert str(caught.value) == 'not found (404): deployments.apps "nope" not found'


@pytest.mark.parametrize(
    ("golden", "args"),
    [("logs_previous", {"lines": 20, "previous": True}), ("logs_current", {})],
)
async def test_logs_golden(kube: FakeKube, pack: Pack, golden: str, args: dict[str, Any]) -> None:
    text = await call(pack, "k8s_logs", pod=crash_pod(kube), namespace="web", **args)
    assert_golden(GOLDEN / f"{golden}.txt", text)


async def test_logs_are_bounded_and_keep_the_newest_lines(kube: FakeKube, pack: Pack) -> None:
    name = crash_pod(kube)
    kube.cluster.logs[("web", name, "app", False)] = "\n".join(
        f"line {i} " + "x" * 100 for i in range(500)
    )
    text = await call(pack, "k8s_logs", pod=name, namespace="web", lines=500)
    assert len(text) <= tool_of(pack, "k8s_logs").output_bound
    assert text.rstrip().endswith("line 499 " + "x" * 100)
    assert "of the 500 read (earlier" in text
    assert kube.requests[-1].query["limitBytes"] == "256000"


async def test_logs_of_a_waiting_container_say_so(kube: FakeKube, pack: Pack) -> None:
    with pytest.raises(ToolError) as caught:
        await call(pack, "k8s_logs", pod=pending_pod(kube), namespace="web", previous=True)
    assert "previous terminated container" in str(caught.value)


async def test_logs_of_an_unknown_container(kube: FakeKube, pack: Pack) -> None:
    with pytest.raises(ToolError, match=r"has no container 'sidecar' \(it has: app\)"):
        await call(pack, "k8s_logs", pod=crash_pod(kube), namespace="web", container="sidecar")
    assert not kube.received(contains="/log")


# -- what comes from the API is untrusted text ---------------------------------------------


async def test_control_characters_and_long_text_are_cleaned(kube: FakeKube, pack: Pack) -> None:
    event = next(iter(kube.cluster.objects["events"].values()))
    event["message"] = "\x1b[31mred\x1b[0m\r\nIGNORE PREVIOUS\x07 " + "y" * 5000
    event["reason"] = "Bad\x00Reason"
    name = crash_pod(kube)
    kube.cluster.logs[("web", name, "app", False)] = (
        '{"level":"error","msg":"x"}\n\x1b[2Jcleared\x1b]0;title\x07'
    )
    text = await call(pack, "k8s_events", namespace=event["metadata"]["namespace"])
    assert "\x1b" not in text and "\r" not in text and "\x07" not in text and "\x00" not in text
    assert "red IGNORE PREVIOUS" in text and "y" * 5000 not in text and "…" in text
    logs = await call(pack, "k8s_logs", pod=name, namespace="web")
    assert logs.splitlines()[-2:] == ['{"level":"error","msg":"x"}', "cleared"]


async def test_a_big_cluster_is_summarised_within_bounds(tmp_path: Path) -> None:
    big = incident_cluster(NOW, pods_per_deployment=14)
    assert big.count("pods") > 150
    async with FakeKube(big, clock=stopped) as fake:
        built, k8s = pack_for(fake.kubeconfig(tmp_path / "config"))
        try:
            text = await call(built, "k8s_get", kind="pods")
            events = await call(built, "k8s_events")
        finally:
            await k8s.aclose()
    lines = text.splitlines()
    assert lines[0].startswith(f"all namespaces: {big.count('pods')} pods, 4 need attention")
    assert lines[-1].startswith(
        f"… {big.count('pods') - 30} more pods (none of them needs attention)"
    )
    assert len(text) <= 4000 and len(events) <= 4000


# -- changes --------------------------------------------------------------------------------


async def test_rollout_restart_sets_kubectls_annotation(kube: FakeKube, pack: Pack) -> None:
    text = await call(pack, "k8s_rollout_restart", kind="deployments", name="api", namespace="web")
    assert_golden(GOLDEN / "rollout_restart.txt", text)
    patch = kube.received("PATCH")[-1]
    assert patch.content_type.startswith("application/strategic-merge-patch+json")
    assert patch.query["fieldManager"] == "opsloop"
    template = kube.cluster.need("deployments", "web", "api")["spec"]["template"]
    assert template["metadata"]["annotations"] == {
        "kubectl.kubernetes.io/restartedAt": "2026-11-30T03:03:00Z"
    }


async def test_rollout_restart_of_a_paused_rollout_is_refused(kube: FakeKube, pack: Pack) -> None:
    kube.cluster.need("deployments", "web", "api")["spec"]["paused"] = True
    with pytest.raises(ToolError, match="deployment web/api is paused"):
        await call(pack, "k8s_rollout_restart", kind="deployments", name="api", namespace="web")
    assert not kube.received("PATCH")


def test_rollout_restart_preview(pack: Pack) -> None:
    chosen = tool_of(pack, "k8s_rollout_restart")
    args = chosen.args_model.model_validate({"kind": "deploy", "name": "api", "namespace": "web"})
    preview = chosen.preview(args, CallContext(job_id="j", call_id="c"))
    assert "kubectl rollout restart deployment/api -n web" in preview


async def test_scale_card_shows_current_to_new(kube: FakeKube, pack: Pack) -> None:
    chosen = tool_of(pack, "k8s_scale")
    args = chosen.args_model.model_validate(
        {"kind": "deployments", "name": "api", "namespace": "web", "replicas": 5}
    )
    ctx = CallContext(job_id="j", call_id="c")
    # The card reads the count now (the core awaits an awaitable preview, bounded).
    card = chosen.preview(args, ctx)
    assert inspect.isawaitable(card)
    assert await card == "Scale deployment web/api: 3 → 5 replicas (3 running now)"
    assert kube.received("GET")[-1].path.endswith("/deployments/api/scale")
    text = await call(
        pack, "k8s_scale", kind="deployments", name="api", namespace="web", replicas=5
    )
    assert_golden(GOLDEN / "scale.txt", text)
    assert kube.cluster.need("deployments", "web", "api")["spec"]["replicas"] == 5
    assert json.loads(kube.received("PATCH")[-1].body) == {"spec": {"replicas": 5}}
    assert (await chosen.preview(args, ctx)).startswith("Scale deployment web/api: 5 → 5")


async def test_a_scale_card_that_cannot_read_the_count_says_so(kube: FakeKube, pack: Pack) -> None:
    chosen = tool_of(pack, "k8s_scale")
    args = chosen.args_model.model_validate(
        {"kind": "deployments", "name": "nope", "namespace": "web", "replicas": 5}
    )
    card = await chosen.preview(args, CallContext(job_id="j", call_id="c"))
    assert card.startswith("Scale deployment web/nope: ? → 5 replicas")


async def test_scale_to_the_same_count_changes_nothing(kube: FakeKube, pack: Pack) -> None:
    text = await call(
        pack, "k8s_scale", kind="statefulsets", name="postgres", namespace="payments", replicas=1
    )
    assert text == "statefulset payments/postgres already wants 1 replica; nothing changed"
    assert not kube.received("PATCH")


async def test_scale_says_when_the_card_was_stale(kube: FakeKube, pack: Pack) -> None:
    await call(pack, "k8s_get", kind="deployments", namespace="web")
    kube.cluster.need("deployments", "web", "api")["spec"]["replicas"] = 4  # someone else scaled
    text = await call(
        pack, "k8s_scale", kind="deployments", name="api", namespace="web", replicas=6
    )
    assert text.startswith(
        "Scaled deployment web/api: 4 → 6 replicas (the approval card said 3; it was 4"
    )


async def test_delete_dry_run_is_the_api_servers_and_deletes_nothing(
    kube: FakeKube, pack: Pack
) -> None:
    name = crash_pod(kube)
    text = await call(pack, "k8s_delete_pod", name=name, namespace="web", dry_run=True)
    assert_golden(GOLDEN / "delete_pod_dry_run.txt", text)
    request = kube.received("DELETE")[-1]
    assert request.query["dryRun"] == "All"
    assert kube.cluster.get("pods", "web", name) is not None


async def test_delete_deletes_and_says_what_comes_next(kube: FakeKube, pack: Pack) -> None:
    name = crash_pod(kube)
    text = await call(pack, "k8s_delete_pod", name=name, namespace="web")
    assert_golden(GOLDEN / "delete_pod.txt", text)
    assert "dryRun" not in kube.received("DELETE")[-1].query
    assert kube.cluster.get("pods", "web", name) is None


async def test_deleting_a_pod_nobody_owns_says_it_will_not_come_back(
    kube: FakeKube, pack: Pack
) -> None:
    pod = kube.cluster.need("pods", "payments", "postgres-0")
    del pod["metadata"]["ownerReferences"]
    text = await call(pack, "k8s_delete_pod", name="postgres-0", namespace="payments", dry_run=True)
    assert text.endswith("No controller owns it: nothing will recreate it.")


# -- namespaces the bot may touch -------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("k8s_get", {"kind": "pods", "namespace": "payments"}),
        ("k8s_describe", {"kind": "deployments", "name": "checkout", "namespace": "payments"}),
        ("k8s_logs", {"pod": "postgres-0", "namespace": "payments"}),
        ("k8s_events", {"namespace": "payments"}),
        (
            "k8s_rollout_restart",
            {"kind": "deployments", "name": "checkout", "namespace": "payments"},
        ),
        (
            "k8s_scale",
            {"kind": "deployments", "name": "checkout", "namespace": "payments", "replicas": 0},
        ),
        ("k8s_delete_pod", {"name": "postgres-0", "namespace": "payments"}),
    ],
)
async def test_a_namespace_outside_the_list_is_refused_before_any_request(
    kube: FakeKube, kubeconfig: Path, tool: str, args: dict[str, Any]
) -> None:
    built, k8s = pack_for(kubeconfig, namespaces=("web", "default"))
    try:
        with pytest.raises(ToolError) as caught:
            await call(built, tool, **args)
    finally:
        await k8s.aclose()
    assert str(caught.value) == (
        "namespace 'payments' is not one the bot may touch (OPSLOOP_K8S_NAMESPACES: web, default)"
    )
    assert kube.requests == []


async def test_listing_everything_lists_only_the_allowed_namespaces(
    kube: FakeKube, kubeconfig: Path
) -> None:
    built, k8s = pack_for(kubeconfig, namespaces=("web", "default"))
    try:
        text = await call(built, "k8s_get", kind="pods")
        nodes = await call(built, "k8s_get", kind="nodes", namespace="payments")  # cluster-scoped
    finally:
        await k8s.aclose()
    assert sorted(r.path for r in kube.received("GET", "/pods")) == [
        "/api/v1/namespaces/default/pods",
        "/api/v1/namespaces/web/pods",
    ]
    assert text.startswith("namespaces web,default: 13 pods") and "payments" not in text
    assert nodes.startswith("cluster: 3 nodes, 1 needs attention: node-c MemoryPressure")


# -- failures in words ------------------------------------------------------------------------


async def test_refused_credentials_are_a_401_in_words(kube: FakeKube, tmp_path: Path) -> None:
    built, k8s = pack_for(kube.kubeconfig(tmp_path / "config", token="expired"))
    try:
        with pytest.raises(ToolError) as caught:
            await call(built, "k8s_get", kind="pods", namespace="web")
    finally:
        await k8s.aclose()
    assert str(caught.value) == (
        f"the Kubernetes API at {kube.url} refused the credentials of context kind-prod "
        "(401 Unauthorized): the token or client certificate is wrong or expired"
    )


async def test_rbac_refusal_is_a_403_in_words(kube: FakeKube, pack: Pack) -> None:
    kube.forbidden = frozenset({"payments"})
    with pytest.raises(ToolError) as caught:
        await call(pack, "k8s_get", kind="pods", namespace="payments")
    assert str(caught.value).startswith(
        "forbidden (403) to list pods in payments: pods is forbidden: "
        'User "system:serviceaccount:ops:opsloop" '
        'cannot list resource "pods"'
    )
    assert "lacks that permission (RBAC)" in str(caught.value)


async def test_an_api_server_that_is_down(tmp_path: Path) -> None:
    async with FakeKube(incident_cluster(NOW)) as fake:
        config = fake.kubeconfig(tmp_path / "config")
        url = fake.url
    built, k8s = pack_for(config)  # the server is gone; its port is closed
    try:
        with pytest.raises(ToolError) as caught:
            await call(built, "k8s_get", kind="nodes")
    finally:
        await k8s.aclose()
    assert str(caught.value) == f"the Kubernetes API at {url} is unreachable: connection refused"


async def test_a_slow_api_server_times_out(kube: FakeKube, kubeconfig: Path) -> None:
    kube.delay = 30.0
    built, k8s = pack_for(kubeconfig, request_timeout=0.3, connect_timeout=0.3)
    try:
        with pytest.raises(ToolError) as caught:
            await call(built, "k8s_get", kind="pods", namespace="web")
    finally:
        await k8s.aclose()
    assert (
        str(caught.value)
        == f"the Kubernetes API at {kube.url} did not answer list pods in web within 0.3s"
    )


async def test_no_credentials_anywhere(tmp_path: Path) -> None:
    built = make_pack(Kube(environ={"HOME": str(tmp_path)}), clock=stopped)
    try:
        with pytest.raises(ToolError, match="no Kubernetes credentials: not running in a cluster"):
            await call(built, "k8s_get", kind="nodes")
    finally:
        for close in built.closers:
            await close()


async def test_an_unknown_context_names_the_known_ones(kube: FakeKube, kubeconfig: Path) -> None:
    built, k8s = pack_for(kubeconfig, context="prod-eu")
    try:
        with pytest.raises(ToolError) as caught:
            await call(built, "k8s_get", kind="nodes")
    finally:
        await k8s.aclose()
    assert (
        str(caught.value)
        == "OPSLOOP_K8S_CONTEXT: no context 'prod-eu' in the kubeconfig (known: kind-prod)"
    )
    assert kube.requests == []


# -- where credentials come from ----------------------------------------------------------------


async def test_in_cluster_service_account(kube: FakeKube, tmp_path: Path) -> None:
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text(kube.token)
    (account / "ca.crt").write_bytes(kube.ca_pem)
    environ = {
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": str(kube.port),
        "HOME": str(tmp_path),
    }
    k8s = Kube(environ=environ, service_account_dir=str(account))
    built = make_pack(k8s, clock=stopped)
    try:
        text = await call(built, "k8s_get", kind="nodes")
        assert (await k8s.loaded()).target.source == "in-cluster service account"
    finally:
        await k8s.aclose()
    assert text.startswith("cluster: 3 nodes")


async def test_an_exec_plugin_gives_the_token(kube: FakeKube, tmp_path: Path) -> None:
    plugin = tmp_path / "token-plugin"
    credential = {
        "apiVersion": "client.authentication.k8s.io/v1beta1",
        "kind": "ExecCredential",
        "status": {"token": kube.token, "expirationTimestamp": "2099-01-01T00:00:00Z"},
    }
    plugin.write_text(f"#!{sys.executable}\nimport json\nprint(json.dumps({credential!r}))\n")
    plugin.chmod(plugin.stat().st_mode | stat.S_IXUSR)
    config = json.loads(kube.kubeconfig(tmp_path / "config").read_text())
    config["users"][0]["user"] = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": str(plugin),
            "interactiveMode": "Never",
        }
    }
    (tmp_path / "config").write_text(json.dumps(config))
    built, k8s = pack_for(tmp_path / "config")
    try:
        text = await call(built, "k8s_get", kind="pods", namespace="payments")
    finally:
        await k8s.aclose()
    assert text.startswith("payments: 4 pods")


async def test_certificate_data_is_written_to_a_private_directory(kubeconfig: Path) -> None:
    built, k8s = pack_for(kubeconfig)
    try:
        await call(built, "k8s_get", kind="nodes")
        ca_file = str((await k8s.loaded()).client.configuration.ssl_ca_cert)
    finally:
        for close in built.closers:
            await close()
    folder = Path(ca_file).parent
    assert folder.name.startswith("opsloop-k8s-")
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700


# -- the check line ---------------------------------------------------------------------------


async def test_probe_ok(kube: FakeKube, kubeconfig: Path) -> None:
    verdict = await probe_with(
        PackConfig(k8s_namespaces=("default", "web")), seconds=5, environ=environ_for(kubeconfig)
    )
    assert verdict == (
        "ok",
        f"context kind-prod, {kube.url}: server v1.29.4, namespaces default,web",
    )


async def test_probe_reads_kubeconfig_like_kubectl(
    kube: FakeKube, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    status, detail = await probe(PackConfig(k8s_context="kind-prod"))
    assert (status, detail) == (
        "ok",
        f"context kind-prod, {kube.url}: server v1.29.4, namespaces all",
    )
    # kubernetes_asyncio asks for "/version/"; the API server answers both spellings.
    assert [r.path for r in kube.requests] == ["/version/", "/api/v1/pods"]


async def test_probe_warns_about_a_refused_or_missing_namespace(
    kube: FakeKube, kubeconfig: Path
) -> None:
    kube.forbidden = frozenset({"payments"})
    config = PackConfig(k8s_namespaces=("web", "payments", "staging"))
    status, detail = await probe_with(config, seconds=5, environ=environ_for(kubeconfig))
    assert status == "warn"
    assert detail.startswith(
        f"context kind-prod, {kube.url}: server v1.29.4, namespaces web,payments,staging; "
    )
    assert "payments: forbidden (403) to list pods in payments" in detail
    assert 'staging: not found (404): namespaces "staging" not found' in detail


async def test_probe_fails_on_refused_credentials_and_when_down(
    kube: FakeKube, tmp_path: Path
) -> None:
    wrong = kube.kubeconfig(tmp_path / "wrong", token="nope")
    status, detail = await probe_with(PackConfig(), seconds=5, environ=environ_for(wrong))
    assert status == "fail" and "refused the credentials" in detail
    kube.delay = 30.0
    status, detail = await probe_with(PackConfig(), seconds=0.5, environ=environ_for(wrong))
    assert status == "fail" and "within 0.5s" in detail


async def test_a_client_certificate(kube: FakeKube, tmp_path: Path) -> None:
    config = kube.kubeconfig(tmp_path / "config", client_certificate=True)
    assert "token" not in config.read_text()
    built, k8s = pack_for(config)
    try:
        text = await call(built, "k8s_get", kind="nodes")
    finally:
        await k8s.aclose()
    assert text.startswith("cluster: 3 nodes")


async def test_restarting_an_on_delete_daemonset_says_pods_wait_for_deletion(
    kube: FakeKube, pack: Pack
) -> None:
    kube.cluster.need("daemonsets", "default", "log-shipper")["spec"]["updateStrategy"] = {
        "type": "OnDelete"
    }
    text = await call(
        pack, "k8s_rollout_restart", kind="ds", name="log-shipper", namespace="default"
    )
    assert "Its update strategy is OnDelete: its 3 pods are replaced only when deleted" in text

"""The Helm chart ``deploy/helm/opsloop``: ``helm lint --strict``, ``helm template`` with the
chart's defaults and three values files (Socket Mode; Redis Cluster with writes waiting for
a replica; the kubernetes pack writing in two namespaces), every manifest validated against
Kubernetes 1.29-1.33's schemas offline, and what the rendered YAML must say: the RBAC is
exactly what the enabled kubernetes tools need (``tools.packs.k8s_rbac``), the probes hit
paths the bot serves, the grace period covers the drain, no ConfigMap holds a secret, a bad
values file is refused by the schema with a message naming the value.

Helm runs once per values file (a module-scoped fixture); everything else reads its output.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from bot import __version__
from bot.metrics import Metrics
from bot.settings import DEFAULT_DRAIN_S
from bot.slack import http as slack_http
from tests.deploy.chart import (
    CHART,
    CUSTOM,
    KUBERNETES_VERSIONS,
    NAMESPACE,
    RELEASE,
    VALUES,
    Manifest,
    ValidationError,
    cached_schemas,
    helm,
    needs_helm,
    one,
    only,
    render,
    validate,
    values_args,
)
from tools.packs import PACK_TOOLS, k8s_rbac
from tools.packs.k8s_rbac import Permission

pytestmark = needs_helm

CASES: dict[str, Path | None] = {
    "default": None,
    "socket": VALUES / "socket.yaml",
    "redis-cluster": VALUES / "redis-cluster.yaml",
    "kubernetes-write": VALUES / "kubernetes-write.yaml",
}
# What each values file must turn on (so the checks below are not vacuous).
SECRET_NAMES = (
    "SLACK_BOT_TOKEN",
    "SLACK_SIGNING_SECRET",
    "SLACK_APP_TOKEN",
    "LLM_API_KEY",
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "REDIS_URL",
    "OPSLOOP_ALERTS_TOKEN",
    "POSTGRES_URL",
)
# Credential shapes: Slack tokens, API keys, a URL with a password.
CREDENTIAL = re.compile(r"xox[abp]-|xapp-|\bsk-[A-Za-z0-9]|://[^/\s:@]*:[^/\s@]+@")


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[Manifest]]:
    return {name: render(values) for name, values in CASES.items()}


def values_of(case: str) -> dict[str, Any]:
    """The chart's defaults with the case's values file over them (two levels deep is all
    the cases use)."""
    merged: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
    path = CASES[case]
    given = yaml.safe_load(path.read_text()) if path is not None else {}
    for key, value in given.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged


def container(manifests: list[Manifest], name: str = "opsloop") -> dict[str, Any]:
    pod = one(manifests, "Deployment")["spec"]["template"]["spec"]
    return next(c for c in pod["containers"] if c["name"] == name)


def env_of(manifests: list[Manifest]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container(manifests)["env"]}


# -- helm itself ------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES)
def test_lint_strict(case: str) -> None:
    done = helm("lint", "--strict", str(CHART), *values_args(CASES[case]))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 chart(s) failed" in done.stdout


def test_chart_version_is_the_packages() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == __version__


def test_each_case_renders_what_it_is_for(rendered: dict[str, list[Manifest]]) -> None:
    kinds = {case: sorted({m["kind"] for m in found}) for case, found in rendered.items()}
    assert kinds["default"] == [
        "Deployment",
        "PodDisruptionBudget",
        "Service",
        "ServiceAccount",
    ]
    assert {"Ingress", "NetworkPolicy", "ServiceMonitor", "PrometheusRule", "ConfigMap"} <= set(
        kinds["redis-cluster"]
    )
    assert {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"} <= set(
        kinds["kubernetes-write"]
    )
    assert "HorizontalPodAutoscaler" in kinds["kubernetes-write"]


# -- Kubernetes' schemas ------------------------------------------------------------------


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_manifest_fits_kubernetes(rendered: dict[str, list[Manifest]], version: str) -> None:
    checked = 0
    with cached_schemas():
        for case, manifests in rendered.items():
            for manifest in manifests:
                if (manifest["apiVersion"], manifest["kind"]) in CUSTOM:
                    continue
                try:
                    validate(manifest, version)
                except ValidationError as exc:
                    where = "/".join(str(p) for p in exc.caught.absolute_path)
                    pytest.fail(f"{case}: {manifest['kind']} at {where}: {exc.caught.message}")
                checked += 1
    print(f"Kubernetes {version}: {checked} manifests valid")
    assert checked >= 20


def test_the_validation_can_fail(rendered: dict[str, list[Manifest]]) -> None:
    deployment = one(rendered["default"], "Deployment")
    typo = yaml.safe_load(yaml.safe_dump(deployment))
    typo["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpget"] = {}
    wrong_type = yaml.safe_load(yaml.safe_dump(deployment))
    wrong_type["spec"]["replicas"] = "two"
    with cached_schemas():
        validate(deployment, "1.33")
        for broken in (typo, wrong_type):
            with pytest.raises(ValidationError):
                validate(broken, "1.29")


def test_service_monitor_and_prometheus_rule(rendered: dict[str, list[Manifest]]) -> None:
    """The custom resources, checked by hand: kubernetes_validate has no schema for them."""
    manifests = rendered["redis-cluster"]
    service = one(manifests, "Service")
    monitor = one(manifests, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(monitor["metadata"]) <= {"name", "labels", "namespace", "annotations"}
    assert set(monitor["spec"]) == {"selector", "endpoints"}
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    port_names = {p["name"] for p in service["spec"]["ports"]}
    for endpoint in monitor["spec"]["endpoints"]:
        assert set(endpoint) <= {"port", "path", "interval", "scrapeTimeout"}
        assert endpoint["port"] in port_names
        assert endpoint["path"] == "/metrics"
        assert re.fullmatch(r"[0-9]+(ms|s|m|h)", endpoint["interval"])
    assert monitor["metadata"]["labels"]["release"] == "prometheus"

    rule = one(manifests, "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(rule["spec"]) == {"groups"}
    exposed = set(
        re.findall(r"^(?:# TYPE )?(opsloop_\w+)", Metrics().scrape((0, 0)).decode(), re.M)
    )
    alerts = []
    for group in rule["spec"]["groups"]:
        assert set(group) <= {"name", "interval", "rules"} and group["name"]
        for item in group["rules"]:
            assert set(item) <= {"alert", "expr", "for", "labels", "annotations"}
            assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", item["alert"])
            assert re.fullmatch(r"[0-9]+(s|m|h)", item["for"])
            assert isinstance(item["expr"], str)
            assert all(isinstance(v, str) for v in item["annotations"].values())
            used = set(re.findall(r"opsloop_\w+", item["expr"]))
            assert used and used <= exposed, f"{item['alert']}: {used - exposed} not exposed"
            assert 'job="ops-opsloop"' in item["expr"]  # the Service's name: the scrape's job
            alerts.append(item["expr"])
    # docs/operations.md's three: Redis down, approvals waiting, model errors.
    assert any("opsloop_redis_up" in e and "== 0" in e for e in alerts)
    assert any("opsloop_pending_approvals" in e and "> 0" in e for e in alerts)
    assert any("rate(opsloop_model_errors_total" in e for e in alerts)
    socket = one(rendered["socket"], "ServiceMonitor")  # Socket Mode still serves /metrics
    assert socket["spec"]["endpoints"][0]["path"] == "/metrics"


# -- the Deployment ---------------------------------------------------------------------


@functools.cache
def served_paths(*, socket: bool) -> frozenset[str]:
    """The paths the bot's HTTP app answers (``bot.slack.http.web_app``), built with
    stand-ins: only the routing table is read."""

    async def handle(request: object) -> None:
        raise AssertionError("never called: only the routing table is read")

    app = SimpleNamespace(error=lambda handler: handler, logger=logging.getLogger("chart-test"))
    alerts = SimpleNamespace(handle=handle)
    server = slack_http.web_app(
        app=app,  # type: ignore[arg-type]
        turns=None,  # type: ignore[arg-type]
        metrics=None,  # type: ignore[arg-type]
        signing_secret=None if socket else "s3cr3t",
        alerts=alerts,  # type: ignore[arg-type]
    )
    return frozenset(r.resource.canonical for r in server.router.routes() if r.resource)


@pytest.mark.parametrize("case", CASES)
def test_probes_hit_served_paths(rendered: dict[str, list[Manifest]], case: str) -> None:
    socket = values_of(case)["mode"] == "socket"
    served = served_paths(socket=socket)
    assert "/healthz" in served
    main = container(rendered[case])
    ports = {p["name"]: p["containerPort"] for p in main["ports"]}
    assert env_of(rendered[case])["PORT"] == str(values_of(case)["port"]) == str(ports["http"])
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        get = main[probe]["httpGet"]
        assert get["path"] == "/healthz", probe
        assert get["path"] in served
        assert ports[get["port"]] == values_of(case)["port"]


def test_socket_mode_runs_socket_and_has_no_ingress(rendered: dict[str, list[Manifest]]) -> None:
    socket = rendered["socket"]
    assert values_of("socket")["ingress"]["enabled"] is True  # asked for, and still none
    assert only(socket, "Ingress") == []
    assert container(socket)["args"] == ["socket"]
    env = env_of(socket)
    assert env["SLACK_APP_TOKEN"]["secretKeyRef"].get("optional") is not True
    assert "SLACK_SIGNING_SECRET" not in env
    assert env["OPSLOOP_REDIS_MODE"] == "sentinel"
    assert env["REDIS_SENTINELS"].count(",") == 2 and env["REDIS_SENTINEL_MASTER"] == "mymaster"
    assert env["REDIS_URL"]["secretKeyRef"]["optional"] is True  # sentinel: optional


def test_http_mode_serves_slack_and_the_alert_webhook(rendered: dict[str, list[Manifest]]) -> None:
    manifests = rendered["redis-cluster"]
    assert container(manifests)["args"] == ["serve"]
    assert container(rendered["default"])["args"] == ["serve"]
    ingress = one(manifests, "Ingress")
    service = one(manifests, "Service")
    paths = [p for rule in ingress["spec"]["rules"] for p in rule["http"]["paths"]]
    assert {p["path"] for p in paths} == {"/slack/events", "/alerts/alertmanager"}
    assert {p["path"] for p in paths} <= served_paths(socket=False)
    for path in paths:
        assert path["backend"]["service"]["name"] == service["metadata"]["name"]
        assert path["backend"]["service"]["port"]["number"] == service["spec"]["ports"][0]["port"]
    assert service["spec"]["ports"][0]["targetPort"] == "http"


@pytest.mark.parametrize("case", CASES)
def test_grace_period_covers_the_drain(rendered: dict[str, list[Manifest]], case: str) -> None:
    pod = one(rendered[case], "Deployment")["spec"]["template"]["spec"]
    drain = float(env_of(rendered[case])["OPSLOOP_DRAIN_S"])
    assert drain == values_of(case)["drainSeconds"]
    assert pod["terminationGracePeriodSeconds"] >= drain + 10
    assert values_of("default")["drainSeconds"] == DEFAULT_DRAIN_S


def test_the_drain_moves_the_grace_period() -> None:
    pod = one(render(None, "drainSeconds=120"), "Deployment")["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == 130


@pytest.mark.parametrize("case", CASES)
def test_rollout_never_drops_a_replica(rendered: dict[str, list[Manifest]], case: str) -> None:
    manifests = rendered[case]
    deployment = one(manifests, "Deployment")
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    selector = deployment["spec"]["selector"]["matchLabels"]
    pdb = one(manifests, "PodDisruptionBudget")
    assert pdb["spec"]["selector"]["matchLabels"] == selector
    spread = deployment["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert {c["topologyKey"] for c in spread} == {
        "kubernetes.io/hostname",
        "topology.kubernetes.io/zone",
    }
    assert all(c["labelSelector"]["matchLabels"] == selector for c in spread)
    if values_of(case)["autoscaling"]["enabled"]:
        assert "replicas" not in deployment["spec"]
        hpa = one(manifests, "HorizontalPodAutoscaler")
        assert hpa["spec"]["minReplicas"] >= 2
        assert hpa["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    else:
        assert deployment["spec"]["replicas"] == 2


@pytest.mark.parametrize("case", CASES)
def test_restricted_security_context(rendered: dict[str, list[Manifest]], case: str) -> None:
    pod = one(rendered[case], "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 10001
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    writable = {v["name"] for v in pod["volumes"] if "emptyDir" in v}
    for each in pod["containers"]:
        context = each["securityContext"]
        assert context["allowPrivilegeEscalation"] is False
        assert context["readOnlyRootFilesystem"] is True
        assert context["capabilities"] == {"drop": ["ALL"]}
        assert each["resources"]["requests"] and each["resources"]["limits"]["memory"]
        mounts = {m["mountPath"]: m for m in each.get("volumeMounts", [])}
        assert mounts["/tmp"]["name"] in writable
    main = container(rendered[case])
    for mount in main["volumeMounts"]:
        assert mount["mountPath"] == "/tmp" or mount.get("readOnly") is True
    k8s = "kubernetes" in values_of(case)["packs"]
    assert pod["automountServiceAccountToken"] is k8s


# -- secrets and configuration files --------------------------------------------------------


@pytest.mark.parametrize("case", CASES)
def test_no_secret_in_any_configmap(rendered: dict[str, list[Manifest]], case: str) -> None:
    manifests = rendered[case]
    for config in only(manifests, "ConfigMap"):
        for key, text in config.get("data", {}).items():
            assert key not in SECRET_NAMES
            assert not any(f"{name}:" in text or f"{name}=" in text for name in SECRET_NAMES), key
            assert CREDENTIAL.search(text) is None, f"{key}: {CREDENTIAL.search(text)}"
    assert only(manifests, "Secret") == []  # the chart never makes one: the user's is named
    env = env_of(manifests)
    secret_name = values_of(case)["secret"]["existingSecret"]
    for name in SECRET_NAMES:
        if name in env and not isinstance(env[name], str):
            assert env[name]["secretKeyRef"]["name"] == secret_name
        elif name in env:  # only REDIS_URL may be a value: redis.url, without a password
            assert name == "REDIS_URL" and CREDENTIAL.search(env[name]) is None
    assert env["SLACK_BOT_TOKEN"]["secretKeyRef"].get("optional") is not True
    for value in env.values():
        assert not isinstance(value, str) or CREDENTIAL.search(value) is None


def test_configuration_files_are_mounted_where_the_env_points(
    rendered: dict[str, list[Manifest]],
) -> None:
    manifests = rendered["redis-cluster"]
    env = env_of(manifests)
    files = {c["metadata"]["name"]: c["data"] for c in only(manifests, "ConfigMap")}
    pod = one(manifests, "Deployment")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in container(manifests)["volumeMounts"]}

    def content(path: str) -> dict[str, str]:
        folder = next(m for m in mounts if path == m or path.startswith(m + "/"))
        data: dict[str, str] = files[volumes[mounts[folder]]["configMap"]["name"]]
        return data

    assert yaml.safe_load(content(env["OPSLOOP_TOOLS"])["tools.yml"])["tools"][0]["name"]
    routes = yaml.safe_load(content(env["OPSLOOP_ALERTS"])["alerts.yml"])
    assert routes["default_channel"] == "C0ALERTS"
    assert "web-errors.md" in content(env["OPSLOOP_RUNBOOKS"])
    assert env["OPSLOOP_REDIS_MODE"] == "cluster" and env["OPSLOOP_REDIS_MIN_REPLICAS"] == "1"
    assert env["OPSLOOP_MAX_RUNNING_JOBS"] == "16"  # config: passed through as text
    annotations = one(manifests, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert re.fullmatch(r"[0-9a-f]{64}", annotations["checksum/config"])


def test_runbooks_from_git_sync(rendered: dict[str, list[Manifest]]) -> None:
    manifests = rendered["kubernetes-write"]
    sidecar = container(manifests, "git-sync")
    assert "--repo=https://github.com/acme/runbooks" in sidecar["args"]
    root = next(a.split("=", 1)[1] for a in sidecar["args"] if a.startswith("--root="))
    link = next(a.split("=", 1)[1] for a in sidecar["args"] if a.startswith("--link="))
    assert env_of(manifests)["OPSLOOP_RUNBOOKS"] == f"{root}/{link}/ops"
    assert only(manifests, "ConfigMap") == []


# -- the schema -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "said"),
    [
        ("mode=websocket", 'mode must be one of the following: "http", "socket"'),
        ("redis.mode=replicated", "redis.mode must be one of the following"),
        ("config.SLACK_BOT_TOKEN=xoxb-1", "a secret: put SLACK_BOT_TOKEN in the Secret"),
        ("config.PORT=8080", "set by the chart: use port instead of config.PORT"),
        ("redis.url=redis://:hunter2@redis:6379", "a URL with a password belongs in the secret"),
        ("kubernetes.write.tools={k8s_exec}", "kubernetes.write.tools.0 must be one of"),
        ("kubernetes.write.namespaces={Web_1}", "kubernetes.write.namespaces.0: Does not match"),
        ("drainSeconds=-1", "drainSeconds: Must be greater than or equal to 0"),
        ("replicas=3", "Additional property replicas is not allowed"),
        ("redis.mode=sentinel", "redis.sentinel.master: String length must be greater"),
    ],
)
def test_schema_refuses_bad_values_clearly(setting: str, said: str) -> None:
    done = helm("template", "ops", str(CHART), "--set", setting)
    assert done.returncode != 0
    assert "don't meet the specifications of the schema" in done.stderr
    assert said in done.stderr, done.stderr


def test_a_bad_values_file_fails_lint_too(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("mode: websocket\npacks: [kubernetes, kubectl]\n")
    done = helm("lint", "--strict", str(CHART), "--values", str(bad))
    assert done.returncode != 0
    assert "mode must be one of the following" in done.stdout + done.stderr
    assert "packs.1 must be one of the following" in done.stdout + done.stderr


def test_schema_knows_the_packs_and_write_tools() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    props = schema["properties"]
    assert props["packs"]["items"]["enum"] == list(PACK_TOOLS)
    write = props["kubernetes"]["properties"]["write"]["properties"]["tools"]["items"]["enum"]
    assert sorted(write) == sorted(k8s_rbac.WRITE)


# -- RBAC ---------------------------------------------------------------------------------


def granted(role: Manifest) -> set[Permission]:
    return {
        Permission(group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def read_tools() -> list[str]:
    return [t for t in PACK_TOOLS["kubernetes"] if t not in k8s_rbac.WRITE]


def test_every_kubernetes_tool_has_rbac() -> None:
    """A tool added to the pack without an entry in k8s_rbac fails here (and in
    ``k8s_rbac.needed`` below)."""
    assert set(PACK_TOOLS["kubernetes"]) == set(k8s_rbac.TOOLS)
    assert set(k8s_rbac.WRITE) == {"k8s_rollout_restart", "k8s_scale", "k8s_delete_pod"}
    assert all(k8s_rbac.TOOLS[t] for t in PACK_TOOLS["kubernetes"])
    write_verbs = {p.verb for t in k8s_rbac.WRITE for p in k8s_rbac.TOOLS[t]}
    read_verbs = {p.verb for t in read_tools() for p in k8s_rbac.TOOLS[t]}
    assert read_verbs == {"get", "list"}
    assert {"patch", "delete"} <= write_verbs


def test_the_charts_table_is_k8s_rbac() -> None:
    """``_helpers.tpl``'s per-tool table, read as YAML, against the Python module."""
    helpers = (CHART / "templates" / "_helpers.tpl").read_text()
    body = re.search(r'define "opsloop.k8sPermissions" -}}\n(.*?)\n\{\{- end', helpers, re.S)
    assert body is not None
    table = yaml.safe_load(body[1])
    as_permissions = {
        tool: {Permission(*entry.split("|")) for entry in entries}
        for tool, entries in table.items()
    }
    assert as_permissions.pop("opsloop_check") == set(k8s_rbac.CHECK)
    assert as_permissions == {tool: set(p) for tool, p in k8s_rbac.TOOLS.items()}


def test_no_rbac_without_the_kubernetes_pack(rendered: dict[str, list[Manifest]]) -> None:
    for case in ("default", "socket", "redis-cluster"):
        kinds = {m["kind"] for m in rendered[case]}
        assert not kinds & {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}


def test_rbac_is_exactly_what_the_enabled_tools_need(rendered: dict[str, list[Manifest]]) -> None:
    manifests = rendered["kubernetes-write"]
    values = values_of("kubernetes-write")
    account = one(manifests, "ServiceAccount")["metadata"]["name"]
    pod = one(manifests, "Deployment")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == account

    cluster_role = one(manifests, "ClusterRole")
    assert granted(cluster_role) == k8s_rbac.needed(read_tools(), check=True)
    assert {p.verb for p in granted(cluster_role)} == {"get", "list"}
    binding = one(manifests, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == cluster_role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}
    ]

    write = values["kubernetes"]["write"]
    assert len(write["namespaces"]) == 2 and write["tools"]
    expected = k8s_rbac.namespaced(k8s_rbac.needed(write["tools"]))
    roles = {r["metadata"]["namespace"]: r for r in only(manifests, "Role")}
    assert sorted(roles) == sorted(write["namespaces"])
    for namespace, role in roles.items():
        assert granted(role) == expected, namespace
    not_enabled = set(k8s_rbac.WRITE) - set(write["tools"])
    assert not_enabled  # the case leaves one write tool out: its verbs must be absent
    for tool in not_enabled:
        assert not (k8s_rbac.TOOLS[tool] - k8s_rbac.needed(write["tools"])) & expected
    assert not any(p.verb == "delete" for r in roles.values() for p in granted(r))
    bindings = {b["metadata"]["namespace"]: b for b in only(manifests, "RoleBinding")}
    assert sorted(bindings) == sorted(write["namespaces"])
    for namespace, bound in bindings.items():
        assert bound["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": roles[namespace]["metadata"]["name"],
        }
        assert bound["subjects"][0]["name"] == account
    env = env_of(manifests)
    assert env["OPSLOOP_K8S_NAMESPACES"] == ",".join(values["kubernetes"]["namespaces"])
    assert "kubernetes" in env["OPSLOOP_PACKS"].split(",")


def test_every_write_tool_in_one_namespace() -> None:
    manifests = render(
        VALUES / "kubernetes-write.yaml",
        "kubernetes.write.namespaces={web}",
        "kubernetes.write.tools={k8s_rollout_restart,k8s_scale,k8s_delete_pod}",
    )
    role = one(manifests, "Role")
    assert role["metadata"]["namespace"] == "web"
    assert granted(role) == k8s_rbac.namespaced(k8s_rbac.needed(k8s_rbac.WRITE))
    assert Permission("", "pods", "delete") in granted(role)


def test_reading_only_is_the_default_for_the_pack() -> None:
    manifests = render(None, "packs={kubernetes}")
    assert only(manifests, "Role") == only(manifests, "RoleBinding") == []
    assert granted(one(manifests, "ClusterRole")) == k8s_rbac.needed(read_tools(), check=True)


# -- NOTES.txt ------------------------------------------------------------------------------


def notes(tmp_path: Path, values: Path | None) -> str:
    """NOTES.txt as ``helm install`` prints it (``helm template`` leaves it out): a copy of
    the chart with one more template rendering it through ``tpl``."""
    copy = tmp_path / "chart"
    shutil.copytree(CHART, copy)
    (copy / "notes.txt").write_text((CHART / "templates" / "NOTES.txt").read_text())
    (copy / "templates" / "notes-test.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\n"
        'data:\n  notes: |\n    {{- tpl (.Files.Get "notes.txt") . | nindent 4 }}\n'
    )
    done = helm(
        "template",
        RELEASE,
        str(copy),
        "--namespace",
        NAMESPACE,
        "--show-only",
        "templates/notes-test.yaml",
        *values_args(values),
    )
    assert done.returncode == 0, done.stderr
    text: str = yaml.safe_load(done.stdout)["data"]["notes"]
    return text


def test_notes_say_what_to_do_next(tmp_path: Path) -> None:
    http = notes(tmp_path / "http", CASES["redis-cluster"])
    check = f"kubectl -n {NAMESPACE} exec deploy/{RELEASE}-opsloop -c opsloop -- opsloop check"
    assert check in http
    assert "https://opsloop.example.com/slack/events" in http
    assert "https://opsloop.example.com/alerts/alertmanager" in http
    socket = notes(tmp_path / "socket", CASES["socket"])
    assert check + " --mode socket" in socket
    assert "SLACK_APP_TOKEN" in socket and "/slack/events" not in socket
    default = notes(tmp_path / "default", None)
    assert "https://<your host>/slack/events" in default
    assert "anyone in the workspace may approve a change" in default
    k8s = notes(tmp_path / "k8s", CASES["kubernetes-write"])
    assert "may change web, payments only, with k8s_rollout_restart, k8s_scale" in k8s
    in_cluster = f"http://{RELEASE}-opsloop.{NAMESPACE}.svc:80/alerts/alertmanager"
    assert in_cluster in socket and in_cluster in default and in_cluster not in http
    steps = [line for line in http.splitlines() if re.match(r"[0-9]\. ", line)]
    assert [s[:2] for s in steps] == ["1.", "2.", "3.", "4."]
    assert "rollout status" in http.split("2. ")[0]  # ready before the exec

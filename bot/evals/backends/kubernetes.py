"""The ``kubernetes`` eval backend: the fake Kubernetes API server, a healthy small cluster,
and the incidents its faults add to it.

``start`` serves :func:`baseline` (three nodes; namespaces ``web``, ``payments`` and
``shop`` with two healthy deployments each, their pods and services) from
``bot.emulator.kube_api.FakeKube`` over TLS on a free loopback port, writes a kubeconfig
under the backend's folder and hands the ``kubernetes`` pack ``KUBECONFIG`` (the pack's
client reads it from the process environment at its first call, not when it is built).

Each fault adds one story to the cluster the server serves, built at the moment it is
injected so ages read as they would: the objects, container statuses, events and logs a
responder would find. Faults and their parameters (``with:``), with the defaults:

* ``crashloop_bad_env`` (namespace shop, deployment checkout, var PAYMENTS_API_URL): a
  rollout of a new version whose pod crash-loops, its log a ``KeyError`` on the env var;
* ``oomkilled`` (payments/ledger, limit 256Mi): a pod OOMKilled (exit 137) over and over,
  its previous log's memory growing to the limit;
* ``image_pull_backoff`` (shop/cart, tag v4.3.0): a rollout to an image that does not
  exist, the new pod in ``ImagePullBackOff``;
* ``stuck_rollout`` (web/api): ``ProgressDeadlineExceeded``, the new ReplicaSet's pod
  running but never ready (its readiness probe answers 503: a migration not applied),
  the old pods serving;
* ``pending_resources`` (payments/fraud-model, cpu 6): a new deployment whose pods stay
  ``Pending``: "0/3 nodes are available: 3 Insufficient cpu";
* ``wedged_pod`` (web/api): one pod running but not ready for half an hour, its worker
  threads deadlocked (the other replica serving): the pod a person would delete.

Facts every fault yields: ``namespace``, ``deployment``, ``pod`` (the pod to look at);
some add more (``image``, ``var``, ``limit``, ``cpu_request``, ``replicaset``).

Exit and ``reset`` put a fresh baseline in place (whatever a case's approved deletes or
scales did vanishes); the server, its port and kubeconfig stay. ``FakeKube.requests``
records what the tools asked (tests read it through :attr:`KubernetesBackend.kube`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

from bot.emulator.kube_api import FakeKube
from bot.emulator.kube_fixtures import (
    NODES,
    Cluster,
    Involved,
    Json,
    Workload,
    deployment,
    namespace_object,
    node,
    pod,
    rfc3339,
    running_status,
    service,
    suffix,
)
from bot.evals.backends.base import BackendError, Facts, Reach

CONTEXT = "kind-prod"
SECOND, MINUTE, HOUR, DAY = (
    timedelta(seconds=1),
    timedelta(minutes=1),
    timedelta(hours=1),
    timedelta(days=1),
)

# (namespace, deployment, image, cluster IP of its service)
APPS: tuple[tuple[str, str, str, str], ...] = (
    ("web", "frontend", "registry.example/frontend:8.0.1", "10.96.12.41"),
    ("web", "api", "registry.example/api:1.14.2", "10.96.12.40"),
    ("payments", "payments-api", "registry.example/payments-api:3.4.0", "10.96.30.7"),
    ("payments", "ledger", "registry.example/ledger:2.1.0", "10.96.30.9"),
    ("shop", "checkout", "registry.example/checkout:2.7.3", "10.96.40.5"),
    ("shop", "cart", "registry.example/cart:4.2.0", "10.96.40.6"),
)
REPLICAS = 2
NAMESPACE_NAMES = ("default", "web", "payments", "shop")
NODE_CPU = "4"


def utc_now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def replica_set(app: str, revision: int) -> str:
    """A deployment's ReplicaSet of ``revision``, named as the controller would."""
    return f"{app}-{suffix(f'{app}#{revision}', 9)}"


def pod_name(rs: str, index: int) -> str:
    return f"{rs}-{suffix(f'{rs}/{index}')}"


def stamp(moment: datetime) -> str:
    """A log line's time, as the apps write it."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


@dataclass
class Builder:
    """A cluster built at ``now``: pod IPs handed out per node as pods are added."""

    now: datetime
    cluster: Cluster = field(default_factory=Cluster)
    ips: dict[str, int] = field(default_factory=lambda: dict.fromkeys(NODES, 10))

    def ip(self, node_name: str) -> str:
        self.ips[node_name] += 1
        return f"10.244.{NODES.index(node_name)}.{self.ips[node_name]}"

    def add_pod(
        self,
        workload: Workload,
        name: str,
        *,
        created: datetime,
        node_name: str | None,
        status: Json | None = None,
        phase: str = "Running",
        ready: bool = True,
        memory: str = "512Mi",
    ) -> Json:
        made = pod(
            workload,
            name,
            now=self.now,
            created=created,
            node_name=node_name,
            ip=self.ip(node_name) if node_name else None,
            status=status,
            phase=phase,
            ready=ready,
            memory=memory,
        )
        self.cluster.add("pods", made)
        return made

    def healthy_pods(self, workload: Workload, *, count: int, created: datetime) -> list[str]:
        _, rs = workload.controller
        names = []
        for i in range(count):
            name = pod_name(rs, i)
            self.add_pod(workload, name, created=created + i * MINUTE, node_name=NODES[i % 3])
            names.append(name)
        return names

    def events(self, *events: Json) -> None:
        for event in events:
            self.cluster.add("events", event)


def baseline(now: datetime) -> Cluster:
    """The healthy cluster every case starts from (see the module docstring)."""
    b = Builder(now)
    for name in NAMESPACE_NAMES:
        b.cluster.add("namespaces", namespace_object(name, now - 90 * DAY))
    for i, name in enumerate(NODES):
        made = node(name, now, i)
        for which in ("capacity", "allocatable"):  # small nodes: 4 cores, 16 GiB
            made["status"][which].update(cpu=NODE_CPU, memory="16393216Ki")
        b.cluster.add("nodes", made)
    b.cluster.add(
        "services",
        service(
            "default",
            "kubernetes",
            created=now - 90 * DAY,
            kind="ClusterIP",
            cluster_ip="10.96.0.1",
            ports=[{"name": "https", "port": 443, "targetPort": 6443}],
        ),
    )
    for namespace, app, image, cluster_ip in APPS:
        created = now - 40 * DAY
        b.cluster.add(
            "deployments",
            deployment(
                namespace,
                app,
                now=now,
                created=created,
                image=image,
                replicas=REPLICAS,
                ready=REPLICAS,
            ),
        )
        workload = Workload(namespace, app, image, ("ReplicaSet", replica_set(app, 1)))
        b.healthy_pods(workload, count=REPLICAS, created=now - 6 * DAY)
        b.cluster.add(
            "services",
            service(
                namespace,
                app,
                created=created,
                kind="ClusterIP",
                cluster_ip=cluster_ip,
                ports=[{"name": "http", "port": 80, "targetPort": 8080}],
                selector={"app": app},
            ),
        )
    return b.cluster


# -- the stories ---------------------------------------------------------------------


def _image_of(cluster: Cluster, namespace: str, app: str) -> str:
    found = cluster.get("deployments", namespace, app)
    if found is None:
        raise BackendError(f"kubernetes: no deployment {namespace}/{app} in the baseline")
    return str(found["spec"]["template"]["spec"]["containers"][0]["image"])


def _next_version(image: str) -> str:
    """``repo:1.14.2`` → ``repo:1.15.0`` (the version a rollout brings)."""
    repo, _, tag = image.rpartition(":")
    parts = tag.split(".")
    if len(parts) == 3 and all(p.isdigit() for p in parts):
        return f"{repo}:{parts[0]}.{int(parts[1]) + 1}.0"
    return f"{repo}:{tag}-next"


def _rolling(
    b: Builder,
    namespace: str,
    app: str,
    new_image: str,
    *,
    started: timedelta,
    progressing: Json,
    new_ready: int = 0,
) -> tuple[Workload, Workload, Json]:
    """``app`` mid-rollout to ``new_image``: the old ReplicaSet's pods still serving, the
    deployment's template the new one; (old, new, the deployment)."""
    now = b.now
    old = b.cluster.need("deployments", namespace, app)
    old_image = _image_of(b.cluster, namespace, app)
    since = rfc3339(now - started)
    made = deployment(
        namespace,
        app,
        now=now,
        created=now - 40 * DAY,
        image=new_image,
        replicas=REPLICAS,
        ready=REPLICAS + new_ready,
        updated=1,
        conditions=[
            {
                "type": "Available",
                "status": "True",
                "reason": "MinimumReplicasAvailable",
                "message": "Deployment has minimum availability.",
                "lastUpdateTime": since,
                "lastTransitionTime": since,
            },
            progressing,
        ],
    )
    made["metadata"]["generation"] = int(old["metadata"]["generation"]) + 1
    made["metadata"]["annotations"] = {"deployment.kubernetes.io/revision": "2"}
    made["status"]["observedGeneration"] = made["metadata"]["generation"]
    made["status"]["replicas"] = REPLICAS + 1
    made["status"]["readyReplicas"] = REPLICAS + new_ready
    made["status"]["availableReplicas"] = REPLICAS + new_ready
    made["status"]["unavailableReplicas"] = 1 - new_ready
    b.cluster.add("deployments", made)
    old_rs = Workload(namespace, app, old_image, ("ReplicaSet", replica_set(app, 1)))
    new_rs = Workload(namespace, app, new_image, ("ReplicaSet", replica_set(app, 2)))
    deploy = Involved(now, namespace, ("Deployment", app), "deployment-controller")
    b.events(
        deploy.event(
            "ScalingReplicaSet",
            f"Scaled up replica set {new_rs.controller[1]} to 1",
            last=started,
        )
    )
    return old_rs, new_rs, made


def _progressing(rs: str, started: timedelta, now: datetime) -> Json:
    since = rfc3339(now - started)
    return {
        "type": "Progressing",
        "status": "True",
        "reason": "ReplicaSetUpdated",
        "message": f'ReplicaSet "{rs}" is progressing.',
        "lastUpdateTime": since,
        "lastTransitionTime": since,
    }


def _crash_status(
    container: str,
    image: str,
    *,
    now: datetime,
    restarts: int,
    reason: str,
    exit_code: int,
    ran: timedelta,
    crashed: timedelta,
    pod_name_: str,
    namespace: str,
) -> Json:
    status = running_status(container, image, now - crashed, restarts=restarts)
    status.update(
        ready=False,
        started=False,
        state={
            "waiting": {
                "reason": "CrashLoopBackOff",
                "message": f"back-off 5m0s restarting failed container={container} "
                f"pod={pod_name_}_{namespace}({suffix(pod_name_, 8)})",
            }
        },
        lastState={
            "terminated": {
                "exitCode": exit_code,
                "reason": reason,
                "startedAt": rfc3339(now - crashed - ran),
                "finishedAt": rfc3339(now - crashed),
                "containerID": "containerd://" + suffix(pod_name_ + "c", 64),
            }
        },
    )
    return status


def _crashloop_events(
    now: datetime, namespace: str, name: str, image: str, restarts: int, since: timedelta
) -> list[Json]:
    crash = Involved(now, namespace, ("Pod", name))
    scheduler = Involved(now, namespace, ("Pod", name), "default-scheduler")
    return [
        scheduler.event(
            "Scheduled", f"Successfully assigned {namespace}/{name} to node-b", last=since
        ),
        crash.event(
            "Pulled",
            f'Container image "{image}" already present on machine',
            last=2 * MINUTE,
            first=since,
            count=restarts + 1,
        ),
        crash.event(
            "Created", "Created container app", last=2 * MINUTE, first=since, count=restarts + 1
        ),
        crash.event(
            "Started", "Started container app", last=2 * MINUTE, first=since, count=restarts + 1
        ),
        crash.event(
            "BackOff",
            f"Back-off restarting failed container app in pod {name}_{namespace}"
            f"({suffix(name, 8)})",
            last=20 * SECOND,
            first=since - 2 * MINUTE,
            count=restarts * 4 + 3,
            warning=True,
        ),
    ]


def crashloop_bad_env(b: Builder, params: Mapping[str, Any]) -> dict[str, str]:
    namespace = str(params.get("namespace", "shop"))
    app = str(params.get("deployment", "checkout"))
    var = str(params.get("var", "PAYMENTS_API_URL"))
    now = b.now
    old_image = _image_of(b.cluster, namespace, app)
    new_image = _next_version(old_image)
    version = new_image.rpartition(":")[2]
    started = 14 * MINUTE
    _, new_rs, made = _rolling(
        b,
        namespace,
        app,
        new_image,
        started=started,
        progressing=_progressing(replica_set(app, 2), started, now),
    )
    made["spec"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "LOG_LEVEL", "value": "info"},
        {"name": "PORT", "value": "8080"},
    ]
    name = pod_name(new_rs.controller[1], 0)
    restarts = 7
    status = _crash_status(
        "app",
        new_image,
        now=now,
        restarts=restarts,
        reason="Error",
        exit_code=1,
        ran=2 * SECOND,
        crashed=90 * SECOND,
        pod_name_=name,
        namespace=namespace,
    )
    made_pod = b.add_pod(
        new_rs, name, created=now - started, node_name="node-b", status=status, ready=False
    )
    made_pod["spec"]["containers"][0]["env"] = made["spec"]["template"]["spec"]["containers"][0][
        "env"
    ]

    def crash_log(at: datetime) -> str:
        return "\n".join(
            [
                f"{stamp(at)} INFO  {app} {version} starting (pid 1)",
                f"{stamp(at + timedelta(milliseconds=180))} INFO  loading settings from "
                "the environment",
                "Traceback (most recent call last):",
                f'  File "/app/{app}/main.py", line 14, in <module>',
                "    settings = Settings.from_env()",
                f'  File "/app/{app}/settings.py", line 41, in from_env',
                f'    {var.lower()} = os.environ["{var}"]',
                '  File "<frozen os>", line 679, in __getitem__',
                f"KeyError: '{var}'",
                f"{stamp(at + timedelta(milliseconds=410))} FATAL missing required env var "
                f"{var}; refusing to start",
            ]
        )

    # A container waiting to restart: its current log is that of the run that crashed.
    b.cluster.logs[(namespace, name, "app", True)] = crash_log(now - 92 * SECOND)
    b.cluster.logs[(namespace, name, "app", False)] = crash_log(now - 92 * SECOND)
    b.events(*_crashloop_events(now, namespace, name, new_image, restarts, started))
    return {
        "namespace": namespace,
        "deployment": app,
        "pod": name,
        "var": var,
        "image": new_image,
        "replicaset": new_rs.controller[1],
    }


def oomkilled(b: Builder, params: Mapping[str, Any]) -> dict[str, str]:
    namespace = str(params.get("namespace", "payments"))
    app = str(params.get("deployment", "ledger"))
    limit = str(params.get("limit", "256Mi"))
    now = b.now
    image = _image_of(b.cluster, namespace, app)
    made = b.cluster.need("deployments", namespace, app)
    resources = {
        "limits": {"memory": limit, "cpu": "500m"},
        "requests": {"memory": limit, "cpu": "250m"},
    }
    made["spec"]["template"]["spec"]["containers"][0]["resources"] = resources
    made["status"].update(readyReplicas=REPLICAS - 1, availableReplicas=REPLICAS - 1)
    made["status"]["unavailableReplicas"] = 1
    rs = Workload(namespace, app, image, ("ReplicaSet", replica_set(app, 1)))
    name = pod_name(rs.controller[1], 0)
    other = pod_name(rs.controller[1], 1)
    restarts = 6
    status = _crash_status(
        "app",
        image,
        now=now,
        restarts=restarts,
        reason="OOMKilled",
        exit_code=137,
        ran=3 * MINUTE + 12 * SECOND,
        crashed=2 * MINUTE,
        pod_name_=name,
        namespace=namespace,
    )
    for which, state in ((name, status), (other, None)):
        existing = b.cluster.need("pods", namespace, which)
        if state is None:  # the other replica: OOMKilled once, running again
            state = running_status("app", image, now - 35 * MINUTE, restarts=1)
            state["lastState"] = {
                "terminated": {
                    "exitCode": 137,
                    "reason": "OOMKilled",
                    "startedAt": rfc3339(now - 39 * MINUTE),
                    "finishedAt": rfc3339(now - 35 * MINUTE),
                }
            }
            existing["status"]["containerStatuses"] = [state]
        else:
            replaced = pod(
                rs,
                name,
                now=now,
                created=now - 6 * DAY,
                node_name="node-a",
                ip=existing["status"]["podIP"],
                status=state,
                ready=False,
                memory=limit,
            )
            b.cluster.add("pods", replaced)
            existing = replaced
        existing["spec"]["containers"][0]["resources"] = resources
    start = now - 2 * MINUTE - 3 * MINUTE - 12 * SECOND
    lines = [
        f"{stamp(start)} INFO  {app} {image.rpartition(':')[2]} starting, "
        f"memory limit {limit} (cgroup)",
        f"{stamp(start + SECOND)} INFO  reconciliation: loading unsettled entries since "
        "2 days ago (month-end batch)",
    ]
    rss = 88
    for i in range(15):
        rss += 10 + i % 3
        at = start + (10 + i * 11) * SECOND
        lines.append(
            f"{stamp(at)} INFO  reconciliation: {(i + 1) * 25_000:,} entries in memory, rss {rss}Mi"
        )
    lines.append(
        f"{stamp(start + 186 * SECOND)} WARN  rss {rss + 1}Mi of {limit} limit, gc cannot "
        "free the entry cache"
    )
    b.cluster.logs[(namespace, name, "app", True)] = "\n".join(lines)
    b.cluster.logs[(namespace, name, "app", False)] = "\n".join(lines[:4])
    events = _crashloop_events(now, namespace, name, image, restarts, 40 * MINUTE)
    events = [e for e in events if e["reason"] != "Scheduled"]
    kernel = Involved(now, "default", ("Node", "node-a"), "kernel-monitor", involved_namespace="")
    events.append(
        kernel.event(
            "OOMKilling",
            "Memory cgroup out of memory: Killed process 48117 "
            f"({app}) total-vm:1893220kB, anon-rss:262144kB, file-rss:0kB, shmem-rss:0kB, "
            "UID:1000 pgtables:812kB oom_score_adj:984",
            last=2 * MINUTE,
            first=40 * MINUTE,
            count=restarts + 1,
            warning=True,
        )
    )
    b.events(*events)
    return {"namespace": namespace, "deployment": app, "pod": name, "limit": limit}


def image_pull_backoff(b: Builder, params: Mapping[str, Any]) -> dict[str, str]:
    namespace = str(params.get("namespace", "shop"))
    app = str(params.get("deployment", "cart"))
    tag = str(params.get("tag", "v4.3.0"))
    now = b.now
    old_image = _image_of(b.cluster, namespace, app)
    new_image = f"{old_image.rpartition(':')[0]}:{tag}"
    started = 9 * MINUTE
    _, new_rs, _ = _rolling(
        b,
        namespace,
        app,
        new_image,
        started=started,
        progressing=_progressing(replica_set(app, 2), started, now),
    )
    name = pod_name(new_rs.controller[1], 0)
    waiting = running_status("app", new_image, now, restarts=0)
    del waiting["imageID"], waiting["containerID"]
    waiting.update(
        ready=False,
        started=False,
        state={
            "waiting": {
                "reason": "ImagePullBackOff",
                "message": f'Back-off pulling image "{new_image}"',
            }
        },
    )
    b.add_pod(
        new_rs,
        name,
        created=now - started,
        node_name="node-c",
        phase="Pending",
        status=waiting,
        ready=False,
    )
    kubelet = Involved(now, namespace, ("Pod", name))
    scheduler = Involved(now, namespace, ("Pod", name), "default-scheduler")
    not_found = (
        f'Failed to pull image "{new_image}": rpc error: code = NotFound desc = failed to '
        f'pull and unpack image "{new_image}": failed to resolve reference "{new_image}": '
        f"{new_image}: not found"
    )
    b.events(
        scheduler.event(
            "Scheduled", f"Successfully assigned {namespace}/{name} to node-c", last=started
        ),
        kubelet.event(
            "Pulling", f'Pulling image "{new_image}"', last=3 * MINUTE, first=started, count=6
        ),
        kubelet.event("Failed", not_found, last=3 * MINUTE, first=started, count=6, warning=True),
        kubelet.event(
            "Failed", "Error: ErrImagePull", last=3 * MINUTE, first=started, count=6, warning=True
        ),
        kubelet.event(
            "BackOff",
            f'Back-off pulling image "{new_image}"',
            last=15 * SECOND,
            first=started,
            count=34,
            warning=True,
        ),
        kubelet.event(
            "Failed",
            "Error: ImagePullBackOff",
            last=15 * SECOND,
            first=started,
            count=34,
            warning=True,
        ),
    )
    return {
        "namespace": namespace,
        "deployment": app,
        "pod": name,
        "image": new_image,
        "tag": tag,
        "replicaset": new_rs.controller[1],
    }


def _readiness(path: str) -> Json:
    return {
        "httpGet": {"path": path, "port": 8080, "scheme": "HTTP"},
        "periodSeconds": 10,
        "timeoutSeconds": 1,
        "failureThreshold": 3,
        "successThreshold": 1,
    }


def stuck_rollout(b: Builder, params: Mapping[str, Any]) -> dict[str, str]:
    namespace = str(params.get("namespace", "web"))
    app = str(params.get("deployment", "api"))
    now = b.now
    old_image = _image_of(b.cluster, namespace, app)
    new_image = _next_version(old_image)
    version = new_image.rpartition(":")[2]
    started = 38 * MINUTE
    deadline = started - 10 * MINUTE  # progressDeadlineSeconds 600
    rs = replica_set(app, 2)
    at = rfc3339(now - deadline)
    _, new_rs, made = _rolling(
        b,
        namespace,
        app,
        new_image,
        started=started,
        progressing={
            "type": "Progressing",
            "status": "False",
            "reason": "ProgressDeadlineExceeded",
            "message": f'ReplicaSet "{rs}" has timed out progressing.',
            "lastUpdateTime": at,
            "lastTransitionTime": at,
        },
    )
    probe = _readiness("/readyz")
    made["spec"]["template"]["spec"]["containers"][0]["readinessProbe"] = probe
    name = pod_name(rs, 0)
    status = running_status("app", new_image, now - started + 4 * SECOND)
    status["ready"] = False
    made_pod = b.add_pod(
        new_rs, name, created=now - started, node_name="node-a", status=status, ready=False
    )
    made_pod["spec"]["containers"][0]["readinessProbe"] = probe
    start = now - started + 4 * SECOND
    lines = [
        f"{stamp(start)} INFO  {app} {version} starting",
        f"{stamp(start + SECOND)} INFO  connected to postgres {app}-db:5432 pool=20",
        f"{stamp(start + 2 * SECOND)} WARN  database schema is at version 41; {version} "
        "needs 42 (migration 0042_add_order_index has not been applied)",
        f"{stamp(start + 2 * SECOND)} INFO  listening on :8080 (not ready until the schema "
        "is migrated)",
    ]
    for i in range(12):
        at_probe = now - (12 - i) * 10 * SECOND
        lines.append(
            f"{stamp(at_probe)} WARN  GET /readyz 503 2ms: schema version 41 < required 42"
        )
    b.cluster.logs[(namespace, name, "app", False)] = "\n".join(lines)
    kubelet = Involved(now, namespace, ("Pod", name))
    scheduler = Involved(now, namespace, ("Pod", name), "default-scheduler")
    deploy = Involved(now, namespace, ("Deployment", app), "deployment-controller")
    b.events(
        scheduler.event(
            "Scheduled", f"Successfully assigned {namespace}/{name} to node-a", last=started
        ),
        kubelet.event("Pulled", f'Container image "{new_image}" pulled', last=started),
        kubelet.event("Started", "Started container app", last=started - 3 * SECOND),
        kubelet.event(
            "Unhealthy",
            "Readiness probe failed: HTTP probe failed with statuscode: 503",
            last=8 * SECOND,
            first=started - 6 * SECOND,
            count=226,
            warning=True,
        ),
        deploy.event(
            "ProgressDeadlineExceeded",
            f'Deployment "{app}" has timed out progressing: ReplicaSet "{rs}" has timed out '
            "progressing.",
            last=deadline,
            warning=True,
        ),
    )
    return {
        "namespace": namespace,
        "deployment": app,
        "pod": name,
        "replicaset": rs,
        "image": new_image,
    }


INSUFFICIENT_CPU = (
    "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available: "
    "3 No preemption victims found for incoming pod."
)


def pending_resources(b: Builder, params: Mapping[str, Any]) -> dict[str, str]:
    namespace = str(params.get("namespace", "payments"))
    app = str(params.get("deployment", "fraud-model"))
    cpu = str(params.get("cpu", "6"))
    now = b.now
    image = f"registry.example/{app}:1.0.0"
    created = now - 32 * MINUTE
    made = deployment(
        namespace, app, now=now, created=created, image=image, replicas=REPLICAS, ready=0
    )
    since = rfc3339(created + 10 * SECOND)
    made["status"]["conditions"] = [
        {
            "type": "Available",
            "status": "False",
            "reason": "MinimumReplicasUnavailable",
            "message": "Deployment does not have minimum availability.",
            "lastUpdateTime": since,
            "lastTransitionTime": since,
        },
        {
            "type": "Progressing",
            "status": "False",
            "reason": "ProgressDeadlineExceeded",
            "message": f'ReplicaSet "{replica_set(app, 1)}" has timed out progressing.',
            "lastUpdateTime": rfc3339(created + 10 * MINUTE),
            "lastTransitionTime": rfc3339(created + 10 * MINUTE),
        },
    ]
    made["status"]["observedGeneration"] = made["metadata"]["generation"] = 1
    made["status"]["updatedReplicas"] = REPLICAS
    resources = {
        "requests": {"cpu": cpu, "memory": "4Gi"},
        "limits": {"cpu": cpu, "memory": "4Gi"},
    }
    made["spec"]["template"]["spec"]["containers"][0]["resources"] = resources
    b.cluster.add("deployments", made)
    rs = Workload(namespace, app, image, ("ReplicaSet", replica_set(app, 1)))
    names = []
    for i in range(REPLICAS):
        name = pod_name(rs.controller[1], i)
        names.append(name)
        made_pod = b.add_pod(
            rs, name, created=created + 2 * SECOND, node_name=None, phase="Pending", ready=False
        )
        made_pod["spec"]["containers"][0]["resources"] = resources
        made_pod["status"]["conditions"][0]["message"] = INSUFFICIENT_CPU
        made_pod["status"]["qosClass"] = "Guaranteed"
        scheduler = Involved(now, namespace, ("Pod", name), "default-scheduler")
        b.events(
            scheduler.event(
                "FailedScheduling",
                INSUFFICIENT_CPU,
                last=(2 + i) * MINUTE,
                first=32 * MINUTE,
                count=9,
                warning=True,
            )
        )
    deploy = Involved(now, namespace, ("Deployment", app), "deployment-controller")
    b.events(
        deploy.event(
            "ScalingReplicaSet",
            f"Scaled up replica set {rs.controller[1]} to {REPLICAS}",
            last=32 * MINUTE,
        )
    )
    return {
        "namespace": namespace,
        "deployment": app,
        "pod": min(names),  # the first listed
        "cpu_request": cpu,
        "replicaset": rs.controller[1],
    }


def wedged_pod(b: Builder, params: Mapping[str, Any]) -> dict[str, str]:
    namespace = str(params.get("namespace", "web"))
    app = str(params.get("deployment", "api"))
    now = b.now
    image = _image_of(b.cluster, namespace, app)
    made = b.cluster.need("deployments", namespace, app)
    made["status"].update(readyReplicas=REPLICAS - 1, availableReplicas=REPLICAS - 1)
    made["status"]["unavailableReplicas"] = 1
    rs = Workload(namespace, app, image, ("ReplicaSet", replica_set(app, 1)))
    name = pod_name(rs.controller[1], 0)
    existing = b.cluster.need("pods", namespace, name)
    status = running_status("app", image, now - 6 * DAY)
    status["ready"] = False
    replaced = pod(
        rs,
        name,
        now=now,
        created=now - 6 * DAY,
        node_name="node-a",
        ip=existing["status"]["podIP"],
        status=status,
        ready=False,
    )
    replaced["spec"]["containers"][0]["readinessProbe"] = _readiness("/readyz")
    for cond in replaced["status"]["conditions"]:
        if cond["type"] in ("Ready", "ContainersReady"):
            cond["lastTransitionTime"] = rfc3339(now - 31 * MINUTE)
    b.cluster.add("pods", replaced)
    stuck = now - 31 * MINUTE
    lines = [
        f"{stamp(stuck - 2 * MINUTE + i * 7 * SECOND)} INFO  GET /v1/orders 200 {31 + i}ms"
        for i in range(10)
    ]
    lines += [
        f"{stamp(stuck)} WARN  worker pool: 64/64 threads busy, 212 requests queued",
        f"{stamp(stuck + SECOND)} ERROR deadlock detected: thread order-sync-3 holds "
        "lock cache-refresh and waits for db-pool; 63 threads wait for cache-refresh",
    ]
    lines += [
        f"{stamp(stuck + (i + 1) * 5 * MINUTE)} WARN  worker pool: 64/64 threads blocked on "
        "cache-refresh, 0 requests served in 5m"
        for i in range(6)
    ]
    b.cluster.logs[(namespace, name, "app", False)] = "\n".join(lines)
    kubelet = Involved(now, namespace, ("Pod", name))
    b.events(
        kubelet.event(
            "Unhealthy",
            'Readiness probe failed: Get "http://'
            f'{existing["status"]["podIP"]}:8080/readyz": context deadline exceeded '
            "(Client.Timeout exceeded while awaiting headers)",
            last=6 * SECOND,
            first=31 * MINUTE,
            count=186,
            warning=True,
        )
    )
    return {"namespace": namespace, "deployment": app, "pod": name}


Story = Callable[[Builder, Mapping[str, Any]], dict[str, str]]
STORIES: Mapping[str, Story] = {
    "crashloop_bad_env": crashloop_bad_env,
    "oomkilled": oomkilled,
    "image_pull_backoff": image_pull_backoff,
    "stuck_rollout": stuck_rollout,
    "pending_resources": pending_resources,
    "wedged_pod": wedged_pod,
}
PARAMS: Mapping[str, frozenset[str]] = {
    "crashloop_bad_env": frozenset({"namespace", "deployment", "var"}),
    "oomkilled": frozenset({"namespace", "deployment", "limit"}),
    "image_pull_backoff": frozenset({"namespace", "deployment", "tag"}),
    "stuck_rollout": frozenset({"namespace", "deployment"}),
    "pending_resources": frozenset({"namespace", "deployment", "cpu"}),
    "wedged_pod": frozenset({"namespace", "deployment"}),
}


def with_fault(now: datetime, name: str, params: Mapping[str, Any]) -> tuple[Cluster, Facts]:
    """The baseline at ``now`` with fault ``name``'s story added, and its facts."""
    story = STORIES.get(name)
    if story is None:
        raise BackendError(f"kubernetes: no fault {name!r} (known: {', '.join(STORIES)})")
    unknown = set(params) - PARAMS[name]
    if unknown:
        raise BackendError(
            f"kubernetes: fault {name!r} takes {', '.join(sorted(PARAMS[name]))}, "
            f"not {', '.join(sorted(unknown))}"
        )
    b = Builder(now)
    b.cluster = baseline(now)
    b.ips = {n: 10 + REPLICAS * len(APPS) for n in NODES}  # past the baseline's
    facts = story(b, params)
    return b.cluster, facts


class KubernetesBackend:
    """See the module docstring."""

    kind: ClassVar[str] = "kubernetes"
    faults: ClassVar[tuple[str, ...]] = tuple(STORIES)

    def __init__(self, clock: Callable[[], datetime] = utc_now) -> None:
        self.clock = clock
        self._kube: FakeKube | None = None

    @property
    def kube(self) -> FakeKube:
        """The running fake API server (its ``requests``, its ``cluster``)."""
        if self._kube is None:
            raise BackendError("kubernetes: the backend is not started")
        return self._kube

    async def start(self, folder: Path) -> Reach:
        kube = FakeKube(baseline(self.clock()), clock=lambda: datetime.now(UTC))
        try:
            await kube.start()
        except OSError as exc:
            raise BackendError(f"kubernetes: the fake API server did not start: {exc}") from exc
        self._kube = kube
        config = kube.kubeconfig(folder / "kube" / "config", context=CONTEXT)
        return Reach(
            packs=("kubernetes",),
            pack_config={"k8s_context": CONTEXT, "k8s_namespaces": ()},
            environ={"KUBECONFIG": str(config)},
        )

    def _serve(self, cluster: Cluster) -> None:
        """Serve ``cluster`` from now on (the server's object layer keeps its ``Cluster``,
        so its contents are swapped in place)."""
        served = self.kube.cluster
        served.objects, served.logs = cluster.objects, cluster.logs

    @asynccontextmanager
    async def fault(self, name: str, params: Mapping[str, Any]) -> AsyncIterator[Facts]:
        cluster, facts = with_fault(self.clock(), name, params)
        self._serve(cluster)
        try:
            yield facts
        finally:
            if self._kube is not None:
                self._serve(baseline(self.clock()))

    async def reset(self) -> None:
        self._serve(baseline(self.clock()))
        self.kube.requests.clear()
        self.kube.answer_bytes.clear()

    async def stop(self) -> None:
        kube, self._kube = self._kube, None
        if kube is not None:
            await kube.stop()

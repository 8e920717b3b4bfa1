"""The incident cluster the kubernetes pack's tests and benchmark run against (see
``bot.emulator.kube_fixtures`` for what it holds), and the container logs it serves.

:func:`incident_cluster` builds it one story at a time, always in the same order (pod IPs
are handed out as pods are added); its events are ``bot.emulator.kube_incident_events``'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Unpack

from bot.emulator.kube_fixtures import (
    EVICTED,
    NAMESPACES,
    NODES,
    Cluster,
    PodState,
    Workload,
    deployment,
    namespace_object,
    node,
    pod,
    rfc3339,
    running_status,
    service,
    suffix,
    workload_set,
)
from bot.emulator.kube_incident_events import Culprits, incident_events

API_PREVIOUS_LOG = "\n".join(
    [
        "2026-11-30T02:58:01.112Z INFO  api starting, version 1.14.2, heap max 460m",
        "2026-11-30T02:58:01.530Z INFO  connected to postgres payments-db:5432 pool=20",
        "2026-11-30T02:58:02.004Z INFO  listening on :8080",
        *(
            f"2026-11-30T02:58:{10 + i:02d}.{i * 37 % 1000:03d}Z INFO  GET /v1/orders?page={i} 200 "
            f"{40 + i * 7}ms"
            for i in range(30)
        ),
        "2026-11-30T02:58:44.870Z WARN  cache warmup: 1,204,332 entries, heap 431m of 460m",
        "2026-11-30T02:58:47.301Z ERROR java.lang.OutOfMemoryError: Java heap space",
        "2026-11-30T02:58:47.302Z ERROR \tat com.example.orders.Cache.load(Cache.java:212)",
        "2026-11-30T02:58:47.302Z ERROR \tat com.example.orders.Warmup.run(Warmup.java:48)",
    ]
)
API_CURRENT_LOG = "\n".join(
    [
        "2026-11-30T03:01:12.001Z INFO  api starting, version 1.14.2, heap max 460m",
        "2026-11-30T03:01:12.420Z INFO  connected to postgres payments-db:5432 pool=20",
    ]
)


API_IMAGE = "registry.example/api:1.14.2"
CHECKOUT_IMAGE = "registry.example/checkout:2.3.0"
CHECKOUT_NEXT_IMAGE = "registry.example/checkout:2.3.1-rc0"  # never pushed: the rollout sticks
MINUTE, HOUR, DAY = timedelta(minutes=1), timedelta(hours=1), timedelta(days=1)


def _replica_set(namespace: str, app: str, image: str, name: str | None = None) -> Workload:
    """A deployment's ReplicaSet, named as the deployment controller names it unless
    ``name`` is given."""
    return Workload(namespace, app, image, ("ReplicaSet", name or f"{app}-{suffix(app, 9)}"))


@dataclass
class _Build:
    """The cluster being built at ``now``, and the last pod IP given out on each node
    (IPs are handed out in the order pods are added)."""

    cluster: Cluster
    now: datetime
    ips: dict[str, int] = field(default_factory=lambda: dict.fromkeys(NODES, 10))

    def pod(
        self,
        workload: Workload,
        name: str,
        *,
        created: datetime,
        node_name: str | None,
        **state: Unpack[PodState],
    ) -> None:
        """Add a pod of ``workload``; one on a node gets the node's next IP unless it failed
        (an evicted pod holds none)."""
        ip = None
        if node_name is not None and state.get("phase") != "Failed":
            ip = self._next_ip(node_name)
        made = pod(
            workload, name, now=self.now, created=created, node_name=node_name, ip=ip, **state
        )
        self.cluster.add("pods", made)

    def healthy(
        self,
        workload: Workload,
        *,
        count: int,
        created: datetime,
        nodes: tuple[str, ...] = ("node-a", "node-b"),
    ) -> None:
        """``count`` running pods of ``workload``, spread over ``nodes``."""
        _, rs = workload.controller
        for i in range(count):
            name = f"{rs}-{suffix(f'{rs}/{i}')}"
            when = created + (i % 7) * MINUTE
            self.pod(workload, name, created=when, node_name=nodes[i % len(nodes)])

    def _next_ip(self, node_name: str) -> str:
        """The next pod IP on ``node_name`` (each node has its own /24 of 10.244.0.0/16)."""
        self.ips[node_name] += 1
        return f"10.244.{NODES.index(node_name)}.{self.ips[node_name]}"


def incident_cluster(now: datetime, *, pods_per_deployment: int = 2) -> Cluster:
    """The incident the tests and the benchmark share; see the module docstring."""
    b = _Build(Cluster(), now)
    n = pods_per_deployment
    for name in NAMESPACES:
        b.cluster.add("namespaces", namespace_object(name, now - 60 * DAY))
    for i, name in enumerate(NODES):
        b.cluster.add("nodes", node(name, now, i, memory_pressure=name == "node-c"))
    api_rs, crash_looping = _api_crash_looping(b, n)
    pending = _worker_pending(b, n)
    evicted = _frontend_evicted(b, n)
    pull_failing = _checkout_stuck(b, n)
    _postgres(b)
    _log_shipper(b)
    _more_deployments(b, n)
    _services(b.cluster, now)
    culprits = Culprits(
        api_replica_set=api_rs,
        api_replicas=n + 1,
        api_image=API_IMAGE,
        crash_looping=crash_looping,
        pending=pending,
        evicted=evicted,
        pull_failing=pull_failing,
        missing_image=CHECKOUT_NEXT_IMAGE,
    )
    for e in incident_events(now, culprits):
        b.cluster.add("events", e)
    return b.cluster


def _api_crash_looping(b: _Build, n: int) -> tuple[str, str]:
    """web/api: n + 1 replicas, one crash-looping on OOM; (its replica set, that pod)."""
    now = b.now
    b.cluster.add(
        "deployments",
        deployment(
            "web", "api", now=now, created=now - 30 * DAY, image=API_IMAGE, replicas=n + 1, ready=n
        ),
    )
    api = _replica_set("web", "api", API_IMAGE)
    b.healthy(api, count=n, created=now - 3 * DAY)
    rs = api.controller[1]
    crash = f"{rs}-x2k4p"
    crashed_at = now - 2 * MINUTE
    status = running_status("app", API_IMAGE, now - 3 * HOUR, restarts=14)
    status.update(
        ready=False,
        started=False,
        state={
            "waiting": {
                "reason": "CrashLoopBackOff",
                "message": f"back-off 5m0s restarting failed container=app pod={crash}_web(…)",
            }
        },
        lastState={
            "terminated": {
                "exitCode": 137,
                "reason": "OOMKilled",
                "startedAt": rfc3339(crashed_at - timedelta(seconds=47)),
                "finishedAt": rfc3339(crashed_at),
                "containerID": "containerd://" + "c" * 64,
            }
        },
    )
    b.pod(api, crash, created=now - 3 * HOUR, node_name="node-a", status=status, ready=False)
    b.cluster.logs[("web", crash, "app", True)] = API_PREVIOUS_LOG
    b.cluster.logs[("web", crash, "app", False)] = API_CURRENT_LOG
    return rs, crash


def _worker_pending(b: _Build, n: int) -> str:
    """web/worker: one pod no node can take; that pod."""
    now = b.now
    image = "registry.example/worker:3.2.0"
    b.cluster.add(
        "deployments",
        deployment(
            "web", "worker", now=now, created=now - 20 * DAY, image=image, replicas=n, ready=n - 1
        ),
    )
    worker = _replica_set("web", "worker", image)
    b.healthy(worker, count=n - 1, created=now - 2 * DAY)
    pending = f"{worker.controller[1]}-q7tbx"
    b.pod(worker, pending, created=now - 40 * MINUTE, node_name=None, phase="Pending", memory="6Gi")
    return pending


def _frontend_evicted(b: _Build, n: int) -> str:
    """web/frontend: healthy, plus one pod evicted from node-c; that pod."""
    now = b.now
    image = "registry.example/frontend:8.0.1"
    count = max(2, n * 2)
    b.cluster.add(
        "deployments",
        deployment(
            "web",
            "frontend",
            now=now,
            created=now - 50 * DAY,
            image=image,
            replicas=count,
            ready=count,
        ),
    )
    frontend = _replica_set("web", "frontend", image)
    b.healthy(frontend, count=count, created=now - 5 * DAY)
    evicted = f"{frontend.controller[1]}-r2t6w"
    b.pod(
        frontend,
        evicted,
        created=now - 5 * DAY,
        node_name="node-c",
        phase="Failed",
        extra={"reason": "Evicted", "message": EVICTED, "containerStatuses": []},
    )
    return evicted


def _checkout_stuck(b: _Build, n: int) -> str:
    """payments/checkout: the new version's image does not exist, the rollout is stuck;
    the new pod, failing to pull."""
    now = b.now
    stuck = rfc3339(now - 50 * MINUTE)
    b.cluster.add(
        "deployments",
        deployment(
            "payments",
            "checkout",
            now=now,
            created=now - 90 * DAY,
            image=CHECKOUT_NEXT_IMAGE,
            replicas=n + 1,
            ready=n,
            updated=1,
            conditions=[
                {
                    "type": "Available",
                    "status": "True",
                    "reason": "MinimumReplicasAvailable",
                    "message": "Deployment has minimum availability.",
                    "lastUpdateTime": stuck,
                    "lastTransitionTime": stuck,
                },
                {
                    "type": "Progressing",
                    "status": "False",
                    "reason": "ProgressDeadlineExceeded",
                    "message": 'ReplicaSet "checkout-6b8f9d7c4" has timed out progressing.',
                    "lastUpdateTime": stuck,
                    "lastTransitionTime": stuck,
                },
            ],
        ),
    )
    current = _replica_set("payments", "checkout", CHECKOUT_IMAGE, "checkout-5c7d8e9f1")
    b.healthy(current, count=n, created=now - 9 * DAY)
    rollout = _replica_set("payments", "checkout", CHECKOUT_NEXT_IMAGE, "checkout-6b8f9d7c4")
    pull = "checkout-6b8f9d7c4-m4x9z"
    waiting = running_status("app", CHECKOUT_NEXT_IMAGE, now, restarts=0)
    waiting.update(
        ready=False,
        started=False,
        state={
            "waiting": {
                "reason": "ImagePullBackOff",
                "message": f'Back-off pulling image "{CHECKOUT_NEXT_IMAGE}"',
            }
        },
    )
    b.pod(rollout, pull, created=now - HOUR, node_name="node-b", phase="Pending", status=waiting)
    return pull


def _postgres(b: _Build) -> None:
    """payments/postgres: a healthy statefulset of one."""
    postgres = Workload(
        "payments", "postgres", "postgres:15.6", ("StatefulSet", "postgres"), "postgres"
    )
    b.cluster.add(
        "statefulsets",
        workload_set(
            postgres,
            created=b.now - 90 * DAY,
            memory="4Gi",
            replicas=1,
            service_name="postgres",
            status={
                "observedGeneration": 2,
                "replicas": 1,
                "readyReplicas": 1,
                "currentReplicas": 1,
                "updatedReplicas": 1,
                "availableReplicas": 1,
            },
        ),
    )
    b.pod(postgres, "postgres-0", created=b.now - 12 * DAY, node_name="node-b")


def _log_shipper(b: _Build) -> None:
    """default/log-shipper: a daemonset, a pod on every node."""
    shipper = Workload(
        "default",
        "log-shipper",
        "fluent/fluent-bit:3.0.4",
        ("DaemonSet", "log-shipper"),
        "fluent-bit",
    )
    created = b.now - 40 * DAY
    b.cluster.add(
        "daemonsets",
        workload_set(
            shipper,
            created=created,
            memory="128Mi",
            status={
                "currentNumberScheduled": 3,
                "desiredNumberScheduled": 3,
                "numberAvailable": 3,
                "numberReady": 3,
                "updatedNumberScheduled": 3,
                "numberMisscheduled": 0,
                "observedGeneration": 1,
            },
        ),
    )
    for where in NODES:
        b.pod(shipper, f"log-shipper-{suffix(where)}", created=created, node_name=where)


def _more_deployments(b: _Build, n: int) -> None:
    """Bigger clusters (``pods_per_deployment`` over 5): more healthy deployments."""
    now = b.now
    for i in range(max(0, (n - 2) // 4)):
        for namespace in ("default", "web", "payments"):
            name = f"svc{i:02d}-{namespace[:3]}"
            image = f"registry.example/{name}:1.{i}.0"
            b.cluster.add(
                "deployments",
                deployment(
                    namespace,
                    name,
                    now=now,
                    created=now - 15 * DAY,
                    image=image,
                    replicas=n,
                    ready=n,
                ),
            )
            workload = _replica_set(namespace, name, image)
            b.healthy(workload, count=n, created=now - 4 * DAY, nodes=NODES)


def _services(c: Cluster, now: datetime) -> None:
    created = now - 60 * DAY
    http = {"name": "http", "port": 80, "targetPort": 8080}
    node_http = {**http, "nodePort": 31380}
    api_server = {"name": "https", "port": 443, "targetPort": 6443}
    public = {"name": "https", "port": 443, "targetPort": 8443, "nodePort": 30443}
    # The app each selects, and a load balancer's address ("": still waiting for it).
    for namespace, name, cluster_ip, ports, app, load_balancer_ip in (
        ("default", "kubernetes", "10.96.0.1", [api_server], None, None),
        ("web", "api", "10.96.12.40", [http], "api", None),
        ("web", "frontend", "10.96.12.41", [node_http], "frontend", "203.0.113.10"),
        ("payments", "checkout", "10.96.30.7", [http], "checkout", None),
        ("payments", "checkout-public", "10.96.30.8", [public], "checkout", ""),
    ):
        made = service(
            namespace,
            name,
            created=created,
            kind="ClusterIP" if load_balancer_ip is None else "LoadBalancer",
            cluster_ip=cluster_ip,
            ports=ports,
            load_balancer_ip=load_balancer_ip,
            selector=None if app is None else {"app": app},
        )
        c.add("services", made)

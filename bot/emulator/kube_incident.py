"""The incident cluster the kubernetes pack's tests and benchmark run against (see
``bot.emulator.kube_fixtures`` for what it holds), and the container logs it serves.

:func:`incident_cluster` builds it one story at a time, always in the same order (pod IPs
are handed out as pods are added); its events are ``bot.emulator.kube_incident_events``'s.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from bot.emulator.kube_fixtures import (
    EVICTED,
    NAMESPACES,
    NODES,
    Cluster,
    container,
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


def _ips() -> dict[str, int]:
    return dict.fromkeys(NODES, 10)


API_IMAGE = "registry.example/api:1.14.2"
CHECKOUT_IMAGE = "registry.example/checkout:2.3.0"
CHECKOUT_NEXT_IMAGE = "registry.example/checkout:2.3.1-rc0"  # never pushed: the rollout sticks
DAY = timedelta(days=1)


def incident_cluster(now: datetime, *, pods_per_deployment: int = 2) -> Cluster:
    """The incident the tests and the benchmark share; see the module docstring."""
    c = Cluster()
    ips = dict.fromkeys(NODES, 10)  # the last host number given out on each node
    n = pods_per_deployment
    for name in NAMESPACES:
        c.add("namespaces", namespace_object(name, now - 60 * DAY))
    for i, name in enumerate(NODES):
        c.add("nodes", node(name, now, i, memory_pressure=name == "node-c"))
    api_rs, crash_looping = _api_crash_looping(c, now, n, ips)
    pending = _worker_pending(c, now, n, ips)
    evicted = _frontend_evicted(c, now, n, ips)
    pull_failing = _checkout_stuck(c, now, n, ips)
    _postgres(c, now, ips)
    _log_shipper(c, now, ips)
    _more_deployments(c, now, n, ips)
    _services(c, now)
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
        c.add("events", e)
    return c


def _api_crash_looping(c: Cluster, now: datetime, n: int, ips: dict[str, int]) -> tuple[str, str]:
    """web/api: n + 1 replicas, one crash-looping on OOM; (its replica set, that pod)."""
    c.add(
        "deployments",
        deployment(
            "web", "api", now=now, created=now - 30 * DAY, image=API_IMAGE, replicas=n + 1, ready=n
        ),
    )
    rs = f"api-{suffix('api', 9)}"
    _healthy(
        c, "web", "api", now=now, count=n, image=API_IMAGE, created=now - 3 * DAY, ips=ips, rs=rs
    )
    crash = f"{rs}-x2k4p"
    crashed_at = now - timedelta(minutes=2)
    status = running_status("app", API_IMAGE, now - 3 * timedelta(hours=1), restarts=14)
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
    c.add(
        "pods",
        pod(
            "web",
            crash,
            now=now,
            created=now - timedelta(hours=3),
            node_name="node-a",
            image=API_IMAGE,
            labels={"app": "api", "pod-template-hash": rs.rsplit("-", 1)[1]},
            owner=("ReplicaSet", rs),
            ip=_next_ip(ips, "node-a"),
            status=status,
            ready=False,
        ),
    )
    c.logs[("web", crash, "app", True)] = API_PREVIOUS_LOG
    c.logs[("web", crash, "app", False)] = API_CURRENT_LOG
    return rs, crash


def _worker_pending(c: Cluster, now: datetime, n: int, ips: dict[str, int]) -> str:
    """web/worker: one pod no node can take; that pod."""
    image = "registry.example/worker:3.2.0"
    c.add(
        "deployments",
        deployment(
            "web", "worker", now=now, created=now - 20 * DAY, image=image, replicas=n, ready=n - 1
        ),
    )
    rs = f"worker-{suffix('worker', 9)}"
    _healthy(
        c, "web", "worker", now=now, count=n - 1, image=image, created=now - 2 * DAY, ips=ips, rs=rs
    )
    pending = f"{rs}-q7tbx"
    c.add(
        "pods",
        pod(
            "web",
            pending,
            now=now,
            created=now - timedelta(minutes=40),
            node_name=None,
            image=image,
            labels={"app": "worker", "pod-template-hash": rs.rsplit("-", 1)[1]},
            owner=("ReplicaSet", rs),
            ip=None,
            phase="Pending",
            ready=False,
            memory="6Gi",
        ),
    )
    return pending


def _frontend_evicted(c: Cluster, now: datetime, n: int, ips: dict[str, int]) -> str:
    """web/frontend: healthy, plus one pod evicted from node-c; that pod."""
    image = "registry.example/frontend:8.0.1"
    count = max(2, n * 2)
    c.add(
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
    rs = f"frontend-{suffix('frontend', 9)}"
    _healthy(
        c,
        "web",
        "frontend",
        now=now,
        count=count,
        image=image,
        created=now - 5 * DAY,
        ips=ips,
        rs=rs,
    )
    evicted = f"{rs}-r2t6w"
    c.add(
        "pods",
        pod(
            "web",
            evicted,
            now=now,
            created=now - timedelta(days=5),
            node_name="node-c",
            image=image,
            labels={"app": "frontend", "pod-template-hash": rs.rsplit("-", 1)[1]},
            owner=("ReplicaSet", rs),
            ip=None,
            phase="Failed",
            ready=False,
            extra={"reason": "Evicted", "message": EVICTED, "containerStatuses": []},
        ),
    )
    return evicted


def _checkout_stuck(c: Cluster, now: datetime, n: int, ips: dict[str, int]) -> str:
    """payments/checkout: the new version's image does not exist, the rollout is stuck;
    the new pod, failing to pull."""
    stuck = rfc3339(now - timedelta(minutes=50))
    c.add(
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
    _healthy(
        c,
        "payments",
        "checkout",
        now=now,
        count=n,
        image=CHECKOUT_IMAGE,
        created=now - 9 * DAY,
        ips=ips,
        rs="checkout-5c7d8e9f1",
    )
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
    c.add(
        "pods",
        pod(
            "payments",
            pull,
            now=now,
            created=now - timedelta(hours=1),
            node_name="node-b",
            image=CHECKOUT_NEXT_IMAGE,
            labels={"app": "checkout", "pod-template-hash": "6b8f9d7c4"},
            owner=("ReplicaSet", "checkout-6b8f9d7c4"),
            ip=_next_ip(ips, "node-b"),
            status=waiting,
            phase="Pending",
            ready=False,
        ),
    )
    return pull


def _postgres(c: Cluster, now: datetime, ips: dict[str, int]) -> None:
    """payments/postgres: a healthy statefulset of one."""
    image = "postgres:15.6"
    c.add(
        "statefulsets",
        workload_set(
            "StatefulSet",
            "payments",
            "postgres",
            created=now - 90 * DAY,
            app=container("postgres", image, memory="4Gi"),
            generation=2,
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
    c.add(
        "pods",
        pod(
            "payments",
            "postgres-0",
            now=now,
            created=now - 12 * DAY,
            node_name="node-b",
            image=image,
            labels={"app": "postgres"},
            owner=("StatefulSet", "postgres"),
            ip=_next_ip(ips, "node-b"),
            container_name="postgres",
        ),
    )


def _log_shipper(c: Cluster, now: datetime, ips: dict[str, int]) -> None:
    """default/log-shipper: a daemonset, a pod on every node."""
    image = "fluent/fluent-bit:3.0.4"
    c.add(
        "daemonsets",
        workload_set(
            "DaemonSet",
            "default",
            "log-shipper",
            created=now - 40 * DAY,
            app=container("fluent-bit", image, memory="128Mi"),
            generation=1,
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
        c.add(
            "pods",
            pod(
                "default",
                f"log-shipper-{suffix(where)}",
                now=now,
                created=now - 40 * DAY,
                node_name=where,
                image=image,
                labels={"app": "log-shipper"},
                owner=("DaemonSet", "log-shipper"),
                ip=_next_ip(ips, where),
                container_name="fluent-bit",
            ),
        )


def _more_deployments(c: Cluster, now: datetime, n: int, ips: dict[str, int]) -> None:
    """Bigger clusters (``pods_per_deployment`` over 5): more healthy deployments."""
    for i in range(max(0, (n - 2) // 4)):
        for namespace in ("default", "web", "payments"):
            name = f"svc{i:02d}-{namespace[:3]}"
            image = f"registry.example/{name}:1.{i}.0"
            c.add(
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
            _healthy(
                c,
                namespace,
                name,
                now=now,
                count=n,
                image=image,
                created=now - 4 * DAY,
                ips=ips,
                nodes=NODES,
            )


def _services(c: Cluster, now: datetime) -> None:
    created = now - 60 * DAY
    http = {"name": "http", "port": 80, "targetPort": 8080}
    for made in (
        service(
            "default",
            "kubernetes",
            created=created,
            kind="ClusterIP",
            cluster_ip="10.96.0.1",
            ports=[{"name": "https", "port": 443, "targetPort": 6443}],
        ),
        service(
            "web",
            "api",
            created=created,
            kind="ClusterIP",
            cluster_ip="10.96.12.40",
            ports=[http],
            selector={"app": "api"},
        ),
        service(
            "web",
            "frontend",
            created=created,
            kind="LoadBalancer",
            cluster_ip="10.96.12.41",
            ports=[{**http, "nodePort": 31380}],
            load_balancer_ip="203.0.113.10",
            selector={"app": "frontend"},
        ),
        service(
            "payments",
            "checkout",
            created=created,
            kind="ClusterIP",
            cluster_ip="10.96.30.7",
            ports=[http],
            selector={"app": "checkout"},
        ),
        service(
            "payments",
            "checkout-public",
            created=created,
            kind="LoadBalancer",
            cluster_ip="10.96.30.8",
            ports=[{"name": "https", "port": 443, "targetPort": 8443, "nodePort": 30443}],
            load_balancer_ip="",  # still waiting for its address
            selector={"app": "checkout"},
        ),
    ):
        c.add("services", made)


def _next_ip(ips: dict[str, int], node_name: str) -> str:
    """The next pod IP on ``node_name`` (each node has its own /24 of 10.244.0.0/16)."""
    ips[node_name] += 1
    return f"10.244.{NODES.index(node_name)}.{ips[node_name]}"


def _healthy(
    cluster: Cluster,
    namespace: str,
    name: str,
    *,
    now: datetime,
    count: int,
    image: str,
    created: datetime,
    ips: dict[str, int],
    nodes: tuple[str, ...] = ("node-a", "node-b"),
    rs: str | None = None,
) -> list[str]:
    rs = rs or f"{name}-{suffix(name, 9)}"
    names = []
    for i in range(count):
        where = nodes[i % len(nodes)]
        pod_name = f"{rs}-{suffix(f'{rs}/{i}')}"
        cluster.add(
            "pods",
            pod(
                namespace,
                pod_name,
                now=now,
                created=created + timedelta(minutes=i % 7),
                node_name=where,
                image=image,
                labels={"app": name, "pod-template-hash": rs.rsplit("-", 1)[1]},
                owner=("ReplicaSet", rs),
                ip=_next_ip(ips, where),
            ),
        )
        names.append(pod_name)
    return names

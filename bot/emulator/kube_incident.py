"""The incident cluster the kubernetes pack's tests and benchmark run against (see
``bot.emulator.kube_fixtures`` for what it holds), and the container logs it serves.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from bot.emulator.kube_fixtures import (
    EVICTED,
    NAMESPACES,
    NODES,
    UNSCHEDULABLE,
    Cluster,
    Json,
    container,
    deployment,
    event,
    meta,
    node,
    pod,
    rfc3339,
    running_status,
    suffix,
)

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
        ips[where] += 1
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
                ip=f"10.244.{NODES.index(where)}.{ips[where]}",
            ),
        )
        names.append(pod_name)
    return names


def incident_cluster(now: datetime, *, pods_per_deployment: int = 2) -> Cluster:
    """The incident the tests and the benchmark share; see the module docstring."""
    c = Cluster()
    ips = _ips()
    day = timedelta(days=1)
    for name in NAMESPACES:
        c.add(
            "namespaces",
            {
                "kind": "Namespace",
                "apiVersion": "v1",
                "metadata": meta(
                    name, None, now - 60 * day, labels={"kubernetes.io/metadata.name": name}
                ),
                "spec": {"finalizers": ["kubernetes"]},
                "status": {"phase": "Active"},
            },
        )
    for i, name in enumerate(NODES):
        c.add("nodes", node(name, now, i, memory_pressure=name == "node-c"))
    n = pods_per_deployment

    # web/api: 3 replicas, one crash-looping on OOM.
    api_image = "registry.example/api:1.14.2"
    c.add(
        "deployments",
        deployment(
            "web", "api", now=now, created=now - 30 * day, image=api_image, replicas=n + 1, ready=n
        ),
    )
    rs = f"api-{suffix('api', 9)}"
    _healthy(
        c, "web", "api", now=now, count=n, image=api_image, created=now - 3 * day, ips=ips, rs=rs
    )
    crash = f"{rs}-x2k4p"
    crashed_at = now - timedelta(minutes=2)
    status = running_status("app", api_image, now - 3 * timedelta(hours=1), restarts=14)
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
    ips["node-a"] += 1
    c.add(
        "pods",
        pod(
            "web",
            crash,
            now=now,
            created=now - timedelta(hours=3),
            node_name="node-a",
            image=api_image,
            labels={"app": "api", "pod-template-hash": rs.rsplit("-", 1)[1]},
            owner=("ReplicaSet", rs),
            ip=f"10.244.0.{ips['node-a']}",
            status=status,
            ready=False,
        ),
    )
    c.logs[("web", crash, "app", True)] = API_PREVIOUS_LOG
    c.logs[("web", crash, "app", False)] = API_CURRENT_LOG

    # web/worker: one pod cannot be scheduled.
    worker_image = "registry.example/worker:3.2.0"
    c.add(
        "deployments",
        deployment(
            "web",
            "worker",
            now=now,
            created=now - 20 * day,
            image=worker_image,
            replicas=n,
            ready=n - 1,
        ),
    )
    wrs = f"worker-{suffix('worker', 9)}"
    _healthy(
        c,
        "web",
        "worker",
        now=now,
        count=n - 1,
        image=worker_image,
        created=now - 2 * day,
        ips=ips,
        rs=wrs,
    )
    pending = f"{wrs}-q7tbx"
    c.add(
        "pods",
        pod(
            "web",
            pending,
            now=now,
            created=now - timedelta(minutes=40),
            node_name=None,
            image=worker_image,
            labels={"app": "worker", "pod-template-hash": wrs.rsplit("-", 1)[1]},
            owner=("ReplicaSet", wrs),
            ip=None,
            phase="Pending",
            ready=False,
            memory="6Gi",
        ),
    )

    # web/frontend: healthy, plus one pod evicted from node-c.
    fe_image = "registry.example/frontend:8.0.1"
    fe_count = max(2, n * 2)
    c.add(
        "deployments",
        deployment(
            "web",
            "frontend",
            now=now,
            created=now - 50 * day,
            image=fe_image,
            replicas=fe_count,
            ready=fe_count,
        ),
    )
    frs = f"frontend-{suffix('frontend', 9)}"
    _healthy(
        c,
        "web",
        "frontend",
        now=now,
        count=fe_count,
        image=fe_image,
        created=now - 5 * day,
        ips=ips,
        rs=frs,
    )
    c.add(
        "pods",
        pod(
            "web",
            f"{frs}-r2t6w",
            now=now,
            created=now - timedelta(days=5),
            node_name="node-c",
            image=fe_image,
            labels={"app": "frontend", "pod-template-hash": frs.rsplit("-", 1)[1]},
            owner=("ReplicaSet", frs),
            ip=None,
            phase="Failed",
            ready=False,
            extra={
                "reason": "Evicted",
                "message": EVICTED,
                "containerStatuses": [],
            },
        ),
    )

    # payments/checkout: the new version's image does not exist; the rollout is stuck.
    old_image, new_image = "registry.example/checkout:2.3.0", "registry.example/checkout:2.3.1-rc0"
    stuck = rfc3339(now - timedelta(minutes=50))
    c.add(
        "deployments",
        deployment(
            "payments",
            "checkout",
            now=now,
            created=now - 90 * day,
            image=new_image,
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
        image=old_image,
        created=now - 9 * day,
        ips=ips,
        rs="checkout-5c7d8e9f1",
    )
    pull = "checkout-6b8f9d7c4-m4x9z"
    ips["node-b"] += 1
    waiting = running_status("app", new_image, now, restarts=0)
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
    c.add(
        "pods",
        pod(
            "payments",
            pull,
            now=now,
            created=now - timedelta(hours=1),
            node_name="node-b",
            image=new_image,
            labels={"app": "checkout", "pod-template-hash": "6b8f9d7c4"},
            owner=("ReplicaSet", "checkout-6b8f9d7c4"),
            ip=f"10.244.1.{ips['node-b']}",
            status=waiting,
            phase="Pending",
            ready=False,
        ),
    )
    # payments/postgres: a healthy statefulset.
    pg_image = "postgres:15.6"
    labels = {"app": "postgres"}
    c.add(
        "statefulsets",
        {
            "kind": "StatefulSet",
            "apiVersion": "apps/v1",
            "metadata": {
                **meta("postgres", "payments", now - 90 * day, labels=labels),
                "generation": 2,
            },
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "serviceName": "postgres",
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [container("postgres", pg_image, memory="4Gi")]},
                },
                "updateStrategy": {"type": "RollingUpdate"},
            },
            "status": {
                "observedGeneration": 2,
                "replicas": 1,
                "readyReplicas": 1,
                "currentReplicas": 1,
                "updatedReplicas": 1,
                "availableReplicas": 1,
            },
        },
    )
    ips["node-b"] += 1
    c.add(
        "pods",
        pod(
            "payments",
            "postgres-0",
            now=now,
            created=now - 12 * day,
            node_name="node-b",
            image=pg_image,
            labels=labels,
            owner=("StatefulSet", "postgres"),
            ip=f"10.244.1.{ips['node-b']}",
            container_name="postgres",
        ),
    )
    # default/log-shipper: a daemonset on every node.
    ds_image = "fluent/fluent-bit:3.0.4"
    ds_labels = {"app": "log-shipper"}
    c.add(
        "daemonsets",
        {
            "kind": "DaemonSet",
            "apiVersion": "apps/v1",
            "metadata": {
                **meta("log-shipper", "default", now - 40 * day, labels=ds_labels),
                "generation": 1,
            },
            "spec": {
                "selector": {"matchLabels": ds_labels},
                "template": {
                    "metadata": {"labels": ds_labels},
                    "spec": {"containers": [container("fluent-bit", ds_image, memory="128Mi")]},
                },
                "updateStrategy": {"type": "RollingUpdate"},
            },
            "status": {
                "currentNumberScheduled": 3,
                "desiredNumberScheduled": 3,
                "numberAvailable": 3,
                "numberReady": 3,
                "updatedNumberScheduled": 3,
                "numberMisscheduled": 0,
                "observedGeneration": 1,
            },
        },
    )
    for where in NODES:
        ips[where] += 1
        c.add(
            "pods",
            pod(
                "default",
                f"log-shipper-{suffix(where)}",
                now=now,
                created=now - 40 * day,
                node_name=where,
                image=ds_image,
                labels=ds_labels,
                owner=("DaemonSet", "log-shipper"),
                ip=f"10.244.{NODES.index(where)}.{ips[where]}",
                container_name="fluent-bit",
            ),
        )
    # Bigger clusters: more healthy deployments.
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
                    created=now - 15 * day,
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
                created=now - 4 * day,
                ips=ips,
                nodes=NODES,
            )

    for namespace, name, kind, cluster_ip, ports, lb in (
        (
            "default",
            "kubernetes",
            "ClusterIP",
            "10.96.0.1",
            [{"name": "https", "port": 443, "targetPort": 6443}],
            None,
        ),
        (
            "web",
            "api",
            "ClusterIP",
            "10.96.12.40",
            [{"name": "http", "port": 80, "targetPort": 8080}],
            None,
        ),
        (
            "web",
            "frontend",
            "LoadBalancer",
            "10.96.12.41",
            [{"name": "http", "port": 80, "targetPort": 8080, "nodePort": 31380}],
            "203.0.113.10",
        ),
        (
            "payments",
            "checkout",
            "ClusterIP",
            "10.96.30.7",
            [{"name": "http", "port": 80, "targetPort": 8080}],
            None,
        ),
        (
            "payments",
            "checkout-public",
            "LoadBalancer",
            "10.96.30.8",
            [{"name": "https", "port": 443, "targetPort": 8443, "nodePort": 30443}],
            "",
        ),
    ):
        spec: Json = {
            "type": kind,
            "clusterIP": cluster_ip,
            "ports": [{"protocol": "TCP", **p} for p in ports],
        }
        if name != "kubernetes":
            spec["selector"] = {"app": name.removesuffix("-public")}
        balancer: Json = {"loadBalancer": {"ingress": [{"ip": lb}]} if lb else {}}
        c.add(
            "services",
            {
                "kind": "Service",
                "apiVersion": "v1",
                "metadata": meta(name, namespace, now - 60 * day),
                "spec": spec,
                "status": balancer,
            },
        )

    minute, hour = timedelta(minutes=1), timedelta(hours=1)
    for e in (
        event(
            "web",
            ("Pod", crash),
            "BackOff",
            f"Back-off restarting failed container app in pod {crash}_web(…)",
            now=now,
            last=minute,
            first=3 * hour,
            count=61,
            warning=True,
        ),
        event(
            "web",
            ("Pod", crash),
            "Pulled",
            f'Container image "{api_image}" already present on machine',
            now=now,
            last=2 * minute,
            first=3 * hour,
            count=15,
        ),
        event(
            "web",
            ("Pod", crash),
            "Started",
            "Started container app",
            now=now,
            last=2 * minute,
            first=3 * hour,
            count=15,
        ),
        event(
            "web",
            ("Pod", pending),
            "FailedScheduling",
            UNSCHEDULABLE,
            now=now,
            last=3 * minute,
            first=40 * minute,
            count=12,
            warning=True,
            component="default-scheduler",
        ),
        event(
            "web",
            ("Deployment", "api"),
            "ScalingReplicaSet",
            f"Scaled up replica set {rs} to {n + 1}",
            now=now,
            last=3 * day,
            component="deployment-controller",
        ),
        event(
            "web",
            ("Pod", f"{frs}-r2t6w"),
            "Evicted",
            f"{EVICTED} Container app was using 402Mi, request is 256Mi, has larger "
            "consumption of memory.",
            now=now,
            last=24 * minute,
            warning=True,
            component="kubelet",
        ),
        event(
            "payments",
            ("Pod", pull),
            "Failed",
            f'Failed to pull image "{new_image}": rpc error: code = NotFound desc = failed to '
            f'pull and unpack image "{new_image}": not found',
            now=now,
            last=4 * minute,
            first=hour,
            count=14,
            warning=True,
        ),
        event(
            "payments",
            ("Pod", pull),
            "BackOff",
            f'Back-off pulling image "{new_image}"',
            now=now,
            last=30 * timedelta(seconds=1),
            first=hour,
            count=240,
            warning=True,
        ),
        event(
            "payments",
            ("Deployment", "checkout"),
            "ScalingReplicaSet",
            "Scaled up replica set checkout-6b8f9d7c4 to 1",
            now=now,
            last=hour,
            component="deployment-controller",
        ),
        event(
            "default",
            ("Node", "node-c"),
            "NodeHasInsufficientMemory",
            "Node node-c status is now: NodeHasInsufficientMemory",
            now=now,
            last=25 * minute,
            involved_namespace="",
        ),
        event(
            "default",
            ("Node", "node-c"),
            "EvictionThresholdMet",
            "Attempting to reclaim memory",
            now=now,
            last=24 * minute,
            first=25 * minute,
            count=3,
            warning=True,
            involved_namespace="",
        ),
    ):
        c.add("events", e)
    return c

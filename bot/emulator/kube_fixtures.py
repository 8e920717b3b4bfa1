"""Clusters for the fake Kubernetes API (``bot.emulator.kube_api``), as data.

A :class:`Cluster` is what the fake serves: objects as the API writes them (plain JSON
dicts, camelCase, RFC 3339 times) keyed by resource and ``(namespace, name)``, plus
container logs; the builders here (``node``, ``pod``, ``deployment``, ``Involved.event``, …)
make them. ``bot.emulator.kube_incident.incident_cluster`` builds the one the tests and the
benchmark use, relative to a ``now`` so ages read the same in every run:

* three nodes; ``node-c`` under ``MemoryPressure`` with the kubelet's taint;
* ``web/api``: a pod in ``CrashLoopBackOff`` (14 restarts, last state ``OOMKilled``, exit
  137) with a previous log ending in the OOM;
* ``web/worker``: a pod ``Pending``, ``Unschedulable``, its ``FailedScheduling`` event
  "0/3 nodes are available: … Insufficient memory";
* ``payments/checkout``: a failed rollout (``Progressing=False ProgressDeadlineExceeded``,
  one unavailable replica, the new pod in ``ImagePullBackOff``);
* an evicted pod on ``node-c``; healthy pods, services, a statefulset and a daemonset.

``pods_per_deployment`` grows the healthy deployments (the benchmark's ~150 pods).
"""

from __future__ import annotations

import copy
import hashlib
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypedDict

Json = dict[str, Any]
NAMESPACES = ("default", "web", "payments")
NODES = ("node-a", "node-b", "node-c")
_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # what Kubernetes makes pod name suffixes of
EVICTED = "The node was low on resource: memory. Threshold quantity: 100Mi, available: 87Mi."
UNSCHEDULABLE = (
    "0/3 nodes are available: 1 node(s) had untolerated taint "
    "{node.kubernetes.io/memory-pressure: }, 2 Insufficient memory. preemption: "
    "0/3 nodes are available: 1 Preemption is not helpful for scheduling, "
    "2 No preemption victims found for incoming pod."
)


@dataclass
class Cluster:
    """What a fake API server holds; see the module docstring."""

    version: str = "v1.29.4"
    objects: dict[str, dict[tuple[str, str], Json]] = field(default_factory=dict)
    logs: dict[tuple[str, str, str, bool], str] = field(default_factory=dict)

    def add(self, resource: str, obj: Json) -> Json:
        meta = obj["metadata"]
        self.objects.setdefault(resource, {})[(meta.get("namespace", ""), meta["name"])] = obj
        return obj

    def get(self, resource: str, namespace: str, name: str) -> Json | None:
        return self.objects.get(resource, {}).get((namespace, name))

    def need(self, resource: str, namespace: str, name: str) -> Json:
        """The object, or ``KeyError`` (tests reading what a call changed)."""
        return self.objects[resource][(namespace, name)]

    def copy(self) -> Cluster:
        return copy.deepcopy(self)

    def count(self, resource: str) -> int:
        return len(self.objects.get(resource, {}))


def suffix(seed: str, length: int = 5) -> str:
    digest = hashlib.sha256(seed.encode()).digest()
    return "".join(_ALPHABET[b % len(_ALPHABET)] for b in digest[:length])


def rfc3339(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def meta(
    name: str,
    namespace: str | None,
    created: datetime,
    *,
    labels: dict[str, str] | None = None,
    owner: tuple[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> Json:
    out: Json = {
        "name": name,
        "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"{namespace}/{name}")),
        "resourceVersion": "1",
        "creationTimestamp": rfc3339(created),
    }
    if namespace is not None:
        out["namespace"] = namespace
    if labels:
        out["labels"] = dict(labels)
    if annotations:
        out["annotations"] = dict(annotations)
    if owner is not None:
        kind, owner_name = owner
        api = "apps/v1" if kind in ("ReplicaSet", "StatefulSet", "DaemonSet") else "v1"
        out["ownerReferences"] = [
            {
                "apiVersion": api,
                "kind": kind,
                "name": owner_name,
                "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"{namespace}/{owner_name}")),
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    return out


def node(name: str, now: datetime, index: int, *, memory_pressure: bool = False) -> Json:
    heartbeat = rfc3339(now - timedelta(seconds=20))
    since = rfc3339(now - timedelta(days=40))

    def cond(kind: str, status: str, reason: str, message: str, changed: str = since) -> Json:
        return {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": heartbeat,
            "lastTransitionTime": changed,
        }

    pressure_since = rfc3339(now - timedelta(minutes=25))
    memory = (
        cond(
            "MemoryPressure",
            "True",
            "KubeletHasInsufficientMemory",
            "kubelet has insufficient memory available",
            pressure_since,
        )
        if memory_pressure
        else cond(
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available",
        )
    )
    spec: Json = {"podCIDR": f"10.244.{index}.0/24", "providerID": f"kind://docker/prod/{name}"}
    if memory_pressure:
        spec["taints"] = [
            {
                "key": "node.kubernetes.io/memory-pressure",
                "effect": "NoSchedule",
                "timeAdded": pressure_since,
            }
        ]
    labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}
    if index == 0:
        labels["node-role.kubernetes.io/control-plane"] = ""
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": meta(name, None, now - timedelta(days=40), labels=labels),
        "spec": spec,
        "status": {
            "capacity": {
                "cpu": "8",
                "memory": "32865336Ki",
                "pods": "110",
                "ephemeral-storage": "102626232Ki",
            },
            "allocatable": {
                "cpu": "8",
                "memory": "32762936Ki",
                "pods": "110",
                "ephemeral-storage": "102626232Ki",
            },
            "conditions": [
                memory,
                cond(
                    "DiskPressure",
                    "False",
                    "KubeletHasNoDiskPressure",
                    "kubelet has no disk pressure",
                ),
                cond(
                    "PIDPressure",
                    "False",
                    "KubeletHasSufficientPID",
                    "kubelet has sufficient PID available",
                ),
                cond("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
            ],
            "addresses": [
                {"type": "InternalIP", "address": f"172.18.0.{index + 2}"},
                {"type": "Hostname", "address": name},
            ],
            "nodeInfo": {
                "kubeletVersion": "v1.29.4",
                "osImage": "Debian GNU/Linux 12 (bookworm)",
                "containerRuntimeVersion": "containerd://1.7.15",
                "kernelVersion": "6.1.0-18-amd64",
                "architecture": "amd64",
                "operatingSystem": "linux",
            },
        },
    }


def container(name: str, image: str, *, memory: str = "512Mi", cpu: str = "500m") -> Json:
    return {
        "name": name,
        "image": image,
        "ports": [{"containerPort": 8080, "protocol": "TCP"}],
        "resources": {
            "limits": {"memory": memory, "cpu": cpu},
            "requests": {"memory": "256Mi", "cpu": "250m"},
        },
        "imagePullPolicy": "IfNotPresent",
    }


def running_status(name: str, image: str, started: datetime, *, restarts: int = 0) -> Json:
    return {
        "name": name,
        "image": image,
        "imageID": f"{image.split(':')[0]}@sha256:{hashlib.sha256(image.encode()).hexdigest()}",
        "containerID": f"containerd://{hashlib.sha256((name + image).encode()).hexdigest()}",
        "ready": True,
        "started": True,
        "restartCount": restarts,
        "state": {"running": {"startedAt": rfc3339(started)}},
        "lastState": {},
    }


def pod_conditions(
    now: datetime, created: datetime, *, ready: bool, scheduled: bool = True
) -> list[Json]:
    at = rfc3339(created + timedelta(seconds=3))
    if not scheduled:
        return [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": UNSCHEDULABLE,
                "lastProbeTime": None,
                "lastTransitionTime": rfc3339(created),
            }
        ]
    unready = {"reason": "ContainersNotReady", "message": "containers with unready status: [app]"}
    return [
        {"type": "PodReadyToStartContainers", "status": "True", "lastTransitionTime": at},
        {"type": "Initialized", "status": "True", "lastTransitionTime": at},
        {
            "type": "Ready",
            "status": "True" if ready else "False",
            "lastTransitionTime": at,
            **({} if ready else unready),
        },
        {
            "type": "ContainersReady",
            "status": "True" if ready else "False",
            "lastTransitionTime": at,
            **({} if ready else unready),
        },
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": rfc3339(created)},
    ]


@dataclass(frozen=True, slots=True)
class Workload:
    """What the pods of one controller share: their namespace, ``app`` label, image and
    container, and the controller itself (a ReplicaSet, StatefulSet or DaemonSet)."""

    namespace: str
    app: str
    image: str
    controller: tuple[str, str]  # (kind, name)
    container: str = "app"

    @property
    def labels(self) -> dict[str, str]:
        """``app``; a ReplicaSet's pods also its ``pod-template-hash`` (its name's end)."""
        kind, name = self.controller
        if kind == "ReplicaSet":
            return {"app": self.app, "pod-template-hash": name.rsplit("-", 1)[1]}
        return {"app": self.app}


class PodState(TypedDict, total=False):
    """What sets a pod apart from a running, ready one (:func:`pod`'s defaults)."""

    status: Json | None  # its container's status (by default running since ``created``)
    phase: str
    ready: bool  # a running pod's readiness (one in any other phase is never ready)
    memory: str  # its container's memory limit
    extra: Json | None  # more of its ``status``


def pod(
    workload: Workload,
    name: str,
    *,
    now: datetime,
    created: datetime,
    node_name: str | None,
    ip: str | None,
    status: Json | None = None,
    phase: str = "Running",
    ready: bool = True,
    memory: str = "512Mi",
    extra: Json | None = None,
) -> Json:
    namespace, image, container_name = workload.namespace, workload.image, workload.container
    ready = ready and phase == "Running"
    spec: Json = {
        "containers": [container(container_name, image, memory=memory)],
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 30,
        "serviceAccountName": "default",
    }
    if node_name:
        spec["nodeName"] = node_name
    body: Json = {
        "phase": phase,
        "conditions": pod_conditions(now, created, ready=ready, scheduled=node_name is not None),
        "qosClass": "Burstable",
        "startTime": rfc3339(created),
    }
    if node_name:
        body["hostIP"] = f"172.18.0.{NODES.index(node_name) + 2}"
    if ip:
        body["podIP"] = ip
        body["podIPs"] = [{"ip": ip}]
    if status is not None:
        body["containerStatuses"] = [status]
    elif node_name and phase == "Running":
        body["containerStatuses"] = [
            running_status(container_name, image, created + timedelta(seconds=5))
        ]
    body.update(extra or {})
    if not ready:
        body["conditions"] = pod_conditions(
            now, created, ready=False, scheduled=node_name is not None
        )
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": meta(
            name, namespace, created, labels=workload.labels, owner=workload.controller
        ),
        "spec": spec,
        "status": body,
    }


def deployment(
    namespace: str,
    name: str,
    *,
    now: datetime,
    created: datetime,
    image: str,
    replicas: int,
    ready: int,
    updated: int | None = None,
    conditions: list[Json] | None = None,
    container_name: str = "app",
) -> Json:
    updated = replicas if updated is None else updated
    since = rfc3339(created + timedelta(minutes=1))
    default_conditions = [
        {
            "type": "Available",
            "status": "True" if ready >= replicas - 1 or replicas == 0 else "False",
            "reason": "MinimumReplicasAvailable",
            "message": "Deployment has minimum availability.",
            "lastUpdateTime": since,
            "lastTransitionTime": since,
        },
        {
            "type": "Progressing",
            "status": "True",
            "reason": "NewReplicaSetAvailable",
            "message": f'ReplicaSet "{name}-{suffix(name, 9)}" has successfully progressed.',
            "lastUpdateTime": since,
            "lastTransitionTime": since,
        },
    ]
    status: Json = {
        "observedGeneration": 4,
        "replicas": max(replicas, updated + ready - min(ready, updated)),
        "updatedReplicas": updated,
        "readyReplicas": ready,
        "availableReplicas": ready,
        "conditions": conditions or default_conditions,
    }
    if replicas - ready > 0:
        status["unavailableReplicas"] = replicas - ready
    labels = {"app": name}
    return {
        "kind": "Deployment",
        "apiVersion": "apps/v1",
        "metadata": {**meta(name, namespace, created, labels=labels), "generation": 4},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [container(container_name, image)]},
            },
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"},
            },
            "revisionHistoryLimit": 10,
            "progressDeadlineSeconds": 600,
        },
        "status": status,
    }


def workload_set(
    workload: Workload,
    *,
    created: datetime,
    status: Json,
    memory: str = "512Mi",
    replicas: int | None = None,
    service_name: str | None = None,
) -> Json:
    """The StatefulSet or DaemonSet that controls ``workload``'s pods, running its one
    container, settled: its generation is the one ``status`` observed (a Deployment is
    :func:`deployment`)."""
    kind, name = workload.controller
    labels = workload.labels
    app = container(workload.container, workload.image, memory=memory)
    spec: Json = {} if replicas is None else {"replicas": replicas}
    spec["selector"] = {"matchLabels": labels}
    if service_name is not None:
        spec["serviceName"] = service_name
    spec["template"] = {"metadata": {"labels": labels}, "spec": {"containers": [app]}}
    spec["updateStrategy"] = {"type": "RollingUpdate"}
    return {
        "kind": kind,
        "apiVersion": "apps/v1",
        "metadata": {
            **meta(name, workload.namespace, created, labels=labels),
            "generation": status["observedGeneration"],
        },
        "spec": spec,
        "status": status,
    }


def namespace_object(name: str, created: datetime) -> Json:
    return {
        "kind": "Namespace",
        "apiVersion": "v1",
        "metadata": meta(name, None, created, labels={"kubernetes.io/metadata.name": name}),
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    }


def service(
    namespace: str,
    name: str,
    *,
    created: datetime,
    kind: str,
    cluster_ip: str,
    ports: list[Json],
    load_balancer_ip: str | None = None,
    selector: dict[str, str] | None = None,
) -> Json:
    """A Service; ``load_balancer_ip`` "" is a load balancer still waiting for its address."""
    spec: Json = {
        "type": kind,
        "clusterIP": cluster_ip,
        "ports": [{"protocol": "TCP", **p} for p in ports],
    }
    if selector is not None:
        spec["selector"] = selector
    ingress = {"ingress": [{"ip": load_balancer_ip}]} if load_balancer_ip else {}
    return {
        "kind": "Service",
        "apiVersion": "v1",
        "metadata": meta(name, namespace, created),
        "spec": spec,
        "status": {"loadBalancer": ingress},
    }


@dataclass(frozen=True, slots=True)
class Involved:
    """An object events are about, at ``now``: the namespace the events are kept in, the
    object, and the component that reports on it; :meth:`event` makes them."""

    now: datetime
    namespace: str
    involved: tuple[str, str]  # (kind, name)
    component: str = "kubelet"
    involved_namespace: str | None = None  # the object's own, when not ``namespace``

    def event(
        self,
        reason: str,
        message: str,
        *,
        last: timedelta,
        first: timedelta | None = None,
        count: int = 1,
        warning: bool = False,
    ) -> Json:
        """An event last seen ``last`` ago (first ``first`` ago, ``count`` times)."""
        now, namespace, component = self.now, self.namespace, self.component
        kind, name = self.involved
        first = first or last
        since = now - first
        ns_of_object = namespace if self.involved_namespace is None else self.involved_namespace
        api_version = "apps/v1" if kind in ("Deployment", "StatefulSet", "DaemonSet") else "v1"
        return {
            "kind": "Event",
            "apiVersion": "v1",
            "metadata": meta(f"{name}.{suffix(reason + name + message, 8)}", namespace, since),
            "involvedObject": {
                "kind": kind,
                "name": name,
                **({"namespace": ns_of_object} if ns_of_object else {}),
                "apiVersion": api_version,
            },
            "reason": reason,
            "message": message,
            "source": {"component": component},
            "firstTimestamp": rfc3339(since),
            "lastTimestamp": rfc3339(now - last),
            "count": count,
            "type": "Warning" if warning else "Normal",
            "reportingComponent": component,
        }

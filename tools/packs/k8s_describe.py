"""What ``k8s_describe`` answers: one object for a responder, like ``kubectl describe``; pure.

The head line says whether it needs attention and why; then status, the conditions (the
unhealthy ones each with reason and message, the healthy ones on one line), container
states with restart reasons (``Terminated OOMKilled (exit 137) 2m ago, ran 47s``),
resources, and the object's recent events, warnings and newest first, at most
``DESCRIBE_EVENTS``. A workload's or node's pods are added by the caller
(``k8s_text.pods_brief``). Listings are in ``tools.packs.k8s_text``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

from tools.packs.k8s_objects import (
    KINDS,
    Obj,
    age,
    ago,
    clean,
    dig,
    event_time,
    items,
    mapping,
    newest_first,
    node_problems,
    node_status,
    number,
    owner,
    plural,
    pod_status,
    ready_count,
    restarts,
    selector_text,
    taints,
    text,
    when,
    workload_counts,
    workload_problems,
)
from tools.packs.k8s_text import MESSAGE_CHARS, event_message, name_of, ns_of

DESCRIBE_EVENTS = 10


def events_block(events: Sequence[Obj], now: datetime) -> list[str]:
    if not events:
        return ["Events: none recent"]
    ordered = newest_first(events)
    lines = [f"Events ({len(events)}, warnings and newest first):"]
    for event in ordered[:DESCRIBE_EVENTS]:
        lines.append(
            f"  {age(event_time(event), now)} ago  {clean(text(event, 'type'), 10)}  "
            f"{clean(text(event, 'reason'), 40)}  {event_message(event, now)}"
        )
    if len(events) > DESCRIBE_EVENTS:
        lines.append(f"  … {len(events) - DESCRIBE_EVENTS} more (k8s_events lists them)")
    return lines


def _conditions(obj: Obj, *, healthy: Callable[[str, str], bool]) -> list[str]:
    """``Conditions:`` with each unhealthy one on its own line (reason, message) first and
    the healthy ones together on the last."""
    bad, fine = [], []
    for cond in items(obj, "status", "conditions"):
        kind, status = clean(text(cond, "type"), 40), clean(text(cond, "status"), 10)
        if healthy(kind, status):
            fine.append(f"{kind}={status}")
            continue
        reason = clean(text(cond, "reason"), 60)
        message = clean(text(cond, "message"), MESSAGE_CHARS * 2)
        bad.append(f"  {kind}={status} {reason}: {message}".rstrip(": "))
    if not bad and not fine:
        return []
    return ["Conditions:", *bad, *([f"  fine: {', '.join(fine)}"] if fine else [])]


def _resources(container: Obj) -> str:
    parts = []
    for which in ("requests", "limits"):
        values = mapping(container, "resources", which)
        if values:
            pairs = ",".join(f"{clean(k, 30)}={clean(v, 20)}" for k, v in sorted(values.items()))
            parts.append(f"{which} {pairs}")
    return "; ".join(parts)


def _state(state: Obj, now: datetime) -> str:
    if running := mapping(state, "running"):
        return f"Running since {ago(when(running, 'startedAt'), now)}"
    if waiting := mapping(state, "waiting"):
        message = clean(text(waiting, "message"), MESSAGE_CHARS)
        return f"Waiting {clean(text(waiting, 'reason'), 40)}" + (f": {message}" if message else "")
    if terminated := mapping(state, "terminated"):
        signal = number(terminated, "signal")
        code = f"signal {signal}" if signal else f"exit {number(terminated, 'exitCode')}"
        started, ended = when(terminated, "startedAt"), when(terminated, "finishedAt")
        ran = f", ran {age(started, ended)}" if started and ended else ""
        message = clean(text(terminated, "message"), MESSAGE_CHARS)
        reason = clean(text(terminated, "reason"), 40)
        return f"Terminated {reason} ({code}) {ago(ended, now)}{ran}" + (
            f": {message}" if message else ""
        )
    return "unknown"


def describe_pod(pod: Obj, events: Sequence[Obj], now: datetime) -> str:
    ready, total = ready_count(pod)
    count, last = restarts(pod)
    word = pod_status(pod)
    head = f"pod {ns_of(pod)}/{name_of(pod)}: {word}, {ready}/{total} ready"
    head += f", {plural(count, 'restart')}"
    if count and last:
        head += f" (last {ago(last, now)})"
    lines = [head]
    node = clean(text(pod, "spec", "nodeName"), 63) or "<not scheduled>"
    lines.append(
        f"Node: {node}  IP: {clean(text(pod, 'status', 'podIP'), 45) or '<none>'}  "
        f"Age: {age(when(pod, 'metadata', 'creationTimestamp'), now)}  "
        f"QoS: {clean(text(pod, 'status', 'qosClass'), 20) or '?'}"
    )
    if controller := owner(pod):
        lines.append(f"Controlled by: {controller}")
    if message := clean(text(pod, "status", "message"), MESSAGE_CHARS):
        lines.append(f"Message: {clean(text(pod, 'status', 'reason'), 40)} {message}".rstrip())
    lines += _conditions(pod, healthy=lambda _k, s: s == "True")
    specs = {text(c, "name"): c for c in items(pod, "spec", "containers")}
    statuses = {text(s, "name"): s for s in items(pod, "status", "containerStatuses")}
    init = items(pod, "status", "initContainerStatuses")
    if init:
        lines.append("Init containers:")
        for status in init:
            lines.append(
                f"  {clean(text(status, 'name'), 63)}: {_state(mapping(status, 'state'), now)}"
            )
    lines.append("Containers:")
    for name in dict.fromkeys([*specs, *statuses]):
        spec, status = specs.get(name, {}), statuses.get(name, {})
        image = clean(text(spec, "image") or text(status, "image"), 120)
        lines.append(
            f"  {clean(name, 63)}  image {image}  "
            f"ready {str(dig(status, 'ready') is True).lower()}  "
            f"restarts {number(status, 'restartCount')}"
        )
        if status:
            lines.append(f"    State: {_state(mapping(status, 'state'), now)}")
        if mapping(status, "lastState"):
            lines.append(f"    Last state: {_state(mapping(status, 'lastState'), now)}")
        if resources := _resources(spec):
            lines.append(f"    Resources: {resources}")
    return "\n".join([*lines, *events_block(events, now)])


def describe_workload(obj: Obj, kind: str, events: Sequence[Obj], now: datetime) -> str:
    ready, desired = workload_counts(obj, kind)
    problems = workload_problems(obj, kind)
    noun = KINDS[kind].kind.lower()
    head = f"{noun} {ns_of(obj)}/{name_of(obj)}: " + (
        f"needs attention: {', '.join(problems)}"
        if problems
        else f"{ready}/{desired} ready, healthy"
    )
    lines = [head]
    status = mapping(obj, "status")
    if kind == "daemonsets":
        lines.append(
            f"Nodes: desired {number(status, 'desiredNumberScheduled')}, current "
            f"{number(status, 'currentNumberScheduled')}, ready {number(status, 'numberReady')}, "
            f"updated {number(status, 'updatedNumberScheduled')}, available "
            f"{number(status, 'numberAvailable')}, "
            f"unavailable {number(status, 'numberUnavailable')}"
        )
    else:
        lines.append(
            f"Replicas: desired {desired}, current {number(status, 'replicas')}, updated "
            f"{number(status, 'updatedReplicas')}, ready {ready}, available "
            f"{number(status, 'availableReplicas')}, unavailable "
            f"{number(status, 'unavailableReplicas')}"
        )
    strategy = mapping(obj, "spec", "strategy") or mapping(obj, "spec", "updateStrategy")
    lines.append(
        f"Strategy: {clean(text(strategy, 'type'), 30) or '?'}  Selector: "
        f"{selector_text(mapping(obj, 'spec', 'selector')) or '<none>'}  "
        f"Generation: {number(obj, 'metadata', 'generation')} (observed "
        f"{number(obj, 'status', 'observedGeneration')})"
    )
    annotations = mapping(obj, "spec", "template", "metadata", "annotations")
    if restarted := annotations.get("kubectl.kubernetes.io/restartedAt"):
        lines.append(f"Last rollout restart: {clean(restarted, 40)}")
    if dig(obj, "spec", "paused") is True:
        lines.append("Rollout: paused")
    if items(obj, "status", "conditions"):
        lines += _conditions(
            obj, healthy=lambda k, s: s == ("False" if k == "ReplicaFailure" else "True")
        )
    lines.append("Containers:")
    for container in items(obj, "spec", "template", "spec", "containers"):
        line = (
            f"  {clean(text(container, 'name'), 63)}  image {clean(text(container, 'image'), 120)}"
        )
        if resources := _resources(container):
            line += f"  {resources}"
        lines.append(line)
    return "\n".join([*lines, *events_block(events, now)])


def describe_node(node: Obj, events: Sequence[Obj], now: datetime) -> str:
    problems = node_problems(node)
    head = f"node {name_of(node)}: {node_status(node)}"
    head += f"; needs attention: {', '.join(problems)}" if problems else ", healthy"
    info = mapping(node, "status", "nodeInfo")
    lines = [
        head,
        f"Age: {age(when(node, 'metadata', 'creationTimestamp'), now)}  Kubelet: "
        f"{clean(text(info, 'kubeletVersion'), 30)}  OS: {clean(text(info, 'osImage'), 60)}",
    ]
    addresses = ", ".join(
        f"{clean(text(a, 'type'), 20)} {clean(text(a, 'address'), 60)}"
        for a in items(node, "status", "addresses")
    )
    if addresses:
        lines.append(f"Addresses: {addresses}")
    lines.append(f"Taints: {', '.join(taints(node)) or '<none>'}")
    lines += _conditions(node, healthy=lambda k, s: s == ("True" if k == "Ready" else "False"))
    for which in ("capacity", "allocatable"):
        values = mapping(node, "status", which)
        if values:
            keys = [k for k in ("cpu", "memory", "pods", "ephemeral-storage") if k in values]
            lines.append(
                f"{which.title()}: " + ", ".join(f"{k}={clean(values[k], 20)}" for k in keys)
            )
    return "\n".join([*lines, *events_block(events, now)])


def describe_service(svc: Obj, events: Sequence[Obj], now: datetime) -> str:
    spec = mapping(svc, "spec")
    lines = [
        f"service {ns_of(svc)}/{name_of(svc)}: {clean(text(spec, 'type'), 20) or 'ClusterIP'} "
        f"{clean(text(spec, 'clusterIP'), 45)}",
        "Selector: "
        + (selector_text(mapping(spec, "selector")) or "<none> (endpoints managed by hand)"),
    ]
    for port in items(spec, "ports"):
        lines.append(
            f"Port {clean(text(port, 'name'), 40) or '<unnamed>'}: {number(port, 'port')}/"
            f"{clean(text(port, 'protocol'), 10) or 'TCP'} → target "
            f"{clean(text(port, 'targetPort'), 40)}"
            + (f", node port {number(port, 'nodePort')}" if number(port, "nodePort") else "")
        )
    if text(spec, "type") == "LoadBalancer":
        ingress = items(svc, "status", "loadBalancer", "ingress")
        shown = ", ".join(clean(text(i, "ip") or text(i, "hostname"), 60) for i in ingress)
        lines.append(f"Load balancer: {shown or '<pending>'}")
    return "\n".join([*lines, *events_block(events, now)])


def describe(kind: str, obj: Obj, events: Sequence[Obj], now: datetime) -> str:
    if kind == "pods":
        return describe_pod(obj, events, now)
    if kind == "nodes":
        return describe_node(obj, events, now)
    if kind == "services":
        return describe_service(obj, events, now)
    return describe_workload(obj, kind, events, now)

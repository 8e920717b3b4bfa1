"""What the ``kubernetes`` pack's read-only tools answer: text for a responder; pure.

Every answer puts the point first (a head line saying what is broken, with counts), then
an aligned table like ``kubectl get -o wide`` with the objects that need attention on top,
each followed by a ``↳`` line saying why (the unschedulable message, the last exit, the
failed condition, the taint). Tables stop at ``MAX_ROWS`` with ``… N more``; every field
from the API is cleaned and clipped (``k8s_objects.clean``). Never raw JSON.

``k8s_describe``'s answers are in ``tools.packs.k8s_describe``; :func:`pods_brief` (a
workload's or node's pods in a few lines) serves both.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import datetime

from tools.packs.k8s_objects import (
    KINDS,
    PRESSURES,
    Obj,
    age,
    ago,
    clean,
    containers_images,
    dig,
    event_count,
    event_time,
    find_condition,
    items,
    last_termination,
    mapping,
    newest_first,
    node_problems,
    node_status,
    number,
    plural,
    pod_problem,
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

MAX_ROWS = 30
MAX_EVENTS = 25
MESSAGE_CHARS = 160
CELL_CHARS = 60


def table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], notes: Sequence[list[str]]
) -> list[str]:
    """Aligned columns (the last one unpadded); each row's notes follow it, indented."""
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))

    def line(cells: Sequence[str]) -> str:
        padded = [c.ljust(widths[i]) for i, c in enumerate(cells[:-1])]
        return "  ".join([*padded, cells[-1]]).rstrip()

    out = [line(headers)]
    for row, extra in zip(rows, notes, strict=True):
        out.append(line(row))
        out.extend(f"  ↳ {note}" for note in extra)
    return out


def _more(total: int, shown: int, noun: str, healthy_rest: bool) -> list[str]:
    if total <= shown:
        return []
    rest = f"… {total - shown} more {noun}s"
    if healthy_rest:
        rest += " (none of them needs attention)"
    return [rest + "; narrow with name= or selector="]


def _counts(words: Sequence[str]) -> str:
    return ", ".join(
        f"{n} {w}" for w, n in sorted(Counter(words).items(), key=lambda x: (-x[1], x[0]))
    )


def ns_of(obj: Obj) -> str:
    return clean(text(obj, "metadata", "namespace"), 63)


def name_of(obj: Obj) -> str:
    return clean(text(obj, "metadata", "name"), 253)


def _head(
    where: str, total: int, noun: str, problems: Sequence[str], rest: str, *, named: bool = False
) -> str:
    """``web: 14 pods, 2 need attention: 1 CrashLoopBackOff, 1 Pending; 12 Running``;
    ``named`` lists the problems themselves (``checkout 2/3 ready``) instead of counting."""
    head = f"{where}: {plural(total, noun)}"
    if not total:
        return head
    if problems:
        verb = "needs" if len(problems) == 1 else "need"
        said = ", ".join(problems[:5]) + (" …" if len(problems) > 5 else "")
        head += f", {len(problems)} {verb} attention: {said if named else _counts(problems)}"
        return head + (f"; {rest}" if rest else "")
    return head + (f": {rest}" if rest else "")


def _joined(parts: Sequence[str]) -> str:
    return "; ".join(p.rstrip(". ") for p in parts if p)


# -- listings -----------------------------------------------------------------------


def pods_listing(pods: Sequence[Obj], now: datetime, *, where: str, with_namespace: bool) -> str:
    judged = [(pod_problem(p), p) for p in pods]
    judged.sort(key=lambda pair: (pair[0] is None, ns_of(pair[1]), name_of(pair[1])))
    problems = [why for why, _ in judged if why is not None]
    healthy = Counter(pod_status(p) for why, p in judged if why is None)
    rest = ", ".join(f"{n} {w}" for w, n in sorted(healthy.items()))
    lines = [_head(where, len(pods), "pod", problems, rest)]
    if not pods:
        return lines[0]
    shown = judged[:MAX_ROWS]
    rows, notes = [], []
    for why, pod in shown:
        ready, total = ready_count(pod)
        count, last = restarts(pod)
        restart = f"{count} ({ago(last, now)})" if count and last else str(count)
        row = [
            name_of(pod),
            f"{ready}/{total}",
            pod_status(pod),
            restart,
            age(when(pod, "metadata", "creationTimestamp"), now),
            clean(text(pod, "status", "podIP"), 45) or "<none>",
            clean(text(pod, "spec", "nodeName"), 63) or "<none>",
        ]
        rows.append([ns_of(pod), *row] if with_namespace else row)
        notes.append(_pod_notes(pod, now) if why is not None else [])
    headers = ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE"]
    lines += table(["NAMESPACE", *headers] if with_namespace else headers, rows, notes)
    lines += _more(len(pods), len(shown), "pod", all(w is None for w, _ in judged[MAX_ROWS:]))
    return "\n".join(lines)


def _pod_notes(pod: Obj, now: datetime) -> list[str]:
    """One line: why this pod is unhappy, from its conditions and container states."""
    parts: list[str] = []
    scheduled = find_condition(pod, "PodScheduled")
    if text(scheduled, "status") == "False":
        parts.append(
            f"{clean(text(scheduled, 'reason'), 40) or 'not scheduled'}: "
            f"{clean(text(scheduled, 'message'), MESSAGE_CHARS)}".rstrip(": ")
        )
    for status in items(pod, "status", "containerStatuses"):
        name = clean(text(status, "name"), 63)
        waiting = mapping(status, "state", "waiting")
        terminated = mapping(status, "state", "terminated")
        last = last_termination(status)
        said = []
        if waiting and text(waiting, "reason") not in ("", "ContainerCreating"):
            message = clean(text(waiting, "message"), 100)
            said.append(
                f"waiting {clean(text(waiting, 'reason'), 40)}"
                + (f" ({message})" if message else "")
            )
        if terminated:
            said.append(f"terminated {clean(text(terminated, 'reason'), 40) or 'now'}")
        if last:
            ended = when(status, "lastState", "terminated", "finishedAt")
            said.append(f"last exit {last} {ago(ended, now)}")
        if said:
            parts.append(f"{name}: " + ", ".join(said))
    message = clean(text(pod, "status", "message"), MESSAGE_CHARS)
    if message and not parts:
        parts.append(message)
    return [_joined(parts)] if parts else []


def workloads_listing(
    objs: Sequence[Obj], kind: str, now: datetime, *, where: str, with_namespace: bool
) -> str:
    noun = KINDS[kind].kind.lower()
    judged = [(workload_problems(o, kind), o) for o in objs]
    judged.sort(key=lambda pair: (not pair[0], ns_of(pair[1]), name_of(pair[1])))
    problems = [f"{name_of(o)} ({', '.join(why)})" for why, o in judged if why]
    healthy = len(objs) - len(problems)
    rest = f"{healthy} fully ready" if healthy else ""
    lines = [_head(where, len(objs), noun, problems, rest, named=True)]
    if not objs:
        return lines[0]
    shown = judged[:MAX_ROWS]
    rows, notes = [], []
    for why, obj in shown:
        ready, desired = workload_counts(obj, kind)
        created = age(when(obj, "metadata", "creationTimestamp"), now)
        names, images = containers_images(obj)
        if kind == "deployments":
            row = [
                name_of(obj),
                f"{ready}/{desired}",
                str(number(obj, "status", "updatedReplicas")),
                str(number(obj, "status", "availableReplicas")),
                created,
            ]
        elif kind == "statefulsets":
            row = [name_of(obj), f"{ready}/{desired}", created]
        else:
            row = [
                name_of(obj),
                str(desired),
                str(ready),
                str(number(obj, "status", "updatedNumberScheduled")),
                str(number(obj, "status", "numberAvailable")),
                created,
            ]
        row += [clean(names, CELL_CHARS), clean(images, CELL_CHARS * 2)]
        rows.append([ns_of(obj), *row] if with_namespace else row)
        notes.append(_workload_notes(obj, why))
    headers = {
        "deployments": ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"],
        "statefulsets": ["NAME", "READY", "AGE"],
        "daemonsets": ["NAME", "DESIRED", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"],
    }[kind] + ["CONTAINERS", "IMAGES"]
    lines += table(["NAMESPACE", *headers] if with_namespace else headers, rows, notes)
    lines += _more(len(objs), len(shown), noun, all(not w for w, _ in judged[MAX_ROWS:]))
    return "\n".join(lines)


def _workload_notes(obj: Obj, why: Sequence[str]) -> list[str]:
    if not why:
        return []
    parts = []
    for cond in items(obj, "status", "conditions"):
        kind, status = text(cond, "type"), text(cond, "status")
        if (kind in ("Progressing", "Available") and status == "False") or (
            kind == "ReplicaFailure" and status == "True"
        ):
            parts.append(
                f"{clean(kind, 30)}={status} {clean(text(cond, 'reason'), 40)}: "
                f"{clean(text(cond, 'message'), MESSAGE_CHARS)}"
            )
    unavailable = number(obj, "status", "unavailableReplicas") or number(
        obj, "status", "numberUnavailable"
    )
    if unavailable:
        parts.append(f"{unavailable} unavailable")
    if dig(obj, "spec", "paused") is True:
        parts.append("rollout paused")
    return [_joined(parts or why)]


def nodes_listing(nodes: Sequence[Obj], now: datetime) -> str:
    judged = [(node_problems(n), n) for n in nodes]
    judged.sort(key=lambda pair: (not pair[0], name_of(pair[1])))
    problems = [f"{name_of(n)} {', '.join(why)}" for why, n in judged if why]
    healthy = len(nodes) - len(problems)
    rest = f"{healthy} Ready" if healthy else ""
    lines = [_head("cluster", len(nodes), "node", problems, rest, named=True)]
    if not nodes:
        return lines[0]
    shown = judged[:MAX_ROWS]
    rows, notes = [], []
    for why, node in shown:
        labels = mapping(node, "metadata", "labels")
        roles = sorted(
            k.split("/", 1)[1]
            for k in labels
            if k.startswith("node-role.kubernetes.io/") and "/" in k
        )
        addresses = {
            text(a, "type"): text(a, "address") for a in items(node, "status", "addresses")
        }
        rows.append(
            [
                name_of(node),
                node_status(node),
                clean(",".join(roles), 40) or "<none>",
                age(when(node, "metadata", "creationTimestamp"), now),
                clean(text(node, "status", "nodeInfo", "kubeletVersion"), 30),
                clean(addresses.get("InternalIP", ""), 45) or "<none>",
            ]
        )
        notes.append(_node_notes(node) if why else [])
    headers = ["NAME", "STATUS", "ROLES", "AGE", "VERSION", "INTERNAL-IP"]
    lines += table(headers, rows, notes)
    lines += _more(len(nodes), len(shown), "node", all(not w for w, _ in judged[MAX_ROWS:]))
    return "\n".join(lines)


def _node_notes(node: Obj) -> list[str]:
    parts = []
    for cond in items(node, "status", "conditions"):
        kind, status = text(cond, "type"), text(cond, "status")
        if (kind == "Ready" and status != "True") or (kind in PRESSURES and status == "True"):
            parts.append(
                f"{clean(kind, 30)}={status} {clean(text(cond, 'reason'), 60)}: "
                f"{clean(text(cond, 'message'), 100)}"
            )
    if found := taints(node):
        parts.append("taints " + ", ".join(found[:5]))
    return [_joined(parts)] if parts else []


def services_listing(
    services: Sequence[Obj], now: datetime, *, where: str, with_namespace: bool
) -> str:
    def pending(svc: Obj) -> bool:
        lb = text(svc, "spec", "type") == "LoadBalancer"
        return lb and not items(svc, "status", "loadBalancer", "ingress")

    ordered = sorted(services, key=lambda s: (not pending(s), ns_of(s), name_of(s)))
    problems = [f"{name_of(s)} LoadBalancer <pending>" for s in ordered if pending(s)]
    types = _counts([clean(text(s, "spec", "type"), 20) or "ClusterIP" for s in ordered])
    lines = [_head(where, len(services), "service", problems, types, named=True)]
    if not services:
        return lines[0]
    shown = ordered[:MAX_ROWS]
    rows = []
    for svc in shown:
        ingress = items(svc, "status", "loadBalancer", "ingress")
        external = ",".join(text(i, "ip") or text(i, "hostname") for i in ingress) or ",".join(
            str(x) for x in dig(svc, "spec", "externalIPs") or ()
        )
        if not external:
            external = "<pending>" if pending(svc) else "<none>"
        ports = ",".join(
            f"{number(p, 'port')}"
            + (f":{number(p, 'nodePort')}" if number(p, "nodePort") else "")
            + f"/{text(p, 'protocol') or 'TCP'}"
            for p in items(svc, "spec", "ports")
        )
        row = [
            name_of(svc),
            clean(text(svc, "spec", "type"), 20) or "ClusterIP",
            clean(text(svc, "spec", "clusterIP"), 45) or "<none>",
            clean(external, CELL_CHARS),
            clean(ports, CELL_CHARS) or "<none>",
            age(when(svc, "metadata", "creationTimestamp"), now),
            clean(selector_text(mapping(svc, "spec", "selector")), CELL_CHARS) or "<none>",
        ]
        rows.append([ns_of(svc), *row] if with_namespace else row)
    headers = ["NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE", "SELECTOR"]
    lines += table(["NAMESPACE", *headers] if with_namespace else headers, rows, [[] for _ in rows])
    lines += _more(len(services), len(shown), "service", False)
    return "\n".join(lines)


def events_listing(
    events: Sequence[Obj], now: datetime, *, where: str, with_namespace: bool
) -> str:
    ordered = newest_first(events)
    warnings = [e for e in ordered if text(e, "type") == "Warning"]
    reasons: Counter[str] = Counter()
    for event in warnings:
        reasons[clean(text(event, "reason"), 40)] += event_count(event)
    head = f"{where}: {plural(len(events), 'event')}"
    if warnings:
        top = ", ".join(
            f"{r} x{n}" for r, n in sorted(reasons.items(), key=lambda x: (-x[1], x[0]))[:6]
        )
        head += f", {len(warnings)} Warning: {top}"
    elif events:
        head += ", no warnings"
    if not events:
        return head
    shown = ordered[:MAX_EVENTS]
    rows = []
    for event in shown:
        row = [
            age(event_time(event), now),
            clean(text(event, "type"), 10) or "Normal",
            clean(text(event, "reason"), 40),
            _involved(event),
            event_message(event, now),
        ]
        rows.append([ns_of(event), *row] if with_namespace else row)
    headers = ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    lines = [
        head,
        *table(["NAMESPACE", *headers] if with_namespace else headers, rows, [[] for _ in rows]),
    ]
    if len(events) > len(shown):
        lines.append(
            f"… {len(events) - len(shown)} more events (older or Normal); "
            "warnings_only=true narrows"
        )
    return "\n".join(lines)


def _involved(event: Obj) -> str:
    involved = mapping(event, "involvedObject") or mapping(event, "regarding")
    return f"{clean(text(involved, 'kind'), 30).lower()}/{clean(text(involved, 'name'), 80)}"


def event_message(event: Obj, now: datetime) -> str:
    message = clean(text(event, "message") or text(event, "note"), MESSAGE_CHARS)
    count = event_count(event)
    if count > 1:
        first = when(event, "firstTimestamp") or when(event, "eventTime")
        span = f" over {age(first, now)}" if first else ""
        return f"(x{count}{span}) {message}"
    return message


def listing(
    kind: str, objs: Sequence[Obj], now: datetime, *, where: str, with_namespace: bool
) -> str:
    if kind == "pods":
        return pods_listing(objs, now, where=where, with_namespace=with_namespace)
    if kind == "nodes":
        return nodes_listing(objs, now)
    if kind == "services":
        return services_listing(objs, now, where=where, with_namespace=with_namespace)
    if kind == "events":
        return events_listing(objs, now, where=where, with_namespace=with_namespace)
    return workloads_listing(objs, kind, now, where=where, with_namespace=with_namespace)


def pods_brief(pods: Sequence[Obj], now: datetime, *, limit: int = 5) -> str:
    """A workload's or node's pods in a few lines: counts, then the ones that need
    attention with why."""
    judged = sorted(
        ((pod_problem(p), p) for p in pods), key=lambda x: (x[0] is None, name_of(x[1]))
    )
    problems = [why for why, _ in judged if why is not None]
    healthy = Counter(pod_status(p) for why, p in judged if why is None)
    rest = ", ".join(f"{n} {w}" for w, n in sorted(healthy.items()))
    lines = [_head("Pods", len(pods), "pod", problems, rest)]
    for _, pod in judged[: min(limit, len(problems))]:
        count, _ = restarts(pod)
        ready, total = ready_count(pod)
        lines.append(
            f"  {name_of(pod)}  {pod_status(pod)}  {ready}/{total} ready  "
            f"{plural(count, 'restart')}  "
            f"node {clean(text(pod, 'spec', 'nodeName'), 63) or '<none>'}"
        )
        lines.extend(f"    ↳ {note}" for note in _pod_notes(pod, now))
    if len(problems) > limit:
        lines.append(f"  … {len(problems) - limit} more that need attention (k8s_get lists them)")
    return "\n".join(lines)

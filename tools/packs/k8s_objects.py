"""Kubernetes objects as the ``kubernetes`` pack reads them; pure, no I/O.

The kinds the pack knows (:data:`KINDS`, with kubectl's short names), the validated
argument types (DNS-1123 names and labels, label selectors), and what an object *means*
read from its untrusted JSON: a pod's status word the way ``kubectl get pods`` computes it
(``CrashLoopBackOff``, ``Init:0/1``, ``Terminating``, ``OOMKilled``), readiness, restarts,
why a workload or a node needs attention. Every string that came from the API passes
:func:`clean` (control characters out, one line, clipped) before it reaches text.
The text itself is built in ``tools.packs.k8s_text``.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field

TEXT_CHARS = 200
Obj = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Kind:
    plural: str  # what the tools take: "deployments"
    kind: str  # what the API says: "Deployment"
    namespaced: bool
    api: Literal["core", "apps"]
    method: str  # kubernetes_asyncio's name part: "deployment", "stateful_set"
    aliases: tuple[str, ...]


KINDS: Mapping[str, Kind] = {
    k.plural: k
    for k in (
        Kind("pods", "Pod", True, "core", "pod", ("pod", "po")),
        Kind("deployments", "Deployment", True, "apps", "deployment", ("deployment", "deploy")),
        Kind("statefulsets", "StatefulSet", True, "apps", "stateful_set", ("statefulset", "sts")),
        Kind("daemonsets", "DaemonSet", True, "apps", "daemon_set", ("daemonset", "ds")),
        Kind("nodes", "Node", False, "core", "node", ("node", "no")),
        Kind("services", "Service", True, "core", "service", ("service", "svc")),
        Kind("events", "Event", True, "core", "event", ("event", "ev")),
    )
}
_ALIASES = {alias: k.plural for k in KINDS.values() for alias in (*k.aliases, k.kind.lower())}


def _kind(value: object) -> object:
    """``Deployment``, ``deploy``, ``deployments.apps`` → ``deployments``; anything else
    is left for the Literal to refuse (with the list of kinds)."""
    if not isinstance(value, str):
        return value
    word = value.strip().lower().removesuffix(".apps").removesuffix(".v1")
    return _ALIASES.get(word, word)


DNS1123_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
# Label selectors as kubectl takes them: ``app=web,tier!=db``, ``env in (a,b)``, ``!canary``.
SELECTOR = r"^[A-Za-z0-9._/=!,() -]+$"


def _whole(pattern: str) -> AfterValidator:
    # Python's ``$`` also matches before a final newline: 'web\n' would pass the pattern.
    compiled = re.compile(pattern[1:-1])

    def check(value: str) -> str:
        if compiled.fullmatch(value) is None:
            raise ValueError(f"must match the pattern {pattern!r}")
        return value

    return AfterValidator(check)


ListKind = Annotated[
    Literal["pods", "deployments", "statefulsets", "daemonsets", "nodes", "services", "events"],
    BeforeValidator(_kind),
]
DescribeKind = Annotated[
    Literal["pods", "deployments", "statefulsets", "daemonsets", "nodes", "services"],
    BeforeValidator(_kind),
]
RestartKind = Annotated[
    Literal["deployments", "statefulsets", "daemonsets"], BeforeValidator(_kind)
]
ScaleKind = Annotated[Literal["deployments", "statefulsets"], BeforeValidator(_kind)]
Namespace = Annotated[
    str,
    Field(min_length=1, max_length=63, pattern=DNS1123_LABEL),
    _whole(DNS1123_LABEL),
]
Name = Annotated[
    str,
    Field(min_length=1, max_length=253, pattern=DNS1123_SUBDOMAIN),
    _whole(DNS1123_SUBDOMAIN),
]
ContainerName = Annotated[
    str, Field(min_length=1, max_length=63, pattern=DNS1123_LABEL), _whole(DNS1123_LABEL)
]
Selector = Annotated[str, Field(min_length=1, max_length=500, pattern=SELECTOR), _whole(SELECTOR)]


# -- reading untrusted JSON ---------------------------------------------------------


def dig(obj: object, *path: str) -> Any:
    """``obj[path[0]][path[1]]…`` or ``None`` as soon as something is not a mapping."""
    for key in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def text(obj: object, *path: str) -> str:
    value = dig(obj, *path)
    return value if isinstance(value, str) else ("" if value is None else str(value))


def number(obj: object, *path: str) -> int:
    value = dig(obj, *path)
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return 0


def items(obj: object, *path: str) -> list[Obj]:
    value = dig(obj, *path)
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def mapping(obj: object, *path: str) -> Obj:
    value = dig(obj, *path)
    return value if isinstance(value, Mapping) else {}


# Terminal escapes: CSI (colours, cursor), OSC (titles, links; ended by BEL or ST), others.
_CONTROL = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-_]")


def clean(value: object, limit: int = TEXT_CHARS) -> str:
    """Untrusted text on one line: escapes and control characters out, cut with ``…``."""
    raw = _CONTROL.sub("", value if isinstance(value, str) else str(value))
    flat = " ".join(
        "".join(ch if unicodedata.category(ch)[0] != "C" else " " for ch in raw).split()
    )
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def clean_line(line: str, limit: int) -> str:
    """One log line: escapes and control characters out (tabs kept), cut with ``…``."""
    raw = _CONTROL.sub("", line).replace("\t", "    ")
    out = "".join(ch if unicodedata.category(ch)[0] != "C" else "" for ch in raw).rstrip()
    return out if len(out) <= limit else out[: limit - 1] + "…"


def when(obj: object, *path: str) -> datetime | None:
    """An RFC 3339 timestamp from the API, or ``None``."""
    value = dig(obj, *path)
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def age(moment: datetime | None, now: datetime) -> str:
    """kubectl-like ages: ``45s``, ``12m``, ``3h20m``, ``14h``, ``2d5h``, ``30d``."""
    if moment is None:
        return "<unknown>"
    seconds = int((now - moment).total_seconds())
    if seconds < 0:
        return "0s"
    if seconds < 120:
        return f"{seconds}s"
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if minutes < 60:
        return f"{minutes}m"
    if hours < 10:
        rest = minutes % 60
        return f"{hours}h{rest}m" if rest else f"{hours}h"
    if hours < 24:
        return f"{hours}h"
    if days < 10:
        rest = hours % 24
        return f"{days}d{rest}h" if rest else f"{days}d"
    return f"{days}d"


def ago(moment: datetime | None, now: datetime) -> str:
    return "at an unknown time" if moment is None else f"{age(moment, now)} ago"


def plural(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


# -- pods ---------------------------------------------------------------------------


def pod_status(pod: Obj) -> str:
    """The STATUS word of ``kubectl get pods`` (its printPod logic, reduced)."""
    reason = text(pod, "status", "reason") or text(pod, "status", "phase") or "Unknown"
    init_specs = items(pod, "spec", "initContainers")
    initializing = False
    for i, status in enumerate(items(pod, "status", "initContainerStatuses")):
        terminated = mapping(status, "state", "terminated")
        waiting = mapping(status, "state", "waiting")
        if terminated and number(terminated, "exitCode") == 0:
            continue
        restartable = text(init_specs[i] if i < len(init_specs) else {}, "restartPolicy")
        if restartable == "Always" and dig(status, "started") is True:
            continue  # a sidecar that runs
        initializing = True
        if terminated:
            reason = "Init:" + (text(terminated, "reason") or _exit_word(terminated))
        elif waiting and text(waiting, "reason") not in ("", "PodInitializing"):
            reason = "Init:" + text(waiting, "reason")
        else:
            reason = f"Init:{i}/{len(init_specs) or i + 1}"
        break
    if not initializing:
        running = False
        for status in reversed(items(pod, "status", "containerStatuses")):
            waiting = mapping(status, "state", "waiting")
            terminated = mapping(status, "state", "terminated")
            if waiting and text(waiting, "reason"):
                reason = text(waiting, "reason")
            elif terminated:
                reason = text(terminated, "reason") or _exit_word(terminated)
            elif dig(status, "state", "running") is not None and dig(status, "ready") is True:
                running = True
        if reason == "Completed" and running:
            reason = "Running" if condition(pod, "Ready") == "True" else "NotReady"
    if dig(pod, "metadata", "deletionTimestamp"):
        reason = "Unknown" if text(pod, "status", "reason") == "NodeLost" else "Terminating"
    return clean(reason, 40)


def _exit_word(terminated: Obj) -> str:
    signal = number(terminated, "signal")
    return f"Signal:{signal}" if signal else f"ExitCode:{number(terminated, 'exitCode')}"


def condition(obj: Obj, kind: str) -> str:
    """The status (``True``/``False``/``Unknown``) of a condition, ``""`` when absent."""
    for cond in items(obj, "status", "conditions"):
        if text(cond, "type") == kind:
            return text(cond, "status")
    return ""


def find_condition(obj: Obj, kind: str) -> Obj:
    for cond in items(obj, "status", "conditions"):
        if text(cond, "type") == kind:
            return cond
    return {}


def ready_count(pod: Obj) -> tuple[int, int]:
    statuses = items(pod, "status", "containerStatuses")
    total = len(items(pod, "spec", "containers")) or len(statuses)
    return sum(1 for s in statuses if dig(s, "ready") is True), total


def restarts(pod: Obj) -> tuple[int, datetime | None]:
    """Restart count of the pod's containers and when the last one ended."""
    count, last = 0, None
    for status in items(pod, "status", "containerStatuses"):
        count += number(status, "restartCount")
        ended = when(status, "lastState", "terminated", "finishedAt")
        if ended is not None and (last is None or ended > last):
            last = ended
    return count, last


HEALTHY_POD = frozenset({"Running", "Completed", "Succeeded"})


def pod_problem(pod: Obj) -> str | None:
    """Why a pod needs attention, in a few words, or ``None``."""
    status = pod_status(pod)
    ready, total = ready_count(pod)
    if status not in HEALTHY_POD:
        if status == "Pending":
            scheduled = find_condition(pod, "PodScheduled")
            if text(scheduled, "status") == "False":
                return f"Pending: {clean(text(scheduled, 'reason') or 'not scheduled', 40)}"
        return status
    if status == "Running" and ready < total:
        return f"Running, {ready}/{total} ready"
    return None


def last_termination(status: Obj) -> str:
    """``OOMKilled (exit 137) 2m ago``-style words for a container's last state."""
    terminated = mapping(status, "lastState", "terminated")
    if not terminated:
        return ""
    reason = clean(text(terminated, "reason") or "Terminated", 40)
    signal = number(terminated, "signal")
    code = f"signal {signal}" if signal else f"exit {number(terminated, 'exitCode')}"
    return f"{reason} ({code})"


def owner(obj: Obj) -> str:
    """``ReplicaSet/api-7d9c8b6f5`` (the controller), or ``""``."""
    refs = items(obj, "metadata", "ownerReferences")
    chosen = next((r for r in refs if dig(r, "controller") is True), refs[0] if refs else None)
    if chosen is None:
        return ""
    return f"{clean(text(chosen, 'kind'), 40)}/{clean(text(chosen, 'name'), 80)}"


# -- workloads and nodes --------------------------------------------------------------


PRESSURES = ("MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable")


def node_status(node: Obj) -> str:
    ready = condition(node, "Ready")
    word = "Ready" if ready == "True" else ("NotReady" if ready == "False" else "Unknown")
    if dig(node, "spec", "unschedulable") is True:
        word += ",SchedulingDisabled"
    return word


def node_problems(node: Obj) -> list[str]:
    out = []
    ready = find_condition(node, "Ready")
    if text(ready, "status") != "True":
        out.append(f"Ready={text(ready, 'status') or 'Unknown'}")
    out.extend(kind for kind in PRESSURES if condition(node, kind) == "True")
    if dig(node, "spec", "unschedulable") is True:
        out.append("cordoned")
    return out


def taints(node: Obj) -> list[str]:
    out = []
    for taint in items(node, "spec", "taints"):
        value = text(taint, "value")
        key = clean(text(taint, "key"), 80) + (f"={clean(value, 60)}" if value else "")
        out.append(f"{key}:{clean(text(taint, 'effect'), 20)}")
    return out


def workload_counts(obj: Obj, kind: str) -> tuple[int, int]:
    """(ready, desired) for a deployment, statefulset or daemonset."""
    if kind == "daemonsets":
        return number(obj, "status", "numberReady"), number(obj, "status", "desiredNumberScheduled")
    desired = dig(obj, "spec", "replicas")
    return number(obj, "status", "readyReplicas"), number(
        obj, "spec", "replicas"
    ) if desired is not None else 1


def workload_problems(obj: Obj, kind: str) -> list[str]:
    """Why a workload needs attention: unready replicas, a failed rollout, a pause."""
    out = []
    ready, desired = workload_counts(obj, kind)
    if ready < desired:
        out.append(f"{ready}/{desired} ready")
    for cond in items(obj, "status", "conditions"):
        kind_, status, reason = text(cond, "type"), text(cond, "status"), text(cond, "reason")
        bad = (kind_ in ("Progressing", "Available") and status == "False") or (
            kind_ == "ReplicaFailure" and status == "True"
        )
        if bad:
            out.append(f"{clean(kind_, 30)}={status} {clean(reason, 40)}".rstrip())
    if dig(obj, "spec", "paused") is True:
        out.append("rollout paused")
    return out


def containers_images(obj: Obj) -> tuple[str, str]:
    specs = items(obj, "spec", "template", "spec", "containers")
    names = ",".join(clean(text(c, "name"), 40) for c in specs)
    images = ",".join(clean(text(c, "image"), 80) for c in specs)
    return names, images


def selector_text(selector: Obj) -> str:
    """A LabelSelector (``matchLabels``) as ``app=web,tier=api``."""
    labels = mapping(selector, "matchLabels") or selector
    pairs = [
        f"{clean(k, 60)}={clean(v, 60)}" for k, v in sorted(labels.items()) if isinstance(v, str)
    ]
    return ",".join(pairs)


def event_time(event: Obj) -> datetime | None:
    return (
        when(event, "lastTimestamp")
        or when(event, "series", "lastObservedTime")
        or when(event, "eventTime")
        or when(event, "firstTimestamp")
        or when(event, "metadata", "creationTimestamp")
    )


def event_count(event: Obj) -> int:
    return max(number(event, "count"), number(event, "series", "count"), 1)


def newest_first(events: Sequence[Obj], *, warnings_first: bool = True) -> list[Obj]:
    epoch = datetime.min.replace(tzinfo=UTC)

    def key(event: Obj) -> tuple[bool, float]:
        moment = event_time(event) or epoch
        warning = text(event, "type") == "Warning"
        return (not warning if warnings_first else False, -moment.timestamp())

    return sorted(events, key=key)

"""The Kubernetes RBAC each ``kubernetes`` pack tool needs; pure, no I/O.

What the Helm chart (``deploy/helm/opsloop``) grants the bot's service account, and what
``tests/deploy/test_chart.py`` checks its rendered ClusterRole and Roles against. Each
entry is derived from the requests the tool makes (``tools.packs.k8s_calls``) over the
kinds its arguments accept (``tools.packs.k8s_objects``):

* ``k8s_get``: one ``list`` per kind (a name is a ``metadata.name`` field selector, still a
  list), namespaced or across namespaces, nodes cluster-wide;
* ``k8s_describe``: ``get`` of the object, ``list`` of its events, and for a workload
  (label selector) or a node (``spec.nodeName``) a ``list`` of its pods;
* ``k8s_logs``: ``get`` of the pod (its containers), ``get`` of ``pods/log``;
* ``k8s_events``: ``list`` of events (core ``v1``, as kubectl reads them);
* ``k8s_rollout_restart``: ``get`` of the workload (paused?), ``patch`` of its template;
* ``k8s_scale``: ``get`` and ``patch`` of the ``scale`` subresource only;
* ``k8s_delete_pod``: ``delete`` of the pod (its dry run is the API server's ``dryRun=All``,
  which needs the same verb).

``opsloop check`` (``tools.packs.kubernetes.probe``) lists one pod per namespace (a
``k8s_get`` permission) and reads each allowed namespace, which it does not require: a
403 there is ignored, so :data:`CHECK` is granted only as a convenience. The server's
``/version`` is a non-resource URL every authenticated account may read.

A permission is one ``(apiGroup, resource, verb)`` triple; ``""`` is the core group.
Read-only tools are granted cluster-wide (a ClusterRole) by the chart; the write tools'
permissions only in the namespaces its values list (a Role and RoleBinding in each).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import get_args

from tools.packs.k8s_objects import KINDS, DescribeKind, ListKind, RestartKind, ScaleKind


@dataclass(frozen=True, slots=True, order=True)
class Permission:
    """One RBAC grant: ``verb`` on ``resource`` (``pods``, ``pods/log``) of ``api_group``."""

    api_group: str
    resource: str
    verb: str


def _kinds(annotated: object) -> tuple[str, ...]:
    """The plural kind names an ``Annotated[Literal[...], ...]`` argument type accepts."""
    literal = get_args(annotated)[0]
    return tuple(get_args(literal))


def _group(kind: str) -> str:
    return "" if KINDS[kind].api == "core" else KINDS[kind].api


def _on(kinds: Iterable[str], *verbs: str, sub: str = "") -> frozenset[Permission]:
    return frozenset(
        Permission(_group(kind), kind + (f"/{sub}" if sub else ""), verb)
        for kind in kinds
        for verb in verbs
    )


READ_ONLY: Mapping[str, frozenset[Permission]] = {
    "k8s_get": _on(_kinds(ListKind), "list"),
    "k8s_describe": _on(_kinds(DescribeKind), "get")
    | _on(["events"], "list")
    | _on(["pods"], "list"),  # a workload's or a node's pods
    "k8s_logs": _on(["pods"], "get") | _on(["pods"], "get", sub="log"),
    "k8s_events": _on(["events"], "list"),
}
WRITE: Mapping[str, frozenset[Permission]] = {
    "k8s_rollout_restart": _on(_kinds(RestartKind), "get", "patch"),
    "k8s_scale": _on(_kinds(ScaleKind), "get", "patch", sub="scale"),
    "k8s_delete_pod": _on(["pods"], "delete"),
}
TOOLS: Mapping[str, frozenset[Permission]] = {**READ_ONLY, **WRITE}
CHECK: frozenset[Permission] = frozenset({Permission("", "namespaces", "get")})
CLUSTER_SCOPED = frozenset({"nodes", "namespaces"})


def needed(tools: Iterable[str], *, check: bool = False) -> frozenset[Permission]:
    """Every permission ``tools`` need together (and ``opsloop check``'s, with ``check``);
    ``KeyError`` naming a tool this module does not know."""
    granted: set[Permission] = set(CHECK) if check else set()
    for name in tools:
        if name not in TOOLS:
            raise KeyError(f"{name}: no RBAC entry in tools.packs.k8s_rbac")
        granted |= TOOLS[name]
    return frozenset(granted)


def namespaced(permissions: Iterable[Permission]) -> frozenset[Permission]:
    """Those a Role can grant (a Role cannot grant nodes or namespaces)."""
    return frozenset(p for p in permissions if p.resource.split("/")[0] not in CLUSTER_SCOPED)


def as_rules(permissions: Iterable[Permission]) -> list[dict[str, list[str]]]:
    """RBAC ``rules``: one per (apiGroup, resource), its verbs sorted; a stable order."""
    verbs: dict[tuple[str, str], set[str]] = {}
    for p in permissions:
        verbs.setdefault((p.api_group, p.resource), set()).add(p.verb)
    return [
        {"apiGroups": [group], "resources": [resource], "verbs": sorted(v)}
        for (group, resource), v in sorted(verbs.items())
    ]

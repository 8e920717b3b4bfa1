"""What the ``kubernetes`` pack's calls ask the API, and the words of the changes' answers.

:class:`Kubernetes` holds the seven operations over one ``k8s_client.Kube``: which
requests each makes (a list is one request per allowed namespace when
``OPSLOOP_K8S_NAMESPACES`` is set, else one across namespaces), the namespace check
before any of them, and the answers of the changes (rollout restart, scale, delete) and
of ``k8s_logs``. It remembers the replica counts it last read (:class:`Seen`) so that
the scale card can say current → new before anything runs. The read-only text comes
from ``k8s_text`` and ``k8s_describe``; the tools themselves are in
``tools.packs.kubernetes``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from bot.errors import ToolError
from tools.packs.k8s_client import Json, Kube
from tools.packs.k8s_describe import describe
from tools.packs.k8s_objects import (
    KINDS,
    Kind,
    Obj,
    age,
    ago,
    clean,
    clean_line,
    dig,
    items,
    last_termination,
    mapping,
    number,
    owner,
    plural,
    pod_status,
    restarts,
    text,
    when,
    workload_counts,
)
from tools.packs.k8s_text import listing, pods_brief

# Objects per list request (the API's ``limit``): a real cluster's worth, well inside
# ``k8s_client.MAX_BODY_BYTES``. Events come in the server's key order, not newest first,
# so they get more room: a cut list could miss the newest.
MAX_LIST = 2000
MAX_EVENTS_LIST = 5000
LOG_BYTES = 256_000  # asked of the API server per log request
LOG_CHARS = 3500  # of log text in an answer (the newest lines win)
LOG_LINE_CHARS = 400
RESTARTED_AT = "kubectl.kubernetes.io/restartedAt"
FIELD_MANAGER = "opsloop"

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class Seen:
    """A workload's replica counts as last read, for the scale card's current → new."""

    desired: int
    ready: int
    at: datetime


class Kubernetes:
    """The seven operations over one :class:`Kube`."""

    def __init__(self, kube: Kube, *, clock: Clock = utc_now) -> None:
        self.kube = kube
        self.clock = clock
        self.seen: dict[tuple[str, str, str], Seen] = {}

    async def _api(self, kind: Kind) -> Any:
        return await (self.kube.core() if kind.api == "core" else self.kube.apps())

    def _namespace(self, kind: Kind, namespace: str | None) -> None:
        if kind.namespaced and namespace is not None:
            self.kube.namespaces.check(namespace)

    async def _list(
        self, kind: Kind, namespace: str | None, **query: str
    ) -> tuple[list[Obj], str, bool, bool]:
        """Objects, where they were looked for, whether several namespaces were, and
        whether the API cut the list."""
        api = await self._api(kind)
        verb = f"list {kind.plural}"
        limit = MAX_EVENTS_LIST if kind.plural == "events" else MAX_LIST
        if not kind.namespaced:
            bodies = [
                await self.kube.call(
                    verb, getattr(api, f"list_{kind.method}"), limit=limit, **query
                )
            ]
            where, several = "cluster", False
        elif namespace is not None:
            method = getattr(api, f"list_namespaced_{kind.method}")
            bodies = [
                await self.kube.call(
                    f"{verb} in {namespace}", method, namespace, limit=limit, **query
                )
            ]
            where, several = namespace, False
        elif self.kube.namespaces.restricted:
            method = getattr(api, f"list_namespaced_{kind.method}")
            allowed = self.kube.namespaces.allowed
            bodies = await asyncio.gather(
                *(
                    self.kube.call(f"{verb} in {ns}", method, ns, limit=limit, **query)
                    for ns in allowed
                )
            )
            where, several = f"namespaces {','.join(allowed)}", len(allowed) > 1
        else:
            method = getattr(api, f"list_{kind.method}_for_all_namespaces")
            bodies = [await self.kube.call(verb, method, limit=limit, **query)]
            where, several = "all namespaces", True
        objs = [obj for body in bodies for obj in items(body, "items")]
        cut = any(text(body, "metadata", "continue") for body in bodies)
        self._remember(kind.plural, objs)
        return objs, where, several, cut

    def _remember(self, kind: str, objs: Sequence[Obj]) -> None:
        if kind not in ("deployments", "statefulsets"):
            return
        now = self.clock()
        for obj in objs:
            ready, desired = workload_counts(obj, kind)
            key = (kind, text(obj, "metadata", "namespace"), text(obj, "metadata", "name"))
            self.seen[key] = Seen(desired, ready, now)

    async def get(
        self, kind_name: str, namespace: str | None, name: str | None, selector: str | None
    ) -> str:
        kind = KINDS[kind_name]
        self._namespace(kind, namespace)
        query: dict[str, str] = {}
        if selector:
            query["label_selector"] = selector
        if name:
            query["field_selector"] = f"metadata.name={name}"
        objs, where, several, cut = await self._list(
            kind, namespace if kind.namespaced else None, **query
        )
        if name and not objs:
            raise ToolError(f"no {kind.kind.lower()} named {name!r} in {where}")
        text_ = listing(kind.plural, objs, self.clock(), where=where, with_namespace=several)
        if cut:
            text_ += (
                f"\n(the API returned the first {MAX_LIST} {kind.plural} of each namespace only; "
                "narrow the query)"
            )
        return text_

    async def events(self, namespace: str | None, warnings_only: bool) -> str:
        kind = KINDS["events"]
        self._namespace(kind, namespace)
        query = {"field_selector": "type=Warning"} if warnings_only else {}
        objs, where, several, cut = await self._list(kind, namespace, **query)
        answer = listing("events", objs, self.clock(), where=where, with_namespace=several)
        return answer + ("\n(the list was cut by the API; narrow it)" if cut else "")

    async def _read(self, kind: Kind, name: str, namespace: str) -> Json:
        api = await self._api(kind)
        if kind.namespaced:
            what = f"read {_label(kind, name, namespace)}"
            return await self.kube.call(
                what, getattr(api, f"read_namespaced_{kind.method}"), name, namespace
            )
        return await self.kube.call(
            f"read {kind.kind.lower()} {name}", getattr(api, f"read_{kind.method}"), name
        )

    async def _read_scale(self, kind: Kind, name: str, namespace: str) -> Json:
        api = await self._api(kind)
        return await self.kube.call(
            f"read the scale of {_label(kind, name, namespace)}",
            getattr(api, f"read_namespaced_{kind.method}_scale"),
            name,
            namespace,
        )

    async def _patch(
        self, what: str, kind: Kind, name: str, namespace: str, patch: Json, subresource: str = ""
    ) -> Json:
        """``patch`` applied to the object (or its ``subresource``), as ``FIELD_MANAGER``."""
        api = await self._api(kind)
        suffix = f"_{subresource}" if subresource else ""
        return await self.kube.call(
            what,
            getattr(api, f"patch_namespaced_{kind.method}{suffix}"),
            name,
            namespace,
            patch,
            field_manager=FIELD_MANAGER,
        )

    async def describe(self, kind_name: str, name: str, namespace: str) -> str:
        kind = KINDS[kind_name]
        self._namespace(kind, namespace)
        obj = await self._read(kind, name, namespace)
        self._remember(kind.plural, [obj])
        involved = f"involvedObject.name={name},involvedObject.kind={kind.kind}"
        events, _, _, _ = await self._list(
            KINDS["events"], namespace if kind.namespaced else None, field_selector=involved
        )
        answer = describe(kind.plural, obj, events, self.clock())
        pods: list[Obj] | None = None
        selector = mapping(obj, "spec", "selector", "matchLabels")
        if kind.plural in ("deployments", "statefulsets", "daemonsets") and selector:
            labels = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
            pods, _, _, _ = await self._list(KINDS["pods"], namespace, label_selector=labels)
        elif kind.plural == "nodes":
            pods, _, _, _ = await self._list(
                KINDS["pods"], None, field_selector=f"spec.nodeName={name}"
            )
        if pods is not None:
            answer += "\n" + pods_brief(pods, self.clock())
        return answer

    async def logs(
        self, pod: str, namespace: str, container: str | None, lines: int, previous: bool
    ) -> str:
        self.kube.namespaces.check(namespace)
        obj = await self._read(KINDS["pods"], pod, namespace)
        names = [text(c, "name") for c in items(obj, "spec", "containers")]
        init = [text(c, "name") for c in items(obj, "spec", "initContainers")]
        note = ""
        if container is None:
            default = text(
                obj, "metadata", "annotations", "kubectl.kubernetes.io/default-container"
            )
            container = default if default in names else (names[0] if names else "")
            if len(names) > 1:
                others = ", ".join(clean(n, 63) for n in names)
                note = f" (1 of {len(names)}: {others}; container= picks)"
        elif container not in names + init:
            known = ", ".join(clean(n, 63) for n in names + init) or "none"
            raise ToolError(
                f"pod {namespace}/{pod} has no container {container!r} (it has: {known})"
            )
        status = next(
            (s for s in items(obj, "status", "containerStatuses") if text(s, "name") == container),
            {},
        )
        core = await self.kube.core()
        run = "previous " if previous else ""
        what = f"read the {run}log of {namespace}/{pod} container {container}"
        body = await self.kube.raw(
            what,
            core.read_namespaced_pod_log,
            pod,
            namespace,
            container=container,
            tail_lines=lines,
            previous=previous,
            limit_bytes=LOG_BYTES,
        )
        now = self.clock()
        head = f"log of pod {namespace}/{pod}, container {clean(container, 63)}{note}"
        if previous:
            ended = when(status, "lastState", "terminated", "finishedAt")
            last = last_termination(status)
            head += f", previous run (ended {last + ' ' if last else ''}{ago(ended, now)})"
        elif mapping(status, "state", "waiting") and mapping(status, "lastState", "terminated"):
            reason = clean(text(status, "state", "waiting", "reason"), 40)
            count = plural(number(status, "restartCount"), "restart")
            head += (
                f"; the container is waiting ({reason}) after {count}: "
                "previous=true shows the crashed run's log"
            )
        return head + "\n" + _log_tail(body, lines)

    # -- changes -----------------------------------------------------------------------

    async def rollout_restart(self, kind_name: str, name: str, namespace: str) -> str:
        kind = KINDS[kind_name]
        self.kube.namespaces.check(namespace)
        before = await self._read(kind, name, namespace)
        label = _label(kind, name, namespace)
        if dig(before, "spec", "paused") is True:
            raise ToolError(f"{label} is paused; a restart would not roll out (resume it first)")
        stamp = self.clock().astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        patch = {"spec": {"template": {"metadata": {"annotations": {RESTARTED_AT: stamp}}}}}
        after = await self._patch(f"restart {label}", kind, name, namespace, patch)
        ready, desired = workload_counts(after, kind.plural)
        strategy = text(after, "spec", "strategy", "type") or text(
            after, "spec", "updateStrategy", "type"
        )
        done = (
            f"Restarted {label}: pod template annotated {RESTARTED_AT}={stamp}, generation "
            f"{number(before, 'metadata', 'generation')} → "
            f"{number(after, 'metadata', 'generation')}. "
        )
        follow = f'k8s_get(kind="{kind.plural}", namespace="{namespace}", name="{name}")'
        if strategy == "OnDelete":
            return done + (
                f"Its update strategy is OnDelete: its {plural(desired, 'pod')} are replaced "
                f"only when deleted (k8s_delete_pod); {follow} shows them."
            )
        return done + (
            f"Its {plural(desired, 'pod')} ({ready} ready now) are replaced by the "
            f"{clean(strategy, 30) or 'rollout'} strategy; follow it with {follow}."
        )

    def restart_preview(self, kind_name: str, name: str, namespace: str) -> str:
        kind = KINDS[kind_name]
        return (
            f"PATCH {_label(kind, name, namespace)}: set the pod template annotation "
            f"{RESTARTED_AT} to the current time (what `kubectl rollout restart "
            f"{kind.kind.lower()}/{name} -n {namespace}` does); its pods are then replaced one "
            "by one by its update strategy"
        )

    async def scale(self, kind_name: str, name: str, namespace: str, replicas: int) -> str:
        kind = KINDS[kind_name]
        self.kube.namespaces.check(namespace)
        label = _label(kind, name, namespace)
        current = await self._read_scale(kind, name, namespace)
        was, running = number(current, "spec", "replicas"), number(current, "status", "replicas")
        shown = self.seen.get((kind.plural, namespace, name))
        note = ""
        if shown is not None and shown.desired != was:
            note = f" (the approval card said {shown.desired}; it was {was} when the change ran)"
        if was == replicas:
            return f"{label} already wants {plural(replicas, 'replica')}; nothing changed{note}"
        patch = {"spec": {"replicas": replicas}}
        after = await self._patch(f"scale {label}", kind, name, namespace, patch, "scale")
        now_wanted = number(after, "spec", "replicas")
        self.seen[(kind.plural, namespace, name)] = Seen(now_wanted, running, self.clock())
        return (
            f"Scaled {label}: {was} → {now_wanted} replicas{note}. {running} running before the "
            f'change; follow it with k8s_get(kind="{kind.plural}", namespace="{namespace}", '
            f'name="{name}").'
        )

    async def scale_card(self, kind_name: str, name: str, namespace: str, replicas: int) -> str:
        """The approval card's line with the replica count read now (the core bounds the
        wait); the count last read when the read fails."""
        kind = KINDS[kind_name]
        try:
            self.kube.namespaces.check(namespace)
            current = await self._read_scale(kind, name, namespace)
        except ToolError:
            return self.scale_preview(kind_name, name, namespace, replicas)
        desired = number(current, "spec", "replicas")
        running = number(current, "status", "replicas")
        zero = "; to 0: every pod of it stops" if replicas == 0 else ""
        label = _label(kind, name, namespace)
        return f"Scale {label}: {desired} → {replicas} replicas ({running} running now){zero}"

    def scale_preview(self, kind_name: str, name: str, namespace: str, replicas: int) -> str:
        kind = KINDS[kind_name]
        label = _label(kind, name, namespace)
        seen = self.seen.get((kind.plural, namespace, name))
        zero = "; to 0: every pod of it stops" if replicas == 0 else ""
        if seen is None:
            return (
                f"Scale {label}: ? → {replicas} replicas (its current count has not been read "
                f"yet; the result will say current → new){zero}"
            )
        return (
            f"Scale {label}: {seen.desired} → {replicas} replicas "
            f"({seen.ready} ready when read {ago(seen.at, self.clock())}){zero}"
        )

    async def delete_pod(self, name: str, namespace: str, *, dry_run: bool) -> str:
        self.kube.namespaces.check(namespace)
        core = await self.kube.core()
        what = f"{'dry-run ' if dry_run else ''}delete pod {namespace}/{name}"
        extra: dict[str, str] = {"dry_run": "All"} if dry_run else {}
        pod = await self.kube.call(what, core.delete_namespaced_pod, name, namespace, **extra)
        if text(pod, "kind") not in ("Pod", ""):
            pod = {"metadata": {"name": name, "namespace": namespace}}  # a bare Status
        facts = _pod_facts(pod, self.clock())
        controller = owner(pod)
        after = (
            f"Its controller {controller} will create a replacement."
            if controller
            else "No controller owns it: nothing will recreate it."
        )
        if dry_run:
            return (
                f"Dry run by the API server (dryRun=All), nothing deleted. Would delete pod "
                f"{namespace}/{name}: {facts}. {after}"
            )
        grace = number(pod, "metadata", "deletionGracePeriodSeconds")
        return (
            f"Deleted pod {namespace}/{name} (was {facts})"
            + (f"; it has {grace}s to shut down" if grace else "")
            + f". {after}"
        )


def _label(kind: Kind, name: str, namespace: str) -> str:
    """``deployment shop/web``: a namespaced object as answers and cards name it."""
    return f"{kind.kind.lower()} {namespace}/{name}"


def _pod_facts(pod: Obj, now: datetime) -> str:
    count, _ = restarts(pod)
    phase = clean(text(pod, "status", "phase"), 20) or "?"
    # What it was doing, not "Terminating": the answer to a delete carries deletionTimestamp.
    meta = {k: v for k, v in mapping(pod, "metadata").items() if k != "deletionTimestamp"}
    status = pod_status({**pod, "metadata": meta})
    words = f"phase {phase}" + (f" ({status})" if status not in (phase, "Terminating") else "")
    return (
        f"{words}, node {clean(text(pod, 'spec', 'nodeName'), 63) or '<none>'}, owner "
        f"{owner(pod) or '<none>'}, age {age(when(pod, 'metadata', 'creationTimestamp'), now)}, "
        f"{plural(count, 'restart')}"
    )


def _log_tail(body: bytes, asked: int) -> str:
    """The newest log lines that fit ``LOG_CHARS``, cleaned; what was left out, said."""
    raw = body.decode("utf-8", "replace").splitlines()
    kept: list[str] = []
    size = 0
    for line in reversed(raw):
        cleaned = clean_line(line, LOG_LINE_CHARS)
        if size + len(cleaned) + 1 > LOG_CHARS:
            break
        kept.append(cleaned)
        size += len(cleaned) + 1
    kept.reverse()
    if not raw:
        return "(no output)"
    head = f"last {plural(len(kept), 'line')}"
    if len(kept) < len(raw):
        head += f" of the {len(raw)} read (earlier {len(raw) - len(kept)} left out to stay short)"
    elif len(raw) < asked:
        head += " (all it has)"
    return "\n".join([head + ":", *kept])

"""The ``kubernetes`` pack: a cluster's pods, workloads, nodes and events, and three changes.

    k8s_get(kind, namespace?, name?, selector?)        read-only    like kubectl get -o wide
    k8s_describe(kind, name, namespace)                read-only    status, conditions, events
    k8s_logs(pod, namespace, container?, lines?, previous?)  read-only  bounded log tail
    k8s_events(namespace?, warnings_only?)             read-only    warnings and newest first
    k8s_rollout_restart(kind, name, namespace)         mutating     kubectl's restartedAt
    k8s_scale(kind, name, namespace, replicas)         mutating     the card shows current → new
    k8s_delete_pod(name, namespace)                    destructive  dry run: dryRun=All

Credentials are found like kubectl's (``tools.packs.k8s_client``); ``OPSLOOP_K8S_CONTEXT``
picks a kubeconfig context and ``OPSLOOP_K8S_NAMESPACES`` the only namespaces the tools may
touch (others are refused before any request; nodes, being cluster-scoped, stay readable).
Kinds and names are validated (DNS-1123) by the argument models before anything runs.

This module owns the tools (names, arguments, descriptions, categories, the approval
cards' previews) and :func:`probe`, ``opsloop check``'s line; the parts live beside it:
``k8s_calls`` (what each call asks the API, the changes' answers), ``k8s_client``
(credentials, namespaces, bounded requests, errors), ``k8s_objects`` (kinds, argument
types, what an object's JSON means), ``k8s_text`` and ``k8s_describe`` (the read-only
answers).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, fields
from typing import Annotated, Any

from pydantic import BaseModel, Field

from bot.agent.tools import CallContext, Tool
from bot.errors import ConfigError, ToolError
from tools.base import PythonTool, tool
from tools.packs import Pack, PackConfig
from tools.packs.k8s_calls import Clock, Kubernetes, utc_now
from tools.packs.k8s_client import NAMESPACES_VARIABLE, Kube
from tools.packs.k8s_objects import (
    DNS1123_LABEL,
    ContainerName,
    DescribeKind,
    ListKind,
    Name,
    Namespace,
    RestartKind,
    ScaleKind,
    Selector,
    clean,
    text,
)

TOOL_TIMEOUT_S = 45.0  # the core's bound; each request's own (10 s) fires first
DEFAULT_LOG_LINES = 100
MAX_LOG_LINES = 1000
MAX_REPLICAS = 1000
PROBE_TIMEOUT_S = 8.0  # under check.py's 10 s, so this line says what timed out


def build(config: PackConfig) -> Pack:
    """The pack over the credentials kubectl would use; ``ConfigError`` for a bad
    ``OPSLOOP_K8S_NAMESPACES`` entry. Credentials load at the first call."""
    namespaces = tuple(config.k8s_namespaces)
    for namespace in namespaces:
        if re.fullmatch(DNS1123_LABEL[1:-1], namespace) is None or len(namespace) > 63:
            raise ConfigError(f"{NAMESPACES_VARIABLE}: {namespace!r} is not a namespace name")
    return make_pack(Kube(context=config.k8s_context, namespaces=namespaces))


def make_pack(kube: Kube, *, clock: Clock = utc_now) -> Pack:
    """The tools over one client (tests build them against the fake with a fixed clock)."""
    return Pack(tools=kubernetes_tools(Kubernetes(kube, clock=clock)), closers=(kube.aclose,))


async def probe(config: PackConfig) -> tuple[str, str]:
    """``opsloop check``'s verdict: ``("ok"|"warn"|"fail", one line)``, within
    ``PROBE_TIMEOUT_S``: credentials, the server's version, and that each namespace exists
    and its pods can be listed."""
    return await probe_with(config, seconds=PROBE_TIMEOUT_S)


async def probe_with(
    config: PackConfig, *, seconds: float, environ: Mapping[str, str] | None = None
) -> tuple[str, str]:
    """:func:`probe` with its bound and environment given (tests)."""
    kube = Kube(
        context=config.k8s_context,
        namespaces=config.k8s_namespaces,
        environ=environ,
        request_timeout=min(seconds, 5.0),
        config_timeout=seconds,
    )
    try:
        async with asyncio.timeout(seconds):
            return await _probe(kube)
    except ToolError as exc:
        return "fail", str(exc)
    except TimeoutError:
        return "fail", f"no answer from the Kubernetes API within {seconds:g}s"
    finally:
        await kube.aclose()


async def _probe(kube: Kube) -> tuple[str, str]:
    loaded = await kube.loaded()
    version = await kube.call("read the server version", (await kube.version()).get_code)
    detail = (
        f"{loaded.target.source}, {loaded.target.server}: server "
        f"{clean(text(version, 'gitVersion'), 40) or '?'}, namespaces {kube.namespaces.shown()}"
    )
    core = await kube.core()
    problems: list[str] = []
    if not kube.namespaces.restricted:
        try:
            await kube.call("list pods", core.list_pod_for_all_namespaces, limit=1)
        except ToolError as exc:
            problems.append(str(exc))
    for namespace in kube.namespaces.allowed:
        try:
            await kube.call(
                f"list pods in {namespace}", core.list_namespaced_pod, namespace, limit=1
            )
            await kube.call(f"read namespace {namespace}", core.read_namespace, namespace)
        except ToolError as exc:
            if "forbidden (403) to read namespace" not in str(exc):  # RBAC often omits it
                problems.append(f"{namespace}: {exc}")
    if problems:
        return "warn", f"{detail}; {'; '.join(clean(p, 200) for p in problems[:3])}"
    return "ok", detail


# -- the tools -----------------------------------------------------------------------


Lines = Annotated[int, Field(ge=1, le=MAX_LOG_LINES)]
Replicas = Annotated[int, Field(ge=0, le=MAX_REPLICAS)]


Card = Callable[[BaseModel], str | None | Awaitable[str | None]]


@dataclass(frozen=True, slots=True, kw_only=True)
class PreviewedTool(PythonTool[Any, Any]):
    """A Python tool that can say, for its approval card, what a call will change."""

    card: Card

    @classmethod
    def of(cls, python_tool: PythonTool[Any, Any], card: Card) -> PreviewedTool:
        """``python_tool`` with ``card`` as its preview."""
        made = {f.name: getattr(python_tool, f.name) for f in fields(python_tool)}
        return cls(**made, card=card)

    def preview(self, args: BaseModel, ctx: CallContext) -> str | None | Awaitable[str | None]:
        return self.card(args)


def kubernetes_tools(k8s: Kubernetes) -> list[Tool]:
    """The seven tools over one :class:`Kubernetes`."""

    @tool(parallel=True, timeout=TOOL_TIMEOUT_S)
    async def k8s_get(
        kind: ListKind,
        namespace: Namespace | None = None,
        name: Name | None = None,
        selector: Selector | None = None,
    ) -> str:
        """List Kubernetes objects like `kubectl get -o wide`: a head line saying what needs
        attention, then a table with problems first, each with a ↳ line saying why
        (CrashLoopBackOff and its last exit, Unschedulable, a failed rollout, node pressure).

        Args:
            kind: pods, deployments, statefulsets, daemonsets, nodes, services or events
                (kubectl's singular and short names work too: pod, deploy, sts, ds, no, svc).
            namespace: The namespace; default: every namespace the bot may see. Ignored for
                nodes.
            name: One object's name (DNS-1123), e.g. ``api-7d9c8b6f5-x2k4p``.
            selector: A label selector, e.g. ``app=api`` or ``tier in (web,api),!canary``.
        """
        return await k8s.get(kind, namespace, name, selector)

    @tool(parallel=True, timeout=TOOL_TIMEOUT_S)
    async def k8s_describe(kind: DescribeKind, name: Name, namespace: Namespace) -> str:
        """Describe one object like `kubectl describe`: status, conditions, container states
        with restart reasons (OOMKilled, exit codes), resources, its recent events, and for
        a workload or node the state of its pods.

        Args:
            kind: pods, deployments, statefulsets, daemonsets, nodes or services.
            name: The object's name.
            namespace: Its namespace (for nodes, which have none, any value is ignored).
        """
        return await k8s.describe(kind, name, namespace)

    @tool(parallel=True, timeout=TOOL_TIMEOUT_S)
    async def k8s_logs(
        pod: Name,
        namespace: Namespace,
        container: ContainerName | None = None,
        lines: Lines = DEFAULT_LOG_LINES,
        previous: bool = False,
    ) -> str:
        """The last lines of a pod's container log (newest kept when long). For a crash
        loop, previous=true reads the log of the run that crashed.

        Args:
            pod: The pod's name.
            namespace: The pod's namespace.
            container: The container; default: the pod's default (or only) container.
            lines: How many lines from the end, 1 to 1000. Default 100.
            previous: Read the previous (terminated) run of the container instead.
        """
        return await k8s.logs(pod, namespace, container, lines, previous)

    @tool(parallel=True, timeout=TOOL_TIMEOUT_S)
    async def k8s_events(namespace: Namespace | None = None, warnings_only: bool = False) -> str:
        """Recent events, warnings first and newest first, with repeat counts; the head line
        counts warnings by reason (BackOff, FailedScheduling, Unhealthy, …).

        Args:
            namespace: The namespace; default: every namespace the bot may see.
            warnings_only: Only Warning events.
        """
        return await k8s.events(namespace, warnings_only)

    @tool(category="mutating", timeout=TOOL_TIMEOUT_S)
    async def k8s_rollout_restart(kind: RestartKind, name: Name, namespace: Namespace) -> str:
        """Restart a workload's pods the way `kubectl rollout restart` does (a new
        kubectl.kubernetes.io/restartedAt pod template annotation; the update strategy
        replaces the pods). Refused for a paused rollout.

        Args:
            kind: deployments, statefulsets or daemonsets.
            name: The workload's name.
            namespace: Its namespace.
        """
        return await k8s.rollout_restart(kind, name, namespace)

    @tool(category="mutating", timeout=TOOL_TIMEOUT_S)
    async def k8s_scale(
        kind: ScaleKind, name: Name, namespace: Namespace, replicas: Replicas
    ) -> str:
        """Set a deployment's or statefulset's replica count (its scale subresource); the
        answer says current → new.

        Args:
            kind: deployments or statefulsets.
            name: The workload's name.
            namespace: Its namespace.
            replicas: The new replica count, 0 to 1000.
        """
        return await k8s.scale(kind, name, namespace, replicas)

    @tool(category="destructive", timeout=TOOL_TIMEOUT_S)
    async def k8s_delete_pod(name: Name, namespace: Namespace, ctx: CallContext) -> str:
        """Delete one pod (its controller, if any, makes a new one). The dry run is the API
        server's own (dryRun=All) and says what would go: phase, node, owner, age, restarts.

        Args:
            name: The pod's name.
            namespace: The pod's namespace.
        """
        return await k8s.delete_pod(name, namespace, dry_run=ctx.dry_run)

    def restart_card(args: BaseModel) -> str:
        given = args.model_dump()
        return k8s.restart_preview(given["kind"], given["name"], given["namespace"])

    def scale_card(args: BaseModel) -> Awaitable[str]:
        given = args.model_dump()
        return k8s.scale_card(given["kind"], given["name"], given["namespace"], given["replicas"])

    return [
        k8s_get,
        k8s_describe,
        k8s_logs,
        k8s_events,
        PreviewedTool.of(k8s_rollout_restart, restart_card),
        PreviewedTool.of(k8s_scale, scale_card),
        k8s_delete_pod,
    ]

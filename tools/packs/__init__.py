"""Built-in tool packs, enabled by name with ``OPSLOOP_PACKS``.

Each pack is a module ``tools.packs.<name>`` with one function::

    def build(config: PackConfig) -> Pack

returning its tools (``@tool``-decorated functions, see ``tools/base.py``) and anything
it must close at shutdown (an HTTP client). The tool names and arguments are the
external contract in docs/packs.md's tables: users name them in allowlists and see
them on approval cards. A pack whose backend URL is missing is a ``ConfigError`` naming
the variable, at start-up.
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from bot.agent.tools import Tool
from bot.errors import ConfigError

PACK_NAMES = (
    "host",
    "http",
    "prometheus",
    "alertmanager",
    "supervisor",
    "kubernetes",
    "postgres",
)
# Every pack's tool names (DESIGN's packs table), known without building the packs, so
# ``opsloop tools check`` accepts a tools.yml that names them in allowlists.
PACK_TOOLS: Mapping[str, tuple[str, ...]] = {
    "host": ("host_cpu", "host_memory", "host_disk", "host_top_processes", "host_tail_log"),
    "http": ("http_check",),
    "prometheus": (
        "prometheus_query",
        "prometheus_query_range",
        "prometheus_alerts",
        "prometheus_targets",
    ),
    "alertmanager": (
        "alertmanager_alerts",
        "alertmanager_silences",
        "alertmanager_create_silence",
        "alertmanager_expire_silence",
    ),
    "supervisor": ("supervisor_status", "supervisor_restart", "supervisor_stop"),
    "kubernetes": (
        "k8s_get",
        "k8s_describe",
        "k8s_logs",
        "k8s_events",
        "k8s_rollout_restart",
        "k8s_scale",
        "k8s_delete_pod",
    ),
    "postgres": (
        "pg_activity",
        "pg_locks",
        "pg_replication",
        "pg_database_stats",
        "pg_top_queries",
        "pg_cancel_backend",
        "pg_terminate_backend",
    ),
}


# Packs whose client library is an optional extra: pack → (extra, top-level module).
PACK_EXTRAS: Mapping[str, tuple[str, str]] = {
    "kubernetes": ("kubernetes", "kubernetes_asyncio"),
    "postgres": ("postgres", "asyncpg"),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class PackConfig:
    """What packs read from the environment (``bot.settings.ToolSettings``)."""

    log_dirs: tuple[str, ...] = ()  # OPSLOOP_LOG_DIRS
    http_allow: str = ""  # OPSLOOP_HTTP_ALLOW
    prometheus_url: str | None = None  # PROMETHEUS_URL
    alertmanager_url: str | None = None  # ALERTMANAGER_URL
    supervisor_url: str | None = None  # SUPERVISOR_URL
    k8s_context: str | None = None  # OPSLOOP_K8S_CONTEXT: the kubeconfig context to use
    k8s_namespaces: tuple[str, ...] = ()  # OPSLOOP_K8S_NAMESPACES; empty: every namespace
    postgres_url: str | None = None  # POSTGRES_URL

    @classmethod
    def from_settings(cls, settings: PackSettings) -> PackConfig:
        """The packs' part of the tool settings (the settings import no layer, so the
        packs read what they need from them)."""
        return cls(
            log_dirs=tuple(d.strip() for d in settings.log_dirs.split(",") if d.strip()),
            http_allow=settings.http_allow,
            prometheus_url=settings.prometheus_url,
            alertmanager_url=settings.alertmanager_url,
            supervisor_url=settings.supervisor_url,
            k8s_context=settings.k8s_context,
            k8s_namespaces=tuple(
                n.strip() for n in settings.k8s_namespaces.split(",") if n.strip()
            ),
            postgres_url=settings.postgres_url,
        )


class PackSettings(Protocol):
    """The fields of ``bot.settings.ToolSettings`` the packs read."""

    log_dirs: str
    http_allow: str
    prometheus_url: str | None
    alertmanager_url: str | None
    supervisor_url: str | None
    k8s_context: str | None
    k8s_namespaces: str
    postgres_url: str | None


@dataclass(frozen=True, slots=True)
class Pack:
    tools: Sequence[Tool]
    closers: Sequence[Callable[[], Awaitable[None]]] = field(default_factory=tuple)


def load_packs(names: Sequence[str], config: PackConfig) -> Mapping[str, Pack]:
    """The named packs, built; ``ConfigError`` for an unknown name or a missing backend."""
    packs: dict[str, Pack] = {}
    for name in names:
        if name not in PACK_NAMES:
            known = ", ".join(PACK_NAMES)
            raise ConfigError(f"OPSLOOP_PACKS: unknown pack {name!r} (known: {known})")
        try:
            module = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            extra = PACK_EXTRAS.get(name)
            if extra is None or exc.name is None or not exc.name.startswith(extra[1]):
                raise
            needs = f"the {name} pack needs {extra[1]}"
            raise ConfigError(
                f"OPSLOOP_PACKS: {needs}: pip install 'opsloop[{extra[0]}]'"
            ) from None
        packs[name] = module.build(config)
    return packs

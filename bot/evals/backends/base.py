"""The backends cases run against, started on loopback, one per kind and shared by the
cases of a run, and the faults each injects.

A backend module ``bot.evals.backends.<kind>`` defines one class implementing
``Backend``: ``start`` brings the real thing up in a folder of its own and says how the
packs reach it (``Reach``); ``fault(name, params)`` is an async context manager that
breaks it on entry — returning *facts* (a pid, a pod name) that a case's checks may name
as ``{{fact}}`` — and heals it on exit; ``reset`` brings it back to its healthy starting
state after a case (whatever an approved change did); ``stop`` leaves nothing running.
A backend that cannot start raises ``BackendError``: its cases are reported ``error``, not
``fail``.

Kinds (``KINDS``): host, http, supervisor, kubernetes, postgres, prometheus, mcp.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

from bot.errors import OpsloopError


class BackendError(OpsloopError):
    """A backend that could not start, or a fault that could not be injected."""


@dataclass(frozen=True, slots=True)
class Reach:
    """How the bot's tools reach a started backend.

    ``packs``: the packs to enable (``OPSLOOP_PACKS``); ``pack_config``: fields of
    ``tools.packs.PackConfig`` (``log_dirs`` and ``http_allow`` are merged across
    backends); ``environ``: variables the packs or MCP servers read (``KUBECONFIG``), set
    for the run; ``tools_yml``: a tools.yml fragment merged into the case's (``mcp_servers``
    entries, command tools)."""

    packs: tuple[str, ...] = ()
    pack_config: Mapping[str, Any] = field(default_factory=dict)
    environ: Mapping[str, str] = field(default_factory=dict)
    tools_yml: Mapping[str, Any] = field(default_factory=dict)


Facts = Mapping[str, str]


class Backend(Protocol):
    """One kind of backend (see the module docstring)."""

    kind: ClassVar[str]
    faults: ClassVar[tuple[str, ...]]  # the fault names ``fault`` accepts

    async def start(self, folder: Path) -> Reach: ...

    def fault(self, name: str, params: Mapping[str, Any]) -> AbstractAsyncContextManager[Facts]: ...

    async def reset(self) -> None: ...

    async def stop(self) -> None: ...


KINDS: Mapping[str, str] = {
    "host": "bot.evals.backends.host:HostBackend",
    "http": "bot.evals.backends.http:HttpBackend",
    "supervisor": "bot.evals.backends.supervisor:SupervisorBackend",
    "kubernetes": "bot.evals.backends.kubernetes:KubernetesBackend",
    "postgres": "bot.evals.backends.postgres:PostgresBackend",
    "prometheus": "bot.evals.backends.prometheus:PrometheusBackend",
    "mcp": "bot.evals.backends.mcp:McpBackend",
}


def backend_class(kind: str) -> type[Backend]:
    """The class of ``kind`` (imported only when a case needs it)."""
    where = KINDS.get(kind)
    if where is None:
        raise BackendError(f"unknown backend {kind!r} (known: {', '.join(KINDS)})")
    module, _, name = where.partition(":")
    cls: type[Backend] = getattr(importlib.import_module(module), name)
    return cls

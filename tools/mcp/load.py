"""Start-up: every ``mcp_servers`` entry connected and its tools built, once.

Servers connect concurrently, each bounded by the connect timeout. A server that cannot
be reached at start does not hold the bot up: one warning naming it and why (``opsloop
check`` reports it too), and it is tried again in the background (``RETRY_FIRST_S``,
doubling up to ``RETRY_MAX_S``) until it answers; then its tools are offered to the jobs
that start afterwards. One whose ``env``/``headers`` name an unset variable is not tried
again. What the operator must fix is a
``ConfigError``: an offered name that is not a valid tool name, or one that collides
with another tool (MCP, pack or tools.yml), naming both. A tool whose schema cannot be
made acceptable is skipped with a warning.

``notifications/tools/list_changed`` makes ``McpTools`` list that server's tools again,
at most once per ``RELIST_EVERY_S`` (a storm of notifications is one more listing), and
replace its ``tools`` mapping at once with the new one: unchanged tools keep their
objects, a new name that is invalid or collides is logged and skipped. A job reads the
catalogue when it first runs (``Catalog.for_channel``) and keeps those names for its
later runs (``Catalog.named``), so its tools block never changes: a tool gone from the
new listing stays in ``retired`` for them (a call of it reaches the server, which says
it has no such tool). Jobs that start afterwards get the new listing (``LiveTools``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import mcp_types

from bot.agent.tools import Tool
from bot.errors import ConfigError
from tools.mcp.connection import (
    CONNECT_TIMEOUT_S,
    McpConnection,
    McpDown,
    child_environment,
    expand,
)
from tools.mcp.schema import (
    MAX_DESCRIPTION_CHARS,
    SchemaProblem,
    arguments_model,
    clean_text,
    offered_name,
    shown_name,
)
from tools.mcp.tool import McpTool, decide
from tools.spec import McpServerSpec

log = logging.getLogger(__name__)

RELIST_EVERY_S = 5.0  # at most one listing per server this often after list_changed
RETRY_FIRST_S = 5.0  # a server down at start is tried again after this, then twice as long
RETRY_MAX_S = 300.0  # … up to this, for as long as the bot runs


@dataclass(slots=True)
class ServerReport:
    """What start-up made of one server, for ``opsloop check``."""

    name: str
    tools: int = 0
    error: str | None = None


@dataclass(slots=True)
class McpTools:
    """The MCP tools of a catalogue and the connections that serve them."""

    tools: dict[str, McpTool] = field(default_factory=dict)  # replaced whole, never edited
    retired: dict[str, McpTool] = field(default_factory=dict)  # dropped by a re-listing
    connections: list[McpConnection] = field(default_factory=list)
    reports: list[ServerReport] = field(default_factory=list)
    existing: Mapping[str, str] = field(default_factory=dict)  # the catalogue's other tools
    relist_every: float = RELIST_EVERY_S
    now: Callable[[], float] = time.monotonic
    relists: int = 0  # listings done after list_changed
    relisted: asyncio.Event = field(default_factory=asyncio.Event)  # set after each one
    retry_first: float = RETRY_FIRST_S
    came_up: asyncio.Event = field(default_factory=asyncio.Event)  # a late server's tools in
    _listed: dict[str, mcp_types.Tool] = field(default_factory=dict)  # what built each tool
    _pending: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    _dirty: set[str] = field(default_factory=set)
    _last: dict[str, float] = field(default_factory=dict)

    def watch(self, spec: McpServerSpec, connection: McpConnection) -> None:
        """List ``connection``'s tools again when it says they changed."""
        connection.on_tools_changed = lambda: self._changed(spec, connection)
        if connection.missed_change:  # it changed while the other servers still connected
            connection.missed_change = False
            self._changed(spec, connection)

    def _changed(self, spec: McpServerSpec, connection: McpConnection) -> None:
        self._dirty.add(spec.name)
        task = self._pending.get(spec.name)
        if task is None or task.done():
            self._pending[spec.name] = asyncio.create_task(
                self._relist(spec, connection), name=f"mcp-relist:{spec.name}"
            )

    async def _relist(self, spec: McpServerSpec, connection: McpConnection) -> None:
        while spec.name in self._dirty:
            last = self._last.get(spec.name)
            if last is not None and (wait := last + self.relist_every - self.now()) > 0:
                await asyncio.sleep(wait)
            self._dirty.discard(spec.name)
            self._last[spec.name] = self.now()
            try:
                listed = await connection.relist()
            except McpDown as exc:
                log.warning("%s: tools not listed again after list_changed: %s", spec.where, exc)
            else:
                self._apply(spec, connection, listed)
            self.relists += 1
            self.relisted.set()

    def _apply(
        self, spec: McpServerSpec, connection: McpConnection, listed: Sequence[mcp_types.Tool]
    ) -> None:
        others = {n: t for n, t in self.tools.items() if t.connection is not connection}
        mine: dict[str, McpTool] = {}
        by_name = {remote.name: remote for remote in listed}
        for tool in build_tools(spec, listed, connection, strict=False):
            if tool.name in others or tool.name in self.existing:
                log.warning(
                    "%s: mcp server %r: its new tool %s would be offered as %r, which is "
                    "already taken; skipped",
                    spec.where,
                    spec.name,
                    shown_name(tool.remote_name),
                    tool.name,
                )
                continue
            remote = by_name[tool.remote_name]
            old = self.tools.get(tool.name)
            if old is not None and old.connection is connection:
                if self._listed.get(tool.name) == remote:
                    tool = old  # unchanged: the same object
            self._listed[tool.name] = remote
            mine[tool.name] = tool
        before = {n: t for n, t in self.tools.items() if t.connection is connection}
        for name in mine:
            self.retired.pop(name, None)
        for name in before.keys() - mine.keys():
            self.retired[name] = before[name]  # a job offered it keeps it (``Catalog.named``)
        self.tools = {**others, **mine}  # one assignment: a reader sees old or new
        for name in before.keys() - mine.keys():
            self._listed.pop(name, None)
        log.info(
            "mcp server %r: tools listed again: %d (%d added, %d gone)",
            spec.name,
            len(mine),
            len(mine.keys() - before.keys()),
            len(before.keys() - mine.keys()),
        )

    def retry_later(self, spec: McpServerSpec, connection: McpConnection) -> None:
        """Try a server that was down at start again (``RETRY_FIRST_S``, doubling up to
        ``RETRY_MAX_S``) until it answers; its tools are then offered to the jobs that
        start afterwards, through the same checks as a new listing."""
        self._pending[spec.name] = asyncio.create_task(
            self._retry(spec, connection), name=f"mcp-retry:{spec.name}"
        )

    async def _retry(self, spec: McpServerSpec, connection: McpConnection) -> None:
        wait = self.retry_first
        while True:
            await asyncio.sleep(wait)
            wait = min(wait * 2, RETRY_MAX_S)
            try:
                listed = await connection.relist()
            except McpDown as exc:
                log.info("mcp server %r: still down (%s); next try in %gs", spec.name, exc, wait)
                continue
            self._apply(spec, connection, listed)
            self.watch(spec, connection)
            log.warning("mcp server %r is up: its tools are offered to new jobs", spec.name)
            self.came_up.set()
            return

    async def aclose(self) -> None:
        """Stop every server (concurrently; each stop is bounded)."""
        for task in self._pending.values():
            task.cancel()
        await asyncio.gather(*self._pending.values(), return_exceptions=True)
        await asyncio.gather(*(c.aclose() for c in self.connections), return_exceptions=True)


class LiveTools(Mapping[str, Tool]):
    """The catalogue's tools: ``base`` plus whatever ``mcp.tools`` is now."""

    def __init__(self, base: Mapping[str, Tool], mcp: McpTools) -> None:
        self._base, self._mcp = base, mcp

    def __getitem__(self, name: str) -> Tool:
        tool = self._mcp.tools.get(name)
        return tool if tool is not None else self._base[name]

    def __iter__(self) -> Iterator[str]:
        return iter({**self._base, **self._mcp.tools})

    def __len__(self) -> int:
        return len({**self._base, **self._mcp.tools})


class LiveSources(Mapping[str, str]):
    """The catalogue's sources: ``base`` plus ``mcp:<server>`` for what ``mcp`` offers now."""

    def __init__(self, base: Mapping[str, str], mcp: McpTools) -> None:
        self._base, self._mcp = base, mcp

    def __getitem__(self, name: str) -> str:
        tool = self._mcp.tools.get(name)
        return f"mcp:{tool.connection.name}" if tool is not None else self._base[name]

    def __iter__(self) -> Iterator[str]:
        return iter({**self._base, **self._mcp.tools})

    def __len__(self) -> int:
        return len({**self._base, **self._mcp.tools})


def _chosen(spec: McpServerSpec, remote: str) -> bool:
    if spec.include is not None:
        return remote in spec.include
    return spec.exclude is None or remote not in spec.exclude


def build_tools(
    spec: McpServerSpec,
    listed: Sequence[mcp_types.Tool],
    connection: McpConnection,
    *,
    strict: bool = True,
) -> list[McpTool]:
    """The tools of one server from its listing; ``ConfigError`` for a bad name
    (``strict``; else logged and skipped)."""
    built: list[McpTool] = []
    seen: set[str] = set()
    for remote in listed:
        if not _chosen(spec, remote.name) or remote.name in seen:
            continue
        seen.add(remote.name)
        name = offered_name(spec.name, remote.name)
        if name is None:
            problem = (
                f"{spec.where}: mcp server {spec.name!r}: its tool {shown_name(remote.name)} "
                f"cannot be offered as {shown_name(spec.name + '_' + remote.name)} (at most 64 "
                "characters of letters, digits, '_' or '-'); leave it out with exclude:"
            )
            if strict:
                raise ConfigError(problem)
            log.warning("%s; skipped", problem)
            continue
        try:
            model = arguments_model(name, remote.input_schema)
        except SchemaProblem as exc:
            log.warning("mcp server %r: tool %r skipped: %s", spec.name, remote.name, exc)
            continue
        override = spec.tools.get(remote.name)
        description = (override.description if override else None) or remote.description
        timeout = override.timeout if override and override.timeout else spec.timeout
        decided = decide(
            remote.annotations, trust_annotations=spec.trust_annotations, override=override
        )
        built.append(
            McpTool(
                name=name,
                remote_name=remote.name,
                description=clean_text(description, MAX_DESCRIPTION_CHARS)
                or f"{remote.name} (MCP server {spec.name})",
                args_model=model,
                category=decided.category,
                parallel=decided.parallel,
                category_reason=decided.reason,
                connection=connection,
                call_timeout=timeout,
            )
        )
    for remote_name in spec.tools if strict else ():
        if remote_name not in seen:
            log.warning("mcp server %r: tools.%s names no tool it offers", spec.name, remote_name)
    return built


def check_variables(spec: McpServerSpec, environ: Mapping[str, str]) -> None:
    """``ValueError`` naming the first ``${NAME}`` of ``env``/``headers`` that is not set."""
    child_environment(spec, environ)
    for key, value in spec.headers.items():
        expand(value, environ, where=f"headers.{key}")


class Misconfigured(McpDown):
    """A server that cannot start as configured (a variable its env or headers name is
    not set): not tried again."""


async def _start(
    spec: McpServerSpec,
    environ: Mapping[str, str] | None,
    connect_timeout: float,
) -> tuple[McpConnection, list[mcp_types.Tool] | McpDown]:
    connection = McpConnection(spec, environ=environ, connect_timeout=connect_timeout)
    try:
        check_variables(spec, os.environ if environ is None else environ)
        return connection, await connection.start()
    except McpDown as exc:
        return connection, exc
    except ValueError as exc:  # env/headers referencing a variable that is not set
        return connection, Misconfigured(f"mcp server {spec.name!r} could not start: {exc}")


async def connect_servers(
    specs: Sequence[McpServerSpec],
    *,
    existing: Mapping[str, str],
    environ: Mapping[str, str] | None = None,
    connect_timeout: float = CONNECT_TIMEOUT_S,
    retry_first: float = RETRY_FIRST_S,
) -> McpTools:
    """Connect every server and build its tools; ``existing`` maps the names of the
    catalogue's other tools to their source, for the collision check. A server that
    cannot be reached is tried again in the background (``McpTools.retry_later``)."""
    started = await asyncio.gather(*(_start(s, environ, connect_timeout) for s in specs))
    result = McpTools(
        connections=[c for c, _ in started], existing=existing, retry_first=retry_first
    )
    try:
        for spec, (connection, listed) in zip(specs, started, strict=True):
            if isinstance(listed, McpDown):
                result.reports.append(ServerReport(spec.name, error=str(listed)))
                if isinstance(listed, Misconfigured):  # trying again cannot fix that
                    log.warning("%s: %s; its tools are not offered", spec.where, listed)
                    continue
                log.warning(
                    "%s: %s; its tools are offered once it answers (tried again in %gs)",
                    spec.where,
                    listed,
                    retry_first,
                )
                result.retry_later(spec, connection)
                continue
            tools = build_tools(spec, listed, connection)
            for tool in tools:
                other = result.tools.get(tool.name)
                if other is not None or tool.name in existing:
                    first = (
                        f"tool {other.remote_name!r} of mcp server {other.connection.name!r}"
                        if other is not None
                        else f"tool {tool.name!r} ({existing[tool.name]})"
                    )
                    raise ConfigError(
                        f"{spec.where}: mcp server {spec.name!r}: its tool "
                        f"{shown_name(tool.remote_name)} is offered as {tool.name!r}, "
                        f"which is already the name of {first}"
                    )
                result.tools[tool.name] = tool
                result._listed[tool.name] = next(r for r in listed if r.name == tool.remote_name)
            result.watch(spec, connection)
            result.reports.append(ServerReport(spec.name, tools=len(tools)))
            log.info("mcp server %r: %d tools", spec.name, len(tools))
    except BaseException:
        await result.aclose()
        raise
    return result

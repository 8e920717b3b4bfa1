"""Start-up: every ``mcp_servers`` entry connected and its tools built, once.

Servers connect concurrently, each bounded by the connect timeout. A server that cannot
be reached at start contributes no tools (one warning naming it and why; ``opsloop
check`` reports it too) and the bot starts without it. What the operator must fix is a
``ConfigError``: an offered name that is not a valid tool name, or one that collides
with another tool (MCP, pack or tools.yml), naming both. A tool whose schema cannot be
made acceptable is skipped with a warning.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import mcp_types

from bot.errors import ConfigError
from tools.mcp.connection import CONNECT_TIMEOUT_S, McpConnection, McpDown
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


@dataclass(slots=True)
class ServerReport:
    """What start-up made of one server, for ``opsloop check``."""

    name: str
    tools: int = 0
    error: str | None = None


@dataclass(slots=True)
class McpTools:
    """The MCP tools of a catalogue and the connections that serve them."""

    tools: dict[str, McpTool] = field(default_factory=dict)
    connections: list[McpConnection] = field(default_factory=list)
    reports: list[ServerReport] = field(default_factory=list)

    async def aclose(self) -> None:
        """Stop every server (concurrently; each stop is bounded)."""
        await asyncio.gather(*(c.aclose() for c in self.connections), return_exceptions=True)


def _chosen(spec: McpServerSpec, remote: str) -> bool:
    if spec.include is not None:
        return remote in spec.include
    return spec.exclude is None or remote not in spec.exclude


def build_tools(
    spec: McpServerSpec, listed: Sequence[mcp_types.Tool], connection: McpConnection
) -> list[McpTool]:
    """The tools of one server from its listing; ``ConfigError`` for a bad name."""
    built: list[McpTool] = []
    seen: set[str] = set()
    for remote in listed:
        if not _chosen(spec, remote.name) or remote.name in seen:
            continue
        seen.add(remote.name)
        name = offered_name(spec.name, remote.name)
        if name is None:
            raise ConfigError(
                f"{spec.where}: mcp server {spec.name!r}: its tool {shown_name(remote.name)} "
                f"cannot be offered as {shown_name(spec.name + '_' + remote.name)} (at most 64 "
                "characters of letters, digits, '_' or '-'); leave it out with exclude:"
            )
        try:
            model = arguments_model(name, remote.input_schema)
        except SchemaProblem as exc:
            log.warning("mcp server %r: tool %r skipped: %s", spec.name, remote.name, exc)
            continue
        override = spec.tools.get(remote.name)
        description = (override.description if override else None) or remote.description
        timeout = override.timeout if override and override.timeout else spec.timeout
        built.append(
            McpTool(
                name=name,
                remote_name=remote.name,
                description=clean_text(description, MAX_DESCRIPTION_CHARS)
                or f"{remote.name} (MCP server {spec.name})",
                args_model=model,
                decided=decide(
                    remote.annotations,
                    trust_annotations=spec.trust_annotations,
                    override=override,
                ),
                connection=connection,
                timeout=timeout,
            )
        )
    for remote_name in spec.tools:
        if remote_name not in seen:
            log.warning("mcp server %r: tools.%s names no tool it offers", spec.name, remote_name)
    return built


async def _start(
    spec: McpServerSpec,
    environ: Mapping[str, str] | None,
    connect_timeout: float,
) -> tuple[McpConnection, list[mcp_types.Tool] | McpDown]:
    connection = McpConnection(spec, environ=environ, connect_timeout=connect_timeout)
    try:
        return connection, await connection.start()
    except McpDown as exc:
        return connection, exc
    except ValueError as exc:  # env/headers referencing a variable that is not set
        return connection, McpDown(f"mcp server {spec.name!r} could not start: {exc}")


async def connect_servers(
    specs: Sequence[McpServerSpec],
    *,
    existing: Mapping[str, str],
    environ: Mapping[str, str] | None = None,
    connect_timeout: float = CONNECT_TIMEOUT_S,
) -> McpTools:
    """Connect every server and build its tools; ``existing`` maps the names of the
    catalogue's other tools to their source, for the collision check."""
    started = await asyncio.gather(*(_start(s, environ, connect_timeout) for s in specs))
    result = McpTools(connections=[c for c, _ in started])
    try:
        for spec, (connection, listed) in zip(specs, started, strict=True):
            if isinstance(listed, McpDown):
                log.warning("%s: %s; its tools are not offered", spec.where, listed)
                result.reports.append(ServerReport(spec.name, error=str(listed)))
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
            result.reports.append(ServerReport(spec.name, tools=len(tools)))
            log.info("mcp server %r: %d tools", spec.name, len(tools))
    except BaseException:
        await result.aclose()
        raise
    return result

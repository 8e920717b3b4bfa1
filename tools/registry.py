"""The tool catalogue: built-in packs and tools.yml tools, and who may use what where.

A tools.yml tool with a built-in's name replaces it (logged); duplicate names inside
tools.yml are a configuration error (``spec.py``). ``channels`` in tools.yml limits a
channel to the tools and toolsets it names (a pack name is a toolset too); channels not
listed get every tool.

MCP servers (``mcp_servers`` in tools.yml) are connected by ``connect_mcp`` (async, after
the rest of the catalogue is built; ``tools/mcp/``, imported only when servers are
configured); their tools' source is ``mcp:<server>`` and ``aclose`` stops the servers.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from bot.agent.tools import Tool
from bot.errors import ConfigError
from tools.command import CommandTool
from tools.http import HttpFetcher, HttpTool
from tools.netpolicy import AddressPolicy
from tools.packs import PackConfig, load_packs
from tools.spec import CommandToolSpec, HttpToolSpec, McpServerSpec, ToolsFile, load_tools_file

if TYPE_CHECKING:
    from tools.mcp.load import ServerReport

log = logging.getLogger(__name__)

BUILTIN = "built-in"
MCP = "mcp"


@dataclass(frozen=True, slots=True)
class Catalog:
    """Every available tool by name, where it came from, and the channel allowlists."""

    tools: Mapping[str, Tool]
    sources: Mapping[str, str]  # name → "built-in:<pack>" or the tools.yml path
    toolsets: Mapping[str, Sequence[str]] = field(default_factory=dict)
    channels: Mapping[str, Sequence[str]] = field(default_factory=dict)
    fetcher: HttpFetcher | None = None  # shared by every http tool; closed by ``aclose``
    closers: Sequence[Callable[[], Awaitable[None]]] = ()  # the packs' clients, MCP servers
    mcp_servers: Sequence[McpServerSpec] = ()  # configured; connected by ``connect_mcp``
    mcp_reports: Sequence[ServerReport] = ()  # what connecting made of each server
    retired: Mapping[str, Tool] = field(default_factory=dict)  # gone from a re-listing

    async def aclose(self) -> None:
        if self.fetcher is not None:
            await self.fetcher.aclose()
        for close in self.closers:
            await close()

    def for_channel(self, channel: str | None) -> list[Tool]:
        """The tools allowed in ``channel`` (all of them where no allowlist is set),
        sorted by name."""
        names = self.channels.get(channel) if channel is not None else None
        if names is None:
            chosen = set(self.tools)
        else:
            chosen = set()
            for name in names:
                chosen.update(self.toolsets.get(name, (name,)))
        return [self.tools[n] for n in sorted(chosen) if n in self.tools]

    def named(self, names: Sequence[str]) -> list[Tool]:
        """The tools called ``names``, in that order: a job's tools on every run after its
        first, so that its tools block never changes. A tool an MCP server no longer lists
        is still offered (its call reaches the server, which answers with an error); a
        name unknown to this process (tools.yml changed since) is left out, logged."""
        found: list[Tool] = []
        for name in names:
            tool = self.tools.get(name) or self.retired.get(name)
            if tool is None:
                log.warning("tool %r is no longer in the catalogue; jobs offered it lose it", name)
                continue
            found.append(tool)
        return found


def declared_tool(
    spec: CommandToolSpec | HttpToolSpec,
    *,
    source: str,
    environ: Mapping[str, str],
    fetcher: HttpFetcher,
) -> Tool:
    """The runnable tool for one tools.yml entry."""
    if isinstance(spec, HttpToolSpec):
        return HttpTool(spec, source=source, fetcher=fetcher)
    return CommandTool(spec, source=source, environ=environ)


def build_catalog(
    *,
    packs: Mapping[str, Sequence[Tool]] | None = None,
    closers: Sequence[Callable[[], Awaitable[None]]] = (),
    tools_file: str | Path | None = None,
    environ: Mapping[str, str] | None = None,
    http_allow: str = "",
    external: Mapping[str, Sequence[str]] | None = None,
) -> Catalog:
    """Assemble built-in packs and a tools.yml; ``ConfigError`` on any inconsistency.

    ``http_allow`` is ``OPSLOOP_HTTP_ALLOW``: one address policy and one HTTP client
    serve every http tool.
    """
    environ = os.environ if environ is None else environ
    fetcher = HttpFetcher(AddressPolicy.from_setting(http_allow))
    tools: dict[str, Tool] = {}
    sources: dict[str, str] = {}
    toolsets: dict[str, list[str]] = {}
    for pack, pack_tools in (packs or {}).items():
        toolsets[pack] = [t.name for t in pack_tools]
        for tool in pack_tools:
            tools[tool.name] = tool
            sources[tool.name] = f"{BUILTIN}:{pack}"
    parsed = ToolsFile()
    if tools_file is not None:
        path = Path(tools_file)
        parsed = load_tools_file(path)
        for spec in parsed.tools:
            if spec.name in tools:
                log.warning("%s: tool %r replaces the built-in of that name", path, spec.name)
            try:
                tools[spec.name] = declared_tool(
                    spec, source=str(path), environ=environ, fetcher=fetcher
                )
            except ConfigError as exc:
                raise ConfigError(f"{path}: tool {spec.name!r}: {exc}") from None
            sources[spec.name] = str(path)
        for name, members in parsed.toolsets.items():
            if name in toolsets:
                raise ConfigError(f"{path}: toolset {name!r} has the name of a built-in pack")
            toolsets[name] = list(members)
    # Checking a file alone (``external``): names of tools and toolsets that exist only
    # once packs are enabled are accepted too.
    outside = external or {}
    outside_tools = {t for members in outside.values() for t in members}
    # MCP tools are known only once their servers answer: their prefix is enough here.
    prefixes = tuple(f"{server.name}_" for server in parsed.mcp_servers)

    def mcp_named(name: str) -> bool:
        return bool(prefixes) and name.startswith(prefixes)

    for name, members in toolsets.items():
        for member in members:
            if member not in tools and member not in outside_tools and not mcp_named(member):
                raise ConfigError(f"toolset {name!r} names unknown tool {member!r}")
    for channel, names in parsed.channels.items():
        for name in names:
            if name not in tools and name not in toolsets and name not in outside_tools:
                if name not in outside and not mcp_named(name):
                    raise ConfigError(f"channels.{channel} names unknown tool or toolset {name!r}")
    return Catalog(
        tools=tools,
        sources=sources,
        toolsets=toolsets,
        channels=parsed.channels,
        fetcher=fetcher,
        closers=tuple(closers),
        mcp_servers=tuple(parsed.mcp_servers),
    )


async def connect_mcp(
    catalog: Catalog,
    *,
    environ: Mapping[str, str] | None = None,
    connect_timeout: float | None = None,
    retry_first: float | None = None,
) -> Catalog:
    """The catalogue with its MCP servers' tools; ``ConfigError`` on a bad or colliding
    name (the servers are stopped then). Without servers, the catalogue as it is."""
    if not catalog.mcp_servers:
        return catalog
    try:
        from tools.mcp.load import (  # the MCP SDK only when configured
            LiveSources,
            LiveTools,
            connect_servers,
        )
    except ImportError as exc:
        where = catalog.mcp_servers[0].where
        raise ConfigError(
            f"{where}: mcp_servers need the MCP SDK ({exc.name} is not installed): "
            "pip install 'opsloop[mcp]'"
        ) from None

    options: dict[str, float] = {}
    if connect_timeout is not None:
        options["connect_timeout"] = connect_timeout
    if retry_first is not None:
        options["retry_first"] = retry_first
    mcp = await connect_servers(
        catalog.mcp_servers, existing=catalog.sources, environ=environ, **options
    )
    # Views: a server's list_changed replaces ``mcp.tools``; jobs read it when they start.
    return replace(
        catalog,
        tools=LiveTools(catalog.tools, mcp),
        sources=LiveSources(catalog.sources, mcp),
        closers=(*catalog.closers, mcp.aclose),
        mcp_reports=tuple(mcp.reports),
        retired=mcp.retired,
    )


def catalog_from_settings(
    *,
    pack_names: Sequence[str],
    pack_config: PackConfig,
    tools_file: str | Path | None,
    environ: Mapping[str, str] | None = None,
) -> Catalog:
    """The catalogue a process serves: the enabled packs plus tools.yml."""
    packs = load_packs(pack_names, pack_config)
    return build_catalog(
        packs={name: pack.tools for name, pack in packs.items()},
        closers=[close for pack in packs.values() for close in pack.closers],
        tools_file=tools_file,
        environ=environ,
        http_allow=pack_config.http_allow,
    )


async def open_catalog(
    *,
    pack_names: Sequence[str],
    pack_config: PackConfig,
    tools_file: str | Path | None,
    environ: Mapping[str, str] | None = None,
) -> Catalog:
    """``catalog_from_settings`` with its MCP servers connected; close it with ``aclose``."""
    catalog = catalog_from_settings(
        pack_names=pack_names, pack_config=pack_config, tools_file=tools_file, environ=environ
    )
    try:
        return await connect_mcp(catalog, environ=environ)
    except BaseException:
        await catalog.aclose()
        raise

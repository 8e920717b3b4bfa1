"""The tool catalogue: built-in packs and tools.yml tools, and who may use what where.

A tools.yml tool with a built-in's name replaces it (logged); duplicate names inside
tools.yml are a configuration error (``spec.py``). ``channels`` in tools.yml limits a
channel to the tools and toolsets it names (a pack name is a toolset too); channels not
listed get every tool.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bot.agent.tools import Tool
from bot.errors import ConfigError
from tools.command import CommandTool
from tools.http import HttpFetcher, HttpTool
from tools.netpolicy import AddressPolicy
from tools.packs import PackConfig, load_packs
from tools.spec import CommandToolSpec, HttpToolSpec, ToolsFile, load_tools_file

log = logging.getLogger(__name__)

BUILTIN = "built-in"


@dataclass(frozen=True, slots=True)
class Catalog:
    """Every available tool by name, where it came from, and the channel allowlists."""

    tools: Mapping[str, Tool]
    sources: Mapping[str, str]  # name → "built-in:<pack>" or the tools.yml path
    toolsets: Mapping[str, Sequence[str]] = field(default_factory=dict)
    channels: Mapping[str, Sequence[str]] = field(default_factory=dict)
    fetcher: HttpFetcher | None = None  # shared by every http tool; closed by ``aclose``
    closers: Sequence[Callable[[], Awaitable[None]]] = ()  # the packs' clients

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
    for name, members in toolsets.items():
        for member in members:
            if member not in tools and member not in outside_tools:
                raise ConfigError(f"toolset {name!r} names unknown tool {member!r}")
    for channel, names in parsed.channels.items():
        for name in names:
            if name not in tools and name not in toolsets and name not in outside_tools:
                if name not in outside:
                    raise ConfigError(f"channels.{channel} names unknown tool or toolset {name!r}")
    return Catalog(
        tools=tools,
        sources=sources,
        toolsets=toolsets,
        channels=parsed.channels,
        fetcher=fetcher,
        closers=tuple(closers),
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

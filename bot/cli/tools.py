"""``opsloop tools``: list, check and try tools from the command line.

    opsloop tools [list] [--file tools.yml]        name, category, parallel, source
                                                   (an MCP tool's category says why)
    opsloop tools check FILE                       validate a tools.yml (exit 2 if bad)
    opsloop tools run NAME key=value … [--file F] [--confirmed-by U…] [--yes]

MCP servers in the file are connected for every subcommand (and stopped at the end).
``run`` executes one tool locally: read-only tools at once; mutating tools only with
``--confirmed-by``; destructive tools show their dry run first and need ``--yes`` too.
Exit codes: 0 success, 1 the tool reported an error, 2 bad usage or configuration.
The flags are declared in ``bot.cli.main`` with every other command's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError
from rich.console import Console
from rich.table import Table
from rich.text import Text

from bot.agent.observe import to_text
from bot.agent.tools import CallContext, Tool
from bot.errors import ConfigError, ToolError
from bot.settings import ToolSettings, load_tool_settings
from tools.packs import PACK_TOOLS, PackConfig
from tools.registry import Catalog, build_catalog, connect_mcp, open_catalog

EXIT_OK, EXIT_TOOL_ERROR, EXIT_USAGE = 0, 1, 2


def main(args: argparse.Namespace, *, environ: Mapping[str, str] | None = None) -> int:
    console = Console()
    environ = os.environ if environ is None else environ
    try:
        settings = load_tool_settings()
        return asyncio.run(_main(console, args, settings, environ))
    except ConfigError as exc:
        console.print(Text.assemble(("error: ", "red"), str(exc)), highlight=False)
        return EXIT_USAGE


async def _main(
    console: Console,
    args: argparse.Namespace,
    settings: ToolSettings,
    environ: Mapping[str, str],
) -> int:
    if args.action == "check":
        # The file alone: built-in packs' names are accepted in allowlists.
        catalog = build_catalog(tools_file=args.path, environ=environ, external=PACK_TOOLS)
        try:
            catalog = await connect_mcp(catalog, environ=environ)
            for report in catalog.mcp_reports:
                if report.error is not None:
                    console.print(Text.assemble(("warning: ", "yellow"), report.error))
            console.print(f"{args.path}: {len(catalog.tools)} tools, OK")
            return EXIT_OK
        finally:
            await catalog.aclose()
    catalog = await open_catalog(
        pack_names=settings.pack_names,
        pack_config=PackConfig.from_settings(settings),
        tools_file=args.file or settings.tools_file,
        environ=environ,
    )
    try:
        if args.action in (None, "list"):
            _list(console, catalog)
            return EXIT_OK
        return await _run(console, catalog, args)
    finally:
        await catalog.aclose()


def _list(console: Console, catalog: Catalog) -> None:
    if not catalog.tools:
        console.print("no tools: set OPSLOOP_TOOLS (a tools.yml) or OPSLOOP_PACKS")
        return
    table = Table("name", "category", "parallel", "timeout", "source", "description")
    for name in sorted(catalog.tools):
        tool = catalog.tools[name]
        reason = getattr(tool, "category_reason", None)  # MCP tools say why
        table.add_row(
            name,
            f"{tool.category} ({reason})" if reason else tool.category,
            "yes" if tool.parallel else "no",
            f"{tool.timeout:g}s",
            catalog.sources.get(name, ""),
            tool.description.splitlines()[0] if tool.description else "",
        )
    console.print(table)
    for report in catalog.mcp_reports:
        if report.error is not None:
            console.print(Text.assemble(("warning: ", "yellow"), report.error))


def parse_params(model: type[BaseModel], pairs: Sequence[str]) -> dict[str, Any]:
    """``key=value`` pairs typed by the argument model's JSON schema."""
    props = model.model_json_schema().get("properties", {})
    values: dict[str, Any] = {}
    for pair in pairs:
        key, eq, raw = pair.partition("=")
        if not eq or not key:
            raise ConfigError(f"expected key=value, got {pair!r}")
        if key not in props:
            raise ConfigError(
                f"unknown parameter {key!r}; parameters: {', '.join(props) or 'none'}"
            )
        kind = props[key].get("type") or _any_of_type(props[key])
        values[key] = _typed(key, raw, kind)
    return values


def _any_of_type(prop: Mapping[str, Any]) -> str | None:
    for option in prop.get("anyOf", ()):
        if option.get("type") not in (None, "null"):
            return str(option["type"])
    return None


def _typed(key: str, raw: str, kind: str | None) -> Any:
    try:
        if kind == "integer":
            return int(raw)
        if kind == "number":
            return float(raw)
        if kind == "boolean":
            if raw.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(raw)
            return raw.lower() in ("true", "1", "yes")
        if kind in ("array", "object"):
            return json.loads(raw)
    except ValueError:
        raise ConfigError(f"{key}: {raw!r} is not a valid {kind}") from None
    return raw


async def _run(console: Console, catalog: Catalog, args: argparse.Namespace) -> int:
    tool = catalog.tools.get(args.name)
    if tool is None:
        raise ConfigError(f"unknown tool {args.name!r}; see `opsloop tools list`")
    try:
        model = tool.args_model.model_validate(parse_params(tool.args_model, args.params))
    except ValidationError as exc:
        raise ConfigError(f"invalid arguments for {tool.name}: {exc.errors()[0]['msg']}") from None
    call_id = f"cli_{secrets.token_hex(4)}"
    if tool.category != "read_only" and not args.confirmed_by:
        raise ConfigError(f"{tool.name} is {tool.category}: pass --confirmed-by U… to run it")
    if tool.category == "destructive":
        dry = await _execute(tool, model, CallContext(job_id="cli", call_id=call_id, dry_run=True))
        console.print(Text("dry run:", style="bold"))
        console.print(dry[1], highlight=False, markup=False)
        if not dry[0]:
            return EXIT_TOOL_ERROR
        if not args.yes:
            console.print("not run: pass --yes to run it for real")
            return EXIT_USAGE
    ctx = CallContext(job_id="cli", call_id=call_id, confirmed_by=args.confirmed_by)
    ok, text = await _execute(tool, model, ctx)
    console.print(text, highlight=False, markup=False)
    return EXIT_OK if ok else EXIT_TOOL_ERROR


async def _execute(tool: Tool, model: BaseModel, ctx: CallContext) -> tuple[bool, str]:
    try:
        async with asyncio.timeout(tool.timeout):
            text = to_text(await tool.execute(model, ctx))
    except ToolError as exc:
        return False, f"Error: {exc}"
    except TimeoutError:
        return False, f"Error: timed out after {tool.timeout:g}s"
    return not text.startswith("Error:"), text

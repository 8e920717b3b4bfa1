"""``opsloop tools``: list, check and try tools from the command line.

    opsloop tools [list] [--file tools.yml] [--json]
                                                   name, category, parallel, timeout,
                                                   source, description (an MCP tool's
                                                   category says why); --json: one JSON
                                                   list of them, the whole description;
                                                   with nothing configured, the built-in
                                                   packs and a line to try instead
    opsloop tools check FILE                       validate a tools.yml (exit 2 if bad)
    opsloop tools run NAME key=value … [--file F] [--confirmed-by U…] [--yes]
                                                   [--unrecorded]

MCP servers in the file are connected for every subcommand (and stopped at the end).
``run`` executes one tool locally: read-only tools at once; mutating tools only with
``--confirmed-by``; destructive tools show their dry run first and need ``--yes`` too.

A mutating or destructive call leaves the same audit trail as the bot's own: with
``REDIS_URL`` (and ``OPSLOOP_REDIS_PREFIX``) it is a job of its own in Redis
(``bot.store.cli_calls``) requested by ``cli:<user>`` — the shell user as ``getpass``
names them (``$LOGNAME``, ``$USER``, …, then the password database; a hint of who sat at
the shell, not an authentication) — with its ledger entry (``started`` before the tool
runs, ``done`` with the scrubbed output) and its trace (the dry run, the call with its
arguments and the ``--confirmed-by`` value as given, the end); ``opsloop trace JOB`` reads
it back and the job id is printed on stderr. Without ``REDIS_URL`` (trying a tools.yml
on a laptop) such a call runs with no record and a warning on stderr (``--unrecorded``
silences it); with ``REDIS_URL`` it is always recorded, and a Redis that cannot record it
means nothing runs. Read-only calls are never recorded.

Exit codes: 0 success, 1 the tool reported an error (or ran but its outcome could not
be recorded), 2 bad usage or configuration, or a record that could not be begun (nothing
ran). The flags are declared in ``bot.cli.main`` with every other command's.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import logging
import os
import secrets
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from bot.agent.calls import args_hash
from bot.agent.events import Event, ToolEnd, ToolStart
from bot.agent.observe import summary_line, to_text
from bot.agent.redact import redact_secrets_in_turns
from bot.agent.tools import CONFIRMED_BY, CallContext, Tool, canonical_json
from bot.cli.parts import command_stores
from bot.errors import ConfigError, StoreError, ToolError
from bot.settings import ToolSettings, load_bot_settings, load_tool_settings
from bot.store.audit import AuditLog
from bot.store.connection import RedisTarget
from bot.store.jobs import JobRecord
from bot.store.keys import Keys
from bot.store.trace import TraceRecorder
from tools.packs import PACK_NAMES, PACK_TOOLS, PackConfig
from tools.registry import Catalog, build_catalog, connect_mcp, open_catalog

log = logging.getLogger(__name__)

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
            if getattr(args, "json", False):  # `opsloop tools` alone has no --json
                _list_json(catalog)
            else:
                _list(console, catalog)
            return EXIT_OK
        return await _run(console, catalog, args, environ)
    finally:
        await catalog.aclose()


# What each built-in pack needs besides its name in OPSLOOP_PACKS (its tools are listed
# from ``PACK_TOOLS``): shown when nothing is configured.
PACK_NEEDS: Mapping[str, str] = {
    "host": "nothing (log tails: OPSLOOP_LOG_DIRS)",
    "http": "nothing (OPSLOOP_HTTP_ALLOW limits the hosts)",
    "prometheus": "PROMETHEUS_URL",
    "alertmanager": "ALERTMANAGER_URL",
    "supervisor": "SUPERVISOR_URL",
    "kubernetes": "a kubeconfig, the kubernetes extra",
    "postgres": "POSTGRES_URL, the postgres extra",
}
EXAMPLE = "OPSLOOP_PACKS=host,http opsloop tools list"


def no_tools_hint() -> str:
    """What to set when there are no tools: every built-in pack, then a line to try."""
    width = max(len(name) for name in PACK_NAMES)
    lines = [
        "No tools configured: the model could only talk. Enable built-in packs with",
        "OPSLOOP_PACKS (comma-separated) and/or your own tools with OPSLOOP_TOOLS (a tools.yml).",
        "",
        "Built-in packs:",
    ]
    lines += [
        f"  {name:<{width}}  needs {PACK_NEEDS[name]}: {', '.join(PACK_TOOLS[name])}"
        for name in PACK_NAMES
    ]
    lines += ["", "Try the two that need no backend:", f"  {EXAMPLE}"]
    return "\n".join(lines)


def _list(console: Console, catalog: Catalog) -> None:
    if not catalog.tools and not catalog.mcp_reports:
        print(no_tools_hint())
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
    if not console.is_terminal:
        # A pipe or a file has no width to fit, and rich would assume 80 columns, cutting
        # every longer name to `prometheus_…`: the table's own width, one line a tool.
        unbounded = console.options.update_width(_UNBOUNDED)
        console.width = Measurement.get(console, unbounded, table).maximum
    console.print(table)
    for report in catalog.mcp_reports:
        if report.error is not None:
            console.print(Text.assemble(("warning: ", "yellow"), report.error))


_UNBOUNDED = 100_000


def _list_json(catalog: Catalog) -> None:
    """``tools list --json``: one JSON list on stdout, a tool an object, by name; the hint
    and MCP servers' warnings go to stderr so stdout stays one document."""
    listed = []
    for name in sorted(catalog.tools):
        tool = catalog.tools[name]
        listed.append(
            {
                "name": name,
                "category": tool.category,
                "category_reason": getattr(tool, "category_reason", None),
                "parallel": tool.parallel,
                "timeout_s": tool.timeout,
                "source": catalog.sources.get(name, ""),
                "description": tool.description or "",
            }
        )
    print(json.dumps(listed, indent=2, ensure_ascii=False))
    if not catalog.tools:
        print(no_tools_hint(), file=sys.stderr)
    for report in catalog.mcp_reports:
        if report.error is not None:
            print(f"warning: {report.error}", file=sys.stderr)


def parse_params(model: type[BaseModel], pairs: Sequence[str]) -> dict[str, Any]:
    """``key=value`` pairs typed by the argument model's JSON schema."""
    props = model.model_json_schema().get("properties", {})
    values: dict[str, Any] = {}
    for pair in pairs:
        key, eq, raw = pair.partition("=")
        if not eq or not key:
            raise ConfigError(f"expected key=value, got {pair!r}")
        if key == CONFIRMED_BY:
            raise ConfigError("the approver is given as --confirmed-by, not as a parameter")
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


async def _run(
    console: Console, catalog: Catalog, args: argparse.Namespace, environ: Mapping[str, str]
) -> int:
    tool = catalog.tools.get(args.name)
    if tool is None:
        raise ConfigError(f"unknown tool {args.name!r}; see `opsloop tools list`")
    try:
        model = tool.args_model.model_validate(parse_params(tool.args_model, args.params))
    except ValidationError as exc:
        raise ConfigError(f"invalid arguments for {tool.name}: {exc.errors()[0]['msg']}") from None
    call_id = f"cli_{secrets.token_hex(4)}"
    if tool.category == "read_only":
        ok, text, _ = await _execute(tool, model, CallContext(job_id="cli", call_id=call_id))
        console.print(text, highlight=False, markup=False)
        return EXIT_OK if ok else EXIT_TOOL_ERROR
    if not args.confirmed_by:
        raise ConfigError(f"{tool.name} is {tool.category}: pass --confirmed-by U… to run it")
    record = _recording(tool, args)  # before anything runs: refused without a record
    trace = TraceRecorder("cli")
    if tool.category == "destructive":
        dry_ctx = CallContext(job_id="cli", call_id=call_id, dry_run=True)
        dry_ok, dry_text, _ = await _traced(trace, tool, model, dry_ctx)
        console.print(Text("dry run:", style="bold"))
        console.print(dry_text, highlight=False, markup=False)
        if not dry_ok:
            return EXIT_TOOL_ERROR
        if not args.yes:
            console.print("not run: pass --yes to run it for real")
            return EXIT_USAGE
    if record is None:
        ctx = CallContext(job_id="cli", call_id=call_id, confirmed_by=args.confirmed_by)
        ok, text, _ = await _execute(tool, model, ctx)
        console.print(text, highlight=False, markup=False)
        return EXIT_OK if ok else EXIT_TOOL_ERROR
    return await record.run(console, trace, tool, model, call_id, args.confirmed_by, environ)


@dataclass(frozen=True, slots=True)
class _Record:
    """Where a mutating or destructive call is put on the record (``bot.store.cli_calls``)."""

    redis_url: str | RedisTarget
    keys: Keys

    async def run(
        self,
        console: Console,
        trace: TraceRecorder,
        tool: Tool,
        model: BaseModel,
        call_id: str,
        confirmed_by: str,
        environ: Mapping[str, str],
    ) -> int:
        async with command_stores(self.redis_url, self.keys) as stores:
            calls = stores.cli_calls
            canonical = canonical_json(model.model_dump(mode="json", exclude={CONFIRMED_BY}))
            try:
                job = await calls.begin(
                    user=shell_user(environ),
                    tool=tool.name,
                    call_id=call_id,
                    args_hash=args_hash(canonical),
                    confirmed_by=confirmed_by,
                    timeout_s=tool.timeout,
                    arguments=model.model_dump(mode="json", exclude={CONFIRMED_BY}),
                    category=tool.category,
                )
            except StoreError as exc:
                _warn(console, f"not run: the call could not be recorded: {exc}")
                return EXIT_USAGE
            ctx = CallContext(job_id=job.id, call_id=call_id, confirmed_by=confirmed_by)
            ok, text, took = await _traced(trace, tool, model, ctx)
            console.print(text, highlight=False, markup=False)
            try:
                await calls.finish(
                    job,
                    call_id=call_id,
                    tool=tool.name,
                    ok=ok,
                    output=await redact_secrets_in_turns(text),
                    active_s=took,
                    trace=trace.drain(),
                )
            except StoreError as exc:
                _warn(console, f"ran, but its outcome could not be recorded in {job.id}: {exc}")
                return EXIT_TOOL_ERROR
            await _chain_audit(stores.audit_log, job)
            print(f"recorded as {job.id} (opsloop trace {job.id})", file=sys.stderr)
            return EXIT_OK if ok else EXIT_TOOL_ERROR


async def _chain_audit(audit_log: AuditLog, job: JobRecord) -> None:
    """Chain the call's audit entries now (the scanner of a running bot would within
    seconds; with none running they would wait)."""
    try:
        await audit_log.publish(job.thread.tag)
    except StoreError:
        log.warning("the audit entries of %s are staged, not chained yet", job.id, exc_info=True)


def _recording(tool: Tool, args: argparse.Namespace) -> _Record | None:
    """Where the call will be recorded; ``None`` without ``REDIS_URL`` (warned of unless
    ``--unrecorded``)."""
    settings = load_bot_settings()
    if settings.redis_url is not None:
        return _Record(RedisTarget.of(settings), Keys(settings.redis_prefix))
    if not args.unrecorded:
        print(
            f"warning: {tool.name} is {tool.category} and REDIS_URL is not set: this call "
            "leaves no ledger entry or trace (set REDIS_URL to record it like the bot's own; "
            "--unrecorded silences this)",
            file=sys.stderr,
        )
    return None


def shell_user(environ: Mapping[str, str]) -> str:
    """Who is at the shell, as ``getpass.getuser`` finds them: ``$LOGNAME``, ``$USER``,
    ``$LNAME``, ``$USERNAME``, then the password database."""
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        if environ.get(name):
            return environ[name]
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no variable and no passwd entry (a bare container uid)
        return f"uid{os.getuid()}"


def _warn(console: Console, message: str) -> None:
    console.print(Text.assemble(("error: ", "red"), message), highlight=False)


async def _traced(
    trace: TraceRecorder, tool: Tool, model: BaseModel, ctx: CallContext
) -> tuple[bool, str, float]:
    """``_execute`` with the ``ToolStart``/``ToolEnd`` a run of the bot would trace."""
    shown: dict[str, object] = model.model_dump(mode="json", exclude={CONFIRMED_BY})
    if ctx.confirmed_by is not None:
        shown[CONFIRMED_BY] = ctx.confirmed_by
    events: list[Event] = [
        ToolStart(call_id=ctx.call_id, tool=tool.name, arguments=shown, dry_run=ctx.dry_run)
    ]
    ok, text, took = await _execute(tool, model, ctx)
    scrubbed = await redact_secrets_in_turns(text)
    events.append(
        ToolEnd(
            call_id=ctx.call_id,
            tool=tool.name,
            ran=True,
            is_error=not ok,
            duration_s=took,
            output_chars=len(scrubbed),
            dry_run=ctx.dry_run,
            confirmed_by=ctx.confirmed_by,
            summary=summary_line(scrubbed),
        )
    )
    for event in events:
        trace(event)
    return ok, text, took


async def _execute(tool: Tool, model: BaseModel, ctx: CallContext) -> tuple[bool, str, float]:
    """Run the call: whether it succeeded, its output, how long it took (seconds)."""
    if ctx.confirmed_by is not None and CONFIRMED_BY in type(model).model_fields:
        model = model.model_copy(update={CONFIRMED_BY: ctx.confirmed_by})
    started = time.monotonic()
    try:
        async with asyncio.timeout(tool.timeout):
            text = to_text(await tool.execute(model, ctx))
    except ToolError as exc:
        return False, f"Error: {exc}", time.monotonic() - started
    except TimeoutError:
        return False, f"Error: timed out after {tool.timeout:g}s", time.monotonic() - started
    return not text.startswith("Error:"), text, time.monotonic() - started

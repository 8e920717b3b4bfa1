"""The ``opsloop`` command line: every command's name and flags, and the dispatch.

This module is the command-line contract (the commands the README and docs/ show) in one
place; each command's work lives in its own module of ``bot.cli``, imported only when that
command runs (so ``opsloop serve`` does not load the checklist, the trace reader or the
demo). Building the parser imports no command's libraries (``bot.cli.eval`` adds its
flags from a light module top): ``opsloop trace`` or ``--help`` does not pay for Slack,
Redis or the evals; run as the process's command, it keeps libraries from importing what
they import only because it is installed (``UNUSED_OPTIONAL_MODULES``: httpx's own command
line, trio, OpenTelemetry's metrics SDK). tests/cli/test_startup_imports.py lists what
each path imports.
"""

from __future__ import annotations

import argparse
import sys

from bot import __version__
from bot.cli import CONFIG_REFERENCE

# Modules that libraries import only because they are installed, and that no command uses:
# httpx imports its own command line (rich, click, pygments) whenever those are installed
# (``rich`` is ours, ``click`` comes with the mcp extra); httpcore imports trio whenever it
# is (opsloop runs on asyncio alone; trio is in no lock); redis-py imports OpenTelemetry's
# metrics SDK whenever it is (the otel extra), for its own opt-in metrics, which opsloop
# never turns on (its traces need the trace SDK only; metrics are Prometheus'). Marked
# absent, importing them raises ImportError, which each library handles by design (httpx
# keeps a stub ``httpx.main``, httpcore runs on anyio, redis-py's metrics stay off): about
# 0.2-0.3 s of every command's start.
UNUSED_OPTIONAL_MODULES = ("httpx._main", "trio", "opentelemetry.sdk.metrics")


def main(argv: list[str] | None = None) -> int:
    """Run the command of ``argv`` (default: the process's arguments); its exit status."""
    parser = argparse.ArgumentParser(prog="opsloop", description="Slack chat-ops agent.")
    parser.add_argument("--version", action="version", version=f"opsloop {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser(
        "demo",
        help="the dev page's incident in the terminal: a mention, the investigation, the "
        "approval card, the answer",
        description="The dev page's incident in the terminal, offline. The approval card "
        "waits for a key: Enter approves, d denies. Without a terminal (stdin piped) and "
        "without --yes, the card is denied.",
    )
    choice = demo.add_mutually_exclusive_group()
    choice.add_argument(
        "--yes",
        "-y",
        "--approve",
        dest="approve",
        action="store_true",
        help="approve the restart without asking",
    )
    choice.add_argument("--deny", action="store_true", help="deny the restart without asking")
    settings = (
        "Settings come from the environment; every variable, what it does and its default: "
        f"{CONFIG_REFERENCE} (in the source repository, linked from its README). "
        "Missing or invalid ones are listed all at once, exit 2; `opsloop check` checks "
        "them and every backend without serving."
    )
    sub.add_parser(
        "serve",
        help="serve Slack's Events API over HTTP (POST /slack/events)",
        description="Serve Slack's Events API and interactivity over HTTP: POST /slack/events "
        "(both request URLs of manifest.yml), GET /healthz, GET /metrics on HOST:PORT. "
        "Needs SLACK_BOT_TOKEN, SLACK_SIGNING_SECRET, REDIS_URL and LLM_MODEL.",
        epilog=settings,
    )
    sub.add_parser(
        "socket",
        help="the same app over Slack's Socket Mode (SLACK_APP_TOKEN)",
        description="The same app over Slack's Socket Mode (no public URL); GET /healthz and "
        "GET /metrics on HOST:PORT. Needs SLACK_BOT_TOKEN, SLACK_APP_TOKEN, REDIS_URL and "
        "LLM_MODEL.",
        epilog=settings,
    )
    dev = sub.add_parser(
        "dev", help="everything on this machine: a Slack-like page, managed Redis, demo model"
    )
    dev.add_argument("--port", type=int, default=3000, help="the page's port (default 3000)")
    dev.add_argument("--dir", default=".opsloop/dev", help="state folder (default .opsloop/dev)")
    dev.add_argument(
        "--degrade-after",
        type=float,
        default=20.0,
        metavar="SECONDS",
        help='when the demo service "web" starts to degrade (default 20)',
    )
    trace = sub.add_parser(
        "trace",
        help="what a job did: model calls, tool calls, approvals, how it ended (from Redis)",
    )
    trace.add_argument(
        "target",
        metavar="JOB",
        help="a job id (C123:1700000000.000100:j1), a thread (C123:1700000000.000100) "
        "or a Slack message link",
    )
    trace.add_argument("--json", action="store_true", help="one JSON object per job")
    timeline = sub.add_parser(
        "timeline",
        help="an incident's timeline in UTC: alert, requests and replies, jobs, approvals, "
        "writes, limits raised, Stop (from Redis)",
    )
    timeline.add_argument(
        "thread",
        metavar="THREAD",
        help="a Slack message link, a thread (C123:1700000000.000100) or a job id "
        "(C123:1700000000.000100:j1)",
    )
    timeline.add_argument(
        "--json", action="store_true", help='one JSON document: {"thread", "events": [...]}'
    )
    _add_audit_parser(sub)
    from bot.cli.eval import add_parser as add_eval_parser

    add_eval_parser(sub)
    check = sub.add_parser(
        "check",
        help="before going live: check the settings, Redis, Slack, the model and the packs' "
        "backends (changes nothing)",
    )
    check.add_argument(
        "--mode",
        choices=("serve", "socket"),
        default="serve",
        help="the settings of which command to check (default serve)",
    )
    _add_tools_parser(sub)
    args = parser.parse_args(argv)
    if argv is None:  # this process is the command; a caller in its own process is not
        skip_unused_optional_modules()

    if args.command == "demo":
        from bot.cli.demo import main as demo_main

        return demo_main(approve=True if args.approve else False if args.deny else None)
    if args.command == "dev":
        from bot.cli.dev import main as dev_main

        return dev_main(folder=args.dir, port=args.port, degrade_after=args.degrade_after)
    if args.command in ("serve", "socket"):
        from bot.cli.serve import main as serve_main

        return serve_main(socket=args.command == "socket")
    if args.command == "trace":
        from bot.cli.trace import main as trace_main

        return trace_main(args.target, as_json=args.json)
    if args.command == "timeline":
        from bot.cli.timeline import main as timeline_main

        return timeline_main(args.thread, as_json=args.json)
    if args.command == "eval":
        from bot.cli.eval import main as eval_main

        return eval_main(args)
    if args.command == "audit":
        from bot.cli.audit import main as audit_main

        return audit_main(
            args.action,
            since=args.since,
            until=args.until,
            user=args.user,
            tool=args.tool,
            channel=args.channel,
            job=args.job,
            as_json=args.json,
        )
    if args.command == "check":
        from bot.cli.check import main as check_main

        return check_main(mode=args.mode)
    if args.command == "tools":
        from bot.cli.tools import main as tools_main

        return tools_main(args)
    parser.error(f"unknown command {args.command}")
    return 2


def skip_unused_optional_modules() -> None:
    """Keep ``UNUSED_OPTIONAL_MODULES`` from being imported in this process (one already
    imported stays)."""
    for name in UNUSED_OPTIONAL_MODULES:
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]


def _add_audit_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``audit`` and ``audit verify`` (``bot.cli.audit`` runs them)."""
    audit = sub.add_parser(
        "audit",
        help="the audit log: who approved what and what ran (query, export as JSON lines, "
        "verify its hash chain)",
    )
    audit.add_argument(
        "action", nargs="?", choices=("verify",), help="verify: check the hash chain"
    )
    when = "ISO 8601 (2026-05-28, 2026-05-28T20:26:40Z, …+02:00) or an age (90m, 24h, 7d)"
    audit.add_argument("--since", metavar="T", help=f"entries at or after T: {when}")
    audit.add_argument("--until", metavar="T", help="entries at or before T")
    audit.add_argument("--user", help="whose (U…, <@U…>, cli:NAME, opsloop)")
    audit.add_argument("--tool", metavar="NAME", help="of this tool")
    audit.add_argument("--channel", metavar="C", help="in this channel (C…)")
    audit.add_argument("--job", metavar="ID", help="of this job (C123:1700000000.000100:j1)")
    audit.add_argument("--json", action="store_true", help="the stored entries, one a line")


def _add_tools_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``tools`` and its subcommands (``bot.cli.tools`` runs them)."""
    tools = sub.add_parser("tools", help="list, check and try tools")
    tools.add_argument("--file", help="tools.yml (default: $OPSLOOP_TOOLS)")
    actions = tools.add_subparsers(dest="action")
    listing = actions.add_parser("list", help="list the available tools")
    listing.add_argument(
        "--json",
        action="store_true",
        help="one JSON list: name, category, category_reason, parallel, timeout_s, source, "
        "description",
    )
    check = actions.add_parser("check", help="validate a tools.yml")
    check.add_argument("path")
    run = actions.add_parser("run", help="run one tool locally")
    run.add_argument("name")
    run.add_argument("params", nargs="*", metavar="key=value")
    run.add_argument("--confirmed-by", help="Slack user id approving a mutating tool")
    run.add_argument("--yes", action="store_true", help="run a destructive tool after its dry run")
    run.add_argument(
        "--unrecorded",
        action="store_true",
        help="without REDIS_URL, run a mutating or destructive tool with no ledger entry or "
        "trace and no warning about it (with REDIS_URL the call is always recorded)",
    )


if __name__ == "__main__":
    sys.exit(main())

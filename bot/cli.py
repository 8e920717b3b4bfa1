"""The ``opsloop`` command line."""

from __future__ import annotations

import argparse
import asyncio
import sys

from bot import __version__


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="opsloop", description="Slack chat-ops agent.")
    parser.add_argument("--version", action="version", version=f"opsloop {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run the built-in incident demo turn in the terminal")
    choice = demo.add_mutually_exclusive_group()
    choice.add_argument("--approve", action="store_true", help="approve the restart")
    choice.add_argument("--deny", action="store_true", help="deny the restart")
    sub.add_parser("serve", help="serve Slack's Events API over HTTP (POST /slack/events)")
    sub.add_parser("socket", help="the same app over Slack's Socket Mode (SLACK_APP_TOKEN)")
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
    from tools.cli import add_parser as add_tools_parser

    add_tools_parser(sub)
    args = parser.parse_args(argv)

    if args.command == "demo":
        from bot.demo import run_demo

        approve: bool | None = True if args.approve else False if args.deny else None
        if approve is None and not sys.stdin.isatty():
            approve = True
        return asyncio.run(run_demo(approve=approve))
    if args.command == "dev":
        from pathlib import Path

        from bot.dev.run import run_dev

        return asyncio.run(run_dev(Path(args.dir).resolve(), args.port, args.degrade_after))
    if args.command in ("serve", "socket"):
        return _serve(socket=args.command == "socket")
    if args.command == "trace":
        from bot.tracecmd import main as trace_main

        return trace_main(args.target, as_json=args.json)
    if args.command == "check":
        from bot.checkcmd import main as check_main

        return check_main(mode=args.mode)
    if args.command == "tools":
        from tools.cli import main as tools_main

        return tools_main(args)
    parser.error(f"unknown command {args.command}")
    return 2


def _serve(*, socket: bool) -> int:
    from bot import logs
    from bot.errors import ConfigError
    from bot.settings import load_bot_settings, load_llm_settings, load_tool_settings
    from bot.slack.app import serve, socket_mode

    logs.configure()
    try:
        bot, llm, tools = load_bot_settings(), load_llm_settings(), load_tool_settings()
        logs.configure(secrets=[*bot.secret_values(), *llm.secret_values()])
        (socket_mode if socket else serve)(bot, llm, tools)
    except ConfigError as exc:
        print(f"opsloop: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

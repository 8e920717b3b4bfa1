"""``opsloop serve`` and ``opsloop socket``: run the bot against Slack.

``serve`` answers Slack's Events API over HTTP (``POST /slack/events``, ``GET /healthz``,
``GET /metrics`` on ``HOST``:``PORT``); ``socket`` runs the same app over Socket Mode
(``SLACK_APP_TOKEN``), with the same health and metrics endpoints. Both read their settings
from the environment and, when those are wrong, list every problem at once on stderr
(``bot.cli.settings_problems``) and exit 2; a problem found later at start (a tools.yml,
a pack's backend URL) is one line, exit 2. Building and running the service is not this
module's: it only loads the settings and hands them over.
"""

from __future__ import annotations

import sys


def main(*, socket: bool) -> int:
    """Serve over HTTP, or over Socket Mode with ``socket=True``, until stopped."""
    from bot import logs
    from bot.cli.settings_problems import Mode, gather, report
    from bot.errors import ConfigError
    from bot.service import serve, socket_mode

    logs.configure()
    mode: Mode = "socket" if socket else "serve"
    ready = gather(mode)
    if isinstance(ready, list):
        print(report(ready, mode), file=sys.stderr)
        return 2
    bot, llm, tools = ready.bot, ready.llm, ready.tools
    try:
        logs.configure(secrets=[*bot.secret_values(), *llm.secret_values(), *tools.secret_values()])
        (socket_mode if socket else serve)(bot, llm, tools)
    except ConfigError as exc:
        print(f"opsloop: {exc}", file=sys.stderr)
        return 2
    return 0

"""``opsloop dev``: the whole bot on this machine, with a Slack-like page.

Redis (``REDIS_URL``, else a managed redis-server), the demo service "web" that starts to
degrade after ``--degrade-after`` seconds, the model (the ``LLM_*`` endpoint, else the
scripted demo model), the Slack emulator's page on ``--port`` and ``opsloop serve`` against
it, with state under ``--dir``; until Ctrl-C. How all that runs is ``bot.dev.run``'s; this
module turns the flags into that call.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from bot.dev.run import run_dev


def main(*, folder: str, port: int, degrade_after: float) -> int:
    """Run the local stack until interrupted."""
    return asyncio.run(run_dev(Path(folder).resolve(), port, degrade_after))

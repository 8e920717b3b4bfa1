"""The process's log lines: one format, and no credentials in them.

``configure`` sets up the root logger for ``serve`` and ``socket``: timestamped lines on
stderr, every formatted line (message, arguments and traceback alike) passed through
``bot.scrub.Scrubber``: the bot's configured secrets masked by value, credential shapes
redacted. A provider's error that echoes an API key, or a URL with a password in an
exception, does not reach the log collector.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from bot.scrub import Scrubber

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class ScrubbingFormatter(logging.Formatter):
    """A formatter whose every line is scrubbed."""

    def __init__(self, fmt: str = FORMAT, *, scrubber: Scrubber | None = None) -> None:
        super().__init__(fmt)
        self._scrub = scrubber or Scrubber()

    def format(self, record: logging.LogRecord) -> str:
        return self._scrub(super().format(record))


def configure(*, secrets: Iterable[str | None] = (), level: int = logging.INFO) -> None:
    """Root logging for a bot process: stderr, ``FORMAT``, scrubbed; httpx quiet."""
    handler = logging.StreamHandler()
    handler.setFormatter(ScrubbingFormatter(scrubber=Scrubber(secrets)))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # One INFO line per HTTP request (every model call, every Slack call) is noise that
    # costs CPU on the ack path's event loop; failures are still logged by opsloop.
    for chatty in ("httpx", "httpcore"):
        logging.getLogger(chatty).setLevel(logging.WARNING)

"""``OPSLOOP_AUDIT_CHANNEL``: every decision and write, one line each, as it is chained.

The audit log itself is in Redis (``bot.store.audit``); this is a courtesy copy people
can watch and search in Slack. It is posted by the process that chained the entries
(``bot.turns.audit.AuditPublisher.on_chained``, which renders the lines), once per entry
(an entry is chained once), through the scrubbing client. A refused post is logged and
dropped: the log, not the channel, is the record.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

log = logging.getLogger(__name__)

MAX_LINES_PER_POST = 20  # a burst (a drain after an outage) goes out in a few messages


class AuditChannel:
    """Posts chained decisions and writes to one channel."""

    def __init__(self, client: AsyncWebClient, channel: str) -> None:
        self.client = client
        self.channel = channel

    async def __call__(self, lines: Sequence[str]) -> None:
        for start in range(0, len(lines), MAX_LINES_PER_POST):
            text = "\n".join(lines[start : start + MAX_LINES_PER_POST])
            try:
                await self.client.chat_postMessage(
                    channel=self.channel, text=text, unfurl_links=False, unfurl_media=False
                )
            except SlackApiError as exc:
                log.warning(
                    "audit channel %s refused %d lines: %s",
                    self.channel,
                    len(lines[start : start + MAX_LINES_PER_POST]),
                    exc.response.get("error"),
                )

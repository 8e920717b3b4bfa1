"""``bot.turns.alerts.AlertPoster`` over the Slack Web API: the alert message, the replies
for alerts that join or resolve, and the edit when the group resolves; and the click on
the alert message's ``Investigate`` button.

The messages are rendered by ``bot.slack.alerts`` (everything from the alert escaped: an
alert never pings anyone) and scrubbed by the client like every post. A refusal from
Slack is raised: the group's work stays in the store for another try
(``AlertDesk.work``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bot.alerts.payload import Alert, Notification
from bot.records import Thread
from bot.slack.alerts import alert_message, resolved_message, update_message
from bot.slack.blockkit import Message

log = logging.getLogger(__name__)


class SlackAlertPoster:
    """How an alert group shows itself in Slack (``bot.turns.alerts.AlertPoster``)."""

    def __init__(self, client: AsyncWebClient) -> None:
        self.client = client

    async def _post(self, channel: str, message: Message, **extra: Any) -> str:
        response = await self.client.chat_postMessage(
            channel=channel, text=message.text, blocks=message.blocks, **extra
        )
        return str(response["ts"])

    async def post_alert(
        self, channel: str, notification: Notification, *, note: str | None, investigate: str | None
    ) -> str:
        message = alert_message(notification, note=note, investigate_value=investigate)
        return await self._post(channel, message)

    async def post_update(
        self, thread: Thread, notification: Notification, changed: Sequence[Alert]
    ) -> str:
        message = update_message(notification, changed)
        return await self._post(thread.channel, message, thread_ts=thread.thread_ts)

    async def resolve_alert(
        self, thread: Thread, notification: Notification, *, resolved_at: float
    ) -> None:
        message = resolved_message(notification, resolved_at=resolved_at)
        await self.client.chat_update(
            channel=thread.channel, ts=thread.thread_ts, text=message.text, blocks=message.blocks
        )

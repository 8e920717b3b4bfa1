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
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bot.alerts.payload import Alert, Notification
from bot.alerts.stored import from_json
from bot.errors import StoreError
from bot.records import Thread
from bot.slack.admission import refusal_text
from bot.slack.alerts import alert_message, resolved_message, update_message
from bot.slack.blockkit import Message, context_block, mention
from bot.slack.policy import ApproverPolicy
from bot.slack.posting import note_via_response_url, response_url_of
from bot.turns.alerts import AlertDesk, AlertGroup

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


STARTED = "Investigation started by {user}."
RUNNING = "This alert is already being investigated in its thread."
GONE = "This alert's thread is closed: the group resolved or fired again since."
UNAVAILABLE = "The investigation could not be started just now; try again in a moment."

Background = Callable[[Coroutine[Any, Any, Any], str], None]


class AlertClicks:
    """The alert message's ``Investigate`` button: the clicker's request starts the job
    (``AlertDesk.investigate``); whoever clicked is told, alone, when nothing started."""

    def __init__(
        self,
        *,
        desk: AlertDesk,
        policy: ApproverPolicy,
        poster: SlackAlertPoster,
        background: Background,
        approvers: Sequence[str] = (),
    ) -> None:
        self.desk = desk
        self.policy = policy
        self.poster = poster
        self.background = background
        self.approvers = approvers

    async def on_investigate(self, ack: Any, body: dict[str, Any]) -> None:
        await ack()
        raw_user = body.get("user")
        user: dict[str, Any] = raw_user if isinstance(raw_user, dict) else {}
        user_id = str(user.get("id") or "")
        actions = body.get("actions")
        action = actions[0] if isinstance(actions, list) and actions else {}
        value = str(action.get("value") or "") if isinstance(action, dict) else ""
        if not user_id or not value:
            return
        refusal = await self.policy.outsider(user_id, user.get("team_id"))
        if refusal is not None:
            self._tell(body, f"Nothing started: {refusal}.")
            return
        try:
            result = await self.desk.investigate(value, user_id)
        except StoreError:
            log.warning("an Investigate click could not be recorded", exc_info=True)
            self._tell(body, UNAVAILABLE)
            return
        if result.outcome == "started" and result.group is not None:
            self.background(self._mark_started(result.group, user_id), "alert investigated")
        elif result.outcome == "running":
            self._tell(body, RUNNING)
        elif result.outcome == "gone":
            self._tell(body, GONE)
        elif result.refusal is not None:
            self._tell(body, refusal_text(result.refusal, approvers=self.approvers))

    async def _mark_started(self, group: AlertGroup, user: str) -> None:
        """The alert message loses its button and says who started the investigation."""
        if not group.notification or not group.thread_ts:
            return
        message = alert_message(from_json(group.notification))
        # Our own line, after the alert's: ``note`` escapes what it is given (it would
        # show the mention as text), so the clicker's mention is added as a block here.
        started = context_block(f":information_source: {STARTED.format(user=mention(user))}")
        try:
            await self.poster.client.chat_update(
                channel=group.channel,
                ts=group.thread_ts,
                text=message.text,
                blocks=[*message.blocks, started],
            )
        except Exception:
            log.warning("the alert message of %s was not updated", group.name, exc_info=True)

    def _tell(self, body: dict[str, Any], text: str) -> None:
        if (url := response_url_of(body)) is not None:
            self.background(note_via_response_url(url, text), "investigate note")

"""Feedback on answers: a click on the 👍/👎 ``feedback_buttons`` of an answer's last message.

``bot.slack.answers`` puts the buttons there (``context_actions``), each one's value
``<job id>|positive`` or ``<job id>|negative``. The click arrives as ``block_actions``
(action id ``ACTION_FEEDBACK``) on whatever process Slack reaches; it is acknowledged at
once and then:

- counted in ``opsloop_feedback_total{value}`` (this process's registry) — whatever the
  job, however old the message;
- recorded in the job's trace (``bot.turns.feedback``: who, which value, which
  message) when the trace still exists; an expired or unknown job writes nothing.

It is never an error: the value is not trusted (a value other than the two ours carry
is ignored and logged, a job id not shaped like ours only counted), and a store failure
only costs the trace entry (logged). Slack's buttons show the choice themselves, so the
clicker is told nothing.
"""

from __future__ import annotations

import logging
from typing import Any

from slack_bolt.async_app import AsyncApp

from bot.metrics import Metrics
from bot.slack.actions import clicker, valid_job_id
from bot.slack.answers import ACTION_FEEDBACK, FeedbackValue
from bot.turns.feedback import record_feedback
from bot.turns.parts import Turns

log = logging.getLogger(__name__)


class Feedback:
    """The listener of the answers' feedback buttons."""

    def __init__(self, *, turns: Turns, metrics: Metrics | None) -> None:
        self.turns = turns
        self.metrics = metrics

    async def on_feedback(self, ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
        await ack()
        try:
            await self._record(body, action)
        except Exception:
            log.warning("feedback not recorded", exc_info=True)

    async def _record(self, body: dict[str, Any], action: dict[str, Any]) -> None:
        raw = action.get("value") if isinstance(action, dict) else None
        job_id, _, value = (raw if isinstance(raw, str) else "").rpartition("|")
        chosen: FeedbackValue
        if value == "positive":
            chosen = "positive"
        elif value == "negative":
            chosen = "negative"
        else:
            log.info("ignored a feedback click with a value not ours")
            return
        if self.metrics is not None:
            self.metrics.feedback.labels(value=chosen).inc()
        user, _team = clicker(body)
        if not user or not valid_job_id(job_id):
            log.info("feedback %s counted; it names no job of ours", chosen)
            return
        container = body.get("container")
        ts = container.get("message_ts") if isinstance(container, dict) else None
        message_ts = ts if isinstance(ts, str) and ts else None
        written = await record_feedback(
            self.turns.stores, job_id, value=chosen, by=user, message_ts=message_ts
        )
        log.info(
            "job %s: %s feedback from %s%s",
            job_id,
            chosen,
            user,
            "" if written else " (no trace any more: counted only)",
        )


def register(app: AsyncApp, *, turns: Turns, metrics: Metrics | None) -> Feedback:
    """Listen to the feedback buttons on ``app``."""
    feedback = Feedback(turns=turns, metrics=metrics)
    app.action(ACTION_FEEDBACK)(feedback.on_feedback)
    return feedback

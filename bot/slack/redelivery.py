"""An ended job's answer and ending, delivered by a process other than the one that ran it.

A job ended by ``Jobs.finish`` owes its thread its answer and its ending until its
process says they are shown (``Jobs.delivered``). When that process died first (or
Slack refused it past its patience), the scanner of any process takes the thread's
lease and calls ``deliver_ending`` with the job's record, which holds everything the
thread must show: the answer (``output``) and how the run ended (``stop_reason``,
``error``, its counters in ``progress``).

Exactly once, as far as the thread can tell: the thread's messages since the one that
asked are read first, and the answer is posted only if no message of the bot's carries this
job's feedback buttons (the answer's last message has them; an answer cut short by the
crash, or a streamed one never turned into its final form, is posted again whole). The
ending replaces the status message (the one ``meta`` names, else the bot's message with
the job's Stop button), or is posted when there is none. The tool lines of the live
ending are not in the record, so this ending has the counts without them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bot.agent.state import RunResult, StopReason
from bot.records import JobRecord
from bot.slack.answers import answer_messages
from bot.slack.job_ending import ending_for
from bot.slack.names import Names
from bot.slack.notifier import FIND_STATUS_PAGE, FIND_STATUS_TIMEOUT_S, has_stop_for
from bot.slack.posting import post_in_thread

log = logging.getLogger(__name__)

ANSWERED = (StopReason.COMPLETED, StopReason.INCOMPLETE)


def result_of(record: JobRecord) -> RunResult:
    """The run's result as the ended job's record keeps it."""
    reason = StopReason(record.stop_reason or StopReason.FAILED.value)
    return RunResult.of(record.progress, reason, output=record.output, error=record.error)


def has_feedback_for(blocks: Sequence[Any], job_id: str) -> bool:
    """Whether a message's blocks hold this job's answer feedback buttons."""
    for block in blocks:
        elements = block.get("elements") if isinstance(block, dict) else None
        for element in elements or []:
            if not isinstance(element, dict):
                continue
            button = element.get("positive_button")
            if isinstance(button, dict) and button.get("value") == f"{job_id}|positive":
                return True
    return False


async def deliver_ending(
    client: AsyncWebClient,
    record: JobRecord,
    *,
    bot_user: str | None,
    names: Names | None = None,
) -> bool:
    """Show the ended job's answer (unless the thread has it) and its ending; False
    when Slack could not be read or refused (the scanner tries again later)."""
    result = result_of(record)
    try:
        # From the message that asked (Slack's own clock), so a long thread's first
        # page is this job's part of it.
        reply = await asyncio.wait_for(
            client.conversations_replies(
                channel=record.channel,
                ts=record.thread_ts,
                limit=FIND_STATUS_PAGE,
                oldest=record.request_ts,
                inclusive=True if record.request_ts else None,
            ),
            FIND_STATUS_TIMEOUT_S,
        )
    except Exception:
        log.info("could not read the thread of job %s", record.id, exc_info=True)
        return False
    own = [
        m
        for m in reply.get("messages") or []
        if bot_user is None or m.get("user") in (bot_user, None)
    ]
    try:
        answer = record.output if result.stop_reason in ANSWERED and record.output else None
        if answer is not None and not any(
            has_feedback_for(m.get("blocks") or [], record.id) for m in own
        ):
            messages = answer_messages(answer, job_id=record.id)
            if names is not None:  # people and channels by name in the markdown blocks
                await names.prefetch(answer)
                messages = answer_messages(answer, job_id=record.id, render=names.render)
            for message in messages:
                await post_in_thread(client, record.channel, record.thread_ts, message)
        ending = ending_for(record, result)
        status_ts = record.meta.get("status_ts") or next(
            (str(m["ts"]) for m in own if has_stop_for(m.get("blocks") or [], record.id)), None
        )
        if status_ts is not None:
            await client.chat_update(
                channel=record.channel, ts=status_ts, text=ending.text, blocks=ending.blocks
            )
        else:
            await post_in_thread(client, record.channel, record.thread_ts, ending)
    except Exception:
        log.warning("could not deliver the ending of job %s", record.id, exc_info=True)
        return False
    log.info("delivered the ending of job %s (its process never showed it)", record.id)
    return True

"""An ended job's answer and ending, delivered by a process other than the one that ran it.

A job ended by ``Jobs.finish`` owes its thread its answer and its ending until its
process says they are shown (``Jobs.delivered``). When that process died first (or
Slack refused it past its patience), the scanner of any process takes the thread's
lease and calls ``deliver_ending`` with the job's record, which holds everything the
thread must show: the answer (``output``), how the run ended (``stop_reason``, ``error``,
its counters in ``progress``) and the per-tool lines its status message showed
(``tools``, kept beside the record as each call ended).

Exactly once, as far as the thread can tell: the thread's messages since the one that
asked are read first, and the answer is completed, never repeated (``show_answer``):

- a message of the bot's with this job's feedback buttons (the answer's last message
  has them) means the answer is all there;
- the answer's first messages found in the thread (their ``text``, which is the
  answer's own, whatever names the blocks show) are kept: only the parts after them
  are posted, so an answer cut between its parts by the crash goes on from the missing
  part;
- none found, the bot's latest message that shows the beginning of the answer (its
  stream, or the message edited while it streamed, whose final edit the crash
  prevented) is turned into the answer's first part in place (its stream stopped
  first, if Slack still has it open), and the rest is posted.

The ending replaces the status message (the one ``meta`` names, else the bot's message
with the job's Stop button), or is posted when there is none.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bot.agent.state import RunResult, StopReason
from bot.records import JobRecord
from bot.slack.answers import answer_messages
from bot.slack.blockkit import Message, unescape
from bot.slack.job_ending import ending_for
from bot.slack.names import Names
from bot.slack.notifier import FIND_STATUS_PAGE, FIND_STATUS_TIMEOUT_S, has_stop_for
from bot.slack.posting import post_in_thread
from bot.slack.status_blocks import ToolLine

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
    """Show the ended job's answer (what of it the thread lacks) and its ending; False
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
    status_ts = record.meta.get("status_ts") or next(
        (str(m["ts"]) for m in own if has_stop_for(m.get("blocks") or [], record.id)), None
    )
    try:
        answer = record.output if result.stop_reason in ANSWERED and record.output else None
        if answer is not None:
            await show_answer(client, record, answer, own, status_ts=status_ts, names=names)
        tools = await kept_lines(record, names)
        ending = ending_for(record, result, tools=tools, cut=kept_cut(record))
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


async def show_answer(
    client: AsyncWebClient,
    record: JobRecord,
    answer: str,
    own: Sequence[dict[str, Any]],
    *,
    status_ts: str | None,
    names: Names | None = None,
) -> None:
    """Complete the answer in the thread from what of it ``own`` (the bot's messages
    since the request) shows: nothing when it is all there, else from the first part
    missing, the streamed beginning turned into the first part in place (see the module
    docstring)."""
    if any(has_feedback_for(m.get("blocks") or [], record.id) for m in own):
        return
    render = _same
    if names is not None:  # people and channels by name in the markdown blocks
        await names.prefetch(answer)
        render = names.render
    messages = answer_messages(answer, job_id=record.id, render=render)
    # Posted parts: the answer's ``text`` in a message of markdown blocks (the last part
    # would carry the feedback buttons: not there, or we would have returned).
    said = {str(m.get("text") or "") for m in own if _has_markdown(m)}
    shown = 0
    while shown < len(messages) - 1 and messages[shown].text in said:
        shown += 1
    if shown == 0:
        streamed = answer_shown_by(own, answer, render=render, status_ts=status_ts)
        if streamed is not None:
            await _complete_in_place(client, record.channel, streamed, messages[0])
            shown = 1
    for message in messages[shown:]:
        await post_in_thread(client, record.channel, record.thread_ts, message)


def _same(text: str) -> str:
    return text


def answer_shown_by(
    own: Sequence[dict[str, Any]],
    answer: str,
    *,
    render: Callable[[str], str] = _same,
    status_ts: str | None = None,
) -> str | None:
    """The ts of the bot's latest message (not the status message) that shows the
    beginning of ``answer`` as it streamed: its text, or a ``markdown`` block's, is a
    start of the answer as written, as rendered with names, or escaped (a stream's
    message edited while it was written; a cut one ends with ``…``)."""
    forms = {answer, render(answer)}
    for message in reversed(own):
        ts = str(message.get("ts") or "")
        if not ts or ts == status_ts:
            continue
        for shown in _shown_texts(message):
            if shown and any(form.startswith(shown) for form in forms):
                return ts
    return None


def _has_markdown(message: dict[str, Any]) -> bool:
    blocks = message.get("blocks") or []
    return any(isinstance(b, dict) and b.get("type") == "markdown" for b in blocks)


def _shown_texts(message: dict[str, Any]) -> list[str]:
    """What a message shows as text: its ``text`` (unescaped, an ellipsis cut off) and
    its ``markdown`` blocks' text, each without surrounding whitespace."""
    text = str(message.get("text") or "")
    shown = [unescape(text).strip(), unescape(text.removesuffix("…")).strip()]
    for block in message.get("blocks") or []:
        if isinstance(block, dict) and block.get("type") == "markdown":
            shown.append(str(block.get("text") or "").strip())
    return shown


async def _complete_in_place(
    client: AsyncWebClient, channel: str, ts: str, message: Message
) -> None:
    """Turn the message that streamed the answer into its first part: its stream is
    stopped first (Slack may still hold it open: its process died mid-stream), then the
    message is edited."""
    try:
        await client.chat_stopStream(channel=channel, ts=ts)
    except Exception:  # not streaming any more, the usual case: nothing to stop
        log.debug("the stream of %s in %s was not open", ts, channel, exc_info=True)
    await client.chat_update(channel=channel, ts=ts, text=message.text, blocks=message.blocks)


async def kept_lines(record: JobRecord, names: Names | None = None) -> list[ToolLine]:
    """The per-tool lines the job's status message showed (people by name), the earlier
    calls it only counted standing in as blanks (the ending counts them, shows none)."""
    kept = record.tools
    if kept is None:
        return []
    results = [line.result for line in kept.lines]
    if names is not None:
        await names.prefetch(*results)
    render = names.render if names is not None else _same
    lines = [ToolLine(line.tool, render(line.result), line.ok) for line in kept.lines]
    earlier = max(0, kept.count - len(lines))
    return [ToolLine("", "", True)] * earlier + lines


def kept_cut(record: JobRecord) -> list[tuple[str, str]]:
    """The calls whose output the model saw cut (the ending's "Full output" buttons)."""
    return [(call_id, tool) for call_id, tool in record.tools.cut] if record.tools else []

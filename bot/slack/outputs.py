"""A tool's full output on request: the ending's "Full output" buttons, and their clicks.

A job's ending (``JobProgress``) carries one button per call whose output was longer than a
tool's default bound (so the model saw it cut: :data:`CUT_AFTER` characters), at most
:data:`MAX_BUTTONS` (an actions block each), valued ``<job id>|<call id>``. A click
(``block_actions``, :data:`ACTION_OUTPUT`, on whatever process Slack reaches: everything
is read from Redis) is acknowledged at once; then the output is read back through
``bot.turns.outputs`` (the artifact the core kept, as that job) and posted in the job's
thread as a file (``bot.slack.files``: Slack's v2 upload), naming who asked.

The value is not trusted: the job it names must be of the channel and thread the clicked
message is in (else nothing is read: a forged value cannot pull another thread's output
into this one), and a job id not shaped like ours is ignored. An output that was not cut,
or whose artifact expired (7 days), is told to the clicker alone (an ephemeral message).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from bot.agent.tools import DEFAULT_OUTPUT_BOUND
from bot.slack.actions import clicker, valid_job_id
from bot.slack.blockkit import MAX_BLOCKS, Block, Message
from bot.slack.files import post_file
from bot.turns.outputs import job_thread, tool_output
from bot.turns.parts import Turns

log = logging.getLogger(__name__)

ACTION_OUTPUT = "opsloop_tool_output"
OUTPUT_BLOCK = "opsloop_tool_outputs"
CUT_AFTER = DEFAULT_OUTPUT_BOUND
MAX_BUTTONS = 5  # an actions block's buttons kept few: the last cut calls
NOT_KEPT = (
    "That output was not cut (its whole text is what the model read), or it is no longer "
    "kept (full outputs are kept 7 days)."
)
_NAME = re.compile(r"[^A-Za-z0-9_.-]+")


def output_buttons(job_id: str, calls: Sequence[tuple[str, str]]) -> list[Block]:
    """A small actions block with a "Full output: <tool>" button per ``(call id, tool)``
    (one block each: an action id is unique within a block)."""
    return [
        {
            "type": "actions",
            "block_id": f"{OUTPUT_BLOCK}:{n}",
            "elements": [
                {
                    "type": "button",
                    "action_id": ACTION_OUTPUT,
                    "text": {"type": "plain_text", "text": f"Full output: {tool}"[:75]},
                    "value": f"{job_id}|{call_id}"[:2000],
                }
            ],
        }
        for n, (call_id, tool) in enumerate(calls[-MAX_BUTTONS:])
    ]


def with_output_buttons(message: Message, job_id: str, calls: Sequence[tuple[str, str]]) -> Message:
    """``message`` (an ending) with the buttons of its cut calls, if any and if room."""
    blocks = output_buttons(job_id, calls)
    if not blocks or len(message.blocks) + len(blocks) > MAX_BLOCKS:
        return message
    return Message(message.text, [*message.blocks, *blocks])


class Outputs:
    """The listener of the "Full output" buttons."""

    def __init__(
        self,
        *,
        turns: Turns,
        client: AsyncWebClient,
        background: Callable[[Coroutine[Any, Any, Any], str], None],
    ) -> None:
        self.turns = turns
        self.client = client
        self.background = background

    async def on_click(self, ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
        await ack()
        raw = action.get("value") if isinstance(action, dict) else None
        job_id, _, call_id = (raw if isinstance(raw, str) else "").partition("|")
        user, _team = clicker(body)
        container = body.get("container")
        channel = str(container.get("channel_id") or "") if isinstance(container, dict) else ""
        message = body.get("message")
        held = message if isinstance(message, dict) else {}
        in_thread = str(held.get("thread_ts") or held.get("ts") or "")
        thread = job_thread(job_id) if valid_job_id(job_id) else None
        if not (user and call_id and thread and channel):
            log.info("ignored a full-output click that names no call of ours")
            return
        if (thread.channel, thread.thread_ts) != (channel, in_thread):
            log.warning("a full-output click named a job of another thread; ignored")
            return
        self.background(self._post(job_id, call_id, user, channel, thread.thread_ts), job_id)

    async def _post(self, job_id: str, call_id: str, user: str, channel: str, ts: str) -> None:
        try:
            found = await tool_output(self.turns, job_id, call_id)
        except Exception:
            log.warning("job %s: could not read %s's output", job_id, call_id, exc_info=True)
            found = None
        if found is None:
            await self._tell(channel, user, ts, NOT_KEPT)
            return
        tool, text = found
        name = _NAME.sub("-", f"{tool}-{call_id}")[:80] + ".txt"
        file_id = await post_file(
            self.client,
            channel=channel,
            thread_ts=ts,
            filename=name,
            content=text,
            title=f"{tool}: full output",
            comment=f"Full output of `{tool}` ({len(text):,} characters), asked for by <@{user}>",
        )
        if file_id is None:
            await self._tell(channel, user, ts, "The full output could not be uploaded here.")

    async def _tell(self, channel: str, user: str, ts: str, text: str) -> None:
        try:
            await self.client.chat_postEphemeral(
                channel=channel, user=user, thread_ts=ts, text=text
            )
        except Exception:
            log.info("could not tell %s in %s", user, channel, exc_info=True)


def register(
    app: AsyncApp,
    *,
    turns: Turns,
    client: AsyncWebClient,
    background: Callable[[Coroutine[Any, Any, Any], str], None],
) -> Outputs:
    """Listen to the "Full output" buttons on ``app``."""
    outputs = Outputs(turns=turns, client=client, background=background)
    app.action(ACTION_OUTPUT)(outputs.on_click)
    return outputs

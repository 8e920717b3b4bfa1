"""A job's cut tool output, read back whole for a person (the ending's "Full output" button).

The core keeps a tool output longer than its bound as an artifact and names the reference
in the result the model saw (``bot.agent.observe.truncation_note``); the result is in the
thread's history with its call id. :func:`tool_output` finds that result among the
history's originals (a condensed view still has them), takes the reference it names and
reads the artifact as its job (``RedisArtifacts.get`` refuses another job's). None when
the call is unknown, its output was not cut, or the artifact expired (7 days).
"""

from __future__ import annotations

import re

from bot.agent.messages import ToolMessage
from bot.store.keys import Thread
from bot.turns.parts import Turns

_REF = re.compile(r"artifact:[^\s\"'\]\)]+")


def job_thread(job_id: str) -> Thread | None:
    """The thread a job id (``C123:1700000000.000100:j3``) embeds, or None."""
    head, sep, _ = job_id.rpartition(":")
    channel, sep2, thread_ts = head.partition(":")
    if not (sep and sep2 and channel and thread_ts):
        return None
    return Thread(channel, thread_ts)


async def tool_output(turns: Turns, job_id: str, call_id: str) -> tuple[str, str] | None:
    """``(tool name, full output)`` of a call of ``job_id`` whose result was cut, or None."""
    thread = job_thread(job_id)
    if thread is None:
        return None
    history = turns.stores.history(thread)
    await history.load()
    for message in reversed(history.originals):
        if isinstance(message, ToolMessage) and message.tool_call_id == call_id:
            found = _REF.findall(message.content)
            if not found:
                return None
            text = await turns.stores.artifacts.get(job_id, found[-1])
            return (message.name, text) if text is not None else None
    return None

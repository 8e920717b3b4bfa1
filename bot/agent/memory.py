"""In-process memory: the reference implementation of the ``Memory`` protocol, and the
rule every implementation applies to an approved call (``record_approver``; on an
append, ``record_approver_of``).

Who approved a call is known only when its result comes back, after the assistant
message holding the call was stored (it is durable before the job pauses for the
card). So the result is the record: a ``ToolMessage`` carries ``confirmed_by`` only
when a human decision approved its call (``calls.py``), and when it is appended the
call it answers is rewritten to match — ``confirmed_by`` in its arguments is the
approver, whatever the model wrote there, and a value the model wrote on a call no one
approved is removed. The model, condensing and every later reader of the history see
who really approved. This is the one change to a message already in the history: it
happens before any request has sent the message (a batch's results are all appended
before the next model request), so an adapter's cached rendering never holds the old
form. ``bot/store/history.py`` applies the same rule when it loads the originals.
"""

from __future__ import annotations

import json
from collections.abc import MutableSequence, Sequence
from dataclasses import dataclass, field

from bot.agent.messages import (
    AnyMessage,
    AssistantMessage,
    ToolMessage,
    UserMessage,
    parse_arguments,
)
from bot.agent.tools import CONFIRMED_BY


def approved_arguments(arguments: str, approver: str | None) -> str:
    """``arguments`` (JSON object text) with ``confirmed_by`` set to ``approver``, or
    without it when no one approved; the same text when nothing changes (or when it is
    not a JSON object: such a call is stored as ``{}`` and never runs)."""
    if approver is None and CONFIRMED_BY not in arguments and "\\" not in arguments:
        return arguments  # the common case, without parsing (an escaped key is parsed)
    value = parse_arguments(arguments)
    if isinstance(value, str):
        return arguments
    if approver is None:
        if CONFIRMED_BY not in value:
            return arguments
        del value[CONFIRMED_BY]
    else:
        if value.get(CONFIRMED_BY) == approver:
            return arguments
        value[CONFIRMED_BY] = approver
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except ValueError:  # a number JSON cannot spell again (1e999): leave the call as written
        return arguments


def with_approver(message: AssistantMessage, result: ToolMessage) -> AssistantMessage:
    """``message`` with the call ``result`` answers carrying ``result.confirmed_by``
    (``message`` itself when that changes nothing)."""
    calls = list(message.tool_calls)
    for i, call in enumerate(calls):
        if call.id != result.tool_call_id:
            continue
        if call.malformed is not None:
            return message
        arguments = approved_arguments(call.arguments, result.confirmed_by)
        if arguments == call.arguments:
            return message
        calls[i] = call.model_copy(update={"arguments": arguments})
        return message.model_copy(update={"tool_calls": tuple(calls)})
    return message


def record_approver(
    messages: MutableSequence[AnyMessage], result: ToolMessage
) -> tuple[AssistantMessage, AssistantMessage] | None:
    """Rewrite, in ``messages``, the call ``result`` answers (see the module docstring);
    ``(old, new)`` when the assistant message was replaced. Only the latest assistant
    message is looked at: results follow the message whose calls they answer."""
    for i in range(len(messages) - 1, -1, -1):
        message = messages[i]
        if isinstance(message, AssistantMessage):
            new = with_approver(message, result)
            if new is message:
                return None
            messages[i] = new
            return message, new
    return None


def record_approvers(messages: MutableSequence[AnyMessage]) -> None:
    """``record_approver`` for every result of ``messages`` (a history read back)."""
    latest: int | None = None
    for i, message in enumerate(messages):
        if isinstance(message, AssistantMessage):
            latest = i
        elif isinstance(message, ToolMessage) and latest is not None:
            call_message = messages[latest]
            assert isinstance(call_message, AssistantMessage)
            messages[latest] = with_approver(call_message, message)


def replace_message(
    messages: MutableSequence[AnyMessage], old: AnyMessage, new: AnyMessage
) -> None:
    """Put ``new`` where ``old`` (that very object) is, searching from the end."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i] is old:
            messages[i] = new
            return


def record_approver_of(
    message: AnyMessage,
    messages: MutableSequence[AnyMessage],
    *,
    also: MutableSequence[AnyMessage],
) -> None:
    """What a memory does before it appends ``message``: a tool result rewrites the call
    it answers in ``messages`` (``record_approver``), and the rewritten assistant message
    takes the old one's place in ``also`` too (the memory's other list of the same
    messages: its originals beside its condensed view)."""
    if isinstance(message, ToolMessage):
        swapped = record_approver(messages, message)
        if swapped is not None:
            replace_message(also, *swapped)


@dataclass(slots=True)
class InMemoryHistory:
    """History kept in a list; ``originals`` keeps everything ever appended."""

    messages: list[AnyMessage] = field(default_factory=list)
    originals: list[AnyMessage] = field(default_factory=list)
    flushes: int = 0

    async def history(self) -> Sequence[AnyMessage]:
        return self.messages

    def append(self, message: AnyMessage) -> None:
        record_approver_of(message, self.messages, also=self.originals)
        self.messages.append(message)
        self.originals.append(message)

    async def flush(self) -> None:
        self.flushes += 1

    async def condense(self, upto: int, summary: str) -> None:
        self.messages[:upto] = [UserMessage(content=summary, summary=True)]

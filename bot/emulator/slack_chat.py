"""The fake Slack's messages and the methods that post, edit, react to and read them.

``chat.postMessage``, ``chat.update``, ``chat.delete``, ``chat.postEphemeral``,
``reactions.add``, ``conversations.replies``, ``assistant.threads.setStatus`` and the
chat streams (``chat.startStream`` / ``appendStream`` / ``stopStream``, their chunks
checked by ``bot.emulator.slack_chunks``), answered and refused like Slack's. What they
hold is :class:`ChatState` (messages by channel and ts, ephemerals, reactions, assistant
statuses); :class:`TsClock` numbers new messages. ``install`` adds the methods to a
``FakeSlack``, which serves them and reads the state back for tests.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from bot.emulator.slack_chunks import StreamChunks
from bot.emulator.slack_wire import (
    BOT_ID,
    BOT_USER_ID,
    Ephemeral,
    Message,
    Params,
    Reply,
    SlackError,
    int_param,
    message_content,
    required,
    stream_text,
)

DEFAULT_REPLIES_LIMIT = 1_000

_FIRST_TS_US = 1_700_000_000_000_000  # microseconds; ts strings are "seconds.micros"
_TS_STEP_US = 100


def ts_us(ts: str) -> int | None:
    """A ts in microseconds (None: not a ts)."""
    seconds, _, micros = ts.partition(".")
    if not (seconds.isdigit() and (micros.isdigit() or not micros)):
        return None
    return int(seconds) * 1_000_000 + int((micros or "0").ljust(6, "0")[:6])


def ts_order(ts: str) -> tuple[int, str]:
    """A sort key putting messages in ts order."""
    return (ts_us(ts) or 0, ts)


class TsClock:
    """The ts of each new message (``"seconds.micros"``), always later than any before.

    By default it counts up from a fixed instant in small steps, so tests read the same
    ts every run; ``wall=True`` follows the wall clock (the dev page shows the times).
    """

    def __init__(self, *, wall: bool = False) -> None:
        self.wall = wall
        self._us = _FIRST_TS_US

    def next(self) -> str:
        if self.wall:
            self._us = max(self._us + 1, time.time_ns() // 1_000)
        else:
            self._us += _TS_STEP_US
        return f"{self._us // 1_000_000}.{self._us % 1_000_000:06d}"

    def seed(self, ts: str | None) -> str:
        """``ts`` for a seeded message (the next one if None); later ones come after it."""
        if ts is None:
            return self.next()
        self._us = max(self._us, ts_us(ts) or 0)
        return ts


@dataclass
class ChatState:
    """What the chat methods hold."""

    messages: dict[tuple[str, str], Message] = field(default_factory=dict)
    ephemerals: list[Ephemeral] = field(default_factory=list)
    reactions: dict[tuple[str, str], list[str]] = field(default_factory=lambda: defaultdict(list))
    statuses: dict[tuple[str, str], str] = field(default_factory=dict)

    def thread(self, channel: str, thread_ts: str | None = None) -> list[Message]:
        """The messages held, in ts order: the whole channel, or one thread with its parent."""
        held = [m for m in self.messages.values() if m.channel == channel]
        if thread_ts is not None:
            held = [m for m in held if thread_ts in (m.ts, m.thread_ts)]
        return sorted(held, key=lambda m: ts_order(m.ts))


def _range_param(params: Params, name: str) -> int | None:
    """``oldest``/``latest`` in microseconds (None: not given); ``invalid_ts_<name>``
    when not a ts."""
    value = params.get(name)
    if value in (None, ""):
        return None
    us = ts_us(str(value))
    if us is None:
        raise SlackError(f"invalid_ts_{name}")
    return us


class Methods(Protocol):
    """``FakeSlack.add_method`` (which imports this module)."""

    def add_method(
        self, name: str, handler: Callable[[Params], Reply], *, app_token: bool = False
    ) -> None: ...


class Chat:
    """The chat methods over one :class:`ChatState`."""

    def __init__(self, clock: TsClock) -> None:
        self.clock = clock
        self.state = ChatState()
        self.chunks = StreamChunks()  # chunk streams: checked and shown like Slack's
        self.deleted: list[tuple[str, str]] = []  # (channel, ts) of chat.delete, in order

    def install(self, slack: Methods) -> None:
        slack.add_method("chat.postMessage", self.post_message)
        slack.add_method("chat.update", self.update)
        slack.add_method("chat.delete", self.delete)
        slack.add_method("chat.postEphemeral", self.post_ephemeral)
        slack.add_method("reactions.add", self.reactions_add)
        slack.add_method("conversations.replies", self.replies)
        slack.add_method("assistant.threads.setStatus", self.set_status)
        slack.add_method("chat.startStream", self.start_stream)
        slack.add_method("chat.appendStream", self.append_stream)
        slack.add_method("chat.stopStream", self.stop_stream)

    def post_as_bot(
        self,
        channel: str,
        text: str,
        *,
        thread_ts: str | None = None,
        blocks: list[dict[str, Any]] | None = None,
        attachments: list[Any] | None = None,
        streaming: bool = False,
        extra: dict[str, Any] | None = None,
    ) -> Message:
        """Hold a new message of the bot's, at the next ts."""
        message = Message(
            channel,
            self.clock.next(),
            text,
            BOT_USER_ID,
            bot_id=BOT_ID,
            thread_ts=thread_ts,
            blocks=blocks,
            attachments=attachments,
            streaming=streaming,
            extra=extra or {},
        )
        self.state.messages[(channel, message.ts)] = message
        return message

    def held(self, params: Params) -> Message:
        """The message ``channel`` and ``ts`` name; ``message_not_found`` if none."""
        key = (required(params, "channel"), required(params, "ts"))
        message = self.state.messages.get(key)
        if message is None:
            raise SlackError("message_not_found")
        return message

    # ---- methods ---------------------------------------------------------------------------

    def post_message(self, params: Params) -> Reply:
        channel = params.get("channel") or ""
        if not channel:
            raise SlackError("channel_not_found")
        text, blocks = message_content(params)
        if not text and not blocks and not params.get("attachments"):
            raise SlackError("no_text")
        message = self.post_as_bot(
            channel,
            text,
            thread_ts=params.get("thread_ts") or None,
            blocks=blocks,
            attachments=params.get("attachments"),
        )
        return {"channel": channel, "ts": message.ts, "message": message.as_slack()}

    def update(self, params: Params) -> Reply:
        message = self.held(params)
        if message.bot_id != BOT_ID:
            raise SlackError("cant_update_message")
        text, blocks = message_content(params)
        if "text" in params:
            message.text = text
        if "blocks" in params:  # omitted: keep; [] removes them
            message.blocks = blocks or None
        if "attachments" in params:
            message.attachments = params["attachments"] or None
        message.edited = True
        return {
            "channel": message.channel,
            "ts": message.ts,
            "text": message.text,
            "message": message.as_slack(),
        }

    def delete(self, params: Params) -> Reply:
        """``chat.delete``: a bot deletes its own messages only (``cant_delete_message``)."""
        message = self.held(params)
        if message.bot_id != BOT_ID:
            raise SlackError("cant_delete_message")
        del self.state.messages[(message.channel, message.ts)]
        self.deleted.append((message.channel, message.ts))
        return {"channel": message.channel, "ts": message.ts}

    def post_ephemeral(self, params: Params) -> Reply:
        channel = required(params, "channel")
        user = required(params, "user")
        text, blocks = message_content(params)
        if not text and not blocks:
            raise SlackError("no_text")
        ts = self.clock.next()
        thread_ts = params.get("thread_ts") or None
        self.state.ephemerals.append(Ephemeral(channel, user, ts, text, thread_ts, blocks))
        return {"message_ts": ts}

    def reactions_add(self, params: Params) -> Reply:
        # Messages that reached the bot only as events are unknown here, so any ts is accepted.
        key = (required(params, "channel"), required(params, "timestamp"))
        name = params.get("name") or ""
        if not name:
            raise SlackError("invalid_name")
        if name in self.state.reactions[key]:
            raise SlackError("already_reacted")
        self.state.reactions[key].append(name)
        return {}

    def replies(self, params: Params) -> Reply:
        """The parent, then its replies oldest first, within ``oldest``/``latest`` (both
        excluded unless ``inclusive``); the first page always opens with the parent, as
        Slack's does, whatever the range."""
        channel = required(params, "channel")
        thread_ts = required(params, "ts")
        thread = self.state.thread(channel, thread_ts)
        parent = [m for m in thread if m.ts == thread_ts]
        if not parent:
            raise SlackError("thread_not_found")
        oldest = _range_param(params, "oldest") or 0
        latest = _range_param(params, "latest")
        inclusive = str(params.get("inclusive") or "").lower() in ("1", "true")

        def in_range(ts: str) -> bool:
            us = ts_us(ts) or 0
            if inclusive:
                return us >= oldest and (latest is None or us <= latest)
            return us > oldest and (latest is None or us < latest)

        listing = parent + [m for m in thread if m.ts != thread_ts and in_range(m.ts)]
        limit = int_param(params.get("limit"), DEFAULT_REPLIES_LIMIT)
        start = int_param(params.get("cursor"), 0)
        page = listing[start : start + limit]
        more = start + limit < len(listing)
        out = []
        for m in page:
            wire = m.as_slack()
            if m.ts == thread_ts and len(thread) > 1:
                wire["thread_ts"] = thread_ts
                wire["reply_count"] = len(thread) - 1
            out.append(wire)
        cursor = str(start + limit) if more else ""
        return {"messages": out, "has_more": more, "response_metadata": {"next_cursor": cursor}}

    def set_status(self, params: Params) -> Reply:
        key = (required(params, "channel_id"), required(params, "thread_ts"))
        self.state.statuses[key] = str(params.get("status") or "")
        return {}

    # ---- streams ---------------------------------------------------------------------------

    def start_stream(self, params: Params) -> Reply:
        channel = params.get("channel") or ""
        if not channel:
            raise SlackError("channel_not_found")
        thread_ts = required(params, "thread_ts")
        mode = self.chunks.check(params, method="chat.startStream")
        text = stream_text(params)
        message = self.post_as_bot(channel, text, thread_ts=thread_ts, streaming=True)
        self.chunks.started(message, params, mode)
        return {"channel": channel, "ts": message.ts}

    def _streaming(self, params: Params) -> Message:
        try:
            message = self.held(params)
        except SlackError:
            raise SlackError("message_not_in_streaming_state") from None
        if not message.streaming:
            raise SlackError("message_not_in_streaming_state")
        return message

    def append_stream(self, params: Params) -> Reply:
        message = self._streaming(params)
        self.chunks.go_on(message, params, method="chat.appendStream")
        message.text += stream_text(params)
        return {"channel": message.channel, "ts": message.ts}

    def stop_stream(self, params: Params) -> Reply:
        message = self._streaming(params)
        self.chunks.go_on(message, params, method="chat.stopStream")
        text = stream_text(params)
        _, blocks = message_content({"blocks": params.get("blocks") or []})
        message.text += text
        if blocks:
            message.blocks = blocks
        message.streaming = False
        return {"channel": message.channel, "ts": message.ts, "message": message.as_slack()}

"""What the dev page is told: each change in the workspace, as a stream event, in order.

:class:`PageFeed` turns what happened (a message posted, edited, streamed or dropped, a
reaction, an ephemeral for one person, an assistant thread status, a delivery to the bot)
into the page's events on a :class:`~bot.dev.page.StreamHub`, and shapes what the page
shows: a message with its reactions (:meth:`PageFeed.ui_message`), the modal a person sees
(``modal``: the view and the errors under its inputs, told to that person only:
:func:`ui_modal`) and the snapshot a stream opens with (:meth:`PageFeed.snapshot`). It
also keeps one behaviour of Slack's the page makes visible: an assistant thread status
clears itself after :data:`STATUS_TTL_S`.
When things happen is the workspace's (``bot.dev.workspace``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from bot.dev.page import StreamHub, ui_ephemeral
from bot.emulator.sender import Delivery
from bot.emulator.slack import BOT_USER_ID, Ephemeral, Message
from bot.emulator.slack_chat import ChatState
from bot.emulator.slack_views import HeldView

MAX_EPHEMERALS = 500
STATUS_TTL_S = 120.0  # an assistant thread status clears itself after 2 minutes

Key = tuple[str, str]  # (channel, ts)


class PageFeed:
    """The page's events about one fake Slack's :class:`ChatState`."""

    def __init__(self, held: ChatState) -> None:
        self.hub = StreamHub()
        self._held = held
        self._streamed: set[Key] = set()  # messages that began as chat streams
        self._status_timers: dict[Key, asyncio.TimerHandle] = {}

    def close(self) -> None:
        """End every page stream and every status timer."""
        self.hub.close()
        for timer in self._status_timers.values():
            timer.cancel()
        self._status_timers.clear()

    def publish(self, kind: str, data: Mapping[str, Any], audience: str | None = None) -> None:
        """Send an event to every page stream (only ``audience``'s, if given), in order."""
        self.hub.publish(kind, data, audience)

    # ---- what the page is told -------------------------------------------------------------

    def posted(self, message: Message, *, streamed: bool = False) -> None:
        if streamed:
            self._streamed.add((message.channel, message.ts))
        self.publish("message", self.ui_message(message))

    def updated(self, message: Message) -> None:
        self.publish("update", self.ui_message(message))

    def deleted(self, channel: str, ts: str) -> None:
        self.publish("delete", {"channel": channel, "ts": ts})

    def dropped(self, channel: str, ts: str) -> None:
        """A message dropped for room: it and what hangs on it go, and the page is told."""
        key = (channel, ts)
        del self._held.messages[key]
        self._held.reactions.pop(key, None)
        self._held.statuses.pop(key, None)
        timer = self._status_timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        self._streamed.discard(key)
        self.deleted(channel, ts)

    def ephemeral(self, ephemeral: Ephemeral) -> None:
        """A new ephemeral, told to its one person (the oldest held beyond the bound go)."""
        ephemerals = self._held.ephemerals
        if len(ephemerals) > MAX_EPHEMERALS:
            del ephemerals[: len(ephemerals) - MAX_EPHEMERALS]
        self.publish("ephemeral", ui_ephemeral(ephemeral), audience=ephemeral.user)

    def modal(self, user: str, shown: HeldView | None) -> None:
        """The modal ``user`` sees now (None: none), told to them only."""
        self.publish("modal", ui_modal(user, shown), audience=user)

    def reacted(self, channel: str, ts: str, name: str) -> None:
        reactions = list(self._held.reactions.get((channel, ts), []))
        data = {"channel": channel, "ts": ts, "name": name, "user": BOT_USER_ID}
        self.publish("reaction", data | {"reactions": reactions})

    def delivery(self, delivery: Delivery, *, retries: int) -> None:
        """One attempt at delivering to the bot; ``retries``: how many it may get."""
        data = {
            "kind": delivery.kind,
            "type": delivery.type,
            "event_id": delivery.event_id,
            "ts": delivery.ts,
            "attempt": delivery.attempt,
            "retries": retries,
            "status": delivery.status,
            "ok": delivery.ok,
            "reason": delivery.reason,
        }
        self.publish("delivery", data)

    def show_status(self, channel: str, thread_ts: str, status: str, *, told: bool = False) -> None:
        """An assistant thread status, cleared after STATUS_TTL_S as Slack does; the page
        hears of it when it was set (``told``) or when what it shows changes."""
        key = (channel, thread_ts)
        timer = self._status_timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        shown = bool(self._held.statuses.get(key))
        if status:
            self._held.statuses[key] = status
            loop = asyncio.get_running_loop()
            self._status_timers[key] = loop.call_later(
                STATUS_TTL_S, self.show_status, channel, thread_ts, ""
            )
        else:
            self._held.statuses.pop(key, None)
        if told or status or shown:
            self.publish("status", {"channel": channel, "thread_ts": thread_ts, "status": status})

    # ---- what the page shows ---------------------------------------------------------------

    def ui_message(self, message: Message) -> dict[str, Any]:
        """A message as the page shows it: Slack's shape, its channel, stream and reactions."""
        out = message.as_slack()
        key = (message.channel, message.ts)
        out.update(
            channel=message.channel,
            streaming=message.streaming,
            streamed=key in self._streamed,
            reactions=[
                {"name": name, "users": [BOT_USER_ID], "count": 1}
                for name in self._held.reactions.get(key, [])
            ],
        )
        return out

    def snapshot(
        self,
        channel: str,
        channel_name: str,
        ephemerals: list[Ephemeral],
        modal: HeldView | None = None,
    ) -> dict[str, Any]:
        """The channel as a page stream opens with it: its messages with their reactions,
        its assistant statuses, and the ephemerals and the modal given (one person's)."""
        statuses = [
            {"channel": c, "thread_ts": t, "status": s}
            for (c, t), s in self._held.statuses.items()
            if c == channel and s
        ]
        return {
            "seq": self.hub.seq,
            "channel": {"id": channel, "name": channel_name},
            "messages": [self.ui_message(m) for m in self._held.thread(channel)],
            "ephemerals": [ui_ephemeral(e) for e in ephemerals],
            "statuses": statuses,
            "modal": ui_modal(modal.user, modal) if modal and modal.user else None,
        }


def ui_modal(user: str, shown: HeldView | None) -> dict[str, Any]:
    """A person's modal as the page shows it: the view (Slack's shape) and the errors under
    its inputs, or ``view: None`` once it is gone."""
    if shown is None:
        return {"user": user, "view": None, "errors": {}}
    return {"user": user, "view": shown.view, "errors": shown.errors}

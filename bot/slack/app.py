"""The bolt app: the message listeners (the ack path) and the buttons' registration.

A listener persists what must not be lost (the message into the thread's inject
stream, a ``queued`` job: ``Turns.receive``) and schedules the job in the background;
bolt runs with ``process_before_response=True``, so the answer to Slack goes out only
after the write, and a Redis failure becomes a 503 that Slack retries. Duplicates
(Slack's retries, and a mention that also arrives as a ``message``) are recognised by
the message's channel and ts, marked only after the message was persisted. Which
messages are taken: people's, and those of the bots ``OPSLOOP_ALLOWED_BOTS`` names.
Other bots' posts (an alert a thread starts from) are read as thread context: when a
message starts a job in a thread whose earlier messages the history does not hold yet
(``bot.turns.context`` decides), the listener reads them with ``conversations.replies``
(bounded in time, never holding up the ack past ``CONTEXT_TIMEOUT_S``, a failure only
costs the context) and ``bot.slack.context`` renders them. A message that would start a
new job passes a gate first (``bot.turns.admission``: the workspace's daily caps, the
author's hourly rate of jobs); refused, it writes nothing and its author is told why
(``bot.slack.admission``), off the ack path. A reply joining a job that waits for
approval is, once persisted and acknowledged, shown on the pending card with ``eyes``
on the reply (``Interactions.show_reply``), so whoever decides sees it before the click.

The transports are elsewhere: ``bot.slack.http`` (``opsloop serve``: the gate in front
of bolt, health, metrics) and ``bot.slack.socket`` (``opsloop socket``); the buttons'
listeners are ``bot.slack.actions``; the whole service is put together in
``bot.service``.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from bot.metrics import Metrics
from bot.records import Thread
from bot.slack import admission, assistant, feedback, home, outputs, shortcut, timeline_shortcut
from bot.slack.actions import Interactions
from bot.slack.alert_poster import AlertClicks
from bot.slack.alerts import ACTION_INVESTIGATE_ALERT
from bot.slack.cards import ACTION_EDIT
from bot.slack.context import Own, thread_context
from bot.slack.edit_modal import EDIT_CALLBACK, EditModal
from bot.slack.identity import BotIdentity
from bot.slack.names import Names
from bot.slack.status_blocks import ACTION_APPROVE, ACTION_CONTINUE, ACTION_DENY, ACTION_STOP
from bot.turns.admission import NotAdmitted
from bot.turns.context import ContextWindow
from bot.turns.parts import Turns

log = logging.getLogger(__name__)

CONTEXT_TIMEOUT_S = 1.5  # a slow Slack must not hold up the ack
CONTEXT_PAGE = 200  # messages per conversations.replies call (Slack's advice: at most 200)
CONTEXT_PAGES = 3  # calls per reading, all within CONTEXT_TIMEOUT_S
HUMAN_SUBTYPES = frozenset({None, "thread_broadcast", "file_share"})

Background = Callable[[Coroutine[Any, Any, Any], str], None]
WaitingReply = Callable[[Thread, str, str], Coroutine[Any, Any, None]]  # thread, job, reply ts


@dataclass(eq=False, kw_only=True)
class Messages:
    """The ``app_mention`` and ``message`` listeners."""

    client: AsyncWebClient
    turns: Turns
    identity: BotIdentity
    schedule: Callable[[str], None]
    allowed_bots: frozenset[str]
    context_timeout_s: float = CONTEXT_TIMEOUT_S
    approvers: Sequence[str] = ()  # named in the daily cap's refusal
    background: Background | None = None
    # A reply to a job waiting for approval, shown on its card (``bot.slack.actions``).
    on_waiting_reply: WaitingReply | None = field(default=None, init=False)
    _tasks: set[asyncio.Task[Any]] = field(default_factory=set, init=False)

    async def _author(self, event: dict[str, Any]) -> str | None:
        """Who a message that may start or enter a job is from, or ``None`` when it must
        be ignored: bots (``bot_id`` set, or ``subtype: bot_message``) start nothing and
        enter nothing — no bot-to-bot loops, no integration spending model budget or
        proposing writes — unless listed in ``OPSLOOP_ALLOWED_BOTS`` (never this bot
        itself); edits, deletions and other subtypes are not people talking."""
        subtype = event.get("subtype")
        bot_id = event.get("bot_id")
        if bot_id or subtype == "bot_message":
            if not isinstance(bot_id, str) or bot_id not in self.allowed_bots:
                log.info("ignored a message from bot %s", bot_id or "(no bot_id)")
                return None
            await self.identity.load()
            if bot_id == self.identity.bot_id:
                return None
            if subtype not in HUMAN_SUBTYPES and subtype != "bot_message":
                return None
            user = event.get("user")
            return user if isinstance(user, str) and user else bot_id
        if subtype not in HUMAN_SUBTYPES:
            return None
        user = event.get("user")
        return user if isinstance(user, str) and user else None

    async def on_mention(self, event: dict[str, Any]) -> None:
        channel, ts = event.get("channel"), event.get("ts")
        if not (isinstance(channel, str) and isinstance(ts, str) and channel and ts):
            return
        user = await self._author(event)
        if user is None:
            return
        thread_ts = event.get("thread_ts")
        thread = Thread(channel, thread_ts if isinstance(thread_ts, str) and thread_ts else ts)
        await self._take(thread, ts, user, str(event.get("text") or ""))

    async def on_message(self, event: dict[str, Any]) -> None:
        channel, ts = event.get("channel"), event.get("ts")
        thread_ts = event.get("thread_ts")
        if not all(isinstance(v, str) and v for v in (channel, ts, thread_ts)) or thread_ts == ts:
            return
        user = await self._author(event)
        if user is None:
            return
        text = str(event.get("text") or "")
        bot = await self.identity.load()
        if bot and re.search(rf"<@{re.escape(bot)}(\|[^>]*)?>", text):
            return  # the app_mention listener takes it
        await self._take(Thread(str(channel), str(thread_ts)), str(ts), str(user), text, reply=True)

    async def _take(
        self, thread: Thread, ts: str, user: str, text: str, *, reply: bool = False
    ) -> None:
        """The ack path: admit, persist (one script), index, schedule. Raises on a store
        failure, so Slack gets a 503 and retries. When the message starts a job, the
        thread's earlier messages the history does not hold yet come first, as context;
        when the job is not admitted (``bot.turns.admission``), nothing is written and
        its author is told why, off the ack path."""

        async def context(window: ContextWindow) -> str | None:
            return await self.thread_context(thread, window)

        receipt = await self.turns.receiver.receive(
            thread,
            ts=ts,
            user=user,
            text=text,
            reply=reply,
            context=context,
        )
        if isinstance(receipt, NotAdmitted):
            log.info("no job for %s in %s: %s", ts, thread, receipt.verdict.kind)
            told = admission.tell(self.client, thread, user, receipt, approvers=self.approvers)
            self.spawn(told, "admission refusal")
            return
        if receipt.needs_run and receipt.job_id is not None:
            self.schedule(receipt.job_id)
        if (
            self.on_waiting_reply is not None
            and receipt.job_id is not None
            and receipt.status == "awaiting_approval"
            and receipt.outcome in ("joined", "duplicate")
        ):
            # Heard before the click: the card shows the reply and the reply gets eyes.
            shown = self.on_waiting_reply(thread, receipt.job_id, ts)
            self.spawn(shown, "reply on the card")

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> None:
        """Slack calls after the ack (the process's background tasks when given)."""
        if self.background is not None:
            self.background(coro, name)
            return
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def thread_context(self, thread: Thread, window: ContextWindow) -> str | None:
        """The thread's messages in ``window``, rendered (``bot.slack.context``); None if
        there are none, or Slack can't say within ``context_timeout_s``."""
        messages: list[object] = []
        complete = False
        try:
            async with asyncio.timeout(self.context_timeout_s):
                await self.identity.load()
                cursor: str | None = None
                for _ in range(CONTEXT_PAGES):
                    reply = await self.client.conversations_replies(
                        channel=thread.channel,
                        ts=thread.thread_ts,
                        latest=window.before,
                        oldest=window.after,
                        limit=CONTEXT_PAGE,
                        cursor=cursor,
                    )
                    messages.extend(reply.get("messages") or [])
                    cursor = str((reply.get("response_metadata") or {}).get("next_cursor") or "")
                    if not reply.get("has_more") or not cursor:
                        complete = True
                        break
        except Exception:
            log.info("no thread context for %s", thread, exc_info=True)
            return None
        own = Own(bot_id=self.identity.bot_id, user=self.identity.user)
        return thread_context(messages, window=window, own=own, complete=complete)


def bolt_app(
    *,
    client: AsyncWebClient,
    signing_secret: str | None,
    socket: bool,
    messages: Messages,
    interactions: Interactions,
    metrics: Metrics | None = None,
    pane: assistant.PaneConfig | None = None,
    names: Names | None = None,
    alert_clicks: AlertClicks | None = None,
) -> AsyncApp:
    """The bolt app with every listener registered (``manifest.yml`` declares them).
    Over Socket Mode there is no request to verify: the websocket is authenticated."""
    app = AsyncApp(
        client=client,
        signing_secret=signing_secret,
        process_before_response=True,
        request_verification_enabled=not socket,
    )
    messages.on_waiting_reply = interactions.show_reply
    app.event("app_mention")(messages.on_mention)
    app.event("message")(messages.on_message)
    app.action(ACTION_APPROVE)(interactions.on_approve)
    app.action(ACTION_DENY)(interactions.on_deny)
    editing = EditModal(interactions)  # the card's Edit and its form (bot.slack.edit_modal)
    app.action(ACTION_EDIT)(editing.on_edit)
    app.view(EDIT_CALLBACK)(editing.on_submit)
    app.action(ACTION_STOP)(interactions.on_stop)
    app.action(ACTION_CONTINUE)(interactions.on_continue)
    if alert_clicks is not None:  # an alert message's Investigate (bot.slack.alert_poster)
        app.action(ACTION_INVESTIGATE_ALERT)(alert_clicks.on_investigate)
    feedback.register(app, turns=messages.turns, metrics=metrics)
    shortcut.register(app, messages=messages, interactions=interactions)
    timeline_shortcut.register(
        app,
        turns=messages.turns,
        client=client,
        policy=interactions.policy,
        background=interactions.background,
        names=names,
    )
    assistant.register(app, messages=messages, background=interactions.background, config=pane)
    home.register(app, interactions=interactions, names=names)
    outputs.register(app, turns=messages.turns, client=client, background=interactions.background)
    return app

"""The assistant pane (Slack's Agents & AI Apps): greeting, context, a job per request.

bolt's ``AsyncAssistant`` middleware routes the pane's events here:

* ``assistant_thread_started`` — the context Slack gives (the channel the user has open)
  is saved, then, off the ack path, a greeting is posted in the pane's thread with the
  suggested prompts (``assistant.threads.setSuggestedPrompts``, ``OPSLOOP_SUGGESTED_PROMPTS``);
* ``assistant_thread_context_changed`` — the new context is saved;
* a user's ``message.im`` in a pane thread — taken exactly like a mention
  (``Messages.on_mention``: the same receipt, limits, approvals, Stop, status and
  answer), the request carrying the channel the user is looking at, e.g.
  "(the user is looking at <#C42>)"; the first request titles the thread
  (``assistant.threads.setTitle``, off the ack path).

The context lives in Redis per pane thread (``bot.turns.assistant``), so any process
taking the next message knows it; bolt's own store (message metadata read back with
``conversations.replies``) would cost a Slack call on the ack path.

Approval cards: a pane thread is a DM between the user and the bot, which approvers
cannot see. With ``OPSLOOP_APPROVAL_CHANNEL`` set, the card of a job in a DM is posted
in that channel instead (``card_channel``), and the DM is told where it is; the card's
edits and its reminder follow it there. Unset, the card stays in the DM, naming whom
to ask (today's behaviour). Either way every refusal stands: the approver policy, the
two-person rule, the card bound to the exact call. Every Slack call here is best
effort: a refused method costs only its part (no prompts, no title).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from slack_bolt.async_app import AsyncApp
from slack_bolt.context.assistant.thread_context import AssistantThreadContext
from slack_bolt.context.assistant.thread_context_store.async_store import (
    AsyncAssistantThreadContextStore,
)
from slack_bolt.middleware.assistant.async_assistant import AsyncAssistant
from slack_sdk.web.async_client import AsyncWebClient

from bot.records import ApprovalRecord, JobRecord, Thread
from bot.settings import DEFAULT_SUGGESTED_PROMPTS
from bot.slack.blockkit import Message as BlockMessage
from bot.slack.blockkit import context_block, mention, one_line, unescape
from bot.turns.assistant import Pane, PaneContext
from bot.turns.parts import Turns

log = logging.getLogger(__name__)

GREETING = (
    "Hi <@{user}>, I'm opsloop. Tell me what is going on and I'll investigate with the "
    "tools this workspace gave me; changes wait for an approval."
)
MAX_TITLE = 80
MAX_PROMPT_TITLE = 75
MAX_PROMPT = 1_000
PROMPTS_TITLE = "Try one of these:"
DM_PREFIX = "D"
CHANNEL_ID = re.compile(r"^[CGD][A-Z0-9]{1,40}$")
TEAM_ID = re.compile(r"^T[A-Z0-9]{1,40}$")
ENTERPRISE_ID = re.compile(r"^E[A-Z0-9]{1,40}$")
USER_ID = re.compile(r"^[UW][A-Z0-9]{1,40}$")
SLACK_TS = re.compile(r"^[0-9]{1,20}\.[0-9]{1,20}$")

Background = Callable[[Coroutine[Any, Any, Any], str], None]


class Messages(Protocol):
    """What the pane needs of ``bot.slack.app.Messages`` (which imports this module)."""

    client: AsyncWebClient
    turns: Turns

    async def on_mention(self, event: dict[str, Any]) -> None: ...


@dataclass(frozen=True, slots=True)
class PaneConfig:
    """The pane's settings (``OPSLOOP_SUGGESTED_PROMPTS``, ``OPSLOOP_APPROVAL_CHANNEL``)."""

    prompts: tuple[str, ...] = tuple(DEFAULT_SUGGESTED_PROMPTS.split("|"))
    approval_channel: str | None = None


def card_channel(approval_channel: str | None, channel: str) -> str | None:
    """Where a card of a job in ``channel`` goes instead of the job's thread: the
    approval channel for a job in a DM (an assistant-pane thread), else ``None``."""
    if approval_channel and channel.startswith(DM_PREFIX):
        return approval_channel
    return None


def with_context(text: str, context: PaneContext | None, own_channel: str) -> str:
    """The request as the job sees it: the text, and the channel the user looks at."""
    looking = context.channel_id if context is not None else None
    if not looking or looking == own_channel or looking.startswith(DM_PREFIX):
        return text
    return f"{text}\n\n(the user is looking at <#{looking}>)"


def prompts_arg(prompts: Sequence[str]) -> list[dict[str, str]]:
    """``assistant.threads.setSuggestedPrompts``' ``prompts`` (title and message)."""
    return [
        {"title": one_line(p)[:MAX_PROMPT_TITLE], "message": p[:MAX_PROMPT]} for p in prompts if p
    ][:4]


def _str(obj: object, name: str) -> str | None:
    value = obj.get(name) if isinstance(obj, dict) else None
    return value if isinstance(value, str) and value else None


def _id(raw: object, name: str, shape: re.Pattern[str]) -> str | None:
    value = _str(raw, name)
    return value if value is not None and shape.match(value) else None


def pane_context(raw: object) -> PaneContext:
    """The context Slack sent, keeping only values shaped like Slack's ids (they enter
    the request the model reads)."""
    return PaneContext(
        _id(raw, "channel_id", CHANNEL_ID),
        _id(raw, "team_id", TEAM_ID),
        _id(raw, "enterprise_id", ENTERPRISE_ID),
    )


class RedisContextStore(AsyncAssistantThreadContextStore):
    """bolt's thread-context store, kept in Redis (``bot.turns.assistant``)."""

    def __init__(self, pane: Pane) -> None:
        self.pane = pane

    async def save(self, *, channel_id: str, thread_ts: str, context: dict[str, str]) -> None:
        await self.pane.save_context(Thread(channel_id, thread_ts), pane_context(context))

    async def find(self, *, channel_id: str, thread_ts: str) -> AssistantThreadContext | None:
        found = await self.pane.context(Thread(channel_id, thread_ts))
        if found is None or found.channel_id is None:
            return None
        raw = {"channel_id": found.channel_id}
        if found.team_id:
            raw["team_id"] = found.team_id
        if found.enterprise_id:
            raw["enterprise_id"] = found.enterprise_id
        return AssistantThreadContext(raw)


@dataclass
class AssistantListeners:
    client: AsyncWebClient
    messages: Messages
    pane: Pane
    background: Background
    config: PaneConfig = field(default_factory=PaneConfig)

    async def on_thread_started(self, payload: dict[str, Any]) -> None:
        started = payload.get("assistant_thread")
        channel = _id(started, "channel_id", CHANNEL_ID)
        thread_ts = _id(started, "thread_ts", SLACK_TS)
        if not (channel and thread_ts):
            return
        thread = Thread(channel, thread_ts)
        await self.pane.save_context(thread, pane_context(_field(started, "context")))
        user = _id(started, "user_id", USER_ID)
        self.background(self._greet(thread, user), "assistant greeting")

    async def _greet(self, thread: Thread, user: str | None) -> None:
        text = GREETING.format(user=user) if user else GREETING.replace(" <@{user}>", "")
        try:
            await self.client.chat_postMessage(
                channel=thread.channel, thread_ts=thread.thread_ts, text=text
            )
        except Exception:
            log.info("no greeting in %s", thread, exc_info=True)
        prompts = prompts_arg(self.config.prompts)
        if not prompts:
            return
        try:
            await self.client.assistant_threads_setSuggestedPrompts(
                channel_id=thread.channel,
                thread_ts=thread.thread_ts,
                prompts=prompts,
                title=PROMPTS_TITLE,
            )
        except Exception:
            log.info("no suggested prompts in %s", thread, exc_info=True)

    async def on_context_changed(self, payload: dict[str, Any]) -> None:
        changed = payload.get("assistant_thread")
        channel = _id(changed, "channel_id", CHANNEL_ID)
        thread_ts = _id(changed, "thread_ts", SLACK_TS)
        if channel and thread_ts:
            await self.pane.save_context(
                Thread(channel, thread_ts), pane_context(_field(changed, "context"))
            )

    async def on_user_message(self, payload: dict[str, Any]) -> None:
        """A request in the pane: a mention in all but name (``Messages.on_mention``)."""
        channel = _id(payload, "channel", CHANNEL_ID)
        thread_ts = _id(payload, "thread_ts", SLACK_TS)
        text = payload.get("text")
        if not (channel and thread_ts and isinstance(text, str)):
            return
        thread = Thread(channel, thread_ts)
        context = await self.pane.context(thread)
        await self.messages.on_mention({**payload, "text": with_context(text, context, channel)})
        if text.strip() and await self.pane.claim_title(thread):
            self.background(self._title(thread, text), "assistant title")

    async def _title(self, thread: Thread, text: str) -> None:
        title = unescape(one_line(text))
        title = title if len(title) <= MAX_TITLE else title[: MAX_TITLE - 1] + "…"
        try:
            await self.client.assistant_threads_setTitle(
                channel_id=thread.channel, thread_ts=thread.thread_ts, title=title
            )
        except Exception:
            log.info("no title for %s", thread, exc_info=True)


def _field(obj: object, name: str) -> object:
    return obj.get(name) if isinstance(obj, dict) else None


def register(
    app: AsyncApp,
    *,
    messages: Messages,
    background: Background,
    config: PaneConfig | None = None,
) -> AsyncAssistant:
    """Route the pane's events (``manifest.yml``: the ``assistant_view`` feature,
    ``assistant:write``, ``im:history``, ``assistant_thread_started``,
    ``assistant_thread_context_changed``, ``message.im``) to the listeners above."""
    pane = Pane(messages.turns)
    listeners = AssistantListeners(
        client=messages.client,
        messages=messages,
        pane=pane,
        background=background,
        config=config or PaneConfig(),
    )
    assistant = AsyncAssistant(thread_context_store=RedisContextStore(pane))
    assistant.thread_started(listeners.on_thread_started)
    assistant.thread_context_changed(listeners.on_context_changed)
    assistant.user_message(listeners.on_user_message)
    app.assistant(assistant)
    return assistant


async def post_card_elsewhere(
    client: AsyncWebClient, channel: str, record: JobRecord, card: BlockMessage
) -> str:
    """Post the card of a DM job in the approval channel (top level, naming whose pane
    asked), tell the DM where it is (best effort), and return the card's ts."""
    asked = f"Asked by {mention(record.requester)} in the assistant pane."
    reply = await client.chat_postMessage(
        channel=channel,
        text=f"{card.text}\n{asked}",
        blocks=[*card.blocks, context_block(asked)],
    )
    try:
        await client.chat_postMessage(
            channel=record.channel,
            thread_ts=record.thread_ts,
            text=(
                f":raised_hand: This change waits for an approval: the card is in <#{channel}>,"
                " where the approvers can see it."
            ),
        )
    except Exception:
        log.info("job %s: the DM was not told where its card is", record.id, exc_info=True)
    return str(reply["ts"])


def card_place(approval_channel: str | None, approval: ApprovalRecord) -> tuple[str, str | None]:
    """The channel a posted card is in, and the thread its reminder goes to."""
    elsewhere = card_channel(approval_channel, approval.channel)
    if elsewhere is None:
        return approval.channel, approval.thread_ts
    return elsewhere, approval.card_ts

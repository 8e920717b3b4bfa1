"""Slack's direction towards the bot: Events API and ``block_actions`` payloads, signed, sent.

The one place Slack's requests are built and signed: the dev emulator (``bot.dev.workspace``)
sends with it (:func:`deliver_event`, :func:`post_signed`), the end-to-end harness
(``tests/e2e/harness.py``) builds and signs with it and posts through its own client (a test
must be able to send exactly the headers it gives, none included). It owns what is sent and
how, not when (the emulator, or a test, decides that):

**Events** go out as Slack sends them: an ``event_callback`` JSON envelope (:func:`envelope`,
:func:`event_body`, around e.g. a :func:`human_event`), signed v0 with the signing secret
(``X-Slack-Request-Timestamp``, ``X-Slack-Signature``: :func:`sign`, HMAC-SHA256 over
``v0:{timestamp}:{body}``). The bot has :data:`ACK_TIMEOUT_S` (3 s) to answer 2xx; a
timeout, a connection failure or any other status is retried by :func:`deliver_event` up to
:data:`MAX_RETRIES` times with ``X-Slack-Retry-Num`` (1..3) and ``X-Slack-Retry-Reason``
(``http_timeout``, ``connection_failed`` or ``http_error``: :func:`retried`), the same
``event_id`` and a fresh signature; an answer carrying ``X-Slack-No-Retry: 1`` stops the
retries. Slack waits about a minute and then five minutes between retries; the emulator waits
:data:`RETRY_DELAYS_S` (1 s, 2 s, 4 s) so local development does not stall.
The assistant pane's events (:func:`assistant_thread_event`: ``assistant_thread_started``,
``assistant_thread_context_changed``), a DM's ``message.im`` (:func:`im_event`,
``channel_type: im``) and ``app_home_opened`` (:func:`app_home_opened`) go in the same
envelope.

**Clicks** go out as ``block_actions`` (:func:`block_actions`, :func:`form_body`): form-encoded
``payload=<json>``, signed, with the clicker, the clicked message as it is now, the button
(``action_id``, ``block_id``, ``value``, ``text``: :func:`find_button`) and a ``response_url``.
Slack does not retry interactivity requests, nor does the emulator. A click on the
``feedback_buttons`` of a ``context_actions`` block (:func:`find_feedback`) is a
``block_actions`` too, its action of type ``feedback_buttons`` carrying the chosen button's
``value`` (:func:`feedback_action`). A **message shortcut** ("⋯ → Investigate with
opsloop") goes out as a ``message_action`` (:func:`message_action`): the same form and
signature, the message as Slack holds it, the user and a ``response_url``.

Every interactivity payload carries a fresh ``trigger_id`` (:func:`trigger_id`): shaped like
Slack's, it holds its issue time in milliseconds and the acting user, which the fake Slack
reads back (:func:`read_trigger`) to refuse one that is expired (after
:data:`TRIGGER_TTL_S`) and to open a modal for its user. A **modal submission** is a
``view_submission`` (:func:`view_submission`): the view as Slack holds it, with the state
of its inputs (``bot.emulator.slack_wire.view_state``), sent like a click; the bot's answer
to it is in the body, which :func:`post_signed_answer` keeps (``bot.emulator.slack_views``
judges it).

Every attempt, event or click, is one :class:`Delivery`; :func:`post_signed` makes it and
turns every failure into a status (:data:`NO_ANSWER`) and a reason, never an exception.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import hmac
import json
import re
import secrets
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NotRequired, TypedDict, Unpack
from urllib.parse import urlencode

import aiohttp

from bot.emulator.slack_wire import (
    APP_ID,
    BOT_USER_ID,
    TEAM_ID,
    Message,
    Submitted,
    view_state,
)

JSON = "application/json"
FORM = "application/x-www-form-urlencoded"
TEAM_DOMAIN = "opsloop-dev"
VERIFICATION_TOKEN = "dev-verification-token"  # the deprecated body token Slack still sends
USER_AGENT = "Slackbot 1.0 (+https://api.slack.com/robots)"

ACK_TIMEOUT_S = 3.0
MAX_RETRIES = 3
RETRY_DELAYS_S: tuple[float, ...] = (1.0, 2.0, 4.0)  # Slack: ~immediately, 1 min, 5 min
NO_ANSWER = 0  # the status recorded (and returned by click_as) when the bot did not answer
MAX_ANSWER_BYTES = 64 * 1024  # of the bot's answer to an event, read and discarded

# (status, failure reason, X-Slack-No-Retry) of one POST to the bot
Sent = tuple[int, str | None, bool]


@dataclass(frozen=True)
class Delivery:
    """One attempt at sending the bot an event or a click."""

    kind: Literal["event", "click"]
    type: str  # "app_mention", "message" or "block_actions"
    event_id: str | None  # events only; the same across retries
    ts: str  # the message the event is about (else its event_ts), or the clicked one
    attempt: int  # 0 for the first, then the X-Slack-Retry-Num sent
    status: int  # the bot's HTTP status, NO_ANSWER without one
    reason: str | None  # why it failed: http_timeout, connection_failed, http_error

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


def sign(body: bytes, secret: str, *, timestamp: int | None = None) -> dict[str, str]:
    """Slack's v0 signature headers for ``body`` (signed now unless ``timestamp`` is given):
    HMAC-SHA256 of ``v0:{timestamp}:{body}`` with the signing secret."""
    ts = str(int(time.time()) if timestamp is None else timestamp)
    base = b"v0:" + ts.encode() + b":" + body
    digest = hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": f"v0={digest}"}


def retried(headers: Mapping[str, str], num: int = 1, reason: str = "http_error") -> dict[str, str]:
    """``headers`` plus the markers Slack adds to a redelivery."""
    return {**headers, "X-Slack-Retry-Num": str(num), "X-Slack-Retry-Reason": reason}


def new_event_id() -> str:
    """A unique event id shaped like Slack's (``Ev`` and upper-case alphanumerics)."""
    return "Ev" + uuid.uuid4().hex[:10].upper()


# ---- payloads -------------------------------------------------------------------------------


def _message_event(message: Message, channel_type: str, team: str) -> dict[str, Any]:
    """The ``message`` event of a person's post, as every kind of channel has it."""
    return {
        "type": "message",
        "user": message.user,
        "text": message.text,
        "ts": message.ts,
        "channel": message.channel,
        "event_ts": message.ts,
        "channel_type": channel_type,
        "team": team,
        "client_msg_id": str(uuid.uuid4()),
    }


def human_event(message: Message, parent: Message | None) -> dict[str, Any]:
    """The ``message`` event of a person's post (in the thread of ``parent``, if given)."""
    event = _message_event(message, "channel", TEAM_ID)
    event["blocks"] = message.blocks
    if parent is not None:
        event["thread_ts"] = parent.ts
        event["parent_user_id"] = parent.user
    return event


def _pane_thread(
    user: str, channel: str, thread_ts: str, looking_at: str | None, team: str
) -> dict[str, Any]:
    context = {"channel_id": looking_at, "team_id": team, "enterprise_id": None}
    return {
        "user_id": user,
        "context": context if looking_at else {},
        "channel_id": channel,
        "thread_ts": thread_ts,
    }


def assistant_thread_event(
    kind: Literal["assistant_thread_started", "assistant_thread_context_changed"],
    *,
    user: str,
    channel: str,
    thread_ts: str,
    looking_at: str | None = None,
    team: str = TEAM_ID,
) -> dict[str, Any]:
    """The assistant pane's ``assistant_thread_started`` (a user opened the pane: a new
    thread ``thread_ts`` in the DM ``channel``) or ``assistant_thread_context_changed``
    (they opened another channel, ``looking_at``)."""
    return {
        "type": kind,
        "assistant_thread": _pane_thread(user, channel, thread_ts, looking_at, team),
        "event_ts": f"{time.time():.6f}",
    }


def im_event(message: Message, *, team: str = TEAM_ID) -> dict[str, Any]:
    """The ``message.im`` event of a person's post in a DM (an assistant pane thread when
    ``message.thread_ts`` is set)."""
    event = _message_event(message, "im", team)
    if message.thread_ts:
        event["thread_ts"] = message.thread_ts
    return event


def app_home_opened(*, user: str, channel: str, tab: str = "home") -> dict[str, Any]:
    """``app_home_opened``: ``user`` opened the app's ``tab`` (``home`` or ``messages``)."""
    return {
        "type": "app_home_opened",
        "user": user,
        "channel": channel,
        "tab": tab,
        "event_ts": f"{time.time():.6f}",
    }


class EnvelopeOptions(TypedDict, total=False):
    """What an envelope says beside its event: the workspace and app it is for and when
    the event happened (by default :func:`envelope`'s: the fake workspace, the app, now)."""

    team: str
    api_app_id: str
    event_time: int | None


def envelope(
    event: Mapping[str, Any],
    event_id: str | None = None,
    *,
    team: str = TEAM_ID,
    api_app_id: str = APP_ID,
    event_time: int | None = None,
) -> dict[str, Any]:
    """The ``event_callback`` envelope Slack wraps an event in (a new event id unless given)."""
    return {
        "token": VERIFICATION_TOKEN,
        "team_id": team,
        "api_app_id": api_app_id,
        "event": dict(event),
        "type": "event_callback",
        "event_id": event_id or new_event_id(),
        "event_time": int(time.time()) if event_time is None else event_time,
        "authorizations": [
            {
                "enterprise_id": None,
                "team_id": team,
                "user_id": BOT_USER_ID,
                "is_bot": True,
                "is_enterprise_install": False,
            }
        ],
        "is_ext_shared_channel": False,
        "event_context": "4-" + uuid.uuid4().hex,
    }


def event_body(
    event: Mapping[str, Any], event_id: str | None = None, **options: Unpack[EnvelopeOptions]
) -> bytes:
    """:func:`envelope` as the JSON bytes Slack posts."""
    return json.dumps(envelope(event, event_id, **options)).encode()


def find_button(
    blocks: Iterable[Mapping[str, Any]] | None,
    *,
    action_id: str | None = None,
    value: str | None = None,
    text: str | None = None,
) -> tuple[str, dict[str, Any]] | None:
    """The first button in ``blocks`` matching every filter given (``text``: its label or
    the start of it), with its block's id (a stand-in, as Slack makes one, if it has none)."""
    for index, block in enumerate(blocks or ()):
        elements = list(block.get("elements") or []) if block.get("type") == "actions" else []
        if isinstance(block.get("accessory"), Mapping):
            elements.append(block["accessory"])
        for element in elements:
            if not isinstance(element, Mapping) or element.get("type") != "button":
                continue
            if action_id is not None and element.get("action_id") != action_id:
                continue
            if value is not None and str(element.get("value", "")) != value:
                continue
            label = str((element.get("text") or {}).get("text", ""))
            if text is not None and not label.startswith(text):
                continue
            return _block_id(block, index), dict(element)
    return None


def _block_id(block: Mapping[str, Any], index: int) -> str:
    """A block's id, or the stand-in Slack makes for one that has none."""
    made = hashlib.sha1(f"{index}".encode(), usedforsecurity=False).hexdigest()[:5]
    return str(block.get("block_id") or made)


def find_feedback(
    blocks: Iterable[Mapping[str, Any]] | None, positive: bool = True
) -> tuple[str, dict[str, Any]] | None:
    """The first ``feedback_buttons`` of a ``context_actions`` block in ``blocks``, as a
    clicked action (:func:`feedback_action`), with its block's id (a stand-in if none)."""
    for index, block in enumerate(blocks or ()):
        if block.get("type") != "context_actions":
            continue
        for element in block.get("elements") or ():
            if isinstance(element, Mapping) and element.get("type") == "feedback_buttons":
                return _block_id(block, index), feedback_action(element, positive=positive)
    return None


def find_feedback_value(
    blocks: Iterable[Mapping[str, Any]] | None, *, action_id: str, value: str
) -> tuple[str, dict[str, Any]] | None:
    """The click on the feedback button of ``blocks`` whose ``action_id`` and ``value``
    (either button's) are given, as :func:`find_feedback` returns it; None if none has."""
    for positive in (True, False):
        found = find_feedback(blocks, positive=positive)
        if found is not None and found[1]["action_id"] == action_id and found[1]["value"] == value:
            return found
    return None


def feedback_action(element: Mapping[str, Any], *, positive: bool) -> dict[str, Any]:
    """The ``actions`` element Slack sends for a click on one of ``element``'s buttons:
    its type, action id and the chosen button's value (in the shape :func:`block_actions`
    takes as ``button``)."""
    chosen = element.get("positive_button" if positive else "negative_button") or {}
    return {
        "type": "feedback_buttons",
        "action_id": str(element.get("action_id", "")),
        "value": str(chosen.get("value", "")),
        "text": dict(chosen.get("text") or {"type": "plain_text", "text": ""}),
    }


TRIGGER_TTL_S = 3.0  # Slack: a trigger_id is good for one views.open/push within 3 s
_TRIGGER = re.compile(r"^(\d{1,16})\.(\d{1,16})\.([0-9a-f]{32})([0-9a-f]{0,200})$")


@dataclass(frozen=True)
class Trigger:
    """What a ``trigger_id`` made here says: when it was issued and for whom."""

    issued_at: float  # seconds since the epoch, to the millisecond
    user: str | None  # the user whose interaction issued it (None: not said)


def trigger_id(user: str | None = None, *, issued_at: float | None = None) -> str:
    """A fresh ``trigger_id`` shaped like Slack's (``"<digits>.<digits>.<hex>"``), carrying
    its issue time in milliseconds (now unless ``issued_at``, so a test can make one that
    is already expired) and the user it was issued to, as the fake Slack reads them back
    (:func:`read_trigger`): Slack knows a trigger's user and age, and so must the fake."""
    at = time.time() if issued_at is None else issued_at
    who = user.encode().hex() if user else ""
    return f"{int(at * 1000)}.{secrets.randbelow(10**12)}.{uuid.uuid4().hex}{who}"


def read_trigger(value: object) -> Trigger | None:
    """The issue time and user of a :func:`trigger_id`; None when it is not one."""
    match = _TRIGGER.match(value) if isinstance(value, str) else None
    if match is None:
        return None
    try:
        user = bytes.fromhex(match.group(4)).decode() or None
    except ValueError:
        return None
    return Trigger(int(match.group(1)) / 1000, user)


_trigger_id = trigger_id  # the name the interactivity payloads have always used


class ActedOn(TypedDict):
    """Who acted on which message, and where the bot answers: what every interactivity
    payload (a click, a shortcut) carries (``team``, ``api_app_id``: the fake's unless given)."""

    user_id: str
    user_name: str
    channel: str
    channel_name: str
    message: Mapping[str, Any]  # in Slack's shape, e.g. ``Message.as_slack()``
    response_url: str
    team: NotRequired[str]
    api_app_id: NotRequired[str]


def _interaction(kind: str, acted: ActedOn) -> dict[str, Any]:
    """The fields every interactivity payload has, of type ``kind``."""
    team = acted.get("team", TEAM_ID)
    name = acted["user_name"]
    return {
        "type": kind,
        "token": VERIFICATION_TOKEN,
        "team": {"id": team, "domain": TEAM_DOMAIN},
        "user": {"id": acted["user_id"], "username": name, "name": name, "team_id": team},
        "channel": {"id": acted["channel"], "name": acted["channel_name"]},
        "is_enterprise_install": False,
        "enterprise": None,
        "api_app_id": acted.get("api_app_id", APP_ID),
        "trigger_id": _trigger_id(acted["user_id"]),
        "response_url": acted["response_url"],
        "message": dict(acted["message"]),
    }


def message_action(*, callback_id: str, **acted: Unpack[ActedOn]) -> dict[str, Any]:
    """The ``message_action`` payload of the message shortcut ``callback_id`` used on
    ``message``."""
    return {
        **_interaction("message_action", acted),
        "action_ts": f"{time.time():.6f}",
        "callback_id": callback_id,
        "message_ts": str(acted["message"].get("ts", "")),
    }


def block_actions(
    *,
    message_ts: str,
    thread_ts: str | None,
    block_id: str,
    button: Mapping[str, Any],
    **acted: Unpack[ActedOn],
) -> dict[str, Any]:
    """The ``block_actions`` payload of a click on ``button`` (its ``action_id``, ``value``,
    ``text``, ``style``) of ``message``."""
    container: dict[str, Any] = {
        "type": "message",
        "message_ts": message_ts,
        "channel_id": acted["channel"],
        "is_ephemeral": False,
    }
    if thread_ts:
        container["thread_ts"] = thread_ts
    action: dict[str, Any] = {
        "type": str(button.get("type") or "button"),
        "action_id": str(button["action_id"]),
        "block_id": block_id,
        "text": dict(button.get("text") or {"type": "plain_text", "text": ""}),
        "value": str(button.get("value", "")),
        "action_ts": f"{time.time():.6f}",
    }
    if action["type"] == "feedback_buttons":
        del action["text"]  # Slack sends the chosen button's value only
    if button.get("style"):
        action["style"] = button["style"]
    return {
        **_interaction("block_actions", acted),
        "container": container,
        "state": {"values": {}},
        "actions": [action],
    }


def view_submission(
    view: Mapping[str, Any],
    *,
    user_id: str,
    user_name: str,
    values: Mapping[str, Submitted] | None = None,
    raw: Mapping[str, Mapping[str, Any]] | None = None,
    team: str = TEAM_ID,
    api_app_id: str = APP_ID,
) -> dict[str, Any]:
    """The ``view_submission`` payload of ``user_id`` pressing a modal's submit button:
    ``view`` as Slack holds it (``id``, ``hash``, ``callback_id``, ``private_metadata``…,
    e.g. ``HeldView.view`` of the fake Slack) with its ``state`` (:func:`view_state` of
    ``values`` and ``raw``), and a fresh ``trigger_id`` (a ``views.push`` may use it)."""
    submitted = copy.deepcopy(dict(view))
    submitted["state"] = view_state(view, values, raw)
    return {
        "type": "view_submission",
        "team": {"id": team, "domain": TEAM_DOMAIN},
        "user": {"id": user_id, "username": user_name, "name": user_name, "team_id": team},
        "api_app_id": api_app_id,
        "token": VERIFICATION_TOKEN,
        "trigger_id": trigger_id(user_id),
        "view": submitted,
        "response_urls": [],
        "is_enterprise_install": False,
        "enterprise": None,
    }


def form_body(payload: Mapping[str, Any]) -> tuple[bytes, dict[str, str]]:
    """An interactivity request's body (``payload=<json>``, form-encoded) and headers."""
    body = urlencode({"payload": json.dumps(payload)}).encode()
    return body, {"Content-Type": FORM}


# ---- sending --------------------------------------------------------------------------------


@dataclass(frozen=True)
class BotAnswer:
    """The bot's answer to one signed POST: its status (:data:`NO_ANSWER` without one),
    why it failed, ``X-Slack-No-Retry``, and its body (up to the bound read)."""

    status: int
    reason: str | None
    no_retry: bool = False
    body: bytes = b""


async def post_signed_answer(
    session: aiohttp.ClientSession,
    url: str,
    body: bytes,
    headers: Mapping[str, str],
    *,
    secret: str,
    ack_timeout: float,
    max_bytes: int = MAX_ANSWER_BYTES,
) -> BotAnswer:
    """POST to the bot, signed now; its answer, the body's first ``max_bytes`` kept (a
    ``view_submission``'s ``response_action`` is in it). Never raises for the bot's faults."""
    signed = {**headers, **sign(body, secret)}
    try:
        async with asyncio.timeout(ack_timeout):
            async with session.post(
                url, data=body, headers=signed, allow_redirects=False
            ) as response:
                read = await response.content.read(max_bytes)
                no_retry = response.headers.get("X-Slack-No-Retry") == "1"
                ok = 200 <= response.status < 300
                return BotAnswer(response.status, None if ok else "http_error", no_retry, read)
    except TimeoutError:
        return BotAnswer(NO_ANSWER, "http_timeout")
    except aiohttp.ClientConnectorError:
        return BotAnswer(NO_ANSWER, "connection_failed")
    except (aiohttp.ClientError, OSError):
        return BotAnswer(NO_ANSWER, "http_error")


async def post_signed(
    session: aiohttp.ClientSession,
    url: str,
    body: bytes,
    headers: Mapping[str, str],
    *,
    secret: str,
    ack_timeout: float,
) -> Sent:
    """POST to the bot, signed now: (status, failure reason, X-Slack-No-Retry)."""
    answer = await post_signed_answer(
        session, url, body, headers, secret=secret, ack_timeout=ack_timeout
    )
    return answer.status, answer.reason, answer.no_retry


async def deliver_event(
    event: Mapping[str, Any],
    *,
    send: Callable[[bytes, Mapping[str, str]], Awaitable[Sent]],
    retry_delays: Sequence[float],
    record: Callable[[Delivery], Awaitable[None]],
    gone: Callable[[], bool],
) -> None:
    """Deliver one event, retrying as Slack does (bounded) until the bot answers 2xx.

    ``send`` makes one attempt, ``record`` is told of each, and ``gone()`` true after an
    attempt (the bot's URL was unset) ends the retries. An event about no message
    (``app_home_opened``, ``assistant_thread_started``) is recorded by its ``event_ts``.
    """
    event_id = new_event_id()
    body = event_body(event, event_id)
    # app_home_opened and the assistant pane's events are about no message: no ``ts``.
    about = str(event.get("ts") or event.get("event_ts") or "")
    reason: str | None = None
    delays = (0.0, *retry_delays[:MAX_RETRIES])
    for attempt, delay in enumerate(delays):
        if delay > 0:
            await asyncio.sleep(delay)
        headers = {"Content-Type": JSON}
        if attempt:
            headers = retried(headers, attempt, reason or "http_error")
        status, reason, no_retry = await send(body, headers)
        delivery = Delivery("event", event["type"], event_id, about, attempt, status, reason)
        await record(delivery)
        if delivery.ok or no_retry or gone():
            return


__all__ = [
    "ACK_TIMEOUT_S",
    "APP_ID",
    "FORM",
    "JSON",
    "MAX_RETRIES",
    "NO_ANSWER",
    "RETRY_DELAYS_S",
    "USER_AGENT",
    "VERIFICATION_TOKEN",
    "TRIGGER_TTL_S",
    "ActedOn",
    "BotAnswer",
    "Delivery",
    "Trigger",
    "EnvelopeOptions",
    "app_home_opened",
    "assistant_thread_event",
    "block_actions",
    "deliver_event",
    "envelope",
    "event_body",
    "feedback_action",
    "find_button",
    "find_feedback",
    "find_feedback_value",
    "form_body",
    "human_event",
    "im_event",
    "message_action",
    "new_event_id",
    "post_signed",
    "post_signed_answer",
    "read_trigger",
    "retried",
    "sign",
    "trigger_id",
    "view_submission",
]

"""Requests as Slack sends them to the bot: events, their envelope, and button clicks.

``message`` / ``reply`` / ``mention`` / ``twin`` build the inner events, ``event_body``
the ``event_callback`` envelope, ``url_verification_body`` the URL check, and
``block_actions_body`` / ``click_body`` the form-encoded clicks (a button found in a
message's blocks with ``find_button``). They are pure functions of their arguments (plus
the clock for timestamps and ids); the signing, envelopes and ``block_actions`` payloads
are ``bot.emulator.sender``'s, the one implementation the dev emulator sends with too.
``seed`` puts the human message behind an event into the fake Slack, as Slack holds it.

Used by the end-to-end tests (``tests/e2e/harness.py`` re-exports it) and the benchmarks
that post to a running bot; ``bot.emulator.bot_process`` posts these to ``opsloop serve``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping
from typing import Any, TypedDict, Unpack

from bot.emulator import sender
from bot.emulator.sender import FORM, JSON
from bot.emulator.slack import BOT_USER_ID, TEAM_ID, FakeSlack
from bot.emulator.slack_chat import TsClock

APP_ID = "A1"


def content_type(body: bytes) -> str:
    """The content type Slack sends ``body`` with: form for interactivity, else JSON."""
    return FORM if body.startswith(b"payload=") else JSON


# ---- ids and timestamps -----------------------------------------------------------------

_clock = TsClock(wall=True)  # one for the process: its ts never repeat


def new_ts() -> str:
    """A message ts (``"seconds.micros"``) near now, strictly increasing within the process."""
    return _clock.next()


# ---- events -----------------------------------------------------------------------------


class Posted(TypedDict, total=False):
    """When and where a person posts: at ``ts`` (by default now), in the thread
    ``thread_ts`` (by default none: the channel), from the workspace ``team``."""

    ts: str | None
    thread_ts: str | None
    team: str


def _posted(
    kind: str,
    channel: str,
    user: str,
    text: str,
    *,
    channel_type: str | None = None,
    **post: Unpack[Posted],
) -> dict[str, Any]:
    """The event of a person's post, as Slack orders its fields."""
    ts = post.get("ts") or new_ts()
    event: dict[str, Any] = {
        "type": kind,
        "channel": channel,
        "user": user,
        "text": text,
        "ts": ts,
        "event_ts": ts,
        "team": post.get("team", TEAM_ID),
    }
    if channel_type is not None:
        event["channel_type"] = channel_type
    event["client_msg_id"] = str(uuid.uuid4())
    thread_ts = post.get("thread_ts")
    if thread_ts is not None:
        event["thread_ts"] = thread_ts
    return event


def message(
    channel: str, user: str, text: str, *, subtype: str | None = None, **post: Unpack[Posted]
) -> dict[str, Any]:
    """A ``message`` event in a public channel."""
    event = _posted("message", channel, user, text, channel_type="channel", **post)
    if subtype is not None:
        event["subtype"] = subtype
    return event


def reply(
    channel: str, user: str, text: str, *, thread_ts: str, ts: str | None = None
) -> dict[str, Any]:
    """A human reply in the thread ``thread_ts`` (a ``message`` with ``thread_ts != ts``)."""
    return message(channel, user, text, ts=ts, thread_ts=thread_ts)


def mention(
    channel: str, user: str, text: str, *, bot_user: str = BOT_USER_ID, **post: Unpack[Posted]
) -> dict[str, Any]:
    """An ``app_mention`` whose text is ``"<@UBOT> " + text``."""
    return _posted("app_mention", channel, user, f"<@{bot_user}> {text}", **post)


def twin(app_mention: Mapping[str, Any]) -> dict[str, Any]:
    """The ``message`` event Slack also delivers for a mention: same channel, ts and text."""
    keep = ("channel", "user", "text", "ts", "event_ts", "team", "client_msg_id", "thread_ts")
    event = {k: app_mention[k] for k in keep if k in app_mention}
    return {"type": "message", "channel_type": "channel", **event}


def event_body(
    event: Mapping[str, Any],
    *,
    event_id: str | None = None,
    **options: Unpack[sender.EnvelopeOptions],
) -> bytes:
    """The ``event_callback`` envelope around ``event`` (for the app ``APP_ID`` unless
    told), as the JSON bytes Slack posts."""
    options.setdefault("api_app_id", APP_ID)
    return sender.event_body(event, event_id, **options)


def url_verification_body(challenge: str) -> bytes:
    """The request Slack sends when the events URL is set; the app must echo ``challenge``."""
    body = {"token": sender.VERIFICATION_TOKEN, "challenge": challenge}
    return json.dumps({**body, "type": "url_verification"}).encode()


def seed(slack: FakeSlack, event: Mapping[str, Any]) -> str:
    """Put the human message behind ``event`` into the fake (so ``conversations.replies``
    returns it, as Slack would); returns its ts."""
    return slack.add_message(
        event["channel"], event["ts"], event["user"], event["text"], event.get("thread_ts")
    )


# ---- interactivity ----------------------------------------------------------------------


def block_actions_body(
    user: str,
    action_id: str,
    value: str,
    channel: str,
    message_ts: str,
    response_url: str,
    *,
    block_id: str | None = None,
    thread_ts: str | None = None,
    message: Mapping[str, Any] | None = None,
    text: str = "button",
    team: str = TEAM_ID,
    api_app_id: str = APP_ID,
) -> bytes:
    """A button click as Slack posts it: form-encoded ``payload=<json>`` of a ``block_actions``.

    ``message`` is the clicked message in Slack's shape (defaults to a bare one).
    """
    clicked = dict(message) if message is not None else {"type": "message", "ts": message_ts}
    button = {
        "action_id": action_id,
        "value": value,
        "text": {"type": "plain_text", "text": text, "emoji": True},
    }
    payload = sender.block_actions(
        user_id=user,
        user_name=user.lower(),
        channel=channel,
        channel_name=channel.lower(),
        message=clicked,
        message_ts=message_ts,
        thread_ts=thread_ts,
        block_id=block_id or uuid.uuid4().hex[:5],
        button=button,
        response_url=response_url,
        team=team,
        api_app_id=api_app_id,
    )
    body, _ = sender.form_body(payload)
    return body


def find_button(
    blocks: Iterable[Mapping[str, Any]] | None,
    *,
    action_id: str | None = None,
    text: str | None = None,
) -> tuple[str, dict[str, Any]]:
    """The first button in ``blocks`` matching ``action_id`` and/or its visible ``text``
    (exact, or a prefix such as ``"Continue"``), with the ``block_id`` holding it."""
    found = sender.find_button(blocks, action_id=action_id, text=text)
    if found is not None:
        return found
    raise LookupError(f"no button with action_id={action_id!r} text={text!r} in the blocks")


def click_body(
    message: Mapping[str, Any],
    channel: str,
    user: str,
    response_url: str,
    *,
    action_id: str | None = None,
    text: str | None = None,
) -> bytes:
    """A click on a button of ``message`` (Slack's shape, e.g. ``Message.as_slack()``),
    carrying that button's own ``action_id``, ``value`` and ``block_id``."""
    block_id, button = find_button(message.get("blocks"), action_id=action_id, text=text)
    return block_actions_body(
        user,
        str(button["action_id"]),
        str(button.get("value", "")),
        channel,
        str(message["ts"]),
        response_url,
        block_id=block_id,
        thread_ts=message.get("thread_ts"),
        message=message,
        text=str(button["text"]["text"]),
    )

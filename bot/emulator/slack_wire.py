"""What the fake Slack Web API speaks: Slack's wire shapes, limits and errors, and requests.

The fake workspace's identities (:data:`BOT_USER_ID`, :data:`TEAM_ID`, …); what the fake
holds and hands back (:class:`Message`, :class:`Ephemeral`, :class:`Call`); :class:`SlackError`,
a method's ``{"ok": false, "error": code}``; Slack's Block Kit and text limits enforced as Slack
enforces them (:func:`block_errors`, :func:`message_content`, :func:`stream_text`); and reading
a request's params the way Slack does (query string, then a form or JSON body; JSON-in-form
fields decoded); and a modal's ``state.values`` as a submission carries them, per input
element (:func:`view_state`, :func:`input_state`, :func:`initial_state`). No server and no
state here: that is ``bot.emulator.slack``, which re-exports the names its users need.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from aiohttp import web

from bot.emulator.context_actions import actions_errors, context_actions_errors

BOT_USER_ID = "UBOT"
BOT_ID = "BBOT"
TEAM_ID = "T1"
BOT_NAME = "opsloop"
APP_ID = "A0OPSLOOP"  # the app's id in envelopes, Socket Mode URLs and hellos

MAX_BLOCKS = 50
MAX_SECTION_TEXT = 3_000
MAX_SECTION_FIELD = 2_000
MAX_HEADER_TEXT = 150
MAX_BUTTON_TEXT = 75
MAX_MARKDOWN_TEXT = 12_000  # cumulative over all markdown blocks of one message
MAX_MESSAGE_TEXT = 40_000
MAX_STREAM_CHUNK = 12_000

Params = dict[str, Any]
Reply = dict[str, Any]
_JSON_FIELDS = ("blocks", "attachments", "view", "chunks", "metadata")


class Call(NamedTuple):
    """One request the fake received: the method and its merged query, form or JSON params."""

    method: str
    params: Params


@dataclass
class Message:
    """A message as the fake holds it, edits applied."""

    channel: str
    ts: str
    text: str
    user: str
    bot_id: str | None = None
    thread_ts: str | None = None
    blocks: list[dict[str, Any]] | None = None
    attachments: list[Any] | None = None
    streaming: bool = False
    edited: bool = False
    # What else another integration's post carries, as Slack returns it (``subtype``,
    # ``username``, ``bot_profile``, ``app_id``, ``icons``…): see ``FakeSlack.add_post``.
    extra: dict[str, Any] = field(default_factory=dict)

    def as_slack(self) -> Reply:
        """The message in Slack's wire shape (no ``user`` when it has none: an incoming
        webhook's post)."""
        out: Reply = {"type": "message", **copy.deepcopy(self.extra), "ts": self.ts}
        if self.user:
            out["user"] = self.user
        out["text"] = self.text
        out["team"] = TEAM_ID
        if self.bot_id is not None:
            out["bot_id"] = self.bot_id
        if self.thread_ts is not None:
            out["thread_ts"] = self.thread_ts
        if self.blocks is not None:
            out["blocks"] = copy.deepcopy(self.blocks)
        if self.attachments is not None:
            out["attachments"] = copy.deepcopy(self.attachments)
        if self.edited:
            out["edited"] = {"user": self.user, "ts": self.ts}
        return out


@dataclass
class Ephemeral:
    """An ephemeral message: visible only to ``user``."""

    channel: str
    user: str
    message_ts: str
    text: str
    thread_ts: str | None = None
    blocks: list[dict[str, Any]] | None = None


class SlackError(Exception):
    """Raised inside a method handler: answered as ``{"ok": false, "error": code, **extra}``."""

    def __init__(self, code: str, **extra: Any) -> None:
        super().__init__(code)
        self.code = code
        self.extra = extra


def block_errors(blocks: object) -> list[str]:
    """Slack-style reasons why ``blocks`` would be rejected as ``invalid_blocks`` (empty: fine)."""
    if not isinstance(blocks, list):
        return ["must be an array [json-pointer:/blocks]"]
    errors: list[str] = []
    if len(blocks) > MAX_BLOCKS:
        errors.append(f"no more than {MAX_BLOCKS} items allowed [json-pointer:/blocks]")
    markdown_total = 0
    for i, block in enumerate(blocks):
        where = f"/blocks/{i}"
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            errors.append(f"missing required field: type [json-pointer:{where}]")
            continue
        kind = block["type"]
        if kind == "section":
            _check_text(block.get("text"), MAX_SECTION_TEXT, f"{where}/text", errors)
            for j, item in enumerate(block.get("fields") or []):
                _check_text(item, MAX_SECTION_FIELD, f"{where}/fields/{j}", errors)
            accessory = block.get("accessory")
            if isinstance(accessory, dict) and accessory.get("type") == "button":
                _check_text(
                    accessory.get("text"), MAX_BUTTON_TEXT, f"{where}/accessory/text", errors
                )
        elif kind == "header":
            _check_text(block.get("text"), MAX_HEADER_TEXT, f"{where}/text", errors)
        elif kind == "context_actions":
            errors.extend(context_actions_errors(block, where))
        elif kind == "actions":
            errors.extend(actions_errors(block, where))
            for j, element in enumerate(block.get("elements") or []):
                if isinstance(element, dict) and element.get("type") == "button":
                    pointer = f"{where}/elements/{j}/text"
                    _check_text(element.get("text"), MAX_BUTTON_TEXT, pointer, errors)
        elif kind == "markdown":
            text = block.get("text")
            if not isinstance(text, str):
                errors.append(f"missing required field: text [json-pointer:{where}]")
            else:
                markdown_total += len(text)
    if markdown_total > MAX_MARKDOWN_TEXT:
        errors.append(f"markdown blocks must total no more than {MAX_MARKDOWN_TEXT} characters")
    return errors


def _check_text(obj: object, limit: int, pointer: str, errors: list[str]) -> None:
    if obj is None:
        return
    text = obj.get("text") if isinstance(obj, dict) else None
    if not isinstance(text, str):
        errors.append(f"missing required field: text [json-pointer:{pointer}]")
    elif not text:
        errors.append(f"must be more than 0 characters [json-pointer:{pointer}/text]")
    elif len(text) > limit:
        errors.append(f"must be less than {limit + 1} characters [json-pointer:{pointer}/text]")


# ---- a modal's state, as a submission carries it ------------------------------------------


_ONE_OPTION = frozenset({"static_select", "radio_buttons"})
_MANY_OPTIONS = frozenset({"multi_static_select", "checkboxes"})
# What a submitted value looks like: text (a number as text too), an option's value, a list of
# them, or None for an empty input.
Submitted = str | int | float | list[str] | None


def _options(element: Mapping[str, Any]) -> list[dict[str, Any]]:
    """An element's options, its option groups' flattened."""
    found = [dict(o) for o in element.get("options") or [] if isinstance(o, Mapping)]
    for group in element.get("option_groups") or []:
        if isinstance(group, Mapping):
            found += [dict(o) for o in group.get("options") or [] if isinstance(o, Mapping)]
    return found


def _chosen(element: Mapping[str, Any], value: str, block_id: str) -> dict[str, Any]:
    for option in _options(element):
        if option.get("value") == value:
            return option
    raise ValueError(f"{block_id}: no option has the value {value!r}")


def input_state(element: Mapping[str, Any], block_id: str, value: Submitted) -> dict[str, Any]:
    """The ``state.values`` entry Slack sends for an input element holding ``value``: text
    (a number as text) for text and number inputs, the option whose ``value`` it is for a
    select or radio buttons, those options for checkboxes and multi-selects; ``None`` (or
    ``[]``) for an empty input. ValueError for an option the element does not have."""
    kind = str(element.get("type", ""))
    if kind in _ONE_OPTION:
        chosen = None if value is None else _chosen(element, str(value), block_id)
        return {"type": kind, "selected_option": chosen}
    if kind in _MANY_OPTIONS:
        values = [] if value is None else [value] if isinstance(value, str) else value
        if not isinstance(values, list):
            raise ValueError(f"{block_id}: a {kind} takes a list of option values")
        return {
            "type": kind,
            "selected_options": [_chosen(element, str(v), block_id) for v in values],
        }
    if isinstance(value, list):
        raise ValueError(f"{block_id}: a {kind} takes one value")
    return {"type": kind, "value": None if value is None or value == "" else str(value)}


def initial_state(element: Mapping[str, Any]) -> dict[str, Any]:
    """The ``state.values`` entry of an input element nobody touched: what it was opened with."""
    kind = str(element.get("type", ""))
    if kind in _ONE_OPTION:
        return {"type": kind, "selected_option": element.get("initial_option")}
    if kind in _MANY_OPTIONS:
        return {"type": kind, "selected_options": list(element.get("initial_options") or [])}
    return {"type": kind, "value": element.get("initial_value") or None}


def view_state(
    view: Mapping[str, Any],
    values: Mapping[str, Submitted] | None = None,
    raw: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """``view.state`` as Slack sends it on submission: every input block by ``block_id``, its
    element by ``action_id``; ``values`` (by block id) as the person left them (see
    :func:`input_state`), the others as opened, and ``raw`` entries sent exactly as given
    (what Slack's client would never send: ``{"type": "number_input", "value": "abc"}``).
    ValueError for a block id in ``values`` or ``raw`` that is no input block of the view."""
    values, raw = dict(values or {}), dict(raw or {})
    state: dict[str, Any] = {}
    for block in view.get("blocks") or []:
        if not isinstance(block, Mapping) or block.get("type") != "input":
            continue
        block_id, element = str(block.get("block_id", "")), block.get("element") or {}
        action_id = str(element.get("action_id", ""))
        if block_id in raw:
            entry = dict(raw.pop(block_id))
        elif block_id in values:
            entry = input_state(element, block_id, values.pop(block_id))
        else:
            entry = initial_state(element)
        state[block_id] = {action_id: entry}
    unknown = sorted({*values, *raw})
    if unknown:
        raise ValueError(f"no input block with the block_id {', '.join(unknown)} in the view")
    return {"values": state}


# ---- request helpers -----------------------------------------------------------------------


async def json_object(request: web.Request) -> dict[str, Any] | None:
    """The request's body as a JSON object; None when it is not JSON or not an object
    (the caller answers ``invalid_json`` in its own way)."""
    try:
        body = await request.json()
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


async def read_params(request: web.Request) -> Params:
    """Query string, then a form or JSON body, merged; JSON-in-form fields decoded."""
    params: Params = dict(request.query)
    if request.can_read_body:
        if request.content_type == "application/json":
            body = await json_object(request)
            if body is None:
                raise SlackError("invalid_json")
            params.update(body)
        else:
            form = await request.post()
            params.update({k: v for k, v in form.items() if isinstance(v, str)})
    for name in _JSON_FIELDS:
        if isinstance(params.get(name), str):
            try:
                params[name] = json.loads(params[name])
            except ValueError:
                raise SlackError(
                    f"invalid_{name}_format" if name == "blocks" else "invalid_arguments"
                ) from None
    return params


def bearer_token(header: str) -> str | None:
    """The token of an ``Authorization: Bearer …`` header, or None."""
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None


def required(params: Params, name: str) -> str:
    """``params[name]`` as text; ``invalid_arguments`` when it is missing or empty."""
    value = params.get(name)
    if not value:
        raise SlackError("invalid_arguments", needed=name)
    return str(value)


def int_param(value: object, default: int) -> int:
    """An integer param (``default`` when absent); ``invalid_arguments`` when not a number."""
    try:
        return int(str(value)) if value not in (None, "") else default
    except ValueError:
        raise SlackError("invalid_arguments") from None


def message_content(params: Params) -> tuple[str, list[dict[str, Any]] | None]:
    """A message's text and blocks, checked against Slack's limits."""
    text = str(params.get("text") or "")
    if len(text) > MAX_MESSAGE_TEXT:
        raise SlackError("msg_too_long")
    blocks = params.get("blocks")
    if blocks is None:
        return text, None
    errors = block_errors(blocks)
    if errors:
        raise SlackError("invalid_blocks", errors=errors)
    return text, list(blocks)


def stream_text(params: Params) -> str:
    """The Markdown a ``chat.*Stream`` call adds; ``msg_too_long`` past ``MAX_STREAM_CHUNK``."""
    text = str(params.get("markdown_text") or "")
    for chunk in params.get("chunks") or []:
        if isinstance(chunk, dict) and chunk.get("type") == "markdown_text":
            text += str(chunk.get("text") or "")
    if len(text) > MAX_STREAM_CHUNK:
        raise SlackError("msg_too_long")
    return text

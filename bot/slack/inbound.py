"""What Slack posts to ``/slack/events``, as far as bolt and our listeners read it.

Two levels, checked in this order by ``bot.slack.gate`` once the signature holds:

* **The envelope** (``Envelope``): the fields bolt itself reads from any request while it
  builds its context and matches listeners — ``type``, the id-or-object fields
  (``team``, ``user``, ``channel``, …) at each level it descends into, ``event`` on an
  ``event_callback``, ``actions`` on a click, ``challenge`` on ``url_verification``.
  A body that fails here could not have come from Slack, and bolt would crash on it.
* **Our listeners' fields** (``listener_problem``): for ``app_mention`` and ``message``
  events the fields ``Messages.on_mention`` / ``on_message`` read (ids as strings,
  ``ts`` shaped like Slack's, since it becomes a Redis key and is compared as a number);
  for clicks on our buttons (``bot.slack.status_blocks``' action ids) the clicker, the
  container and the button's value (Approve/Deny: ``job_id|call_id``; Stop/Continue: a
  job id, ``C123:1700000000.000100:j3``), which ``bot.slack.actions`` splits and looks up.

Everything is parsed with ``extra="ignore"`` (Slack adds fields freely) and strict types
(no number silently becoming an id). Nothing here decides a status or logs: the gate does.
Unknown event types, action ids and interaction types pass: whether a listener takes
them is bolt's business.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError, model_validator

from bot.slack.status_blocks import ACTION_APPROVE, ACTION_CONTINUE, ACTION_DENY, ACTION_STOP

MAX_ID = 64  # Slack ids are ~11 upper-case alphanumerics; room to spare
MAX_TS = 32  # "1700000000.000100"
MAX_VALUE = 2_000  # Slack's bound on a button value
MAX_PROBLEMS = 3  # validation errors named in one log line
MAX_LOC_PARTS = 8

CHANNEL_ID = r"[A-Z0-9]{1,64}"
SLACK_TS = r"[0-9]{1,20}\.[0-9]{1,20}"
JOB_ID = rf"{CHANNEL_ID}:{SLACK_TS}:j[0-9]{{1,9}}"  # bot.records.Thread.job_id

ChannelId = Annotated[StrictStr, Field(pattern=rf"^{CHANNEL_ID}$", max_length=MAX_ID)]
SlackTs = Annotated[StrictStr, Field(pattern=rf"^{SLACK_TS}$", max_length=MAX_TS)]
Obj = dict[str, Any]
NOT_NULL = frozenset({"view"})
IdRef = StrictStr | Obj | None  # bolt takes a string as the id, or reads ``id`` of an object


class _Shape(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)


class Ids(_Shape):
    """The fields bolt's context extraction reads at every level it descends into
    (``slack_bolt.request.internals``): ids given as strings or objects, and the nested
    objects it recurses into. A list or a number in any of them crashes bolt, and so
    does an explicit ``null`` in those of ``NOT_NULL`` (bolt tests ``"view" in body``
    and then reads ``body["view"]``)."""

    @model_validator(mode="before")
    @classmethod
    def _present_means_given(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key in NOT_NULL.intersection(data):
                if data[key] is None:
                    raise ValueError(f"{key} is null")
        return data

    enterprise: IdRef = None
    team: IdRef = None
    user: IdRef = None
    channel: IdRef = None
    authorizations: list[Ids] | None = None
    view: View | None = None
    item: Ids | None = None
    message: Ids | None = None
    previous_message: Ids | None = None
    assistant_thread: Ids | None = None
    function_data: Obj | None = None


class View(Ids):
    """A modal or App Home view (bolt reads its ``type`` on a ``view_submission``)."""

    type: StrictStr


class Event(Ids):
    """The inner event of an ``event_callback``."""

    type: StrictStr


class Action(_Shape):
    """One element of a click's ``actions``; bolt matches on ``action_id`` (a legacy
    attachment button has a ``name`` instead)."""

    action_id: StrictStr | None = None


class Envelope(Ids):
    """Any request body, as bolt reads it before a listener runs."""

    type: StrictStr
    event: Event | None = None
    actions: list[Action] | None = None
    response_urls: list[Obj] | None = None
    challenge: StrictStr | None = None
    action_id: StrictStr | None = None  # a block_suggestion's (options for a select)


# -- what our listeners read -----------------------------------------------------------


class ChatEvent(_Shape):
    """``app_mention`` and ``message`` as ``Messages.on_mention``/``on_message`` read
    them; every field may be absent (the listener then ignores the event)."""

    channel: ChannelId | None = None
    user: StrictStr | None = None
    text: StrictStr | None = None
    ts: SlackTs | None = None
    thread_ts: SlackTs | None = None
    subtype: StrictStr | None = None
    bot_id: StrictStr | None = None


class _Clicker(_Shape):
    id: StrictStr


class _Container(_Shape):
    message_ts: StrictStr | None = None
    channel_id: StrictStr | None = None


class _Channel(_Shape):
    id: StrictStr | None = None


class _Message(_Shape):
    thread_ts: StrictStr | None = None


class Click(_Shape):
    """A ``block_actions`` on one of our buttons, as ``bot.slack.actions`` reads it."""

    user: _Clicker
    container: _Container | None = None
    channel: _Channel | None = None
    message: _Message | None = None


ApprovalValue = Annotated[StrictStr, Field(pattern=rf"^{JOB_ID}\|.+$", max_length=MAX_VALUE)]
JobValue = Annotated[StrictStr, Field(pattern=rf"^{JOB_ID}$", max_length=MAX_VALUE)]
# ``job|n``: the raises the job had when that Continue was shown (a bare job id: a button
# from before buttons carried it).
ContinueValue = Annotated[
    StrictStr, Field(pattern=rf"^{JOB_ID}(\|[0-9]{{1,9}})?$", max_length=MAX_VALUE)
]


class _ApprovalAction(_Shape):
    value: ApprovalValue


class _JobAction(_Shape):
    value: JobValue


class _ContinueAction(_Shape):
    value: ContinueValue


JSON_KINDS: dict[type, str] = {
    list: "array",
    str: "string",
    int: "number",
    float: "number",
    bool: "boolean",
    type(None): "null",
}
CHAT_EVENTS = frozenset({"app_mention", "message"})
OUR_ACTIONS: dict[str, type[_Shape]] = {
    ACTION_APPROVE: _ApprovalAction,
    ACTION_DENY: _ApprovalAction,
    ACTION_STOP: _JobAction,
    ACTION_CONTINUE: _ContinueAction,
}


def envelope(body: object) -> Envelope:
    """The envelope of a parsed body; raises ``ValueError`` (pydantic's
    ``ValidationError`` included) naming what is wrong."""
    if not isinstance(body, dict):
        kind = JSON_KINDS.get(type(body), type(body).__name__)
        raise ValueError(f"the body is a JSON {kind}, not an object")
    found = Envelope.model_validate(body)
    if found.type == "event_callback" and found.event is None:
        raise ValueError("an event_callback without an event")
    if found.type in ("block_actions", "interactive_message") and not found.actions:
        raise ValueError(f"a {found.type} without actions")
    if found.type == "block_actions" and any(a.action_id is None for a in found.actions or ()):
        raise ValueError("a block_actions with an action that has no action_id")
    if found.type == "url_verification" and found.challenge is None:
        raise ValueError("a url_verification without a challenge")
    return found


def listener_problem(body: Obj, found: Envelope) -> str | None:
    """Why a listener of ours could not act on this well-formed request, or ``None``."""
    try:
        if found.event is not None and found.event.type in CHAT_EVENTS:
            ChatEvent.model_validate(body["event"])
        elif found.type == "block_actions" and found.actions:
            ours = [
                (OUR_ACTIONS[a.action_id], raw)
                for a, raw in zip(found.actions, body["actions"], strict=True)
                if a.action_id is not None and a.action_id in OUR_ACTIONS
            ]
            if ours:
                Click.model_validate(body)
            for shape, raw in ours:
                shape.model_validate(raw)
    except ValidationError as exc:
        return problems(exc)
    return None


def problems(exc: ValidationError) -> str:
    """A one-line summary of a validation error: where and what, never the input."""
    errors = exc.errors(include_input=False, include_url=False, include_context=False)
    named = [f"{_where(e['loc'])}: {e['msg']}" for e in errors]
    more = f" (+{len(named) - MAX_PROBLEMS} more)" if len(named) > MAX_PROBLEMS else ""
    return "; ".join(named[:MAX_PROBLEMS]) + more


def _where(loc: tuple[int | str, ...]) -> str:
    parts = [str(p) for p in loc] or ["body"]
    if len(parts) > MAX_LOC_PARTS:  # a deeply nested body must not make a huge line
        parts = [*parts[:3], "…", *parts[-2:]]
    return ".".join(parts)

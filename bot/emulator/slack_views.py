"""The fake Slack's modals: trigger ids, ``views.open``/``update``/``push``, and submissions.

**Triggers.** ``views.open`` and ``views.push`` take a ``trigger_id`` (or
``interactivity_pointer``) as Slack's do: one made by ``bot.emulator.sender.trigger_id``
carries its issue time and user; anything else is ``invalid_trigger_id``, one older than
:data:`~bot.emulator.sender.TRIGGER_TTL_S` (3 s) ``expired_trigger_id``, one used before
``exchanged_trigger_id`` (Slack's own error names, from its ``views.open`` reference). The
view opens for the trigger's user.

**Views** are checked as Slack checks a modal (``bot.emulator.slack_modal``; refused
``invalid_arguments`` with ``response_metadata.messages`` such as ``[ERROR] must be less
than 25 characters [json-pointer:/view/title/text]``, or ``view_too_large`` past 250 kB),
then held (:class:`HeldView`: id, user, the view as Slack returns it with its ``hash``,
open or closed, the errors shown, the answers judged). ``views.update`` finds a view by
``view_id`` or ``external_id`` (``not_found``; a stale ``hash`` is ``hash_conflict``);
``views.push`` stacks a view on the user's open modal, at most 3 deep
(``push_limit_reached``).

**Submissions.** ``bot.emulator.sender.view_submission`` builds the payload;
:meth:`SlackViews.answer` judges the bot's HTTP answer (or a Socket Mode ack's
``payload``: :meth:`SlackViews.answer_ack`) as Slack does and applies it: an empty 200
closes the view, ``response_action`` ``errors`` (keys: the view's input block ids only)
shows them, ``update`` replaces the view, ``push`` stacks one, ``clear`` closes them all;
anything else is refused (the person sees :data:`TROUBLE`, the view stays open).
:meth:`SlackViews.submit` signs, posts and judges in one go; :meth:`SlackViews.close` is
the person's close button. ``client_errors`` (re-exported from ``slack_modal``) is what
Slack's client refuses before anything is sent (an empty required input, a number that is
not one). Read back with :meth:`SlackViews.opened`, :meth:`SlackViews.get`,
:meth:`SlackViews.top` and :meth:`SlackViews.wait_opened`; waits are the fake's
``wait_for`` (a condition, no sleeps).
"""

from __future__ import annotations

import copy
import hashlib
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import aiohttp

from bot.emulator.sender import (
    ACK_TIMEOUT_S,
    NO_ANSWER,
    TRIGGER_TTL_S,
    form_body,
    post_signed_answer,
    read_trigger,
)
from bot.emulator.slack_modal import MAX_STACK, MAX_VIEW_BYTES, client_errors, modal_errors
from bot.emulator.slack_wire import APP_ID, BOT_ID, TEAM_ID, Params, Reply, SlackError

MAX_HELD = 1_000  # views kept (the oldest closed ones go first)
MAX_ANSWERS = 50  # answers kept per view
MAX_ANSWER_BYTES = 1 << 20  # of the bot's answer to a submission (an update holds a view)
TROUBLE = "We had some trouble connecting. Try again?"  # Slack's client, on a refused answer


# ---- what the fake holds --------------------------------------------------------------------


@dataclass(frozen=True)
class ViewAnswer:
    """How Slack took the bot's answer to a submission of view ``view_id``.

    ``closed`` (an empty 200: that view goes), ``errors`` (shown under their inputs; the
    view stays), ``updated`` / ``pushed`` (``view``: the view now shown), ``cleared`` (the
    whole stack goes) or ``refused`` (``reason`` says why; the person sees :data:`TROUBLE`
    and the view stays open, unchanged)."""

    outcome: Literal["closed", "errors", "updated", "pushed", "cleared", "refused"]
    view_id: str
    errors: dict[str, str] = field(default_factory=dict)
    view: dict[str, Any] | None = None
    reason: str | None = None

    @property
    def refused(self) -> bool:
        return self.outcome == "refused"

    @property
    def shown(self) -> str | None:
        """What Slack's client shows the person for a refused answer."""
        return TROUBLE if self.refused else None


@dataclass
class HeldView:
    """A modal view as the fake holds it: ``view`` is Slack's shape of it (what
    ``views.open`` returned: ``id``, ``hash``, ``root_view_id``…), ``errors`` those shown
    under its inputs now, ``answers`` every submission answer judged for it."""

    id: str
    user: str | None
    view: dict[str, Any]
    open: bool = True
    errors: dict[str, str] = field(default_factory=dict)
    answers: list[ViewAnswer] = field(default_factory=list)

    @property
    def hash(self) -> str:
        return str(self.view["hash"])

    @property
    def callback_id(self) -> str:
        return str(self.view.get("callback_id") or "")

    @property
    def private_metadata(self) -> str:
        return str(self.view.get("private_metadata") or "")

    def input_blocks(self) -> dict[str, dict[str, Any]]:
        """The view's input blocks, by ``block_id``."""
        return {
            str(b["block_id"]): b for b in self.view.get("blocks") or [] if b.get("type") == "input"
        }


class Host(Protocol):
    """What the views need of ``FakeSlack`` (which imports this module)."""

    def add_method(
        self, name: str, handler: Callable[[Params], Reply], *, app_token: bool = False
    ) -> None: ...

    async def wait_for(self, predicate: Callable[[], object], *, timeout: float = ...) -> None: ...  # noqa: ASYNC109

    async def notify(self) -> None: ...


def _ids(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The blocks with the ``block_id`` and input ``action_id`` Slack makes for those
    without one."""
    out = copy.deepcopy(blocks)
    for i, block in enumerate(out):
        made = hashlib.sha1(f"{i}".encode(), usedforsecurity=False).hexdigest()[:5]
        block.setdefault("block_id", made)
        element = block.get("element")
        if block.get("type") == "input" and isinstance(element, dict):
            made_action = hashlib.sha1(made.encode(), usedforsecurity=False).hexdigest()[:5]
            element.setdefault("action_id", made_action)
    return out


class SlackViews:
    """The modals of one fake workspace (``FakeSlack.views``)."""

    def __init__(self, host: Host, *, clock: Callable[[], float] = time.time) -> None:
        self._host = host
        self._clock = clock
        self._held: dict[str, HeldView] = {}
        self._stacks: dict[str | None, list[str]] = {}  # user -> open view ids, root first
        self._exchanged: dict[str, float] = {}  # trigger id -> its issue time
        self._count = 0
        self._watchers: list[Callable[[HeldView], None]] = []
        host.add_method("views.open", self._open)
        host.add_method("views.push", self._push)
        host.add_method("views.update", self._update)

    def watch(self, seen: Callable[[HeldView], None]) -> None:
        """Call ``seen`` with (a copy of) each view that opens, changes or closes."""
        self._watchers.append(seen)

    # ---- reading back ----------------------------------------------------------------------

    def get(self, view_id: str) -> HeldView:
        """A snapshot of one view; KeyError if the fake holds none with that id."""
        return copy.deepcopy(self._held[view_id])

    def opened(self, user: str | None = None) -> list[HeldView]:
        """Snapshots of the views open now (for ``user`` only, if given), oldest first."""
        return [
            copy.deepcopy(v)
            for v in self._held.values()
            if v.open and (user is None or v.user == user)
        ]

    def held(self, user: str | None = None) -> list[HeldView]:
        """Snapshots of every view held, open or closed (``user``'s only, if given)."""
        return [copy.deepcopy(v) for v in self._held.values() if user is None or v.user == user]

    def top(self, user: str) -> HeldView | None:
        """The view ``user`` sees now (the top of their modal's stack), if any."""
        stack = self._stacks.get(user) or []
        return copy.deepcopy(self._held[stack[-1]]) if stack else None

    async def wait_opened(
        self,
        user: str | None = None,
        *,
        count: int = 1,
        timeout: float = 10.0,  # noqa: ASYNC109 (a hang guard, passed on to wait_for)
    ) -> HeldView:
        """Wait until ``count`` views have been opened or pushed (for ``user``, if given);
        the last of them, as it is now."""
        await self._host.wait_for(lambda: len(self.held(user)) >= count, timeout=timeout)
        return self.held(user)[count - 1]

    # ---- the methods -----------------------------------------------------------------------

    def _exchange(self, params: Params) -> str | None:
        """The user of the call's trigger, once it is checked and spent."""
        value = params.get("trigger_id") or params.get("interactivity_pointer")
        if not value:
            raise SlackError("invalid_arguments", needed="trigger_id")
        trigger = read_trigger(value)
        if trigger is None:
            raise SlackError("invalid_trigger_id")
        now = self._clock()
        for old, issued in list(self._exchanged.items()):  # spent ones expire anyway
            if now - issued > TRIGGER_TTL_S:
                del self._exchanged[old]
        if value in self._exchanged:
            raise SlackError("exchanged_trigger_id")
        if now - trigger.issued_at > TRIGGER_TTL_S:
            raise SlackError("expired_trigger_id")
        self._exchanged[str(value)] = trigger.issued_at
        return trigger.user

    def _checked(self, params: Params, *, keep: str | None = None) -> dict[str, Any]:
        view = params.get("view")
        if not isinstance(view, dict):
            raise SlackError("invalid_arguments", needed="view")
        errors = modal_errors(view)
        if errors:
            raise SlackError("invalid_arguments", response_metadata={"messages": errors})
        if len(json.dumps(view)) > MAX_VIEW_BYTES:
            raise SlackError("view_too_large")
        external = view.get("external_id")
        if external and any(
            v.view.get("external_id") == external and v.id != keep for v in self._held.values()
        ):
            raise SlackError("duplicate_external_id")
        return view

    def _open(self, params: Params) -> Reply:
        view = self._checked(params)
        user = self._exchange(params)
        for old in self._stacks.pop(user, []):  # a new modal replaces the one shown
            self._close(old)
        return {"view": self._hold(view, user, previous=None).view}

    def _push(self, params: Params) -> Reply:
        view = self._checked(params)
        user = self._exchange(params)
        stack = self._stacks.get(user)
        if not stack:
            raise SlackError("not_found")  # the fake's choice: no modal to push onto
        if len(stack) >= MAX_STACK:
            raise SlackError("push_limit_reached")
        return {"view": self._hold(view, user, previous=stack[-1]).view}

    def _update(self, params: Params) -> Reply:
        wanted, external = params.get("view_id"), params.get("external_id")
        if not wanted and not external:
            raise SlackError("invalid_arguments", needed="view_id")
        held = next(
            (
                v
                for v in self._held.values()
                if v.open and (v.id == wanted if wanted else v.view.get("external_id") == external)
            ),
            None,
        )
        if held is None:
            raise SlackError("not_found")
        if params.get("hash") and params["hash"] != held.hash:
            raise SlackError("hash_conflict")
        self._replace(held, self._checked(params, keep=held.id))
        return {"view": copy.deepcopy(held.view)}

    # ---- holding ---------------------------------------------------------------------------

    def _hash(self) -> str:
        self._count += 1
        return f"{int(self._clock())}.{self._count:08d}"

    def _shape(self, view: dict[str, Any], view_id: str, root: str, previous: str | None) -> Reply:
        """The view as Slack returns and sends it."""
        return {
            "id": view_id,
            "team_id": TEAM_ID,
            "type": "modal",
            "blocks": _ids(view.get("blocks") or []),
            "private_metadata": view.get("private_metadata", ""),
            "callback_id": view.get("callback_id", ""),
            "state": {"values": {}},
            "hash": self._hash(),
            "title": copy.deepcopy(view["title"]),
            "clear_on_close": bool(view.get("clear_on_close", False)),
            "notify_on_close": bool(view.get("notify_on_close", False)),
            "close": copy.deepcopy(view.get("close")),
            "submit": copy.deepcopy(view.get("submit")),
            "previous_view_id": previous,
            "root_view_id": root,
            "app_id": APP_ID,
            "external_id": view.get("external_id", ""),
            "app_installed_team_id": TEAM_ID,
            "bot_id": BOT_ID,
        }

    def _hold(self, view: dict[str, Any], user: str | None, previous: str | None) -> HeldView:
        view_id = f"V{len(self._held) + 1:010d}"
        while view_id in self._held:
            view_id += "X"
        root = self._held[previous].view["root_view_id"] if previous else view_id
        held = HeldView(view_id, user, self._shape(view, view_id, root, previous))
        self._held[view_id] = held
        self._stacks.setdefault(user, []).append(view_id)
        self._evict()
        self._tell(held)
        return held

    def _replace(self, held: HeldView, view: dict[str, Any]) -> None:
        shaped = self._shape(
            view, held.id, held.view["root_view_id"], held.view["previous_view_id"]
        )
        held.view, held.errors = shaped, {}
        self._tell(held)

    def _close(self, view_id: str) -> None:
        held = self._held[view_id]
        held.open = False
        stack = self._stacks.get(held.user) or []
        if view_id in stack:
            stack.remove(view_id)
        self._tell(held)

    def _evict(self) -> None:
        closed = [k for k, v in self._held.items() if not v.open]
        for view_id in closed[: max(0, len(self._held) - MAX_HELD)]:
            del self._held[view_id]

    def _tell(self, held: HeldView) -> None:
        for seen in self._watchers:
            seen(copy.deepcopy(held))

    # ---- judging a submission's answer -----------------------------------------------------

    async def answer(
        self, view_id: str, status: int, body: bytes | str | Mapping[str, Any] | None
    ) -> ViewAnswer:
        """Apply the bot's answer to the submission of ``view_id`` as Slack does: its HTTP
        ``status`` (:data:`~bot.emulator.sender.NO_ANSWER` for none within 3 s) and body
        (bytes or text as sent; a mapping is a Socket Mode ack's ``payload``). LookupError
        when that view is not the one its person sees now (nothing to submit)."""
        held = self._held.get(view_id)
        stack = self._stacks.get(held.user) if held else None
        if held is None or not held.open or not stack or stack[-1] != view_id:
            raise LookupError(f"view {view_id} is not open on top of its modal")
        result = self._judge(held, status, body)
        held.answers = [*held.answers, result][-MAX_ANSWERS:]
        self._tell(held)
        await self._host.notify()
        return result

    async def answer_ack(self, view_id: str, ack: Mapping[str, Any] | None) -> ViewAnswer:
        """:meth:`answer` for a Socket Mode ack (``FakeSocketMode.send``'s return: None when
        none came in time); bolt puts the ``response_action`` in the ack's ``payload``."""
        if ack is None:
            return await self.answer(view_id, NO_ANSWER, None)
        payload = ack.get("payload")
        return await self.answer(view_id, 200, payload if isinstance(payload, Mapping) else None)

    async def submit(
        self,
        url: str,
        payload: Mapping[str, Any],
        *,
        secret: str,
        session: aiohttp.ClientSession | None = None,
        ack_timeout: float = ACK_TIMEOUT_S,
    ) -> ViewAnswer:
        """POST a ``view_submission`` payload to the bot at ``url`` as Slack does (form
        encoded, signed with ``secret``, 3 s to answer) and :meth:`answer` with its answer."""
        body, headers = form_body(payload)
        own = session is None
        client = session or aiohttp.ClientSession(trust_env=False)
        try:
            answer = await post_signed_answer(
                client,
                url,
                body,
                headers,
                secret=secret,
                ack_timeout=ack_timeout,
                max_bytes=MAX_ANSWER_BYTES,
            )
        finally:
            if own:
                await client.close()
        return await self.answer(str(payload["view"]["id"]), answer.status, answer.body)

    def _judge(
        self, held: HeldView, status: int, body: bytes | str | Mapping[str, Any] | None
    ) -> ViewAnswer:
        def refused(reason: str) -> ViewAnswer:
            return ViewAnswer("refused", held.id, reason=reason)

        if status == NO_ANSWER:
            return refused("the bot did not answer within 3 s")
        if status != 200:
            return refused(f"the bot answered HTTP {status}, not 200")
        if isinstance(body, Mapping):
            answer: object = dict(body)
        else:
            text = body.decode(errors="replace") if isinstance(body, bytes) else body or ""
            if not text.strip():
                answer = {}
            else:
                try:
                    answer = json.loads(text)
                except ValueError:
                    return refused("the body is neither empty nor JSON")
        if not isinstance(answer, dict):
            return refused("the body is not a JSON object")
        action = answer.get("response_action")
        if not answer:  # an empty body (or {}): the view closes
            self._close(held.id)
            return ViewAnswer("closed", held.id)
        if action == "errors":
            errors = answer.get("errors")
            if not isinstance(errors, dict) or not errors:
                return refused("response_action errors without an errors object")
            inputs = held.input_blocks()
            for key, message in errors.items():
                if key not in inputs:
                    return refused(f"errors names {key!r}, which is not an input block's id")
                if not isinstance(message, str) or not message:
                    return refused(f"the error for {key!r} is not text")
            held.errors = dict(errors)
            return ViewAnswer("errors", held.id, errors=dict(errors))
        if action == "clear":
            for view_id in list(self._stacks.get(held.user) or []):
                self._close(view_id)
            return ViewAnswer("cleared", held.id)
        if action in ("update", "push"):
            view = answer.get("view")
            errors_ = modal_errors(view)
            if errors_:
                return refused(f"the {action} view is not a valid modal: {'; '.join(errors_)}")
            assert isinstance(view, dict)
            if action == "update":
                self._replace(held, view)
                return ViewAnswer("updated", held.id, view=copy.deepcopy(held.view))
            if len(self._stacks.get(held.user) or []) >= MAX_STACK:
                return refused(f"a modal holds at most {MAX_STACK} views")
            pushed = self._hold(view, held.user, previous=held.id)
            return ViewAnswer("pushed", held.id, view=copy.deepcopy(pushed.view))
        return refused(f"unknown response_action {action!r}")

    async def close(self, view_id: str) -> None:
        """The person pressed the close button of the view they see: it goes (the whole
        modal with ``clear_on_close``), back to the view under it. ``view_closed`` is not
        sent to the bot. LookupError when that view is not the one shown."""
        held = self._held.get(view_id)
        stack = self._stacks.get(held.user) if held else None
        if held is None or not stack or stack[-1] != view_id:
            raise LookupError(f"view {view_id} is not open on top of its modal")
        for shown in stack[::-1] if held.view.get("clear_on_close") else [view_id]:
            self._close(shown)
        await self._host.notify()


__all__ = [
    "MAX_STACK",
    "TROUBLE",
    "HeldView",
    "SlackViews",
    "ViewAnswer",
    "client_errors",
    "modal_errors",
]

"""The fake Slack's assistant-pane and App Home methods.

``assistant.threads.setSuggestedPrompts`` and ``assistant.threads.setTitle`` (per pane
thread) and ``views.publish`` (one home per user), answered and refused like Slack:
missing arguments are ``invalid_arguments``; prompts must be 1..4 objects with a
``title`` and a ``message``; a view must be ``type: home`` with at most
``MAX_VIEW_BLOCKS`` blocks, each within Block Kit's limits (``invalid_blocks``, with
Slack's json-pointer reasons), or it is not published. ``assistant.threads.setStatus``
is ``bot.emulator.slack``'s own. ``install`` adds them to a ``FakeSlack``; what they
hold is read back with ``prompts``, ``title`` and ``home``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from bot.emulator.slack_wire import TEAM_ID, Params, Reply, SlackError, block_errors, required

MAX_PROMPTS = 4
MAX_VIEW_BLOCKS = 100
MAX_TITLE = 255  # Slack does not document one; a bound all the same
MAX_VIEW_BYTES = 250_000


@dataclass
class AssistantState:
    """What the pane and home methods hold."""

    prompts: dict[tuple[str, str], list[dict[str, str]]] = field(default_factory=dict)
    prompt_titles: dict[tuple[str, str], str] = field(default_factory=dict)
    titles: dict[tuple[str, str], str] = field(default_factory=dict)
    homes: dict[str, dict[str, Any]] = field(default_factory=dict)
    published: int = 0

    def set_suggested_prompts(self, params: Params) -> Reply:
        key = (required(params, "channel_id"), required(params, "thread_ts"))
        prompts = params.get("prompts")
        if not isinstance(prompts, list) or not 1 <= len(prompts) <= MAX_PROMPTS:
            raise SlackError("invalid_arguments", needed="prompts")
        for prompt in prompts:
            if not (
                isinstance(prompt, dict)
                and isinstance(prompt.get("title"), str)
                and isinstance(prompt.get("message"), str)
                and prompt["title"]
                and prompt["message"]
            ):
                raise SlackError("invalid_arguments", needed="prompts")
        self.prompts[key] = [{"title": p["title"], "message": p["message"]} for p in prompts]
        if isinstance(params.get("title"), str):
            self.prompt_titles[key] = params["title"]
        return {}

    def set_title(self, params: Params) -> Reply:
        key = (required(params, "channel_id"), required(params, "thread_ts"))
        title = required(params, "title")
        if len(title) > MAX_TITLE:
            raise SlackError("invalid_arguments", needed="title")
        self.titles[key] = title
        return {}

    def publish(self, params: Params) -> Reply:
        user = required(params, "user_id")
        view = params.get("view")
        if not isinstance(view, dict):
            raise SlackError("invalid_arguments", needed="view")
        errors = view_errors(view)
        if errors:
            raise SlackError("invalid_arguments", response_metadata={"messages": errors})
        self.published += 1
        stored = {
            **copy.deepcopy(view),
            "id": f"VHOME{self.published:04d}",
            "team_id": TEAM_ID,
            "hash": f"h{self.published}",
        }
        self.homes[user] = stored
        return {"view": stored}


def view_errors(view: dict[str, Any]) -> list[str]:
    """Why Slack would refuse a home view (empty: fine)."""
    if view.get("type") != "home":
        return ["[ERROR] must be home [json-pointer:/view/type]"]
    blocks = view.get("blocks")
    if not isinstance(blocks, list):
        return ["[ERROR] must be an array [json-pointer:/view/blocks]"]
    errors = []
    if len(blocks) > MAX_VIEW_BLOCKS:
        errors.append(
            f"[ERROR] no more than {MAX_VIEW_BLOCKS} items allowed [json-pointer:/view/blocks]"
        )
    for i, block in enumerate(blocks):
        for error in block_errors([block]):
            errors.append(error.replace("/blocks/0", f"/view/blocks/{i}"))
    if len(repr(view)) > MAX_VIEW_BYTES:
        errors.append("[ERROR] view too large [json-pointer:/view]")
    return errors


class Methods(Protocol):
    """``FakeSlack.add_method`` (which imports this module)."""

    def add_method(
        self, name: str, handler: Callable[[Params], Reply], *, app_token: bool = False
    ) -> None: ...


def install(slack: Methods) -> AssistantState:
    """Add the pane and home methods to ``slack``; their state, for reading back."""
    state = AssistantState()
    slack.add_method("assistant.threads.setSuggestedPrompts", state.set_suggested_prompts)
    slack.add_method("assistant.threads.setTitle", state.set_title)
    slack.add_method("views.publish", state.publish)
    return state

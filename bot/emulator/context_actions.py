"""Slack's ``context_actions`` block as Slack checks it: the feedback buttons of AI answers.

``bot.emulator.slack_wire.block_errors`` hands every ``context_actions`` block here, and a
message that breaks a rule is refused ``invalid_blocks`` with the reasons, as Slack does:

- ``elements``: 1 to 5 of ``feedback_buttons`` or ``icon_button``; ``block_id`` ≤ 255;
- ``feedback_buttons``: an ``action_id`` (≤ 255), a ``positive_button`` and a
  ``negative_button``, each with ``text`` (``plain_text``, 1 to 75 characters), a
  ``value`` (1 to 2,000) and an optional ``accessibility_label`` (≤ 75);
- ``icon_button``: an ``icon``, a ``text`` (``plain_text``) and an ``action_id``.

(slack-sdk's ``ContextActionsBlock``, ``FeedbackButtonsElement`` and
``FeedbackButtonObject`` carry the same bounds.) ``feedback_buttons`` anywhere else (an
``actions`` block) is not an element Slack takes there: ``actions_errors`` says so.
"""

from __future__ import annotations

from typing import Any

MAX_ELEMENTS = 5
MAX_ID = 255
MAX_BUTTON_TEXT = 75
MAX_VALUE = 2_000
MAX_LABEL = 75
ELEMENTS = frozenset({"feedback_buttons", "icon_button"})


def context_actions_errors(block: dict[str, Any], where: str) -> list[str]:
    """Why Slack would refuse this ``context_actions`` block at ``where`` (empty: fine)."""
    errors: list[str] = []
    block_id = block.get("block_id")
    if block_id is not None and (not isinstance(block_id, str) or len(block_id) > MAX_ID):
        errors.append(
            f"must be a string of at most {MAX_ID} characters [json-pointer:{where}/block_id]"
        )
    elements = block.get("elements")
    if not isinstance(elements, list) or not elements:
        return [*errors, f"must provide at least 1 item [json-pointer:{where}/elements]"]
    if len(elements) > MAX_ELEMENTS:
        errors.append(f"no more than {MAX_ELEMENTS} items allowed [json-pointer:{where}/elements]")
    for j, element in enumerate(elements):
        at = f"{where}/elements/{j}"
        kind = element.get("type") if isinstance(element, dict) else None
        if kind not in ELEMENTS:
            errors.append(f"must be one of {sorted(ELEMENTS)} [json-pointer:{at}/type]")
            continue
        assert isinstance(element, dict)
        _action_id(element, at, errors)
        if kind == "feedback_buttons":
            for side in ("positive_button", "negative_button"):
                _feedback_button(element.get(side), f"{at}/{side}", errors)
        else:
            if not isinstance(element.get("icon"), str) or not element["icon"]:
                errors.append(f"missing required field: icon [json-pointer:{at}]")
            _plain_text(element.get("text"), f"{at}/text", errors)
    return errors


def actions_errors(block: dict[str, Any], where: str) -> list[str]:
    """``feedback_buttons`` in an ``actions`` block: Slack takes them in ``context_actions``."""
    return [
        f"feedback_buttons is only allowed in context_actions [json-pointer:{where}/elements/{j}]"
        for j, element in enumerate(block.get("elements") or [])
        if isinstance(element, dict) and element.get("type") == "feedback_buttons"
    ]


def _action_id(element: dict[str, Any], at: str, errors: list[str]) -> None:
    action_id = element.get("action_id")
    if not isinstance(action_id, str) or not action_id:
        errors.append(f"missing required field: action_id [json-pointer:{at}]")
    elif len(action_id) > MAX_ID:
        errors.append(f"must be less than {MAX_ID + 1} characters [json-pointer:{at}/action_id]")


def _feedback_button(button: object, at: str, errors: list[str]) -> None:
    if not isinstance(button, dict):
        errors.append(f"missing required field [json-pointer:{at}]")
        return
    _plain_text(button.get("text"), f"{at}/text", errors)
    value = button.get("value")
    if not isinstance(value, str) or not value:
        errors.append(f"missing required field: value [json-pointer:{at}]")
    elif len(value) > MAX_VALUE:
        errors.append(f"must be less than {MAX_VALUE + 1} characters [json-pointer:{at}/value]")
    label = button.get("accessibility_label")
    if label is not None and (not isinstance(label, str) or not 0 < len(label) <= MAX_LABEL):
        errors.append(
            f"must be 1 to {MAX_LABEL} characters [json-pointer:{at}/accessibility_label]"
        )


def _plain_text(obj: object, at: str, errors: list[str]) -> None:
    if not isinstance(obj, dict) or obj.get("type") != "plain_text":
        errors.append(f"must be a plain_text object [json-pointer:{at}]")
        return
    text = obj.get("text")
    if not isinstance(text, str) or not text:
        errors.append(f"must be more than 0 characters [json-pointer:{at}/text]")
    elif len(text) > MAX_BUTTON_TEXT:
        errors.append(
            f"must be less than {MAX_BUTTON_TEXT + 1} characters [json-pointer:{at}/text]"
        )

"""What Slack refuses in a modal view, and what its client refuses before a submission.

:func:`modal_errors` checks a view as ``views.open``, ``views.update``, ``views.push`` and a
``response_action`` ``update``/``push`` are checked: ``type: modal``; ``title`` (required),
``submit`` and ``close`` ``plain_text`` of at most 24 characters; at most 100 blocks, block
ids unique and at most 255; ``private_metadata`` at most 3,000, ``callback_id`` and
``external_id`` 255; a view with input blocks has ``submit``. An input block has a
``plain_text`` ``label`` (≤ 2,000), an optional ``hint`` (≤ 2,000) and an ``element`` of a
type input blocks take (``action_id`` ≤ 255): ``plain_text_input`` (``initial_value`` and
``min_length``/``max_length`` ≤ 3,000), ``number_input`` (``is_decimal_allowed`` required;
``initial_value``, ``min_value``, ``max_value`` numbers as strings, whole when decimals are
not allowed, the initial value within the bounds), selects (1 to 100 options), radio
buttons and checkboxes (1 to 10), options with text ≤ 75 and a value ≤ 150, initial options
among the options. Other blocks follow the messages' rules (``slack_wire.block_errors``).
Each reason is Slack's ``[ERROR] … [json-pointer:/view/…]``. The limits are quoted from
Slack's reference beside their constants.

:func:`client_errors` is what Slack's client says under an input before it sends anything.
No state here: ``bot.emulator.slack_views`` holds the views.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from bot.emulator.slack_wire import Submitted, block_errors

# Slack's limits, from its reference ("Modal views", "Input block", the elements, "Option
# object"); each message below names the field it bounds.
MAX_VIEW_BLOCKS = 100  # "Max of 100 blocks."
MAX_BUTTON = 24  # title, submit, close: "plain_text ... with a max length of 24 characters"
MAX_PRIVATE_METADATA = 3_000  # "Max length of 3000 characters."
MAX_ID = 255  # callback_id, external_id, block_id, action_id: "Maximum length ... 255"
MAX_LABEL = 2_000  # label and hint: "Maximum length for the text in this field is 2000"
# plain_text_input: min_length 0..3000, max_length 1..3000 (the reference); initial_value
# is held to the same 3000 here, though the reference names no bound for it
MAX_TEXT_INPUT = 3_000
MAX_PLACEHOLDER = 150  # "Maximum length for the text in this field is 150 characters."
MAX_SELECT_OPTIONS = 100  # static selects: "Maximum number of options is 100."
MAX_CHOICES = 10  # radio_buttons and checkboxes: "A maximum of 10 options are allowed."
MAX_OPTION_TEXT = 75  # option text and description: "Maximum length ... 75 characters."
MAX_OPTION_VALUE = 150  # option value: 150 in the current reference (older pages said 75)
MAX_VIEW_BYTES = 250_000  # view_too_large: "greater than 250kb"
MAX_STACK = 3  # "After a modal is opened, the app is limited to pushing 2 additional views."

INPUT_ELEMENTS = frozenset(
    {
        "plain_text_input",
        "number_input",
        "email_text_input",
        "url_text_input",
        "static_select",
        "multi_static_select",
        "external_select",
        "multi_external_select",
        "users_select",
        "multi_users_select",
        "conversations_select",
        "multi_conversations_select",
        "channels_select",
        "multi_channels_select",
        "radio_buttons",
        "checkboxes",
        "datepicker",
        "timepicker",
        "datetimepicker",
        "rich_text_input",
        "file_input",
    }
)
_OPTION_LIMITS = {
    "static_select": MAX_SELECT_OPTIONS,
    "multi_static_select": MAX_SELECT_OPTIONS,
    "radio_buttons": MAX_CHOICES,
    "checkboxes": MAX_CHOICES,
}

# ---- what Slack refuses in a modal ----------------------------------------------------------


def _error(message: str, pointer: str) -> str:
    return f"[ERROR] {message} [json-pointer:{pointer}]"


def _plain(
    obj: object, limit: int, at: str, errors: list[str], *, required: bool, mrkdwn: bool = False
) -> None:
    """A text object: present if ``required``, ``plain_text`` (or ``mrkdwn`` if allowed),
    1 to ``limit`` characters."""
    if obj is None:
        if required:
            errors.append(_error("missing required field", at))
        return
    kinds = ("plain_text", "mrkdwn") if mrkdwn else ("plain_text",)
    if not isinstance(obj, dict) or obj.get("type") not in kinds:
        errors.append(_error(f"must be a {' or '.join(kinds)} text object", f"{at}/type"))
    elif not isinstance(obj.get("text"), str) or not obj["text"]:
        errors.append(_error("must be more than 0 characters", f"{at}/text"))
    elif len(obj["text"]) > limit:
        errors.append(_error(f"must be less than {limit + 1} characters", f"{at}/text"))


def _string(value: object, limit: int, at: str, errors: list[str]) -> None:
    if value is not None and (not isinstance(value, str) or len(value) > limit):
        errors.append(_error(f"must be a string of at most {limit} characters", at))


def _number(value: object, decimal: bool, at: str, errors: list[str]) -> Decimal | None:
    """A number_input's number (a string, as Slack takes them); None when absent or wrong."""
    if value is None:
        return None
    try:
        number = Decimal(value) if isinstance(value, str) else None
    except InvalidOperation:
        number = None
    if number is None or not number.is_finite():
        errors.append(_error("must be a number, as a string", at))
        return None
    if not decimal and number != number.to_integral_value():
        errors.append(_error("must be an integer when is_decimal_allowed is false", at))
        return None
    return number


def _options_errors(element: dict[str, Any], at: str, errors: list[str]) -> list[dict[str, Any]]:
    kind = element["type"]
    options = element.get("options")
    if options is None and isinstance(element.get("option_groups"), list):
        options = [o for g in element["option_groups"] for o in (g or {}).get("options") or []]
    limit = _OPTION_LIMITS[kind]
    if not isinstance(options, list) or not options:
        errors.append(_error("must provide at least 1 item", f"{at}/options"))
        return []
    if len(options) > limit:
        errors.append(_error(f"no more than {limit} items allowed", f"{at}/options"))
    for k, option in enumerate(options):
        where = f"{at}/options/{k}"
        if not isinstance(option, dict):
            errors.append(_error("must be an option object", where))
            continue
        mrkdwn = kind in ("radio_buttons", "checkboxes")
        _plain(
            option.get("text"),
            MAX_OPTION_TEXT,
            f"{where}/text",
            errors,
            required=True,
            mrkdwn=mrkdwn,
        )
        _plain(
            option.get("description"),
            MAX_OPTION_TEXT,
            f"{where}/description",
            errors,
            required=False,
            mrkdwn=mrkdwn,
        )
        value = option.get("value")
        if not isinstance(value, str) or not value or len(value) > MAX_OPTION_VALUE:
            errors.append(_error(f"must be 1 to {MAX_OPTION_VALUE} characters", f"{where}/value"))
    return [o for o in options if isinstance(o, dict)]


def _same(a: object, b: Mapping[str, Any]) -> bool:
    """An initial option "exactly matches" an option: same value and text."""
    return (
        isinstance(a, dict)
        and a.get("value") == b.get("value")
        and (a.get("text") or {}).get("text") == (b.get("text") or {}).get("text")
    )


def _element_errors(element: object, at: str, errors: list[str]) -> None:
    if not isinstance(element, dict) or element.get("type") not in INPUT_ELEMENTS:
        errors.append(_error(f"must be one of {sorted(INPUT_ELEMENTS)}", f"{at}/type"))
        return
    kind = element["type"]
    _string(element.get("action_id"), MAX_ID, f"{at}/action_id", errors)
    _plain(element.get("placeholder"), MAX_PLACEHOLDER, f"{at}/placeholder", errors, required=False)
    if kind == "plain_text_input":
        _string(element.get("initial_value"), MAX_TEXT_INPUT, f"{at}/initial_value", errors)
        for name, least in (("min_length", 0), ("max_length", 1)):
            value = element.get(name)
            if value is not None and (
                not isinstance(value, int)
                or isinstance(value, bool)
                or not least <= value <= MAX_TEXT_INPUT
            ):
                errors.append(_error(f"must be {least} to {MAX_TEXT_INPUT}", f"{at}/{name}"))
    elif kind == "number_input":
        decimal = element.get("is_decimal_allowed")
        if not isinstance(decimal, bool):
            errors.append(_error("missing required field: is_decimal_allowed", at))
            decimal = True
        low = _number(element.get("min_value"), decimal, f"{at}/min_value", errors)
        high = _number(element.get("max_value"), decimal, f"{at}/max_value", errors)
        first = _number(element.get("initial_value"), decimal, f"{at}/initial_value", errors)
        if low is not None and high is not None and low > high:
            errors.append(_error("cannot be greater than max_value", f"{at}/min_value"))
        if first is not None and (
            (low is not None and first < low) or (high is not None and first > high)
        ):
            errors.append(_error("must be within min_value and max_value", f"{at}/initial_value"))
    elif kind in _OPTION_LIMITS:
        options = _options_errors(element, at, errors)
        single = element.get("initial_option")
        if single is not None and not any(_same(single, o) for o in options):
            errors.append(_error("must match one of the options", f"{at}/initial_option"))
        for k, chosen in enumerate(element.get("initial_options") or []):
            if not any(_same(chosen, o) for o in options):
                errors.append(_error("must match one of the options", f"{at}/initial_options/{k}"))


def _input_errors(block: dict[str, Any], at: str, errors: list[str]) -> None:
    _plain(block.get("label"), MAX_LABEL, f"{at}/label", errors, required=True)
    _plain(block.get("hint"), MAX_LABEL, f"{at}/hint", errors, required=False)
    for flag in ("optional", "dispatch_action"):
        if flag in block and not isinstance(block[flag], bool):
            errors.append(_error("must be a boolean", f"{at}/{flag}"))
    if "element" not in block:
        errors.append(_error("missing required field: element", at))
    else:
        _element_errors(block["element"], f"{at}/element", errors)


def modal_errors(view: object) -> list[str]:
    """Why Slack would refuse ``view`` as a modal (``invalid_arguments`` with these as
    ``response_metadata.messages``); empty when it takes it."""
    if not isinstance(view, dict):
        return [_error("must be an object", "/view")]
    errors: list[str] = []
    if view.get("type") != "modal":
        errors.append(_error("must be modal", "/view/type"))
    _plain(view.get("title"), MAX_BUTTON, "/view/title", errors, required=True)
    for button in ("submit", "close"):
        _plain(view.get(button), MAX_BUTTON, f"/view/{button}", errors, required=False)
    _string(view.get("private_metadata"), MAX_PRIVATE_METADATA, "/view/private_metadata", errors)
    for name in ("callback_id", "external_id"):
        _string(view.get(name), MAX_ID, f"/view/{name}", errors)
    blocks = view.get("blocks")
    if not isinstance(blocks, list):
        return [*errors, _error("must be an array", "/view/blocks")]
    if len(blocks) > MAX_VIEW_BLOCKS:
        errors.append(_error(f"no more than {MAX_VIEW_BLOCKS} items allowed", "/view/blocks"))
    seen: set[str] = set()
    for i, block in enumerate(blocks):
        at = f"/view/blocks/{i}"
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            errors.append(_error("missing required field: type", at))
            continue
        block_id = block.get("block_id")
        _string(block_id, MAX_ID, f"{at}/block_id", errors)
        if isinstance(block_id, str):
            if block_id in seen:
                errors.append(_error("must be unique within the view", f"{at}/block_id"))
            seen.add(block_id)
        if block["type"] == "input":
            _input_errors(block, at, errors)
        else:  # messages' rules for the others (section, header, actions, context…)
            for error in block_errors([block]):
                errors.append("[ERROR] " + error.replace("/blocks/0", at))
    has_input = any(isinstance(b, dict) and b.get("type") == "input" for b in blocks)
    if has_input and view.get("submit") is None:
        errors.append(_error("submit is required when an input block is in the view", "/view"))
    return errors


def client_errors(view: Mapping[str, Any], values: Mapping[str, Submitted]) -> dict[str, str]:
    """What Slack's client says under each input (by ``block_id``) before it sends a
    submission at all: a required input left empty, a number that is not one (or not whole,
    or out of bounds), text too short or too long. Empty: the client sends it."""
    said: dict[str, str] = {}
    for block in view.get("blocks") or []:
        if not isinstance(block, Mapping) or block.get("type") != "input":
            continue
        block_id, element = str(block.get("block_id", "")), block.get("element") or {}
        value = values.get(block_id)
        if value in (None, "", []):
            if not block.get("optional"):
                said[block_id] = "Please complete this required field."
            continue
        text = str(value)
        if element.get("type") == "number_input":
            try:
                number = Decimal(text)
                assert number.is_finite()
            except (InvalidOperation, AssertionError):
                said[block_id] = "Please enter a number."
                continue
            if not element.get("is_decimal_allowed") and number != number.to_integral_value():
                said[block_id] = "Please enter a whole number."
            elif element.get("min_value") is not None and number < Decimal(element["min_value"]):
                said[block_id] = f"Please enter a number of at least {element['min_value']}."
            elif element.get("max_value") is not None and number > Decimal(element["max_value"]):
                said[block_id] = f"Please enter a number of at most {element['max_value']}."
        elif element.get("type") == "plain_text_input":
            if len(text) < int(element.get("min_length") or 0):
                said[block_id] = f"Please use at least {element['min_length']} characters."
            elif element.get("max_length") and len(text) > int(element["max_length"]):
                said[block_id] = f"Please use at most {element['max_length']} characters."
    return said


__all__ = [
    "INPUT_ELEMENTS",
    "MAX_STACK",
    "MAX_VIEW_BLOCKS",
    "MAX_VIEW_BYTES",
    "client_errors",
    "modal_errors",
]

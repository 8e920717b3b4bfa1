"""Approve with edits: a person changes a call's arguments before it runs.

Pure functions over a tool's arguments model, shared by the edge that shows the form and
the core that runs the edited call, so both judge an edit the same way:

- ``edit_fields``: one typed field per argument of the proposed call (``confirmed_by``
  never: only a decision sets it), each with its kind — a whole number, a number, a
  yes/no, a choice from an enum, text, or JSON for lists and objects — its current value
  as form text, and whether it may be left empty.
- ``parse_edit``: the form's text values → the edited arguments, validated by the tool's
  own model (``EditedCall``), or an error per field (``EditErrors``) when a value is of
  the wrong type, outside the schema's bounds or not one of the enum's values.
- ``edit_diff`` / ``edit_note``: what changed, ``replicas 5 → 3``, and the line the
  model's tool result starts with, ``approved with edits by <@U1>: replicas 5 → 3``.

An edit that changes nothing is an approval of the call as proposed (``EditedCall.changed``
is False).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from bot.agent.tools import CONFIRMED_BY, Tool, canonical_json

FieldKind = Literal["integer", "number", "boolean", "choice", "text", "json"]

MAX_FIELDS = 40  # arguments shown in one form (a modal holds at most 100 blocks)
MAX_OPTIONS = 100  # choices of one enum (a select holds at most 100 options)
MAX_VALUE_CHARS = 3000  # a text field's value (a plain-text input's limit)
DIFF_VALUE_CHARS = 60  # one value in a diff line
TRUE, FALSE = "true", "false"


@dataclass(frozen=True, slots=True)
class EditField:
    """One argument of the call as a form field."""

    name: str
    kind: FieldKind
    initial: str | None  # the proposed value as form text (None: empty)
    required: bool  # False: may be left empty (the argument is nullable)
    description: str = ""
    options: tuple[str, ...] = ()  # a choice's values (a boolean's: true, false)
    decimals: bool = False  # a number: whether decimals are allowed


@dataclass(frozen=True, slots=True)
class EditErrors:
    """The submitted values are not a valid call: why, per field name."""

    errors: dict[str, str]
    kind: Literal["errors"] = "errors"


@dataclass(frozen=True, slots=True)
class EditedCall:
    """The edited call, validated by the tool's model: its arguments (as the model dumps
    them, ``confirmed_by`` left out), their canonical JSON, and whether any changed."""

    arguments: dict[str, object]
    canonical: str
    changed: bool
    diff: str = ""
    kind: Literal["edited"] = "edited"


def _schema_of(model: type[BaseModel]) -> tuple[dict[str, Any], dict[str, Any]]:
    schema = model.model_json_schema()
    return dict(schema.get("properties") or {}), dict(schema.get("$defs") or {})


def _resolve(prop: Mapping[str, Any], defs: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
    """The property's own schema (``$ref`` followed, ``Optional`` unwrapped) and whether
    it admits null."""
    nullable = False
    node: dict[str, Any] = dict(prop)
    for _ in range(4):
        if "$ref" in node:
            ref = str(node["$ref"]).rsplit("/", 1)[-1]
            node = {**dict(defs.get(ref) or {}), **{k: v for k, v in node.items() if k != "$ref"}}
            continue
        choices = node.get("anyOf") or node.get("oneOf")
        if isinstance(choices, list):
            rest = [c for c in choices if not (isinstance(c, dict) and c.get("type") == "null")]
            nullable = nullable or len(rest) < len(choices)
            if len(rest) == 1 and isinstance(rest[0], dict):
                extra = {k: v for k, v in node.items() if k not in ("anyOf", "oneOf")}
                node = {**rest[0], **extra}
                continue
        break
    if node.get("type") == "null":
        nullable = True
    return node, nullable


def _kind(node: Mapping[str, Any]) -> FieldKind:
    enum = node.get("enum")
    if isinstance(enum, list) and 0 < len(enum) <= MAX_OPTIONS:
        return "choice"
    if "const" in node:
        return "choice"
    match node.get("type"):
        case "integer":
            return "integer"
        case "number":
            return "number"
        case "boolean":
            return "boolean"
        case "string":
            return "text"
    return "json"


def _as_text(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return TRUE if value else FALSE
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _options(node: Mapping[str, Any]) -> tuple[str, ...]:
    if "const" in node:
        return (str(_as_text(node["const"])),)
    return tuple(str(_as_text(v)) for v in node.get("enum") or [])


def edit_fields(tool: Tool, arguments: Mapping[str, object]) -> list[EditField]:
    """The form for editing a call of ``tool`` with ``arguments`` (its canonical
    arguments): one field per argument, in the model's field order, ``confirmed_by``
    left out; at most ``MAX_FIELDS``."""
    props, defs = _schema_of(tool.args_model)
    names = [n for n in tool.args_model.model_fields if n in arguments and n != CONFIRMED_BY]
    names += [n for n in arguments if n not in names and n != CONFIRMED_BY and n in props]
    fields: list[EditField] = []
    for name in names[:MAX_FIELDS]:
        node, nullable = _resolve(props.get(name) or {}, defs)
        kind = _kind(node)
        value = arguments.get(name)
        fields.append(
            EditField(
                name=name,
                kind=kind,
                initial=_as_text(value),
                required=not nullable,
                description=str(node.get("description") or "")[:300],
                options=(TRUE, FALSE) if kind == "boolean" else _options(node),
                decimals=kind == "number",
            )
        )
    return fields


def _convert(spec: EditField, raw: str | None, enum: list[Any]) -> tuple[object, str | None]:
    """The typed value of one field's form text, or why it is not one."""
    text = (raw or "").strip() if spec.kind != "text" else (raw or "")
    if text == "" or raw is None:
        if spec.kind == "text" and raw is not None and not spec.required:
            return None, None
        if spec.kind == "text" and raw is not None:
            return "", None  # an empty string, which the model may refuse itself
        return (None, None) if not spec.required else (None, "a value is required")
    if len(text) > MAX_VALUE_CHARS:
        return None, f"at most {MAX_VALUE_CHARS} characters"
    match spec.kind:
        case "integer":
            try:
                return int(text), None
            except ValueError:
                return None, "must be a whole number"
        case "number":
            try:
                number = float(text)
            except ValueError:
                return None, "must be a number"
            if not math.isfinite(number):
                return None, "must be a finite number"
            return (int(number) if number.is_integer() and "." not in text else number), None
        case "boolean":
            if text.lower() in (TRUE, FALSE):
                return text.lower() == TRUE, None
            return None, "must be true or false"
        case "choice":
            for value in enum:
                if _as_text(value) == text:
                    return value, None
            allowed = ", ".join(spec.options[:10])
            return None, f"must be one of: {allowed}"
        case "json":
            try:
                return json.loads(text), None
            except ValueError:
                return None, "must be JSON"
        case _:
            return text, None


def _message(error: Mapping[str, Any]) -> str:
    return str(error.get("msg") or "not valid")[:150]


def parse_edit(
    tool: Tool, proposed: Mapping[str, object], values: Mapping[str, str | None]
) -> EditedCall | EditErrors:
    """The edited call from the form's ``values`` (field name → text; a field not sent
    keeps its proposed value), judged by the tool's own model."""
    fields = edit_fields(tool, proposed)
    props, defs = _schema_of(tool.args_model)
    merged: dict[str, object] = {k: v for k, v in proposed.items() if k != CONFIRMED_BY}
    errors: dict[str, str] = {}
    for spec in fields:
        if spec.name not in values:
            continue
        node, _ = _resolve(props.get(spec.name) or {}, defs)
        enum = list(node.get("enum") or ([node["const"]] if "const" in node else []))
        value, why = _convert(spec, values[spec.name], enum)
        if why is not None:
            errors[spec.name] = why
        else:
            merged[spec.name] = value
    if errors:
        return EditErrors(errors)
    required = tool.args_model.model_fields.get(CONFIRMED_BY)
    candidate = dict(merged)
    if required is not None and required.is_required():
        candidate[CONFIRMED_BY] = ""
    try:
        model = tool.args_model.model_validate(candidate)
    except ValidationError as exc:
        names = [f.name for f in fields]
        for item in exc.errors():
            loc = item.get("loc") or ()
            name = str(loc[0]) if loc else ""
            target = name if name in names else (names[0] if names else "")
            errors.setdefault(target, _message(item))
        return EditErrors(errors)
    arguments: dict[str, object] = model.model_dump(mode="json", exclude={CONFIRMED_BY})
    canonical = canonical_json(arguments)
    original = canonical_json({k: v for k, v in proposed.items() if k != CONFIRMED_BY})
    diff = edit_diff(proposed, arguments)
    return EditedCall(
        arguments=arguments,
        canonical=canonical,
        changed=canonical != original,
        diff=diff,
    )


def _shown(value: object) -> str:
    text = _as_text(value)
    if text is None:
        return "(empty)"
    text = " ".join(text.split()) or '""'
    return text if len(text) <= DIFF_VALUE_CHARS else text[: DIFF_VALUE_CHARS - 1] + "…"


def edit_diff(proposed: Mapping[str, object], edited: Mapping[str, object]) -> str:
    """``replicas 5 → 3, host web-03 → web-04``: each argument the edit changed."""
    names = [n for n in proposed if n != CONFIRMED_BY]
    names += [n for n in edited if n not in names and n != CONFIRMED_BY]
    changes = [
        f"{name} {_shown(proposed.get(name))} → {_shown(edited.get(name))}"
        for name in names
        if canonical_json(proposed.get(name)) != canonical_json(edited.get(name))
    ]
    return ", ".join(changes)


def edit_note(by: str, proposed: Mapping[str, object], edited: Mapping[str, object]) -> str:
    """The line an edited call's result starts with:
    ``approved with edits by <@U1>: replicas 5 → 3``."""
    return f"approved with edits by <@{by}>: {edit_diff(proposed, edited) or 'no change'}"

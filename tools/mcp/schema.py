"""What an MCP server says about its tools, made safe to show and to enforce.

Everything a server sends is untrusted: names and descriptions lose control characters
and are bounded; an input schema is made acceptable to both providers (a top-level
``type: object`` with ``properties``, no ``$schema``/``$id`` and no top-level
combinators, which OpenAI rejects) and bounded in size. The model sees that schema; the
arguments it writes are validated against the server's own schema (``jsonschema``)
before the call goes out, through an argument model so that validation happens where
it happens for every tool (``CallRunner._validate``).

Not here: the SDK. This module only needs ``jsonschema`` and pydantic.
"""

from __future__ import annotations

import copy
import json
import re
import unicodedata
from typing import Any, ClassVar

from jsonschema import exceptions as schema_errors
from jsonschema import validators
from pydantic import BaseModel, ConfigDict, model_validator
from pydantic_core import PydanticCustomError

from bot.agent.tools import CONFIRMED_BY, NAME_PATTERN

MAX_DESCRIPTION_CHARS = 1024
MAX_SCHEMA_CHARS = 16_000  # of the model-facing schema, as compact JSON
MAX_SHOWN_NAME_CHARS = 80  # a hostile name in an error message
MAX_VALIDATION_ERRORS = 5

# Providers reject these at the top of a function's parameters.
_TOP_LEVEL_DROPPED = ("$schema", "$id", "anyOf", "oneOf", "allOf", "not", "enum", "const")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069]")


class SchemaProblem(ValueError):
    """A server's tool schema we cannot offer (the tool is skipped, with a log line)."""


def clean_text(text: str | None, limit: int) -> str:
    """``text`` without control or bidi characters (newlines and tabs kept), at most
    ``limit`` characters."""
    if not text:
        return ""
    text = unicodedata.normalize("NFC", text)
    text = _CONTROL.sub("", text.replace("\r\n", "\n")).strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def shown_name(name: str) -> str:
    """A server-provided name fit for a log line or an error: cleaned, bounded, quoted."""
    return repr(clean_text(name, MAX_SHOWN_NAME_CHARS).replace("\n", " "))


def offered_name(server: str, tool: str) -> str | None:
    """``<server>_<tool>`` when that is a valid provider tool name, else None."""
    name = f"{server}_{tool}"
    return name if NAME_PATTERN.match(name) else None


def model_schema(raw: object) -> dict[str, Any]:
    """The schema the model sees; ``SchemaProblem`` if it cannot be made acceptable."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise SchemaProblem("the input schema is not an object")
    try:
        schema: dict[str, Any] = json.loads(json.dumps(raw))  # a plain JSON copy
    except (TypeError, ValueError) as exc:
        raise SchemaProblem(f"the input schema is not JSON: {exc}") from None
    if schema.get("type", "object") != "object":
        raise SchemaProblem(f"the input schema's type is {schema.get('type')!r}, not 'object'")
    for key in _TOP_LEVEL_DROPPED:
        schema.pop(key, None)
    schema["type"] = "object"
    props = schema.get("properties")
    if not isinstance(props, dict):
        props = {}
    schema["properties"] = props
    required = schema.get("required")
    if isinstance(required, list):
        kept = [r for r in required if isinstance(r, str) and r in props]
        if kept:
            schema["required"] = kept
        else:
            schema.pop("required")
    elif required is not None:
        schema.pop("required")
    if _size(schema) > MAX_SCHEMA_CHARS:
        _drop_nested_descriptions(schema)
    if _size(schema) > MAX_SCHEMA_CHARS:
        raise SchemaProblem(
            f"the input schema is {_size(schema)} characters, more than {MAX_SCHEMA_CHARS}"
        )
    return schema


def _size(schema: dict[str, Any]) -> int:
    return len(json.dumps(schema, separators=(",", ":")))


def _drop_nested_descriptions(node: object, depth: int = 0) -> None:
    if isinstance(node, dict):
        if depth > 1:
            node.pop("description", None)
        node.pop("examples", None)
        for value in node.values():
            _drop_nested_descriptions(value, depth + 1)
    elif isinstance(node, list):
        for value in node:
            _drop_nested_descriptions(value, depth + 1)


def checker(raw: dict[str, Any]) -> Any:
    """A ``jsonschema`` validator for the server's own schema (``confirmed_by`` taken out:
    the runtime sets it); ``SchemaProblem`` if the schema itself is invalid."""
    schema = copy.deepcopy(raw)
    props = schema.get("properties")
    if isinstance(props, dict) and CONFIRMED_BY in props:
        schema["properties"] = {k: v for k, v in props.items() if k != CONFIRMED_BY}
        if isinstance(schema.get("required"), list):
            schema["required"] = [r for r in schema["required"] if r != CONFIRMED_BY]
    schema.pop("$id", None)  # never resolve against a server-chosen base URI
    cls = validators.validator_for(schema, default=validators.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except schema_errors.SchemaError as exc:
        raise SchemaProblem(f"the input schema is not valid JSON Schema: {exc.message}") from None
    return cls(schema)


class McpArguments(BaseModel):
    """Arguments of one MCP tool: any JSON object the server's schema accepts.

    Subclasses (one per tool, made by ``arguments_model``) carry the model-facing schema
    and the validator; ``model_json_schema`` returns the former, so ``tool_spec`` offers
    the server's schema, and validation runs the latter.
    """

    model_config = ConfigDict(extra="allow")

    mcp_schema: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}}
    mcp_validator: ClassVar[Any] = None

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return copy.deepcopy(cls.mcp_schema)

    @model_validator(mode="before")
    @classmethod
    def _against_server_schema(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            raise PydanticCustomError("mcp_arguments", "arguments must be a JSON object")
        if cls.mcp_validator is None:
            return data
        checked = {k: v for k, v in data.items() if k != CONFIRMED_BY}
        errors = sorted(cls.mcp_validator.iter_errors(checked), key=lambda e: list(e.path))
        if errors:
            parts = []
            for error in errors[:MAX_VALIDATION_ERRORS]:
                where = ".".join(str(p) for p in error.absolute_path) or "(arguments)"
                parts.append(f"{where}: {clean_text(error.message, 300)}")
            if len(errors) > MAX_VALIDATION_ERRORS:
                parts.append(f"and {len(errors) - MAX_VALIDATION_ERRORS} more")
            raise PydanticCustomError("mcp_arguments", "{details}", {"details": "; ".join(parts)})
        return data


def arguments_model(name: str, raw_schema: object) -> type[McpArguments]:
    """The argument model of tool ``name``; ``SchemaProblem`` if the schema is unusable."""
    shown = model_schema(raw_schema)
    validator = checker(raw_schema if isinstance(raw_schema, dict) else {})
    namespace: dict[str, Any] = {
        "__module__": __name__,
        "mcp_schema": shown,
        "mcp_validator": validator,
    }
    if CONFIRMED_BY in shown["properties"]:
        # A real field, so the runtime sets it to the approver (``CallRunner._execute``).
        namespace["__annotations__"] = {CONFIRMED_BY: str}
        namespace[CONFIRMED_BY] = ""
    return type(f"{name}_args", (McpArguments,), namespace)

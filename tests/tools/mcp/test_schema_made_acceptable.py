"""A server's input schema is made acceptable to both providers and bounded; one that
cannot be is skipped; names and descriptions lose control characters and are bounded."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from bot.agent.tools import tool_spec
from tools.mcp.schema import (
    MAX_SCHEMA_CHARS,
    SchemaProblem,
    arguments_model,
    clean_text,
    model_schema,
    offered_name,
)


def test_what_providers_reject_is_taken_out() -> None:
    raw = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "$id": "https://evil.example/schema",
        "type": "object",
        "anyOf": [{"required": ["a"]}, {"required": ["b"]}],
        "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
        "required": ["a", "ghost", 7],
    }
    shown = model_schema(raw)
    assert shown == {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
        "required": ["a"],
    }


def test_a_schema_without_properties_gets_them() -> None:
    assert model_schema({"type": "object"}) == {"type": "object", "properties": {}}
    assert model_schema(None) == {"type": "object", "properties": {}}


@pytest.mark.parametrize(
    "raw",
    [
        {"type": "array", "items": {}},
        "not a schema",
        {"type": "object", "properties": {"a": {"enum": [f"value-{i}" for i in range(5000)]}}},
    ],
)
def test_unusable_schemas_are_refused(raw: object) -> None:
    with pytest.raises(SchemaProblem):
        model_schema(raw)


def test_big_nested_descriptions_are_dropped_to_fit() -> None:
    props = {f"p{i}": {"type": "string", "description": "d" * 400} for i in range(60)}
    shown = model_schema({"type": "object", "properties": props})
    assert len(str(shown)) < MAX_SCHEMA_CHARS
    assert set(shown["properties"]) == set(props)


def test_an_invalid_json_schema_is_refused() -> None:
    with pytest.raises(SchemaProblem, match="not valid JSON Schema"):
        arguments_model("x_y", {"type": "object", "properties": {"a": {"type": 12}}})


def test_the_model_validates_and_offers_the_schema() -> None:
    model = arguments_model(
        "srv_t",
        {
            "type": "object",
            "properties": {"n": {"type": "integer", "minimum": 1}, "confirmed_by": {}},
            "required": ["n", "confirmed_by"],
            "additionalProperties": False,
        },
    )
    assert model.model_validate({"n": 2}).model_dump() == {"n": 2, "confirmed_by": ""}
    with pytest.raises(ValidationError, match=r"n: 0 is less than the minimum of 1"):
        model.model_validate({"n": 0})
    with pytest.raises(ValidationError, match="Additional properties are not allowed"):
        model.model_validate({"n": 1, "extra": True})


def test_names_and_descriptions_are_cleaned() -> None:
    assert clean_text("ok\x1b[31m red\u202e evil\x00", 100) == "ok[31m red evil"
    assert len(clean_text("x" * 5000, 1024)) == 1024
    assert offered_name("srv", "list-pods") == "srv_list-pods"
    assert offered_name("srv", "a.b") is None
    assert offered_name("srv", "t" * 61) is None


def test_tool_spec_hides_confirmed_by() -> None:
    class Fake:
        name = "srv_t"
        description = "d"
        args_model = arguments_model(
            "srv_t", {"type": "object", "properties": {"confirmed_by": {"type": "string"}}}
        )

    spec = tool_spec(Fake())  # type: ignore[arg-type]
    assert spec.parameters == {"type": "object", "properties": {}}

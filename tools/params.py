"""tools.yml parameters as a pydantic argument model (its JSON schema is what the model
sees; validation runs before anything is executed)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, create_model

from tools.spec import ParamSpec

_TYPES: dict[str, type] = {"string": str, "integer": int, "number": float, "boolean": bool}


class DeclaredArgs(BaseModel):
    """Base of generated argument models: no unknown arguments, Python regexes, strict
    types (a model sending ``"5"`` for an integer is told, not silently coerced)."""

    model_config = ConfigDict(extra="forbid", regex_engine="python-re", strict=True)


def _field(spec: ParamSpec) -> tuple[Any, Any]:
    annotation: Any = _TYPES[spec.type]
    if spec.enum:
        annotation = Literal[tuple(spec.enum)]
    if spec.type == "number":
        annotation = float | int if not spec.enum else annotation
    constraints: dict[str, Any] = {}
    if spec.pattern is not None:
        # Shown to the model as is; enforced by ``_strict_pattern``.
        constraints["json_schema_extra"] = {"pattern": spec.pattern}
        annotation = Annotated[annotation, AfterValidator(_strict_pattern(spec.pattern))]
    if spec.min is not None:
        constraints["ge"] = spec.min
    if spec.max is not None:
        constraints["le"] = spec.max
    description = spec.description or ""
    if spec.is_required:
        return annotation, Field(description=description, **constraints)
    if spec.default is None:
        return annotation | None, Field(None, description=description, **constraints)
    return annotation, Field(spec.default, description=description, **constraints)


def _strict_pattern(pattern: str) -> Callable[[str], str]:
    """JSON Schema semantics (the pattern is searched, as the model is told), except
    that a final ``$`` means the very end of the value: Python's ``$`` would also match
    before a trailing newline, letting ``"web\n"`` through ``^[a-z]+$``."""
    source = pattern
    if source.endswith("$") and not source.endswith("\\$"):
        source = source[:-1] + r"\Z"
    compiled = re.compile(source)

    def check(value: str) -> str:
        if compiled.search(value) is None:
            raise ValueError(f"must match the pattern {pattern!r}")
        return value

    return check


def args_model(tool_name: str, params: dict[str, ParamSpec]) -> type[BaseModel]:
    """A model named after the tool with one field per parameter."""
    fields = {name: _field(spec) for name, spec in params.items()}
    title = "".join(part.capitalize() for part in tool_name.replace("-", "_").split("_"))
    return create_model(f"{title}Args", __base__=DeclaredArgs, **fields)  # type: ignore[call-overload,no-any-return]

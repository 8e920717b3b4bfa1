"""Python tools: a plain ``async def`` plus ``@tool`` becomes an agent-core ``Tool``.

The argument model is derived from the function, as pydantic-ai does it: each
keyword-able parameter is a field whose type comes from its hint (``Annotated[...,
Field(...)]`` constraints included), whose default comes from its default, and whose
description comes from the docstring (Google ``Args:``, Sphinx ``:param x:`` or numpy
``Parameters``) unless an ``Annotated`` field already carries one. The docstring's
summary (the text before its first section) is the tool's description. No hand-written
JSON schema anywhere: the model sees ``args_model.model_json_schema()``.

    @tool(category="mutating")
    async def restart_service(host: str, unit: Unit, confirmed_by: str) -> str:
        '''Restart a systemd unit on one host.

        Args:
            host: Host name, e.g. ``web-03``.
            unit: The unit to restart.
        '''

Two parameters are never shown to the model: one annotated ``CallContext`` (any name)
receives the call's context (job id, idempotency key, dry-run flag, progress), and one
named ``confirmed_by`` receives the approver's Slack id (``str | None``: ``None`` when
nobody approved, as for a read-only call or a dry run; plain ``str``: ``""`` then).

Everything wrong with a definition (no summary, a parameter without a description or
type, a sync function, a bad name) raises at decoration time, naming the function and
the parameter, so a broken tool never reaches a running bot. This module owns Python
tools only; tools.yml tools live in ``declared.py``.
"""

from __future__ import annotations

import inspect
import itertools
import re
import typing
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, ParamSpec, TypeVar, cast, get_args, overload

import pydantic_core
from pydantic import BaseModel, ConfigDict, PydanticUserError, create_model
from pydantic.fields import FieldInfo

from bot.agent.tools import (
    CONFIRMED_BY,
    DEFAULT_OUTPUT_BOUND,
    DEFAULT_TIMEOUT_S,
    NAME_PATTERN,
    CallContext,
    Category,
)

CATEGORIES: tuple[Category, ...] = typing.get_args(Category)
OK_RESULT = "ok"  # what the model reads when a tool returns None

P = ParamSpec("P")
R = TypeVar("R")

# Lax validation on purpose (unlike tools.yml's strict models): an enum parameter must
# accept its JSON value, and the function gets real Python values either way.
# ``python-re`` keeps patterns Python regexes, as in tools.yml.
_ARGS_CONFIG = ConfigDict(extra="forbid", regex_engine="python-re", protected_namespaces=())

Injector = Callable[[CallContext], object]


@dataclass(frozen=True, slots=True, kw_only=True)
class PythonTool(Generic[P, R]):
    """A decorated function as a ``bot.agent.tools.Tool``; still callable as itself."""

    name: str
    description: str
    args_model: type[BaseModel]
    fn: Callable[P, Awaitable[R]]
    category: Category = "read_only"
    parallel: bool = False
    timeout: float = DEFAULT_TIMEOUT_S
    output_bound: int = DEFAULT_OUTPUT_BOUND
    # Parameters filled from the call context rather than from the model's arguments.
    injected: tuple[tuple[str, Injector], ...] = ()

    async def execute(self, args: BaseModel, ctx: CallContext) -> str | bytes:
        """Call the function with the validated arguments and the injected context."""
        # Attributes, not ``model_dump``: enums, nested models and the like keep their type.
        kwargs: dict[str, object] = {
            name: getattr(args, name) for name in self.args_model.model_fields
        }
        for name, inject in self.injected:
            kwargs[name] = inject(ctx)
        fn = cast(Callable[..., Awaitable[object]], self.fn)
        return render(await fn(**kwargs), tool_name=self.name)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Awaitable[R]:
        """The undecorated function, so unit tests can call a tool directly."""
        return self.fn(*args, **kwargs)


def render(value: object, *, tool_name: str = "tool") -> str | bytes:
    """A return value as tool output: str as is, bytes for the core to decode, ``None``
    as ``ok``, anything else (dicts, lists, pydantic models, numbers) as indented JSON."""
    if value is None:
        return OK_RESULT
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    try:
        return pydantic_core.to_json(value, indent=2).decode("utf-8")
    except pydantic_core.PydanticSerializationError as exc:
        raise TypeError(
            f"tool {tool_name!r} returned a {type(value).__name__}, which cannot be rendered "
            "as text; return str, bytes, None, or something JSON-serializable"
        ) from exc


@overload
def tool(name: Callable[P, Awaitable[R]], /) -> PythonTool[P, R]: ...
@overload
def tool(
    name: str | None = None,
    *,
    category: Category = "read_only",
    parallel: bool = False,
    timeout: float = DEFAULT_TIMEOUT_S,
    output_bound: int = DEFAULT_OUTPUT_BOUND,
) -> Callable[[Callable[P, Awaitable[R]]], PythonTool[P, R]]: ...
def tool(
    name: str | Callable[..., Awaitable[Any]] | None = None,
    *,
    category: Category = "read_only",
    parallel: bool = False,
    timeout: float = DEFAULT_TIMEOUT_S,
    output_bound: int = DEFAULT_OUTPUT_BOUND,
) -> PythonTool[Any, Any] | Callable[[Callable[..., Awaitable[Any]]], PythonTool[Any, Any]]:
    """Make an ``async def`` a tool; usable as ``@tool`` or ``@tool("name", category=...)``."""

    def decorate(fn: Callable[..., Awaitable[Any]]) -> PythonTool[Any, Any]:
        return _build(
            fn,
            name=None if callable(name) else name,
            category=category,
            parallel=parallel,
            timeout=timeout,
            output_bound=output_bound,
        )

    return decorate(name) if callable(name) else decorate


def _build(
    fn: Callable[..., Awaitable[Any]],
    *,
    name: str | None,
    category: Category,
    parallel: bool,
    timeout: float,
    output_bound: int,
) -> PythonTool[Any, Any]:
    where = f"@tool {getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', fn)!s}"
    if not inspect.iscoroutinefunction(fn):
        raise TypeError(f"{where}: a tool must be an 'async def' function")
    tool_name = name if name is not None else getattr(fn, "__name__", "")
    if not isinstance(tool_name, str) or not NAME_PATTERN.match(tool_name):
        raise ValueError(f"{where}: tool name {tool_name!r} must match {NAME_PATTERN.pattern}")
    if category not in CATEGORIES:
        raise ValueError(f"{where}: category {category!r} is not one of {', '.join(CATEGORIES)}")
    if parallel and category != "read_only":
        raise ValueError(f"{where}: parallel=True applies to read_only tools only")
    if isinstance(timeout, bool) or not timeout > 0:
        raise ValueError(f"{where}: timeout must be a positive number of seconds")
    if isinstance(output_bound, bool) or not output_bound > 0:
        raise ValueError(f"{where}: output_bound must be a positive number of characters")

    doc = parse_docstring(inspect.getdoc(fn))
    if not doc.summary:
        raise TypeError(f"{where}: the docstring needs a summary; it is the tool's description")
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception as exc:  # NameError and friends from string annotations
        raise TypeError(f"{where}: cannot resolve the type hints: {exc}") from exc
    parameters = inspect.signature(fn).parameters
    if unknown := sorted(set(doc.params) - set(parameters)):
        raise TypeError(f"{where}: the docstring documents unknown parameter(s) {unknown}")

    fields: dict[str, Any] = {}
    injected: list[tuple[str, Injector]] = []
    for param in parameters.values():
        at = f"{where}: parameter {param.name!r}"
        if param.kind not in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
            raise TypeError(f"{at}: *args, **kwargs and positional-only parameters can't be tools")
        if param.name not in hints:
            raise TypeError(f"{at} needs a type hint")
        hint = hints[param.name]
        if hint is CallContext:
            injected.append((param.name, _context))
        elif param.name == CONFIRMED_BY:
            injected.append((param.name, _confirmed_by(hint, at)))
        else:
            fields[param.name] = _field(param, hint, doc.params.get(param.name), at)
    if category == "destructive" and not any(inject is _context for _, inject in injected):
        # The core runs a destructive tool once with dry_run=True before asking anyone;
        # without the context the function could not tell, and would really do it.
        raise TypeError(
            f"{where}: a destructive tool needs a CallContext parameter to honour ctx.dry_run"
        )

    args_model = _args_model(tool_name, fn, fields, where)
    return PythonTool(
        name=tool_name,
        description=doc.summary,
        args_model=args_model,
        fn=fn,
        category=category,
        parallel=parallel,
        timeout=float(timeout),
        output_bound=output_bound,
        injected=tuple(injected),
    )


def _context(ctx: CallContext) -> CallContext:
    return ctx


def _approver(ctx: CallContext) -> str | None:
    return ctx.confirmed_by


def _approver_or_empty(ctx: CallContext) -> str:
    return ctx.confirmed_by or ""


def _confirmed_by(hint: object, at: str) -> Injector:
    if hint is str:
        return _approver_or_empty
    if set(get_args(hint)) == {str, type(None)}:
        return _approver
    raise TypeError(f"{at}: confirmed_by receives the approver and must be 'str | None' or 'str'")


def _field(param: inspect.Parameter, hint: Any, documented: str | None, at: str) -> Any:
    """``(annotation, FieldInfo)`` for ``create_model``, with a description guaranteed."""
    if param.name.startswith("_") or hasattr(BaseModel, param.name):
        raise TypeError(f"{at}: the name clashes with pydantic's BaseModel; rename it")
    if param.default is param.empty:
        info = FieldInfo.from_annotation(hint)
    else:
        info = FieldInfo.from_annotated_attribute(hint, param.default)
    if not (info.description or "").strip():
        if not documented:
            raise TypeError(
                f"{at} has no description; document it in the docstring's Args section "
                "or use Annotated[..., Field(description=...)]"
            )
        info.description = documented  # ``info`` is a fresh copy, never the caller's Field
    # The bare annotation: ``info`` already holds the Annotated metadata (constraints);
    # passing the Annotated hint again would apply every constraint twice.
    return (info.annotation, info)


def _args_model(
    tool_name: str, fn: Callable[..., object], fields: dict[str, Any], where: str
) -> type[BaseModel]:
    title = "".join(part[:1].upper() + part[1:] for part in re.split(r"[_-]", tool_name))
    try:
        model: type[BaseModel] = create_model(
            f"{title}Args", __config__=_ARGS_CONFIG, __module__=fn.__module__, **fields
        )
        model.model_json_schema()  # a type that validates but has no JSON schema fails now
    except (PydanticUserError, TypeError, ValueError) as exc:
        raise TypeError(f"{where}: cannot build the argument model: {exc}") from exc
    return model


# ---- docstrings ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Docstring:
    """What a tool needs from a docstring: the summary and one line per parameter."""

    summary: str
    params: dict[str, str]


_GOOGLE_HEADER = re.compile(
    r"^(args|arguments|parameters|params|keyword args|keyword arguments|other parameters"
    r"|returns?|yields?|raises|examples?|notes?|warnings?|see also|attributes"
    r"|references|todo):\s*$",
    re.IGNORECASE,
)
_GOOGLE_PARAMS = {
    "args",
    "arguments",
    "parameters",
    "params",
    "keyword args",
    "keyword arguments",
    "other parameters",
}
_GOOGLE_ENTRY = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:(.*)$")
_NUMPY_RULE = re.compile(r"^-{3,}\s*$")
_NUMPY_PARAMS = {"parameters", "other parameters", "keyword arguments"}
_SPHINX_FIELD = re.compile(r"^:(\w+)([^:]*):(.*)$")
_SPHINX_PARAMS = {"param", "parameter", "arg", "argument", "key", "keyword"}


def parse_docstring(doc: str | None) -> Docstring:
    """Split a docstring into its summary and parameter descriptions (Google, Sphinx
    or numpy style; styles may even be mixed). The summary is everything before the
    first section or field; a parameter's description is joined onto one line."""
    lines = inspect.cleandoc(doc or "").splitlines()
    starts = [i for i in range(len(lines)) if _section_kind(lines, i) is not None]
    summary = "\n".join(lines[: starts[0] if starts else len(lines)]).strip()
    params: dict[str, str] = {}
    for start, end in itertools.pairwise([*starts, len(lines)]):
        kind = _section_kind(lines, start)
        head, body = lines[start], lines[start + 1 : end]
        if kind != "numpy":
            body = _indented(body)
        if kind == "google" and head.strip()[:-1].lower() in _GOOGLE_PARAMS:
            params.update(_google_entries(body))
        elif kind == "numpy" and head.strip().lower() in _NUMPY_PARAMS:
            params.update(_numpy_entries(body[1:]))  # body[0] is the dashed rule
        elif kind == "sphinx":
            match = _SPHINX_FIELD.match(head)
            assert match is not None
            field, target, text = match.groups()
            words = target.split()
            if field.lower() in _SPHINX_PARAMS and words:
                params[words[-1].lstrip("*")] = _join([text, *body])
    return Docstring(summary=summary, params={k: v for k, v in params.items() if v})


def _section_kind(lines: list[str], i: int) -> str | None:
    line = lines[i]
    if not line or line[0].isspace():
        return None  # sections and fields start in the first column
    if _GOOGLE_HEADER.match(line):
        return "google"
    if _SPHINX_FIELD.match(line):
        return "sphinx"
    if i + 1 < len(lines) and _NUMPY_RULE.match(lines[i + 1]):
        return "numpy"
    return None


def _indented(body: list[str]) -> list[str]:
    """The block under a Google header or Sphinx field: up to the first line that is
    back in the first column (a closing paragraph is not part of the last entry)."""
    for i, line in enumerate(body):
        if line.strip() and not line[0].isspace():
            return body[:i]
    return body


def _join(parts: list[str]) -> str:
    return " ".join(part.strip() for part in parts if part.strip())


def _google_entries(body: list[str]) -> dict[str, str]:
    """``name (type): text`` at the section's indent; deeper lines continue it."""
    indents = [len(line) - len(line.lstrip()) for line in body if line.strip()]
    if not indents:
        return {}
    indent = min(indents)
    entries: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in body:
        if line.strip() and len(line) - len(line.lstrip()) == indent:
            match = _GOOGLE_ENTRY.match(line.strip())
            current = None
            if match:
                current = entries.setdefault(match.group(1), [])
                current.append(match.group(2))
        elif current is not None:
            current.append(line)
    return {name: _join(parts) for name, parts in entries.items()}


def _numpy_entries(body: list[str]) -> dict[str, str]:
    """``name : type`` in the first column (``a, b : int`` shares one text), text indented."""
    entries: dict[str, str] = {}
    names: list[str] = []
    text: list[str] = []

    def flush() -> None:
        for name in names:
            entries[name] = _join(text)

    for line in body:
        if line.strip() and not line[0].isspace():
            flush()
            names = [n.strip().lstrip("*") for n in line.split(":", 1)[0].split(",")]
            text = []
        else:
            text.append(line)
    flush()
    return entries

"""The core's view of a tool: definition, rights and an async execute.

``tools/`` builds the typed base, packs and tools.yml on top of this protocol; the
core only needs what is here to validate, confirm, run and bound a call.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel

from bot.agent.messages import ToolSpec

Category = Literal["read_only", "mutating", "destructive"]

DEFAULT_TIMEOUT_S = 30.0
DEFAULT_OUTPUT_BOUND = 4000
CONFIRMED_BY = "confirmed_by"
NAME_PATTERN = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")  # what providers accept as a tool name


def _no_progress(_: str) -> None:
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class CallContext:
    """What a tool learns about the call besides its arguments."""

    job_id: str
    call_id: str
    confirmed_by: str | None = None
    dry_run: bool = False
    progress: Callable[[str], None] = _no_progress

    @property
    def idempotency_key(self) -> str:
        return f"{self.job_id}:{self.call_id}"


class Tool(Protocol):
    """A tool the model may call."""

    @property
    def name(self) -> str: ...
    @property
    def description(self) -> str: ...
    @property
    def category(self) -> Category: ...
    @property
    def parallel(self) -> bool: ...
    @property
    def timeout(self) -> float: ...
    @property
    def output_bound(self) -> int: ...
    @property
    def args_model(self) -> type[BaseModel]: ...

    async def execute(self, args: BaseModel, ctx: CallContext) -> str | bytes:
        """Run the call; raise ``ToolError`` (or anything) to report a failure."""
        ...


def has_dry_run(tool: Tool) -> bool:
    """Whether a destructive call of ``tool`` is dry-run before its approval is asked;
    a tool that cannot (``dry_run_available = False``, e.g. an MCP tool) is asked for
    without one, and its card says that no dry run is available."""
    return getattr(tool, "dry_run_available", True) is not False


@runtime_checkable
class Previewable(Protocol):
    """A tool that can say exactly what a call will do before it runs (a command tool's
    argv, an http tool's request), for the person asked to approve it. A preview that
    must ask its backend (a replica count now → the new one) returns an awaitable; the
    core bounds it (``calls.PREVIEW_TIMEOUT_S``) and sends the card without it if it
    fails or is late."""

    def preview(self, args: BaseModel, ctx: CallContext) -> str | None | Awaitable[str | None]: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class FunctionTool:
    """A tool made of an argument model and an async function (tests, built-ins)."""

    name: str
    description: str
    args_model: type[BaseModel]
    fn: Callable[[Any, CallContext], Awaitable[str | bytes]]
    category: Category = "read_only"
    parallel: bool = False
    timeout: float = DEFAULT_TIMEOUT_S
    output_bound: int = DEFAULT_OUTPUT_BOUND

    async def execute(self, args: BaseModel, ctx: CallContext) -> str | bytes:
        return await self.fn(args, ctx)


def needs_confirm(tool: Tool) -> bool:
    return tool.category != "read_only"


def runs_in_parallel(tool: Tool) -> bool:
    return tool.category == "read_only" and tool.parallel


def tool_spec(tool: Tool) -> ToolSpec:
    """The model-facing spec; ``confirmed_by`` is never offered to the model. The
    parameters are built once per argument model and shared, read-only, by every run
    (pydantic's ``model_json_schema`` cost about 0.6 ms of each job)."""
    return ToolSpec(
        name=tool.name, description=tool.description, parameters=_parameters(tool.args_model)
    )


@functools.lru_cache(maxsize=4096)
def _parameters(args_model: type[BaseModel]) -> dict[str, Any]:
    schema = args_model.model_json_schema()
    props = schema.get("properties")
    if isinstance(props, dict) and CONFIRMED_BY in props:
        schema = dict(schema)
        schema["properties"] = {k: v for k, v in props.items() if k != CONFIRMED_BY}
        required = [r for r in schema.get("required", []) if r != CONFIRMED_BY]
        if required:
            schema["required"] = required
        else:
            schema.pop("required", None)
    schema.pop("title", None)
    return schema


def canonical_json(value: object) -> str:
    """Stable JSON for hashing: sorted keys, no whitespace, non-ASCII kept."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)

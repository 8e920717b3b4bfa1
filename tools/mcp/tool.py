"""``McpTool``: one MCP server tool as a ``bot.agent.tools.Tool``, and its category.

An MCP tool goes through the one path every tool takes (``bot/agent/calls.py``): its
``args_model`` validates against the server's schema, its category decides the card,
and ``execute`` is a ``tools/call``. Here only what is MCP's own:

category
    ``mutating`` by default; ``read_only`` when ``readOnlyHint`` is true and the entry
    trusts annotations; ``destructive`` when ``destructiveHint`` is explicitly true,
    whatever the trust (annotations are hints a server may get wrong, so trust may only
    lower the bar for a server the operator vouches for); an override wins. The reason
    is kept for ``opsloop tools list``.
the request
    An approved call's ``_meta`` carries ``opsloop/confirmed_by`` and
    ``opsloop/idempotency_key``; a ``confirmed_by`` argument, when the schema has one,
    is set by the runtime (``CallRunner._execute``) and sent as it is.
dry run
    An MCP tool has none (``dry_run_available`` is False): the core asks for approval of
    a destructive one without a dry run, and the card says "No dry run available". A
    dry run asked for anyway (``opsloop tools run --dry-run``) answers that without
    calling the server.
the result
    Text and JSON content become text; images, audio and embedded resources a short
    description, and the bytes or text of a resource follow as the full output so the
    output bound and the artifact take care of their size. ``isError`` → ``Error:``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import mcp_types
from pydantic import BaseModel

from bot.agent.tools import CONFIRMED_BY, DEFAULT_OUTPUT_BOUND, CallContext, Category
from bot.errors import ToolError
from tools.mcp.connection import McpConnection
from tools.mcp.schema import clean_text
from tools.spec import McpToolOverride

NO_DRY_RUN = "No dry run available: this MCP tool has no dry run; approving it runs it."
TIMEOUT_GRACE_S = 1.0  # the connection's own timeout answers first, naming the server
MAX_CONTENT_BLOCKS = 100
META_CONFIRMED_BY = "opsloop/confirmed_by"
META_IDEMPOTENCY_KEY = "opsloop/idempotency_key"

Reason = Literal["override", "annotation", "default"]


@dataclass(frozen=True, slots=True)
class Decided:
    category: Category
    parallel: bool
    reason: Reason


def decide(
    annotations: mcp_types.ToolAnnotations | None,
    *,
    trust_annotations: bool,
    override: McpToolOverride | None,
) -> Decided:
    """The category of a tool from the operator's override and the server's hints."""
    parallel = bool(override and override.parallel)
    if override is not None and override.category is not None:
        return Decided(override.category, parallel and override.category == "read_only", "override")
    read_only = annotations is not None and annotations.read_only_hint is True
    destructive = annotations is not None and annotations.destructive_hint is True
    if destructive and not (read_only and trust_annotations):
        # destructiveHint is meaningful only when not read-only (the spec).
        return Decided("destructive", False, "annotation")
    if read_only and trust_annotations:
        return Decided("read_only", parallel, "annotation")
    return Decided("mutating", False, "default")


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)  # one tool is one object
class McpTool:
    """A server's tool offered as ``<server>_<tool>``."""

    dry_run_available: ClassVar[bool] = False  # the card says so; approving runs it for real

    name: str
    remote_name: str  # the name the server knows it by
    description: str
    args_model: type[BaseModel]
    category: Category
    parallel: bool
    category_reason: Reason  # for ``opsloop tools list``
    connection: McpConnection
    call_timeout: float  # what the server is given; ``timeout`` adds a grace
    output_bound: int = DEFAULT_OUTPUT_BOUND

    @property
    def timeout(self) -> float:
        return self.call_timeout + TIMEOUT_GRACE_S

    def arguments(self, args: BaseModel, ctx: CallContext) -> dict[str, Any]:
        """The ``arguments`` of the request."""
        values: dict[str, Any] = args.model_dump(mode="json", exclude={CONFIRMED_BY})
        if CONFIRMED_BY in type(args).model_fields and ctx.confirmed_by:
            values[CONFIRMED_BY] = ctx.confirmed_by
        return values

    def meta(self, ctx: CallContext) -> dict[str, Any] | None:
        """The request's ``_meta``: who approved it and its idempotency key."""
        if not ctx.confirmed_by:
            return None
        return {META_CONFIRMED_BY: ctx.confirmed_by, META_IDEMPOTENCY_KEY: ctx.idempotency_key}

    async def execute(self, args: BaseModel, ctx: CallContext) -> str | bytes:
        if ctx.dry_run:
            return NO_DRY_RUN

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            shown = f"{progress:g}/{total:g}" if total else f"{progress:g}"
            text = clean_text(message, 120).replace("\n", " ")
            ctx.progress(f"{text} ({shown})" if text else shown)

        result = await self.connection.call(
            self.remote_name,
            self.arguments(args, ctx),
            time_limit=self.call_timeout,
            meta=self.meta(ctx),
            progress=on_progress,
        )
        text = result_text(result.content, result.structured_content)
        if result.is_error:
            raise ToolError(f"mcp server {self.connection.name!r}: {text or 'the tool failed'}")
        return text


def result_text(content: Sequence[Any], structured: Any = None) -> str:
    """The model's text of a result's content blocks."""
    parts: list[str] = []
    blocks = list(content)
    for block in blocks[:MAX_CONTENT_BLOCKS]:
        parts.append(_block_text(block))
    if len(blocks) > MAX_CONTENT_BLOCKS:
        parts.append(f"({len(blocks) - MAX_CONTENT_BLOCKS} more content blocks left out)")
    if not blocks and structured is not None:
        parts.append(json.dumps(structured, ensure_ascii=False, indent=2))
    return "\n".join(p for p in parts if p)


def _block_text(block: Any) -> str:
    match block:
        case mcp_types.TextContent(text=text):
            return text
        case mcp_types.ImageContent(data=data, mime_type=mime):
            return f"[image {clean_text(mime, 60)}, {_decoded_size(data)} bytes]"
        case mcp_types.AudioContent(data=data, mime_type=mime):
            return f"[audio {clean_text(mime, 60)}, {_decoded_size(data)} bytes]"
        case mcp_types.EmbeddedResource(resource=resource):
            uri = clean_text(str(resource.uri), 200)
            mime = clean_text(resource.mime_type or "", 60)
            if isinstance(resource, mcp_types.TextResourceContents):
                head = f"[resource {uri}{' ' + mime if mime else ''}, {len(resource.text)} chars]"
                return f"{head}\n{resource.text}"
            return (
                f"[resource {uri}{' ' + mime if mime else ''}, "
                f"{_decoded_size(resource.blob)} bytes of binary data]"
            )
        case mcp_types.ResourceLink(uri=uri, name=name):
            return f"[resource link {clean_text(str(uri), 200)} ({clean_text(name, 80)})]"
        case _:
            kind = getattr(block, "type", type(block).__name__)
            return f"[{clean_text(str(kind), 40)} content]"


def _decoded_size(data: str) -> int:
    """The size of base64 ``data`` once decoded, without decoding it."""
    stripped = data.rstrip("=")
    return len(stripped) * 3 // 4

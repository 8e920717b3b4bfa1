"""What a model script is made of, and what both of the scripted server's renderings share.

A policy (:data:`Policy`) reads a :class:`ScriptedRequest` and answers a :class:`Reply` (text
and/or :class:`ScriptedCall` tool calls, usage) or a :class:`Fault` (an HTTP error, a delay, a
malformed body, a stream cut half-way or repeating itself). Tests and the dev mode's demo model
import these to write policies.

The rest is what the OpenAI rendering (``bot.emulator.model_server``) and the Anthropic one
(``bot.emulator.anthropic``) both use: :func:`split` (a text in stream pieces), :func:`usage`
(the token counts a reply reports), :func:`fault_response` (an error body in either provider's
shape), :func:`stream` (server-sent events, ended or broken off), :func:`fault_chunks` and
:func:`cut` (a broken stream), and :class:`ServerState`, what a rendering needs of the server.
Both import this module; it imports neither, so the two renderings do not import each other.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiohttp import web

DEFAULT_CHUNKS = 4
MAX_REPEAT_CHUNKS = 1_000_000


@dataclass(frozen=True, slots=True)
class ScriptedCall:
    name: str
    arguments: dict[str, Any] | str = field(default_factory=dict)
    id: str | None = None

    @property
    def arguments_json(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments)


@dataclass(frozen=True, slots=True, kw_only=True)
class Reply:
    content: str | None = None
    tool_calls: Sequence[ScriptedCall] = ()
    prompt_tokens: int | None = None  # None: about chars/4 of the request
    completion_tokens: int | None = None
    cached_tokens: int = 0
    finish_reason: str | None = None
    delay_s: float = 0.0  # wait before answering


@dataclass(frozen=True, slots=True, kw_only=True)
class Fault:
    status: int = 500
    message: str = "scripted failure"
    code: str | None = None
    kind: str | None = None  # the error's ``type`` (OpenAI: default ``server_error``)
    param: str | None = None  # OpenAI: the request field the error is about
    retry_after: str | None = None
    delay_s: float = 0.0
    malformed: bool = False  # 200 with a body that is not JSON
    raw: bytes | None = None  # 200 with exactly these bytes as its JSON body
    cut_after: int | None = None  # stream: send this many chunks, then drop the connection
    repeat: str | None = None  # stream: send this text over and over (until cut_after chunks)


@dataclass(frozen=True, slots=True)
class ScriptedRequest:
    provider: str  # "openai" or "anthropic"
    path: str
    body: dict[str, Any]
    headers: dict[str, str]

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body.get("messages") or [])

    @property
    def tools(self) -> list[dict[str, Any]]:
        return list(self.body.get("tools") or [])

    @property
    def model(self) -> str:
        return str(self.body.get("model", ""))

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream"))

    def tool_results(self) -> int:
        """How many tool results the conversation holds (either provider's format)."""
        count = 0
        for m in self.messages:
            if m.get("role") == "tool":
                count += 1
            elif isinstance(m.get("content"), list):
                count += sum(1 for b in m["content"] if b.get("type") == "tool_result")
        return count


Answer = Reply | Fault
Policy = Callable[[ScriptedRequest], Answer | Awaitable[Answer]]


class ServerState(Protocol):
    """What a provider's rendering needs of the server answering: its stream piece count,
    its id counter and its count of streams the client left."""

    chunks: int
    disconnects: int

    def next_id(self, prefix: str) -> str: ...


def split(text: str, parts: int) -> list[str]:
    """``text`` in ``parts`` nearly equal, non-empty pieces (fewer if it is short)."""
    if not text:
        return []
    size = max(1, -(-len(text) // max(parts, 1)))
    return [text[i : i + size] for i in range(0, len(text), size)]


def usage(scripted: ScriptedRequest, reply: Reply) -> tuple[int, int, int]:
    """(prompt, completion, cached) tokens: the reply's own, else about chars/4."""
    prompt = reply.prompt_tokens
    if prompt is None:
        prompt = len(json.dumps(scripted.body)) // 4
    completion = reply.completion_tokens
    if completion is None:
        completion = (
            len(reply.content or "") + sum(len(c.arguments_json) for c in reply.tool_calls)
        ) // 4 + 1
    return prompt, completion, reply.cached_tokens


def fault_chunks(fault: Fault, make: Callable[[str], dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """A faulty stream's chunks, made lazily. Without ``cut_after`` a repeating
    stream goes on until the client leaves (back-pressure paces it), bounded by
    ``MAX_REPEAT_CHUNKS``."""
    limit = fault.cut_after if fault.cut_after is not None else MAX_REPEAT_CHUNKS
    text = fault.repeat or "partial answer "
    return (make(text) for _ in range(limit))


async def cut(request: web.Request, response: web.StreamResponse) -> web.StreamResponse:
    """Drop the connection without finishing the stream."""
    transport = request.transport
    if transport is not None:
        transport.close()
    return response


async def stream(
    server: ServerState,
    request: web.Request,
    frames: Iterable[bytes],
    *,
    broken: bool,
    end: bytes = b"",
) -> web.StreamResponse:
    """``frames`` as a server-sent event stream, then ``end``; a ``broken`` one (a fault's)
    is dropped instead of ended. A client that goes away counts in ``server.disconnects``."""
    response = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await response.prepare(request)
    try:
        for frame in frames:
            await response.write(frame)
        if broken:
            return await cut(request, response)
        if end:
            await response.write(end)
        await response.write_eof()
    except ConnectionError:
        server.disconnects += 1  # the client went away: expected, not worth a log line
    except asyncio.CancelledError:
        server.disconnects += 1
        raise
    return response


def fault_response(fault: Fault, *, anthropic: bool) -> web.Response:
    """The HTTP answer of a fault that is not a broken stream, in the provider's shape."""
    if fault.raw is not None:
        return web.Response(status=200, body=fault.raw, content_type="application/json")
    if fault.malformed:
        return web.Response(status=200, text="{not json", content_type="application/json")
    headers = {"retry-after": fault.retry_after} if fault.retry_after else {}
    if anthropic:
        kind = fault.code or ("overloaded_error" if fault.status == 529 else "api_error")
        body: dict[str, Any] = {"type": "error", "error": {"type": kind, "message": fault.message}}
    else:
        error = {"message": fault.message, "type": fault.kind or "server_error"}
        if fault.param is not None:
            error["param"] = fault.param
        body = {"error": {**error, "code": fault.code}}
    return web.json_response(body, status=fault.status, headers=headers)

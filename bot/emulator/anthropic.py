"""Anthropic Messages rendering for the scripted model server (``POST /v1/messages``).

``respond`` turns the server's neutral answer into what the Messages API sends: a
``message`` body, the same message as SSE events in the documented order
(``message_start``, ``ping``, per block ``content_block_start`` / ``_delta`` / ``_stop``,
``message_delta``, ``message_stop``), an error body, or a stream dropped half-way.
Deciding the answer and recording the request stay in ``bot.emulator.model_server``, which
calls :func:`respond`; what both renderings share is in ``bot.emulator.scripted``, so this
module never imports the server.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from aiohttp import web

from bot.emulator.scripted import (
    Answer,
    Fault,
    Reply,
    ScriptedCall,
    ScriptedRequest,
    ServerState,
    cut,
    fault_chunks,
    fault_response,
    split,
    stream,
    usage,
)

Event = tuple[str, dict[str, Any]]

# A script may name the finish in OpenAI's words; Anthropic has its own.
_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


async def respond(
    server: ServerState, request: web.Request, scripted: ScriptedRequest, answer: Answer
) -> web.StreamResponse:
    """The HTTP answer to one ``/v1/messages`` request."""
    if isinstance(answer, Fault) and answer.cut_after is None and not answer.repeat:
        return fault_response(answer, anthropic=True)
    if not scripted.stream:
        if isinstance(answer, Fault):  # a cut without a stream: no answer at all
            return await cut(request, web.Response())
        return web.json_response(message_body(server, scripted, answer))
    events: Iterable[Event]
    if isinstance(answer, Fault):
        events = fault_events(server, scripted, answer)
    else:
        events = stream_events(server, scripted, answer)
    frames = (sse(name, data) for name, data in events)
    return await stream(server, request, frames, broken=isinstance(answer, Fault))


def sse(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


def usage_fields(scripted: ScriptedRequest, reply: Reply) -> dict[str, int]:
    """The reply's (prompt, completion, cached) in Anthropic's terms: the cached part of
    the prompt is reported apart from ``input_tokens``."""
    prompt, completion, cached = usage(scripted, reply)
    return {
        "input_tokens": max(prompt - cached, 0),
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached,
        "output_tokens": completion,
    }


def stop_reason(reply: Reply) -> str:
    if reply.finish_reason:
        return _STOP_REASONS.get(reply.finish_reason, reply.finish_reason)
    return "tool_use" if reply.tool_calls else "end_turn"


def tool_input(call: ScriptedCall) -> Any:
    """``input`` is an object; scripted arguments that are not one are passed as they are
    (what a misbehaving server would do), for the client to report."""
    if not isinstance(call.arguments, str):
        return call.arguments
    try:
        return json.loads(call.arguments)
    except ValueError:
        return call.arguments


def message_body(server: ServerState, scripted: ScriptedRequest, reply: Reply) -> dict[str, Any]:
    """The non-streaming response."""
    content: list[dict[str, Any]] = []
    if reply.content:
        content.append({"type": "text", "text": reply.content})
    for call in reply.tool_calls:
        content.append(
            {
                "type": "tool_use",
                "id": call.id or server.next_id("toolu_"),
                "name": call.name,
                "input": tool_input(call),
            }
        )
    return {
        "id": server.next_id("msg_"),
        "type": "message",
        "role": "assistant",
        "model": scripted.model,
        "content": content,
        "stop_reason": stop_reason(reply),
        "stop_sequence": None,
        "usage": usage_fields(scripted, reply),
    }


def _message_start(server: ServerState, scripted: ScriptedRequest, usage: dict[str, int]) -> Event:
    message: dict[str, Any] = {
        "id": server.next_id("msg_"),
        "type": "message",
        "role": "assistant",
        "model": scripted.model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage,
    }
    return "message_start", {"type": "message_start", "message": message}


def stream_events(server: ServerState, scripted: ScriptedRequest, reply: Reply) -> list[Event]:
    """The streamed response: text and each tool input split into ``server.chunks`` pieces."""
    usage = usage_fields(scripted, reply)
    # message_start reports the output counted so far; message_delta the (cumulative) total.
    start_usage = {**usage, "output_tokens": min(1, usage["output_tokens"])}
    out: list[Event] = [_message_start(server, scripted, start_usage), ("ping", {"type": "ping"})]
    blocks: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
    if reply.content:
        pieces = split(reply.content, server.chunks)
        blocks.append(
            ({"type": "text", "text": ""}, [{"type": "text_delta", "text": p} for p in pieces])
        )
    for call in reply.tool_calls:
        start: dict[str, Any] = {
            "type": "tool_use",
            "id": call.id or server.next_id("toolu_"),
            "name": call.name,
            "input": {},
        }
        # The documented stream opens each tool input with an empty piece.
        pieces = ["", *split(call.arguments_json, server.chunks)]
        blocks.append((start, [{"type": "input_json_delta", "partial_json": p} for p in pieces]))
    for index, (start, deltas) in enumerate(blocks):
        out.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": start},
            )
        )
        out.extend(
            ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d})
            for d in deltas
        )
        out.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    message_delta = {
        "type": "message_delta",
        "delta": {"stop_reason": stop_reason(reply), "stop_sequence": None},
        "usage": {"output_tokens": usage["output_tokens"]},
    }
    out.append(("message_delta", message_delta))
    out.append(("message_stop", {"type": "message_stop"}))
    return out


def fault_events(server: ServerState, scripted: ScriptedRequest, fault: Fault) -> Iterator[Event]:
    """A stream that starts well and then breaks off (the connection is dropped after).

    Lazy, so that the text deltas are produced only as fast as they are written."""
    usage = {
        "input_tokens": len(json.dumps(scripted.body)) // 4,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": 0,
    }
    yield _message_start(server, scripted, usage)
    text_block = {"type": "text", "text": ""}
    yield (
        "content_block_start",
        {"type": "content_block_start", "index": 0, "content_block": text_block},
    )
    for data in fault_chunks(fault, _delta_data):
        yield "content_block_delta", data


def _delta_data(text: str) -> dict[str, Any]:
    delta = {"type": "text_delta", "text": text}
    return {"type": "content_block_delta", "index": 0, "delta": delta}

"""Anthropic Messages API (``POST {base_url}/v1/messages``).

The request's stable prefix (tools, then the system prompt) carries ``cache_control``
breakpoints so that every request of a turn reads it from the prompt cache. History
becomes strictly alternating user/assistant turns: consecutive tool results and a user
text that follows them merge into one user turn, tool results first. Each message's
JSON is computed once and reused (``wire.py``); merging only joins those fragments.

A stored call a provider would refuse (history written before the core made calls
well-formed) is sent valid: arguments that are not an object under ``_raw``, a name
outside ``^[a-zA-Z0-9_-]{1,64}$`` as ``INVALID_TOOL_NAME``, an id with other characters
through ``tool_id``. Strings taken from an answer have their lone surrogates replaced
(``surrogates.py``), so they can be sent again.

Responses come as one JSON body or as SSE events (``message_start`` …
``message_stop``); text and ``tool_use`` blocks map to the neutral ``ModelResponse``.
Errors are translated by ``bot.llm.errors`` and transient ones retried by
``with_retries``, as in ``openai.py``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from bot.agent.messages import (
    AnyMessage,
    AssistantMessage,
    ModelRequest,
    ModelResponse,
    ToolCall,
    ToolMessage,
    ToolSpec,
    Usage,
    UserMessage,
    parse_arguments,
    sendable_tool_name,
)
from bot.errors import ModelError, ModelUnavailableError
from bot.llm.attempts import HttpModelClient, Sink
from bot.llm.errors import error_from_response, malformed
from bot.llm.surrogates import clean, encode, received_call
from bot.llm.wire import FragmentCache, dumps

ANTHROPIC_VERSION = "2023-06-01"
MAX_TEMPERATURE = 1.0  # Anthropic's range is 0-1; a setting shared with OpenAI may be higher
EPHEMERAL: dict[str, str] = {"type": "ephemeral"}

ERROR_STATUS: dict[str, int] = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}
"""The HTTP status each documented error type comes with, for errors that arrive inside a
stream (already under a 200) or a 200 body; an unknown type counts as a server error."""

_UNSAFE_ID = re.compile(r"[^A-Za-z0-9_-]")


# -- request rendering ---------------------------------------------------------------


def tool_id(raw: str) -> str:
    """A tool-call id in the form Anthropic accepts (``[A-Za-z0-9_-]+``).

    Ids written by another provider (a fallback switch mid-job) are mapped the same way
    on the ``tool_use`` and its ``tool_result``, so the pair still matches.
    """
    return _UNSAFE_ID.sub("_", raw) or "toolu_0"


def tool_input(arguments: str) -> dict[str, Any]:
    """A call's JSON arguments as the object ``tool_use.input`` must be.

    Text that is not a JSON object is kept under ``_raw`` rather than dropped, so the
    model still sees what it wrote.
    """
    value = parse_arguments(arguments)
    return value if isinstance(value, dict) else {"_raw": arguments}


def render_message(message: AnyMessage) -> str | list[dict[str, Any]]:
    """A user message's text, or the content blocks of any other message."""
    match message:
        case UserMessage(content=content):
            return content
        case ToolMessage(tool_call_id=call_id, content=content, is_error=is_error):
            block: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_id(call_id)}
            if content:
                block["content"] = content
            if is_error:
                block["is_error"] = True
            return [block]
        case AssistantMessage(content=content, tool_calls=calls):
            blocks: list[dict[str, Any]] = []
            if content and not content.isspace():  # empty text blocks are rejected
                blocks.append({"type": "text", "text": content})
            blocks.extend(
                {
                    "type": "tool_use",
                    "id": tool_id(c.id),
                    "name": sendable_tool_name(c.name),
                    "input": tool_input(c.arguments),
                }
                for c in calls
            )
            return blocks


def render_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """Tools in their stable order; the last one closes the cached prefix."""
    out: list[dict[str, Any]] = [
        {"name": t.name, "description": t.description, "input_schema": t.parameters} for t in tools
    ]
    if out:
        out[-1]["cache_control"] = EPHEMERAL
    return out


def render_system(system: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": system, "cache_control": EPHEMERAL}]


_MESSAGES = FragmentCache(render_message)


@dataclass(slots=True)
class _Turn:
    """One role's consecutive messages, as cached JSON fragments."""

    role: str
    results: list[str] = field(default_factory=list)  # tool_result blocks: they go first
    texts: list[str] = field(default_factory=list)  # user texts, as JSON strings
    blocks: list[str] = field(default_factory=list)  # assistant blocks

    def json(self) -> str:
        if not self.results and not self.blocks and len(self.texts) == 1:
            return '{"role":"user","content":' + self.texts[0] + "}"
        parts = self.results + ['{"type":"text","text":' + t + "}" for t in self.texts]
        parts += self.blocks
        return '{"role":"' + self.role + '","content":[' + ",".join(parts) + "]}"


def messages_json(messages: Sequence[AnyMessage]) -> str:
    """The ``messages`` array: roles alternate, same-role neighbours merge into one turn.

    A message with nothing to send (blank text, no calls) is left out, since Anthropic
    rejects empty content; its neighbours then merge.
    """
    get = _MESSAGES.get
    turns: list[_Turn] = []
    for message in messages:
        if isinstance(message, UserMessage) and (not message.content or message.content.isspace()):
            continue
        fragment = get(message)
        if fragment == "[]":
            continue
        role = "assistant" if isinstance(message, AssistantMessage) else "user"
        if not turns or turns[-1].role != role:
            turns.append(_Turn(role))
        turn = turns[-1]
        if isinstance(message, UserMessage):
            turn.texts.append(fragment)
        elif isinstance(message, ToolMessage):
            turn.results.append(fragment[1:-1])
        else:
            turn.blocks.append(fragment[1:-1])
    return "[" + ",".join(t.json() for t in turns) + "]"


# -- the client ----------------------------------------------------------------------


@dataclass(slots=True)
class _Block:
    kind: str
    id: str = ""
    name: str = ""
    input: Any = None  # the input given at block start (empty for streamed tool_use)
    json: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _Stream:
    """What the events of one stream have said so far, and who listens to its text."""

    sink: Sink
    text: list[str] = field(default_factory=list)
    blocks: dict[int, _Block] = field(default_factory=dict)
    usage: dict[str, Any] = field(default_factory=dict)
    stop_reason: str | None = None
    model: str | None = None
    done: bool = False


def api_url(base_url: str, path: str) -> str:
    """``{base}/v1/{path}``; a base that already ends in ``/v1`` is not doubled."""
    base = base_url.rstrip("/")
    return f"{base}/{path}" if base.endswith("/v1") else f"{base}/v1/{path}"


def auth_headers(api_key: str | None) -> dict[str, str]:
    """The API version and key headers every Messages API request carries."""
    headers = {"anthropic-version": ANTHROPIC_VERSION}
    if api_key:
        headers["x-api-key"] = api_key
    return headers


class AnthropicClient(HttpModelClient):
    """One model on the Anthropic Messages API (the core's ``Client``)."""

    max_temperature = MAX_TEMPERATURE

    def endpoint(self, base_url: str) -> str:
        return api_url(base_url, "messages")

    def key_headers(self, api_key: str | None) -> dict[str, str]:
        return auth_headers(api_key)

    def render_tools(self, tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
        return render_tools(tools)

    def render_system(self, system: str) -> list[dict[str, Any]]:
        return render_system(system)

    # -- request body -----------------------------------------------------------

    def body(self, request: ModelRequest) -> bytes:
        """The JSON body, assembled from cached fragments (prefix order: tools, system)."""
        head: dict[str, Any] = {"model": self._model, "max_tokens": request.max_output_tokens}
        if self._temperature is not None:
            head["temperature"] = self._temperature
        if request.stream:
            head["stream"] = True
        text = dumps(head)[:-1]
        if request.tools:
            text += ',"tools":' + self._tools_json.get(request.tools)
            text += ',"tool_choice":{"type":"auto"}'
        if request.system:
            text += ',"system":' + self._system_json.get(request.system)
        text += ',"messages":' + messages_json(request.messages)
        return encode(text + "}")

    # -- the call ---------------------------------------------------------------

    def _error(self, data: dict[str, Any], raw: str) -> ModelError:
        """An error object that came under a 200 (in a stream, or as the body)."""
        error = data.get("error")
        kind = error.get("type") if isinstance(error, dict) else None
        status = ERROR_STATUS.get(str(kind), 500)
        return error_from_response(status, raw, {}, model=self._name)

    def _parse(self, data: dict[str, Any]) -> ModelResponse:
        if data.get("type") == "error":
            raise self._error(data, clean(dumps(data)))
        content = data.get("content")
        if not isinstance(content, list):
            raise malformed(self._name, "no content blocks")
        text: list[str] = []
        calls: list[ToolCall] = []
        for block in content:
            kind = block.get("type")
            if kind == "text":
                text.append(str(block.get("text") or ""))
            elif kind == "tool_use":
                calls.append(
                    received_call(
                        str(block.get("id") or ""),
                        str(block.get("name") or ""),
                        dumps(block.get("input") or {}),
                    )
                )
            # thinking, server tool blocks, ...: nothing the core uses
        return self._response(
            "".join(text) or None,
            calls,
            usage=_usage(data.get("usage")),
            finish_reason=data.get("stop_reason"),
            model=data.get("model"),
        )

    async def _stream(self, body: bytes, sink: Sink) -> ModelResponse:
        state = _Stream(sink=sink)
        async with self._post(body) as response:
            data: list[str] = []
            try:
                # Read to the end even after message_stop (as the SDK does): the
                # connection then goes back to the pool instead of being closed.
                async for line in response.aiter_lines():
                    if line.startswith("data:"):
                        data.append(line[5:].removeprefix(" "))
                    elif not line and data:  # a blank line ends an event
                        self._event("\n".join(data), state)
                        data.clear()
                    # "event:" lines repeat the data's "type"; comments and ids do not matter
            except httpx.TransportError:
                if not state.done:
                    raise
                # The answer was complete; only the connection's goodbye went wrong.
            if data:
                self._event("\n".join(data), state)
        if not state.done:
            raise ModelUnavailableError(f"{self._name}: stream ended early", model=self._name)
        calls = []
        for _, block in sorted(state.blocks.items()):
            if block.kind != "tool_use":
                continue
            arguments = "".join(block.json) or (dumps(block.input) if block.input else "{}")
            calls.append(received_call(block.id, block.name, arguments))
        return self._response(
            "".join(state.text) or None,
            calls,
            usage=_usage(state.usage),
            finish_reason=state.stop_reason,
            model=state.model,
        )

    def _event(self, payload: str, state: _Stream) -> None:
        if state.done:
            return
        event = self._json_object(payload, "stream event")

        match event.get("type"):
            case "message_start":
                message = event.get("message") or {}
                state.model = message.get("model")
                state.usage.update(message.get("usage") or {})
            case "content_block_start":
                raw = event.get("content_block") or {}
                block = state.blocks[int(event.get("index", 0))] = _Block(
                    kind=str(raw.get("type") or ""),
                    id=str(raw.get("id") or ""),
                    name=str(raw.get("name") or ""),
                    input=raw.get("input"),
                )
                if block.kind == "text" and raw.get("text"):
                    _emit(state, str(raw["text"]))
            case "content_block_delta":
                delta = event.get("delta") or {}
                match delta.get("type"):
                    case "text_delta":
                        if delta.get("text"):
                            _emit(state, str(delta["text"]))
                    case "input_json_delta":
                        index = int(event.get("index", 0))
                        block = state.blocks.get(index) or _Block(kind="tool_use")
                        state.blocks[index] = block
                        block.json.append(str(delta.get("partial_json") or ""))
                    case _:
                        pass  # thinking, signatures, citations
            case "message_delta":
                stop = (event.get("delta") or {}).get("stop_reason")
                state.stop_reason = stop or state.stop_reason
                # Usage here is cumulative and may restate the input side: latest wins.
                usage = event.get("usage") or {}
                state.usage.update({k: v for k, v in usage.items() if v is not None})
            case "message_stop":
                state.done = True
            case "error":
                raise self._error(event, payload)
            case _:
                pass  # ping, content_block_stop, and event types added later


def _emit(state: _Stream, piece: str) -> None:
    state.text.append(piece)
    state.sink(clean(piece))


def _usage(raw: Any) -> Usage:
    """Anthropic's ``input_tokens`` excludes cache reads and writes; the prompt is all three."""
    if not isinstance(raw, dict):
        return Usage()
    read = int(raw.get("cache_read_input_tokens") or 0)
    written = int(raw.get("cache_creation_input_tokens") or 0)
    return Usage(
        prompt_tokens=int(raw.get("input_tokens") or 0) + read + written,
        completion_tokens=int(raw.get("output_tokens") or 0),
        cached_tokens=read,
    )

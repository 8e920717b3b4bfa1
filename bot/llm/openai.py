"""OpenAI-compatible chat completions (OpenAI, Azure, vLLM, Ollama, LiteLLM, ...).

``POST {base_url}/chat/completions`` with a Bearer key; non-streaming and SSE streaming
(text and tool-call fragments assembled by index, usage requested in the stream). The
request body is built from cached per-message JSON fragments (``wire.py``), so its cost
grows with what is new, not with the conversation. A stored call that a server would
refuse (history written before the core made calls well-formed) is sent with ``{}`` /
``INVALID_TOOL_NAME`` instead, and an id over 40 characters as a digest of itself, so
one bad call cannot fail every later request. Strings taken from an answer have their
lone surrogates replaced (``surrogates.py``), so they can be sent again.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any
from urllib.parse import urlsplit

from bot.agent.messages import (
    MAX_CALL_ID_CHARS,
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
from bot.errors import ModelUnavailableError
from bot.llm.attempts import HttpModelClient, Sink
from bot.llm.errors import error_from_response, malformed
from bot.llm.surrogates import clean, encode, received_call
from bot.llm.wire import FragmentCache, PrefixCache, dumps


def render_function(call: ToolCall) -> dict[str, str]:
    """A call's ``function`` as servers accept it in history: a valid name, and arguments
    that are a JSON object (rendered once per message: the fragments are cached)."""
    arguments = call.arguments
    if not arguments.strip() or not isinstance(parse_arguments(arguments), dict):
        arguments = "{}"
    return {"name": sendable_tool_name(call.name), "arguments": arguments}


_DIGEST_PREFIX = "call_"


def call_id(raw: str) -> str:
    """A call id as OpenAI accepts it (at most ``MAX_CALL_ID_CHARS``). A longer one, kept
    from before the core made ids safe, is sent as a digest of itself, on the call and on
    its result alike, so the pair still matches."""
    if len(raw) <= MAX_CALL_ID_CHARS:
        return raw
    digest = hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()
    return _DIGEST_PREFIX + digest[: MAX_CALL_ID_CHARS - len(_DIGEST_PREFIX)]


def render_message(message: AnyMessage) -> dict[str, Any]:
    match message:
        case UserMessage(content=content):
            return {"role": "user", "content": content}
        case ToolMessage(tool_call_id=tool_call_id, content=content):
            return {"role": "tool", "tool_call_id": call_id(tool_call_id), "content": content}
        case AssistantMessage(content=content, tool_calls=calls):
            out: dict[str, Any] = {"role": "assistant", "content": content}
            if calls:
                out["tool_calls"] = [
                    {"id": call_id(c.id), "type": "function", "function": render_function(c)}
                    for c in calls
                ]
            return out


def render_tools(tools: tuple[ToolSpec, ...]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
        }
        for t in tools
    ]


_MESSAGES = FragmentCache(render_message)
_HISTORY = PrefixCache(_MESSAGES)


def _uses_max_completion_tokens(url: str) -> bool:
    """OpenAI and Azure take ``max_completion_tokens``; most compatible servers ``max_tokens``."""
    host = urlsplit(url).hostname or ""
    return host == "api.openai.com" or host.endswith(".openai.azure.com")


@dataclass(slots=True)
class _Call:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


def auth_headers(api_key: str | None) -> dict[str, str]:
    """The Bearer key header (none for an endpoint without a key)."""
    return {"authorization": f"Bearer {api_key}"} if api_key else {}


class OpenAIClient(HttpModelClient):
    """One model on one OpenAI-compatible endpoint (the core's ``Client``)."""

    def endpoint(self, base_url: str) -> str:
        return base_url.rstrip("/") + "/chat/completions"

    def key_headers(self, api_key: str | None) -> dict[str, str]:
        return auth_headers(api_key)

    def render_tools(self, tools: tuple[ToolSpec, ...]) -> list[dict[str, Any]]:
        return render_tools(tools)

    def render_system(self, system: str) -> dict[str, str]:
        return {"role": "system", "content": system}

    @cached_property
    def _max_key(self) -> str:
        """The body's name for the output bound (the endpoint's host decides)."""
        return "max_completion_tokens" if _uses_max_completion_tokens(self._url) else "max_tokens"

    # -- request body -----------------------------------------------------------

    def body(self, request: ModelRequest) -> bytes:
        """The JSON body, assembled from cached fragments."""
        messages = _HISTORY.join(request.messages)
        if request.system:
            messages = self._system_json.get(request.system) + ("," + messages if messages else "")
        head: dict[str, Any] = {"model": self._model, self._max_key: request.max_output_tokens}
        if self._temperature is not None:
            head["temperature"] = self._temperature
        if request.stream:
            head["stream"] = True
            head["stream_options"] = {"include_usage": True}
        text = dumps(head)[:-1] + ',"messages":[' + messages + "]"
        if request.tools:
            text += (
                ',"tools":'
                + self._tools_json.get(request.tools)
                + ',"tool_choice":"auto","parallel_tool_calls":true'
            )
        return encode(text + "}")

    # -- the call ---------------------------------------------------------------

    def _parse(self, data: dict[str, Any]) -> ModelResponse:
        if "error" in data and not data.get("choices"):
            raise error_from_response(500, clean(dumps(data)), {}, model=self._name)
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise malformed(self._name, "no choices")
        message = choices[0].get("message") or {}
        calls = []
        for raw in message.get("tool_calls") or ():
            fn = raw.get("function") or {}
            args = fn.get("arguments")
            if not isinstance(args, str):  # some servers send an object
                args = dumps(args) if args is not None else "{}"
            calls.append(received_call(str(raw.get("id") or ""), str(fn.get("name") or ""), args))
        content = message.get("content")
        return self._response(
            content if isinstance(content, str) else None,
            calls,
            usage=_usage(data.get("usage")),
            finish_reason=choices[0].get("finish_reason"),
            model=data.get("model"),
        )

    async def _stream(self, body: bytes, sink: Sink) -> ModelResponse:
        text: list[str] = []
        calls: dict[int, _Call] = {}
        finish: str | None = None
        usage: Usage | None = None
        model: str | None = None
        done = False
        async with self._post(body) as response:
            if "json" in response.headers.get("content-type", ""):
                # A server that ignores ``stream`` answers with a whole completion.
                whole = self._parse_body(await response.aread())
                if whole.content:
                    sink(whole.content)
                return whole
            event_stream = "event-stream" in response.headers.get("content-type", "")
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                event_stream = True
                payload = line[5:].strip()
                if payload == "[DONE]":
                    # Read on to the end of the body so the connection can be reused.
                    done = True
                    continue
                chunk = self._json_object(payload, "stream chunk")
                if "error" in chunk:
                    raise error_from_response(500, payload, {}, model=self._name)
                model = model or chunk.get("model")
                if chunk.get("usage"):
                    usage = _usage(chunk["usage"])
                for choice in chunk.get("choices") or ():
                    delta = choice.get("delta") or {}
                    piece = delta.get("content")
                    if piece:
                        text.append(piece)
                        sink(clean(piece))
                    for frag in delta.get("tool_calls") or ():
                        entry = calls.get(frag.get("index", 0))
                        if entry is None:
                            entry = calls[frag.get("index", 0)] = _Call()
                        if frag.get("id"):
                            entry.id = frag["id"]
                        fn = frag.get("function") or {}
                        if fn.get("name"):
                            entry.name += fn["name"]
                        if fn.get("arguments"):
                            entry.arguments.append(fn["arguments"])
                    if choice.get("finish_reason"):
                        finish = choice["finish_reason"]
        if not event_stream:  # e.g. a proxy's HTML page under a 200
            raise malformed(self._name, "the answer is not an event stream")
        if not done and finish is None:
            raise ModelUnavailableError(f"{self._name}: stream ended early", model=self._name)
        return self._response(
            "".join(text) or None,
            (
                received_call(c.id, c.name, "".join(c.arguments) or "{}")
                for _, c in sorted(calls.items())
            ),
            usage=usage or Usage(),
            finish_reason=finish,
            model=model,
        )


def _usage(raw: Any) -> Usage:
    if not isinstance(raw, dict):
        return Usage()
    details = raw.get("prompt_tokens_details") or {}
    cached = details.get("cached_tokens") if isinstance(details, dict) else 0
    return Usage(
        prompt_tokens=int(raw.get("prompt_tokens") or 0),
        completion_tokens=int(raw.get("completion_tokens") or 0),
        cached_tokens=int(cached or 0),
    )

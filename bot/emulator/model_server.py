"""The scripted model server: OpenAI chat completions (and Anthropic Messages, rendered by
``bot.emulator.anthropic``) on loopback.

A policy function decides every answer from the request: a ``Reply`` (text and/or tool
calls, usage), or a ``Fault`` (an HTTP error with ``Retry-After``, a delay, a malformed
body, a body of exact bytes, a stream cut half-way, a stream repeating itself); those, and
what both renderings share, are in ``bot.emulator.scripted``. Every request is recorded.
Strings are sent as ``json.dumps`` writes them, so a lone surrogate in a ``Reply`` goes
out escaped (``"\ud800"``), as a broken server would send it.
Tests drive the real adapters over real HTTP with it; the local dev mode uses it as its
offline demo model.

``GET /v1/models`` (and ``/models``) lists ``models`` in the asking provider's shape,
without asking the policy: it is what ``opsloop check`` probes. With ``api_key`` set,
every request must carry it (``Authorization: Bearer`` or ``x-api-key``) or is answered
401 as the provider would; without it, any key or none is accepted.

With ``strict=True`` the server refuses, before asking the policy, a history that vLLM
or OpenAI's own validation refuses: a call whose arguments are not a JSON object
string, a tool name outside ``^[a-zA-Z0-9_-]{1,64}$``, a call id over 40 characters
(OpenAI; Anthropic: one outside ``^[a-zA-Z0-9_-]+$``), a tool result answering no
earlier call. The answer is the provider's 400 (``invalid_request_error``), which the
adapters treat as terminal; every such refusal is kept in ``refusals``.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

from aiohttp import web

from bot.emulator.anthropic import respond as respond_anthropic
from bot.emulator.app_server import AppServer, StartStop
from bot.emulator.scripted import (
    DEFAULT_CHUNKS,
    Answer,
    Fault,
    Policy,
    Reply,
    ScriptedRequest,
    fault_chunks,
    fault_response,
    split,
    stream,
    usage,
)

# What OpenAI and Anthropic accept as a function / tool name. Spelled out here, not
# imported from the code under test: the strict server is the referee.
PROVIDER_TOOL_NAME = "^[a-zA-Z0-9_-]{1,64}$"
_PROVIDER_TOOL_NAME = re.compile(PROVIDER_TOOL_NAME)
OPENAI_MAX_CALL_ID = 40
ANTHROPIC_CALL_ID = "^[a-zA-Z0-9_-]+$"
_ANTHROPIC_CALL_ID = re.compile(ANTHROPIC_CALL_ID)


class ScriptedServer(StartStop):
    """``async with ScriptedServer(policy) as server: server.base_url …``"""

    def __init__(
        self,
        policy: Policy,
        *,
        chunks: int = DEFAULT_CHUNKS,
        models: Sequence[str] = (),
        api_key: str | None = None,
        strict: bool = False,
    ) -> None:
        self.policy = policy
        self.chunks = chunks
        self.models = list(models)  # what ``GET /v1/models`` lists
        self.api_key = api_key  # None: any key (or none) is accepted
        self.strict = strict  # refuse an invalid history with a 400, as vLLM does
        self.requests: list[ScriptedRequest] = []
        self.refusals: list[str] = []  # the messages of the strict mode's 400s
        self.disconnects = 0  # streams whose client went away before the end
        self._ids = itertools.count(1)
        self._server = AppServer()
        self.port = 0

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI-style base URL (``…/v1``)."""
        return f"{self.root_url}/v1"

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> ScriptedServer:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._openai)
        app.router.add_post("/chat/completions", self._openai)
        app.router.add_post("/v1/messages", self._anthropic)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/models", self._models)
        self.port = await self._server.start(app, host=host, port=port)
        return self

    async def stop(self) -> None:
        await self._server.stop()

    def next_id(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids)}"

    def refused(self, scripted: ScriptedRequest) -> Fault | None:
        """The 401 a wrong or missing key gets when ``api_key`` is set."""
        if self.api_key is None:
            return None
        headers = scripted.headers
        if headers.get("authorization") == f"Bearer {self.api_key}":
            return None
        if headers.get("x-api-key") == self.api_key:
            return None
        if scripted.provider == "anthropic":
            return Fault(status=401, message="invalid x-api-key", code="authentication_error")
        return Fault(status=401, message="Incorrect API key provided", code="invalid_api_key")

    async def decide(self, request: web.Request, provider: str) -> tuple[ScriptedRequest, Answer]:
        try:
            body = await request.json()
        except ValueError:
            body = {}
        scripted = ScriptedRequest(
            provider=provider,
            path=request.path,
            body=body if isinstance(body, dict) else {},
            headers={k.lower(): v for k, v in request.headers.items()},
        )
        self.requests.append(scripted)
        refused = self.refused(scripted)
        if refused is None and self.strict:
            refused = invalid_history(scripted)
            if refused is not None:
                self.refusals.append(refused.message)
        if refused is not None:
            return scripted, refused
        answer = self.policy(scripted)
        if inspect.isawaitable(answer):
            answer = await answer
        if answer.delay_s:
            await asyncio.sleep(answer.delay_s)
        return scripted, answer

    # -- OpenAI -----------------------------------------------------------------

    async def _openai(self, request: web.Request) -> web.StreamResponse:
        scripted, answer = await self.decide(request, "openai")
        if isinstance(answer, Fault) and not (answer.cut_after is not None or answer.repeat):
            return fault_response(answer, anthropic=False)
        if not scripted.stream:
            assert isinstance(answer, Reply)
            return web.json_response(self.openai_body(scripted, answer))
        return await self._openai_stream(request, scripted, answer)

    def openai_body(self, scripted: ScriptedRequest, reply: Reply) -> dict[str, Any]:
        prompt, completion, cached = usage(scripted, reply)
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": c.id or self.next_id("call_"),
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments_json},
                }
                for c in reply.tool_calls
            ]
        finish = reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")
        return {
            "id": self.next_id("chatcmpl-"),
            "object": "chat.completion",
            "model": scripted.model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
                "prompt_tokens_details": {"cached_tokens": cached},
            },
        }

    def openai_chunks(self, scripted: ScriptedRequest, reply: Reply) -> list[dict[str, Any]]:
        base = {"id": self.next_id("chatcmpl-"), "object": "chat.completion.chunk"}
        base["model"] = scripted.model

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            return {**base, "choices": [choice]}

        out = [chunk({"role": "assistant", "content": ""})]
        for piece in split(reply.content or "", self.chunks):
            out.append(chunk({"content": piece}))
        for index, c in enumerate(reply.tool_calls):
            first = {"index": index, "id": c.id or self.next_id("call_"), "type": "function"}
            first["function"] = {"name": c.name, "arguments": ""}
            out.append(chunk({"tool_calls": [first]}))
            for piece in split(c.arguments_json, self.chunks):
                frag = {"index": index, "function": {"arguments": piece}}
                out.append(chunk({"tool_calls": [frag]}))
        finish = reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")
        out.append(chunk({}, finish))
        prompt, completion, cached = usage(scripted, reply)
        counts = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached},
        }
        out.append({**base, "choices": [], "usage": counts})
        return out

    async def _openai_stream(
        self, request: web.Request, scripted: ScriptedRequest, answer: Answer
    ) -> web.StreamResponse:
        chunks: Iterable[dict[str, Any]]
        if isinstance(answer, Fault):
            chunks = fault_chunks(
                answer,
                lambda text: {"choices": [{"index": 0, "delta": {"content": text}}]},
            )
        else:
            chunks = self.openai_chunks(scripted, answer)
        frames = (b"data: " + json.dumps(data).encode() + b"\n\n" for data in chunks)
        broken = isinstance(answer, Fault)
        return await stream(self, request, frames, broken=broken, end=b"data: [DONE]\n\n")

    # -- the model list ---------------------------------------------------------

    async def _models(self, request: web.Request) -> web.Response:
        headers = {k.lower(): v for k, v in request.headers.items()}
        anthropic = "anthropic-version" in headers
        scripted = ScriptedRequest(
            provider="anthropic" if anthropic else "openai",
            path=request.path,
            body={},
            headers=headers,
        )
        self.requests.append(scripted)
        refused = self.refused(scripted)
        if refused is not None:
            return fault_response(refused, anthropic=anthropic)
        if anthropic:
            listed = [{"type": "model", "id": m, "display_name": m} for m in self.models]
            return web.json_response({"data": listed, "has_more": False})
        data = [{"id": m, "object": "model", "owned_by": "scripted"} for m in self.models]
        return web.json_response({"object": "list", "data": data})

    # -- Anthropic --------------------------------------------------------------

    async def _anthropic(self, request: web.Request) -> web.StreamResponse:
        scripted, answer = await self.decide(request, "anthropic")
        return await respond_anthropic(self, request, scripted, answer)


# -- strict mode ----------------------------------------------------------------------


def invalid_history(scripted: ScriptedRequest) -> Fault | None:
    """The 400 a strict provider answers ``scripted`` with, or None when it is valid."""
    if scripted.provider == "anthropic":
        problem = _anthropic_problem(scripted.messages)
        if problem is None:
            return None
        return Fault(status=400, message=problem, code="invalid_request_error")
    found = _openai_problem(scripted.messages)
    if found is None:
        return None
    param, message, code = found
    return Fault(status=400, message=message, code=code, kind="invalid_request_error", param=param)


def _is_object_json(text: object) -> bool:
    if not isinstance(text, str):
        return False
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def _too_long(at: str, value: object) -> tuple[str, str, str | None] | None:
    """OpenAI's answer to an id over ``OPENAI_MAX_CALL_ID`` characters at ``at``."""
    if not isinstance(value, str) or len(value) <= OPENAI_MAX_CALL_ID:
        return None
    return (
        at,
        f"Invalid '{at}': string too long. Expected a string with maximum length "
        f"{OPENAI_MAX_CALL_ID}, but got a string with length {len(value)} instead.",
        "string_above_max_length",
    )


def _openai_problem(messages: list[Any]) -> tuple[str, str, str | None] | None:
    """(param, message, code) of the first thing OpenAI/vLLM would refuse."""
    calls: set[str] = set()
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        if message.get("role") == "assistant":
            for j, call in enumerate(message.get("tool_calls") or ()):
                call = call if isinstance(call, dict) else {}
                fn = call.get("function")
                fn = fn if isinstance(fn, dict) else {}
                long_id = _too_long(f"messages.[{i}].tool_calls.[{j}].id", call.get("id"))
                if long_id is not None:
                    return long_id
                at = f"messages.[{i}].tool_calls.[{j}].function"
                name = fn.get("name")
                if not isinstance(name, str) or not _PROVIDER_TOOL_NAME.fullmatch(name):
                    return (
                        f"{at}.name",
                        f"Invalid '{at}.name': string does not match pattern. "
                        f"Expected a string that matches the pattern '{PROVIDER_TOOL_NAME}'.",
                        "invalid_value",
                    )
                if not _is_object_json(fn.get("arguments")):
                    return (
                        f"{at}.arguments",
                        f"Invalid '{at}.arguments': the function arguments must be "
                        "a JSON object, as a string.",
                        "invalid_value",
                    )
                calls.add(str(call.get("id")))
        elif message.get("role") == "tool":
            long_id = _too_long(f"messages.[{i}].tool_call_id", message.get("tool_call_id"))
            if long_id is not None:
                return long_id
            if message.get("tool_call_id") in calls:
                continue
            return (
                f"messages.[{i}].tool_call_id",
                f"Invalid parameter: 'tool_call_id' of messages.[{i}] answers no earlier "
                "message with 'tool_calls': messages with role 'tool' must be a response "
                "to a preceding message with 'tool_calls'.",
                None,
            )
    return None


def _anthropic_problem(messages: list[Any]) -> str | None:
    """The message of the first thing the Messages API would refuse."""
    uses: set[str] = set()
    for i, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        for j, block in enumerate(content if isinstance(content, list) else ()):
            if not isinstance(block, dict):
                continue
            at = f"messages.{i}.content.{j}"
            if block.get("type") == "tool_use":
                name = block.get("name")
                if not isinstance(name, str) or not _PROVIDER_TOOL_NAME.fullmatch(name):
                    return f"{at}.tool_use.name: String should match pattern '{PROVIDER_TOOL_NAME}'"
                if not _anthropic_id(block.get("id")):
                    return f"{at}.tool_use.id: String should match pattern '{ANTHROPIC_CALL_ID}'"
                if not isinstance(block.get("input"), dict):
                    return f"{at}.tool_use.input: Input should be a valid dictionary"
                uses.add(str(block.get("id")))
            elif block.get("type") == "tool_result" and not _anthropic_id(block.get("tool_use_id")):
                return (
                    f"{at}.tool_result.tool_use_id: String should match pattern "
                    f"'{ANTHROPIC_CALL_ID}'"
                )
            elif block.get("type") == "tool_result" and block.get("tool_use_id") not in uses:
                return (
                    f"{at}: unexpected `tool_use_id` found in `tool_result` blocks: "
                    f"{block.get('tool_use_id')}. Each `tool_result` block must have a "
                    "corresponding `tool_use` block in the previous message."
                )
    return None


def _anthropic_id(value: object) -> bool:
    return isinstance(value, str) and _ANTHROPIC_CALL_ID.fullmatch(value) is not None

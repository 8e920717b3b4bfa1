"""One model call as both adapters make it: attempts under an overall timeout, retried
on transient errors, library errors translated once, and the caller's delta sink kept
apart from all of that; and ``HttpModelClient``, what the two adapters share (their
options, headers, the POST and the parsing of a whole JSON answer).

The sink may raise (the repetition detector does, to abort a stream): its exception is
carried past the translation and retries unchanged and re-raised as is. When a stream
that already showed text is retried, the sink first gets ``""`` ("start over").
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any, ClassVar

import httpx

from bot.agent.messages import ModelRequest, ModelResponse, ToolCall, ToolSpec, Usage
from bot.agent.ports import DeltaSink
from bot.errors import ModelError, ModelUnavailableError
from bot.llm.errors import error_from_exception, malformed, read_error
from bot.llm.retry import RetryPolicy, with_retries
from bot.llm.surrogates import clean
from bot.llm.wire import LastJson

DEFAULT_REQUEST_TIMEOUT_S = 300.0
JSON_HEADERS = {"content-type": "application/json", "accept": "application/json"}


class SinkFailed(Exception):
    """Carries what the caller's delta sink raised past the error translation."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


class Sink:
    """Wraps the caller's delta sink: records that text was shown, wraps its errors."""

    __slots__ = ("_on_delta", "shown")

    def __init__(self, on_delta: DeltaSink | None) -> None:
        self._on_delta = on_delta
        self.shown = False

    def __call__(self, piece: str) -> None:
        if self._on_delta is None:
            return
        self.shown = True
        try:
            self._on_delta(piece)
        except Exception as exc:
            raise SinkFailed(exc) from exc

    def restart(self) -> None:
        if self._on_delta is not None and self.shown:
            self._on_delta("")
            self.shown = False


async def complete_with_retries(
    once: Callable[[Sink], Awaitable[ModelResponse]],
    *,
    request: ModelRequest,
    on_delta: DeltaSink | None,
    model: str,
    policy: RetryPolicy,
    timeout_s: float,
) -> ModelResponse:
    """Run ``once(sink)`` (one HTTP attempt) with retries; return or raise a model error
    (or exactly what the sink raised)."""
    sink = Sink(on_delta)

    def restart(_: int, __: ModelUnavailableError, ___: float) -> None:
        sink.restart()

    async def attempt(_: int) -> ModelResponse:
        try:
            async with asyncio.timeout(timeout_s):
                return await once(sink)
        except (ModelError, SinkFailed):
            raise
        except (httpx.HTTPError, TimeoutError) as exc:
            raise error_from_exception(exc, model=model) from exc
        except (ValueError, TypeError, AttributeError, KeyError) as exc:
            # A body of the wrong shape (a list where an object belongs, ...).
            raise malformed(model, f"{type(exc).__name__}: {exc}") from exc

    try:
        return await with_retries(
            attempt, policy=policy, time_left=request.time_left, on_retry=restart
        )
    except SinkFailed as failed:
        aborted = failed.error
    # Raised outside the handler so that nothing is chained onto the sink's exception.
    raise aborted


class HttpModelClient:
    """The shared shape of the adapters: one model on one JSON-over-HTTP endpoint.

    The constructor takes the options both adapters have; a subclass says where a request
    goes (``endpoint``), which headers carry the key (``key_headers``), how its tools and
    system prompt render (``render_tools``, ``render_system``; the JSON is reused while
    they stay the same) and the highest temperature it accepts (``max_temperature``).
    ``complete`` renders the body once and runs one plain or streamed attempt under
    ``complete_with_retries``; subclasses implement ``body``, ``_parse`` (a whole JSON
    answer) and ``_stream``, which opens its request with ``_post``; both end in
    ``_response``."""

    max_temperature: ClassVar[float | None] = None  # the provider's upper bound, if any

    def __init__(
        self,
        *,
        model: str,
        base_url: str,
        http: httpx.AsyncClient,
        api_key: str | None = None,
        temperature: float | None = None,
        retry: RetryPolicy | None = None,
        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        name: str | None = None,
    ) -> None:
        self._model = model
        self._name = name or model
        self._http = http
        self._retry = retry or RetryPolicy()
        self._timeout = request_timeout_s
        self._url = self.endpoint(base_url)
        self._headers = {**JSON_HEADERS, **self.key_headers(api_key)}
        if temperature is not None and self.max_temperature is not None:
            temperature = min(temperature, self.max_temperature)
        self._temperature = temperature
        self._tools_json = LastJson(self.render_tools)
        self._system_json = LastJson(self.render_system)

    def endpoint(self, base_url: str) -> str:
        """The URL every completion request is posted to."""
        raise NotImplementedError

    def key_headers(self, api_key: str | None) -> dict[str, str]:
        raise NotImplementedError

    def render_tools(self, tools: tuple[ToolSpec, ...]) -> Any:
        raise NotImplementedError

    def render_system(self, system: str) -> Any:
        raise NotImplementedError

    @property
    def name(self) -> str:
        return self._name

    def body(self, request: ModelRequest) -> bytes:
        raise NotImplementedError

    @asynccontextmanager
    async def _post(self, body: bytes) -> AsyncIterator[httpx.Response]:
        """The response to ``body``, unread; an error status is raised as a model error."""
        async with self._http.stream(
            "POST", self._url, content=body, headers=self._headers
        ) as response:
            if response.status_code >= 400:
                raise await read_error(response, model=self._name)
            yield response

    async def _plain(self, body: bytes) -> ModelResponse:
        async with self._post(body) as response:
            raw = await response.aread()
        return self._parse_body(raw)

    def _parse_body(self, raw: bytes) -> ModelResponse:
        return self._parse(self._json_object(raw, "body"))

    def _parse(self, data: dict[str, Any]) -> ModelResponse:
        raise NotImplementedError

    def _json_object(self, raw: str | bytes, what: str) -> dict[str, Any]:
        """``raw`` (a body, a stream chunk or event) parsed; anything but a JSON object
        is a malformed answer."""
        try:
            value = json.loads(raw)
        except ValueError:
            raise malformed(self._name, f"{what} is not JSON") from None
        if not isinstance(value, dict):
            raise malformed(self._name, f"{what} is not an object")
        return value

    async def _stream(self, body: bytes, sink: Sink) -> ModelResponse:
        raise NotImplementedError

    def _response(
        self,
        text: str | None,
        calls: Iterable[ToolCall],
        *,
        usage: Usage,
        finish_reason: str | None,
        model: str | None,
    ) -> ModelResponse:
        """The neutral response to a whole answer or a stream: ``text`` cleaned of lone
        surrogates, and the model the provider named (else ours)."""
        return ModelResponse(
            content=None if text is None else clean(text),
            tool_calls=tuple(calls),
            usage=usage,
            finish_reason=finish_reason,
            model=model or self._model,
        )

    async def complete(
        self, request: ModelRequest, *, on_delta: DeltaSink | None = None
    ) -> ModelResponse:
        body = self.body(request)

        def once(sink: Sink) -> Awaitable[ModelResponse]:
            return self._stream(body, sink) if request.stream else self._plain(body)

        return await complete_with_retries(
            once,
            request=request,
            on_delta=on_delta,
            model=self._name,
            policy=self._retry,
            timeout_s=self._timeout,
        )

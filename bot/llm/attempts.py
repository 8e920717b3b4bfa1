"""One model call as both adapters make it: attempts under an overall timeout, retried
on transient errors, library errors translated once, and the caller's delta sink kept
apart from all of that.

The sink may raise (the repetition detector does, to abort a stream): its exception is
carried past the translation and retries unchanged and re-raised as is. When a stream
that already showed text is retried, the sink first gets ``""`` ("start over").
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import httpx

from bot.agent.messages import ModelRequest, ModelResponse
from bot.agent.ports import DeltaSink
from bot.errors import ModelError, ModelUnavailableError
from bot.llm.errors import error_from_exception, malformed
from bot.llm.retry import RetryPolicy, with_retries


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
    """The shared shape of the adapters: ``complete`` renders the body once and runs
    one plain or streamed attempt under ``complete_with_retries``. Subclasses pass the
    common settings to ``__init__`` and implement ``body``, ``_plain``, ``_stream``."""

    def __init__(
        self,
        *,
        model: str,
        http: httpx.AsyncClient,
        retry: RetryPolicy | None,
        request_timeout_s: float,
        name: str | None,
    ) -> None:
        self._model = model
        self._name = name or model
        self._http = http
        self._retry = retry or RetryPolicy()
        self._timeout = request_timeout_s

    @property
    def name(self) -> str:
        return self._name

    def body(self, request: ModelRequest) -> bytes:
        raise NotImplementedError

    async def _plain(self, body: bytes) -> ModelResponse:
        raise NotImplementedError

    async def _stream(self, body: bytes, sink: Sink) -> ModelResponse:
        raise NotImplementedError

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

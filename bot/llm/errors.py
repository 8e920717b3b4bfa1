"""Translating provider failures into ``bot.errors`` model errors, at one boundary.

    transient        connect/read timeouts, resets, 408, 409, 425, 429, 5xx, 529 overloaded
                     → ModelUnavailableError (retried, then the next model of the chain)
    context overflow the providers' context-length errors → ContextOverflowError
    auth             401, 403 → ModelAuthError (never retried, never a fallback)
    invalid          other 4xx, quota exhausted, malformed responses → ModelRequestError

The provider's own message is kept (bounded) in every error.
"""

from __future__ import annotations

import email.utils
import json
import math
import time
from collections.abc import Mapping

import httpx

from bot.agent.redact import redact_secrets
from bot.errors import (
    ContextOverflowError,
    ModelAuthError,
    ModelError,
    ModelRequestError,
    ModelUnavailableError,
)
from bot.llm.surrogates import clean

TRANSIENT_STATUS = frozenset({408, 409, 425, 429, 529})
MAX_MESSAGE_CHARS = 500
_OVERFLOW_CODES = frozenset(
    {"context_length_exceeded", "string_above_max_length", "request_too_large"}
)
_OVERFLOW_PHRASES = (
    "maximum context length",
    "context length",
    "context window",
    "prompt is too long",
    "too many tokens",
    "reduce the length",
    "input is too long",
    "context limit",
    "exceed context",
)
_NOT_TRANSIENT_CODES = frozenset({"insufficient_quota", "billing_hard_limit_reached"})


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds from a ``Retry-After`` header: delta-seconds or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return max(seconds, 0.0) if math.isfinite(seconds) else None
    try:
        parsed = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if parsed is None:
        return None
    return max(parsed.timestamp() - (time.time() if now is None else now), 0.0)


def _details(body: str) -> tuple[str, str | None]:
    """The provider's message (scrubbed: some echo the API key) and error code from an
    error body (any shape)."""
    message, code = _raw_details(body)
    # An escaped lone surrogate in the provider's message must not reach job state,
    # logs or Slack, which cannot encode it.
    return redact_secrets(clean(message)), clean(code) if code is not None else None


def _raw_details(body: str) -> tuple[str, str | None]:
    try:
        data = json.loads(body)
    except ValueError:
        return body.strip()[:MAX_MESSAGE_CHARS], None
    error = data.get("error", data) if isinstance(data, dict) else data
    if isinstance(error, dict):
        message = error.get("message") or error.get("detail") or json.dumps(error)
        code = error.get("code") or error.get("type")
        return str(message)[:MAX_MESSAGE_CHARS], str(code) if code is not None else None
    return str(error)[:MAX_MESSAGE_CHARS], None


def error_from_response(
    status: int, body: str, headers: Mapping[str, str], *, model: str
) -> ModelError:
    """The error for a non-2xx answer."""
    message, code = _details(body)
    text = f"{model}: HTTP {status}" + (f" {code}" if code else "") + f": {message}"
    lowered = message.lower()
    if status in (401, 403):
        return ModelAuthError(text, status=status, model=model)
    if code in _OVERFLOW_CODES or (
        status in (400, 413, 422) and any(p in lowered for p in _OVERFLOW_PHRASES)
    ):
        return ContextOverflowError(text, status=status, model=model)
    if code in _NOT_TRANSIENT_CODES:
        return ModelRequestError(text, status=status, model=model)
    if status in TRANSIENT_STATUS or status >= 500:
        retry_after = parse_retry_after(headers.get("retry-after"))
        return ModelUnavailableError(text, status=status, model=model, retry_after=retry_after)
    return ModelRequestError(text, status=status, model=model)


def error_from_exception(exc: BaseException, *, model: str) -> ModelError:
    """The error for a failure below HTTP (connect, timeout, reset, cut stream)."""
    if isinstance(exc, ModelError):
        return exc
    kind = type(exc).__name__
    detail = redact_secrets((str(exc) or kind)[:MAX_MESSAGE_CHARS])
    if isinstance(exc, httpx.TimeoutException | TimeoutError):
        return ModelUnavailableError(f"{model}: timed out ({kind})", model=model)
    if isinstance(exc, httpx.TransportError):
        return ModelUnavailableError(f"{model}: connection failed ({kind}: {detail})", model=model)
    return ModelRequestError(f"{model}: {kind}: {detail}"[:MAX_MESSAGE_CHARS], model=model)


def malformed(model: str, what: str) -> ModelRequestError:
    return ModelRequestError(
        f"{model}: malformed response: {what}"[:MAX_MESSAGE_CHARS], model=model
    )


MAX_ERROR_BODY = 64 * 1024


async def read_error(response: httpx.Response, *, model: str) -> ModelError:
    """The error for a failed streamed response, reading at most ``MAX_ERROR_BODY``."""
    raw = b""
    async for chunk in response.aiter_bytes():
        raw += chunk
        if len(raw) > MAX_ERROR_BODY:
            break
    text = raw[:MAX_ERROR_BODY].decode("utf-8", "replace")
    return error_from_response(response.status_code, text, response.headers, model=model)

"""Classifying provider failures into the ``ModelError`` subclasses, as units.

    transient         408, 409, 425, 429, 5xx, 529; timeouts, refused or reset
                      connections, cut streams         → ModelUnavailableError
    context overflow  ``context_length_exceeded`` or the providers' overflow messages on
                      400/413/422                       → ContextOverflowError
    auth              401, 403                          → ModelAuthError
    invalid           other 4xx, quota exhausted, anything unexpected → ModelRequestError

The provider's message is kept in the error, bounded to 500 characters, whatever shape
the error body has. ``Retry-After`` is read as seconds or as an HTTP date.
"""

from __future__ import annotations

import email.utils
import json

import httpx
import pytest

from bot.errors import (
    ContextOverflowError,
    ModelAuthError,
    ModelError,
    ModelRequestError,
    ModelUnavailableError,
)
from bot.llm.errors import (
    MAX_MESSAGE_CHARS,
    error_from_exception,
    error_from_response,
    malformed,
    parse_retry_after,
)

NOW = 1_700_000_000.0
NO_HEADERS = httpx.Headers()


def openai_error(message: str, code: str | None = None, kind: str = "server_error") -> str:
    return json.dumps({"error": {"message": message, "type": kind, "param": None, "code": code}})


def classify(status: int, body: str, headers: httpx.Headers = NO_HEADERS) -> ModelError:
    return error_from_response(status, body, headers, model="gpt-test")


# -- by status -------------------------------------------------------------------------


@pytest.mark.parametrize("status", [408, 409, 425, 429, 500, 502, 503, 504, 529])
def test_transient_status(status: int) -> None:
    error = classify(status, openai_error("try again later"))

    assert type(error) is ModelUnavailableError
    assert error.status == status
    assert error.model == "gpt-test"
    assert "try again later" in str(error)
    assert f"HTTP {status}" in str(error)


@pytest.mark.parametrize("status", [401, 403])
def test_auth_status(status: int) -> None:
    error = classify(status, openai_error("Incorrect API key provided", "invalid_api_key"))

    assert type(error) is ModelAuthError
    assert isinstance(error, ModelRequestError)  # an invalid request: never retried
    assert error.status == status
    assert "Incorrect API key provided" in str(error)


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (400, "Invalid value for 'tool_choice'"),
        (404, "The model `gpt-9` does not exist"),
        (413, "Request Entity Too Large"),
        (422, "Unprocessable Entity"),
    ],
)
def test_invalid_request_status(status: int, message: str) -> None:
    error = classify(status, openai_error(message, kind="invalid_request_error"))

    assert type(error) is ModelRequestError
    assert error.status == status
    assert message in str(error)


@pytest.mark.parametrize("code", ["insufficient_quota", "billing_hard_limit_reached"])
def test_quota_is_not_transient(code: str) -> None:
    error = classify(429, openai_error("You exceeded your current quota", code))

    assert type(error) is ModelRequestError
    assert error.status == 429


# -- context overflow ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (400, openai_error("too long", "context_length_exceeded", "invalid_request_error")),
        (400, openai_error("string too long", "string_above_max_length")),
        (
            400,
            json.dumps(
                {
                    "object": "error",
                    "message": "This model's maximum context length is 4096 tokens. However, "
                    "you requested 5000 tokens.",
                    "type": "BadRequestError",
                    "param": None,
                    "code": 400,
                }
            ),
        ),
        (
            400,
            json.dumps(
                {
                    "type": "error",
                    "error": {
                        "type": "invalid_request_error",
                        "message": "prompt is too long: 210000 tokens > 200000 maximum",
                    },
                }
            ),
        ),
        (413, openai_error("Request too large: the input is too long for this model")),
        (422, json.dumps({"detail": "Input is too long for the context window"})),
    ],
    ids=["openai-code", "string-code", "vllm", "anthropic", "413", "422-detail"],
)
def test_context_overflow(status: int, body: str) -> None:
    error = classify(status, body)

    assert type(error) is ContextOverflowError
    assert error.status == status


def test_rate_limit_about_tokens_is_not_an_overflow() -> None:
    body = openai_error(
        "Rate limit reached for gpt-4o: too many tokens per minute", "rate_limit_exceeded"
    )

    error = classify(429, body, httpx.Headers({"Retry-After": "20"}))

    assert type(error) is ModelUnavailableError
    assert error.retry_after == 20.0


# -- the provider's message ------------------------------------------------------------


def test_message_is_bounded() -> None:
    error = classify(500, openai_error("x" * 5000))

    assert "x" * MAX_MESSAGE_CHARS in str(error)
    assert "x" * (MAX_MESSAGE_CHARS + 1) not in str(error)
    assert MAX_MESSAGE_CHARS == 500


def test_non_json_body_is_the_message() -> None:
    page = "<html><body><h1>502 Bad Gateway</h1>" + "padding " * 500 + "</body></html>"

    error = classify(502, page)

    assert type(error) is ModelUnavailableError
    assert "<h1>502 Bad Gateway</h1>" in str(error)
    assert len(str(error)) < MAX_MESSAGE_CHARS + 100


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (json.dumps({"detail": "Not Found"}), "Not Found"),
        (json.dumps({"error": "model not loaded"}), "model not loaded"),
        (
            json.dumps({"type": "error", "error": {"type": "overloaded_error", "message": "Busy"}}),
            "Busy",
        ),
        (json.dumps(["odd", "shape"]), "odd"),
        ("", ""),
    ],
    ids=["detail", "string-error", "anthropic", "list", "empty"],
)
def test_message_from_any_body_shape(body: str, message: str) -> None:
    error = classify(503, body)

    assert type(error) is ModelUnavailableError
    assert message in str(error)


def test_code_is_shown() -> None:
    error = classify(429, openai_error("slow down", "rate_limit_exceeded"))

    assert "rate_limit_exceeded" in str(error)


def test_malformed_is_an_invalid_request_and_bounded() -> None:
    error = malformed("gpt-test", "y" * 5000)

    assert type(error) is ModelRequestError
    assert "malformed" in str(error)
    assert len(str(error)) <= MAX_MESSAGE_CHARS


# -- failures below HTTP ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("exc", "words"),
    [
        (httpx.ConnectError("[Errno 111] Connection refused"), "Connection refused"),
        (httpx.ReadTimeout("timed out"), "timed out"),
        (httpx.ConnectTimeout("timed out"), "timed out"),
        (httpx.PoolTimeout("no connection"), "timed out"),
        (
            httpx.RemoteProtocolError("peer closed connection without sending complete body"),
            "peer closed connection",
        ),
        (httpx.ReadError("Connection reset by peer"), "Connection reset by peer"),
        (TimeoutError(), "timed out"),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else "",
)
def test_transport_failures_are_unavailable(exc: BaseException, words: str) -> None:
    error = error_from_exception(exc, model="gpt-test")

    assert type(error) is ModelUnavailableError
    assert error.model == "gpt-test"
    assert words in str(error)


def test_transport_failure_message_is_bounded() -> None:
    error = error_from_exception(httpx.RemoteProtocolError("z" * 5000), model="gpt-test")

    assert type(error) is ModelUnavailableError
    assert "z" * (MAX_MESSAGE_CHARS + 1) not in str(error)


def test_model_errors_pass_through() -> None:
    original = ContextOverflowError("already classified", status=400)

    assert error_from_exception(original, model="gpt-test") is original


def test_anything_else_is_an_invalid_request() -> None:
    error = error_from_exception(RuntimeError("h11 state machine confused"), model="gpt-test")

    assert type(error) is ModelRequestError
    assert "h11 state machine confused" in str(error)


# -- Retry-After -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("7", 7.0), (" 12 ", 12.0), ("0", 0.0), ("1.5", 1.5), ("-3", 0.0)],
)
def test_retry_after_seconds(value: str, seconds: float) -> None:
    assert parse_retry_after(value, now=NOW) == seconds


def test_retry_after_http_date() -> None:
    later = email.utils.formatdate(NOW + 120, usegmt=True)  # e.g. "Tue, 14 Nov 2023 22:15:20 GMT"

    assert parse_retry_after(later, now=NOW) == pytest.approx(120.0)


def test_retry_after_http_date_in_the_past_is_now() -> None:
    earlier = email.utils.formatdate(NOW - 3600, usegmt=True)

    assert parse_retry_after(earlier, now=NOW) == 0.0


@pytest.mark.parametrize("value", [None, "", "soon", "Someday, 99 Foo 20xx", "nan"])
def test_retry_after_unreadable_is_none(value: str | None) -> None:
    # "nan" is not delta-seconds; read as a number it would make every wait comparison
    # false, so a retry would sleep on it (forever) past any deadline.
    assert parse_retry_after(value, now=NOW) is None


def test_retry_after_header_reaches_the_error() -> None:
    headers = httpx.Headers({"Retry-After": "Fri, 01 Jan 2100 00:00:00 GMT"})

    seconds = classify(503, openai_error("busy"), headers).retry_after

    assert seconds is not None
    assert seconds > 1e9  # decades away, whatever today is


def test_no_retry_after_for_non_transient_errors() -> None:
    headers = httpx.Headers({"Retry-After": "5"})

    assert classify(400, openai_error("bad"), headers).retry_after is None
    assert classify(401, openai_error("bad key"), headers).retry_after is None

"""What the ``prometheus`` and ``alertmanager`` packs share: ``Backend``, the one HTTP
client of such a pack, and the small formatting helpers of their summaries.

``Backend`` (connect timeout 3 s, at most 10 s and 16 MB per request, closed through
``Pack.closers``) is the one place where transport and HTTP failures become
``ToolError`` messages: a refused password is named as such and never shown, a
``user:password@`` in the base URL is sent as basic auth. The helpers render numbers,
label sets, times and bounded listings the same way in both packs (``duration`` serves
the postgres pack's summaries too).
"""

from __future__ import annotations

import asyncio
import json
import math
import socket
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import httpx

from bot.agent.tools import Tool
from bot.errors import ConfigError, ToolError
from tools.http_client import read_bounded
from tools.packs import Pack

CONNECT_TIMEOUT_S = 3.0

TOTAL_TIMEOUT_S = 10.0  # per request, connect to last byte

TOOL_TIMEOUT_S = 15.0  # the core's bound; ours fires first with a clearer message

MAX_BODY_BYTES = 16_000_000

ERROR_CHARS = 500  # of an error the backend reports

LABEL_VALUE_CHARS = 80

TEXT_CHARS = 200


def listing(head: str, lines: Sequence[str], limit: int) -> str:
    """``head`` and at most ``limit`` lines, then ``… N more``."""
    shown = list(lines[:limit])
    if len(lines) > limit:
        shown.append(f"… {len(lines) - limit} more")
    return "\n".join([head, *shown]) if shown else head


def plural(n: int, noun: str) -> str:
    """``1 alert``, ``2 alerts``, ``2 series``."""
    return f"{n} {noun}" if n == 1 or noun.endswith("series") else f"{n} {noun}s"


class Backend:
    """One ``httpx.AsyncClient`` against a backend's base URL; see the module docstring."""

    def __init__(
        self,
        kind: str,
        url: str,
        *,
        variable: str,
        connect_timeout: float = CONNECT_TIMEOUT_S,
        total_timeout: float = TOTAL_TIMEOUT_S,
        max_body: int = MAX_BODY_BYTES,
    ) -> None:
        base = _base_url(url, variable)
        self.kind = kind
        self.variable = variable
        self.has_credentials = bool(base.username or base.password)
        shown = base.copy_with(username=base.username, password="***") if base.password else base
        self.shown = str(shown).rstrip("/")  # what errors name; never the password
        self.total_timeout = total_timeout
        self.connect_timeout = connect_timeout
        self.max_body = max_body
        self._client = httpx.AsyncClient(
            base_url=base,
            timeout=httpx.Timeout(total_timeout, connect=connect_timeout),
            follow_redirects=False,
            headers={"Accept": "application/json", "User-Agent": "opsloop"},
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    async def call(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        json_body: object = None,
    ) -> Any:
        """The decoded JSON answer, or a ``ToolError`` that says what went wrong."""
        try:
            async with asyncio.timeout(self.total_timeout):
                async with self._client.stream(
                    method, path, params=params, json=json_body
                ) as response:
                    body, cut = await read_bounded(response.aiter_bytes(), self.max_body)
                    if cut:
                        raise ToolError(
                            f"{self.kind}'s answer is larger than {self.max_body / 1e6:g} MB; "
                            "narrow the request"
                        )
        except (TimeoutError, httpx.TimeoutException) as exc:
            if isinstance(exc, httpx.ConnectTimeout):
                raise ToolError(
                    f"{self.kind} at {self.shown} is unreachable: "
                    f"no connection within {self.connect_timeout:g}s"
                ) from None
            raise ToolError(
                f"{self.kind} at {self.shown} timed out after {self.total_timeout:g}s"
            ) from None
        except httpx.TransportError as exc:
            raise ToolError(f"{self.kind} at {self.shown} is unreachable: {_reason(exc)}") from None
        if response.status_code >= 300:
            raise ToolError(self._status_error(response, body, path))
        try:
            return json.loads(body) if body else None
        except ValueError:
            kind = response.headers.get("content-type", "no content type")
            raise ToolError(
                f"{self.kind} at {self.shown} answered {path} with something that is not "
                f"JSON ({kind}); is that the {self.kind} server's URL?"
            ) from None

    def _status_error(self, response: httpx.Response, body: bytes, path: str) -> str:
        status = response.status_code
        if 300 <= status < 400:
            where = response.headers.get("location", "?")
            return (
                f"{self.kind} at {self.shown} redirects {path} to {clip(where)} "
                f"(HTTP {status}); point the URL at the server itself"
            )
        if status in (401, 403):
            if self.has_credentials:
                return (
                    f"{self.kind} at {self.shown} refused the credentials in {self.variable} "
                    f"(HTTP {status})"
                )
            return (
                f"{self.kind} at {self.shown} asks for credentials (HTTP {status}); give them "
                f"in {self.variable} as http(s)://user:password@host"
            )
        text = body.decode("utf-8", "replace")
        detail, error_type = " ".join(text.split()), ""
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = None
        if isinstance(parsed, str):  # Alertmanager's plain error string
            detail = parsed
        elif isinstance(parsed, dict):  # Prometheus's error/errorType, Alertmanager's message
            detail = str(parsed.get("error") or parsed.get("message") or detail)
            error_type = str(parsed.get("errorType") or "")
        kind = f" {error_type}" if error_type else ""
        return f"{self.kind} answered HTTP {status}{kind}: {clip(detail, ERROR_CHARS) or '(empty)'}"


def backend_pack(
    name: str, url: str | None, *, variable: str, tools_of: Callable[[Backend], list[Tool]]
) -> Pack:
    """The pack ``name`` over one ``Backend`` at ``url`` (from ``variable``): its tools
    and the backend's close; ``ConfigError`` when the URL is missing or bad."""
    if not url:
        raise ConfigError(f"{variable} is required for the {name} pack")
    backend = Backend(name, url, variable=variable)
    return Pack(tools=tools_of(backend), closers=(backend.aclose,))


def _base_url(url: str, variable: str) -> httpx.URL:
    try:
        base = httpx.URL(url.strip())
    except httpx.InvalidURL as exc:
        raise ConfigError(f"{variable}: not a URL: {exc}") from None
    if base.scheme not in ("http", "https") or not base.host:
        raise ConfigError(f"{variable} must be an http(s) URL with a host, got {url!r}")
    if base.query or base.fragment:
        raise ConfigError(f"{variable} must be a base URL without ?query or #fragment")
    return base.copy_with(path=base.path.rstrip("/") or "/")


def _reason(exc: BaseException) -> str:
    """Why a connection failed, from the OS error at the bottom of httpx's chain."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ConnectionRefusedError):
            return "connection refused"
        if isinstance(seen, socket.gaierror):
            return f"cannot resolve the host name ({seen.strerror or seen})"
        if isinstance(seen, OSError) and seen.strerror:
            return seen.strerror[:1].lower() + seen.strerror[1:]
        seen = seen.__cause__ or seen.__context__
    return str(exc) or type(exc).__name__


def clip(text: str, limit: int = TEXT_CHARS) -> str:
    """``text`` on one line, cut to ``limit`` characters with an ellipsis."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def number(value: str | float) -> str:
    """A sample value, short: integers whole, from 10,000 on without decimals, else 5
    significant digits; NaN and ±Inf as Prometheus writes them."""
    v = float(value)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if v.is_integer() and abs(v) < 1e15:
        return str(int(v))
    if 1e4 <= abs(v) < 1e15:
        return f"{v:.0f}"
    return f"{v:.5g}"


def labels_text(labels: Mapping[str, str]) -> str:
    """``{a="1",b="2"}`` (sorted, long values cut), or ``""`` for no labels."""
    pairs = [
        f"{key}={json.dumps(clip(str(value), LABEL_VALUE_CHARS), ensure_ascii=False)}"
        for key, value in sorted(labels.items())
    ]
    return "{" + ",".join(pairs) + "}" if pairs else ""


def series_name(metric: Mapping[str, str]) -> str:
    """A series in PromQL form: ``name{labels}``; ``{}`` when it has neither."""
    labels = {k: v for k, v in metric.items() if k != "__name__"}
    return (metric.get("__name__", "") + labels_text(labels)) or "{}"


def annotation(annotations: Mapping[str, str] | None) -> str:
    """The one annotation worth a line: summary, else description, else message."""
    for key in ("summary", "description", "message"):
        if value := (annotations or {}).get(key):
            return clip(str(value))
    return ""


def parse_time(text: object) -> datetime | None:
    """An RFC 3339 timestamp as the APIs write it (nanoseconds allowed), or ``None``."""
    if not isinstance(text, str) or not text:
        return None
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def iso(timestamp: float) -> str:
    """``2026-11-30T03:32:22Z``: UTC, whole seconds."""
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def duration(seconds: float) -> str:
    """``1d2h``, ``1h30m``, ``5m``, ``15s``, ``0.5s``: the two largest units."""
    if seconds < 1:
        return f"{seconds:.2g}s"
    rest = round(seconds)
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if rest >= size:
            parts.append(f"{rest // size}{unit}")
            rest %= size
    return "".join(parts[:2])


def ago(moment: datetime, now: datetime) -> str:
    """``5m ago``, ``in 1h27m``, or ``just now`` (within a second)."""
    delta = (now - moment).total_seconds()
    if abs(delta) < 1:
        return "just now"
    return f"{duration(delta)} ago" if delta >= 0 else f"in {duration(-delta)}"

"""``kind: http`` tools: a request templated from validated arguments, sent under the
address policy, answered with status, latency and a bounded body.

Templating (docs/tools.md, "tools.yml"):

- ``url``: a placeholder that is the whole URL is inserted as validated (the policy then
  judges it); placeholders inside a URL are percent-encoded with nothing kept (``/``,
  ``?``, ``#``, ``&`` included), so a value stays inside its path segment or query
  value; ``.`` and ``..`` are refused as path values (they would climb the path).
- ``headers``: values inserted as they are; CR, LF or NUL in a result is refused.
- ``body``: JSON; a string that is exactly ``{name}`` becomes the typed value (an integer
  stays an integer), other strings are templated as text. ``HEAD`` sends no body.

Sending (``HttpFetcher``, shared by every http tool): one client from
``tools.http_client`` (over ``PolicyTransport``); redirects followed by hand
(``PolicyClient.follow``), at most 5, each hop checked by the policy before it is sent; the
body streamed and cut at 1 MiB.
Any HTTP status is an observation (a 500 is a result); refusals, connection failures and
timeouts are ``ToolError``. A destructive tool's dry run sends nothing: it shows the
request it would send.
"""

from __future__ import annotations

import asyncio
import json
import string
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import httpx
from pydantic import BaseModel

from bot.agent.tools import CallContext
from bot.errors import ToolError
from tools.declared import DeclaredTool
from tools.http_client import (
    MAX_REDIRECTS,
    Hop,
    PolicyClient,
    RedirectStopped,
    decode_body,
    host_port,
    peer_ssl_object,
    read_bounded,
)
from tools.http_client import make_client as make_client
from tools.netpolicy import AddressPolicy, Target
from tools.spec import HttpToolSpec

MAX_BODY_BYTES = 1 << 20
_SENSITIVE_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie"})
_FORMATTER = string.Formatter()


class _NoBody:
    def __repr__(self) -> str:
        return "NO_BODY"


NO_BODY: Any = _NoBody()
"""``json_body`` default: send no body (``None`` would be the JSON ``null``)."""


# -- templating ---------------------------------------------------------------------


def _parse(template: str) -> list[tuple[str, str | None, str | None, str | None]]:
    try:
        return list(_FORMATTER.parse(template))
    except ValueError as exc:  # tools.yml is validated at start-up; a safety net
        raise ToolError(f"bad template {template!r}: {exc}") from None


def _whole_placeholder(template: str) -> str | None:
    """The parameter a template consists of, e.g. ``"{url}"`` → ``"url"``."""
    parts = _parse(template)
    if len(parts) == 1:
        literal, field, spec, conversion = parts[0]
        if not literal and field and not spec and conversion is None:
            return field
    return None


def _value(values: Mapping[str, Any], field: str) -> Any:
    try:
        return values[field]
    except KeyError:
        raise ToolError(f"template names unknown parameter {{{field}}}") from None


def _text(value: Any, spec: str | None = None, conversion: str | None = None) -> str:
    """A value as template text: booleans as ``true``/``false``, a missing one as ``""``."""
    if conversion is None and not spec:
        if isinstance(value, bool):
            return "true" if value else "false"
        return "" if value is None else str(value)
    try:
        if conversion is not None:
            value = _FORMATTER.convert_field(value, conversion)
        return str(_FORMATTER.format_field(value, spec or ""))
    except (ValueError, TypeError) as exc:
        raise ToolError(f"cannot format {value!r} with {spec!r}: {exc}") from None


def render_url(template: str, values: Mapping[str, Any]) -> str:
    """The URL: a whole-URL placeholder as validated, any other percent-encoded."""
    whole = _whole_placeholder(template)
    if whole is not None:
        return _text(_value(values, whole))
    out: list[str] = []
    before = ""  # the template's literal text so far: tells path from query
    for literal, field, spec, conversion in _parse(template):
        out.append(literal)
        before += literal
        if field is None:
            continue
        text = _text(_value(values, field), spec, conversion)
        if text in (".", "..") and "?" not in before and "#" not in before:
            raise ToolError(f"{field}: {text!r} is not allowed in a URL path")
        out.append(urllib.parse.quote(text, safe=""))
    return "".join(out)


def render_text(template: str, values: Mapping[str, Any]) -> str:
    """Plain text templating (header values, body strings)."""
    out: list[str] = []
    for literal, field, spec, conversion in _parse(template):
        out.append(literal)
        if field is not None:
            out.append(_text(_value(values, field), spec, conversion))
    return "".join(out)


def render_header(name: str, template: str, values: Mapping[str, Any]) -> str:
    """A header value; CR, LF and NUL are refused (no header injection)."""
    text = render_text(template, values)
    if any(c in text for c in "\r\n\0"):
        raise ToolError(f"header {name}: the value contains a line break or NUL; refused")
    if not text.isascii():
        raise ToolError(f"header {name}: the value must be ASCII")
    return text


def render_body(body: Any, values: Mapping[str, Any]) -> Any:
    """The JSON body; ``"{name}"`` alone becomes the typed value."""
    if isinstance(body, str):
        whole = _whole_placeholder(body)
        return _value(values, whole) if whole is not None else render_text(body, values)
    if isinstance(body, dict):
        return {key: render_body(item, values) for key, item in body.items()}
    if isinstance(body, list):
        return [render_body(item, values) for item in body]
    return body


# -- sending ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Fetched:
    """One completed exchange (after redirects), body bounded."""

    method: str
    url: str  # the final URL
    status: int
    reason: str
    elapsed_ms: float  # from the first check to the last body byte, redirects included
    headers: httpx.Headers
    body: bytes
    truncated: bool  # the body went on past the bound
    redirects: tuple[str, ...] = ()  # the URLs redirected to, in order
    peer_certificate: dict[str, Any] | None = None  # https: the server's, as ssl gives it

    @property
    def text(self) -> str:
        """The body decoded with its charset (UTF-8 by default), never failing."""
        return decode_body(self.body, self.headers.get("content-type"))


@dataclass(frozen=True, slots=True)
class _Request:
    """What one hop sends."""

    method: str
    headers: dict[str, str]
    body: Any

    def redirected(self, hop: Hop) -> _Request:
        """The request for where ``hop`` points, as browsers and httpx adapt it: a 303
        (and a 301 or 302 after a POST) becomes a GET without body; credentials are not
        sent to another origin."""
        method, body = self.method, self.body
        if (hop.status == 303 and method != "HEAD") or (
            hop.status in (301, 302) and method == "POST"
        ):
            method, body = "GET", NO_BODY
        headers = self.headers
        if hop.url is not None and _origin(hop.url) != _origin(hop.source):
            headers = {k: v for k, v in headers.items() if k.lower() not in _SENSITIVE_HEADERS}
        return _Request(method, headers, body)


def _origin(url: httpx.URL) -> tuple[str, str, int | None]:
    return url.scheme, url.host, url.port


def _peer_certificate(response: httpx.Response) -> dict[str, Any] | None:
    ssl_object = peer_ssl_object(response)
    if ssl_object is None:
        return None
    certificate = ssl_object.getpeercert()
    return dict(certificate) if certificate else None


def _failure(exc: Exception, method: str, url: httpx.URL, timeout: float) -> ToolError:
    """httpx's errors as ours: the one place they are translated."""
    target = f"{method} {url}"
    if isinstance(exc, httpx.TimeoutException):
        phase = {
            httpx.ConnectTimeout: "connecting",
            httpx.ReadTimeout: "waiting for the answer",
            httpx.WriteTimeout: "sending",
            httpx.PoolTimeout: "waiting for a free connection",
        }.get(type(exc), "")
        return ToolError(f"timed out after {timeout:g}s{' ' + phase if phase else ''}: {target}")
    if isinstance(exc, httpx.ConnectError):
        return ToolError(f"cannot connect to {host_port(url)}: {str(exc) or 'no answer'}")
    if isinstance(exc, httpx.InvalidURL):
        return ToolError(f"bad URL: {target}: {exc}")
    detail = str(exc) or type(exc).__name__
    return ToolError(f"HTTP request failed ({type(exc).__name__}): {target}: {detail}")


class HttpFetcher(PolicyClient):
    """Sends requests under an ``AddressPolicy``; see the module docstring.

    ``client``: an httpx client to use, the caller's to close (default:
    ``make_client(policy)``, created on first use and closed by ``aclose``). A client not
    built by ``make_client`` still gets every hop checked before it is sent, but not the
    connect-time re-check.
    """

    def __init__(
        self,
        policy: AddressPolicy | None = None,
        *,
        client: httpx.AsyncClient | None = None,
        max_body_bytes: int = MAX_BODY_BYTES,
        max_redirects: int = MAX_REDIRECTS,
    ) -> None:
        super().__init__(policy or AddressPolicy(), client, max_redirects=max_redirects)
        self.max_body_bytes = max_body_bytes

    async def fetch(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        json_body: Any = NO_BODY,
        time_limit: float,
    ) -> Fetched:
        """One exchange, redirects followed; all of it within ``time_limit`` seconds."""
        first = _Request(method, dict(headers or {}), json_body)
        try:
            async with asyncio.timeout(time_limit):
                return await self._exchange(url, first, time_limit)
        except TimeoutError:
            raise ToolError(f"timed out after {time_limit:g}s: {method} {url}") from None

    async def _exchange(self, url: str, first: _Request, time_limit: float) -> Fetched:
        started = time.perf_counter()
        request = first

        async def send(target: Target, hops: Sequence[Hop]) -> httpx.Response:
            nonlocal request
            if hops:
                request = request.redirected(hops[-1])
            try:
                built = self.client.build_request(
                    request.method,
                    target.url,
                    headers=request.headers,
                    json=None if request.body is NO_BODY else request.body,
                    timeout=time_limit,
                )
                return await self.client.send(built, stream=True)
            except (httpx.HTTPError, httpx.InvalidURL) as exc:
                raise _failure(exc, request.method, target.url, time_limit) from None

        async def answer(target: Target, response: httpx.Response, hops: Sequence[Hop]) -> Fetched:
            content, truncated = (b"", False)
            if request.method != "HEAD":
                try:
                    content, truncated = await read_bounded(
                        response.aiter_bytes(), self.max_body_bytes
                    )
                except httpx.HTTPError as exc:
                    raise _failure(exc, request.method, target.url, time_limit) from None
            return Fetched(
                method=request.method,
                url=str(target.url),
                status=response.status_code,
                reason=response.reason_phrase or _standard_reason(response.status_code),
                elapsed_ms=(time.perf_counter() - started) * 1000,
                headers=response.headers,
                body=content,
                truncated=truncated,
                redirects=tuple(str(hop.url) for hop in hops),
                peer_certificate=_peer_certificate(response),
            )

        try:
            return await self.follow(url, send=send, answer=answer)
        except RedirectStopped as stop:
            raise ToolError(_stopped_message(stop, url, self.max_redirects)) from None


def _stopped_message(stop: RedirectStopped, url: str, max_redirects: int) -> str:
    """A redirect not followed, as the error a tool call reports."""
    last = stop.hops[-1]
    if last.url is None:
        return f"bad redirect Location {last.location!r}: {stop.cause}"
    if len(stop.hops) > max_redirects:
        return f"more than {max_redirects} redirects from {url}; the last pointed to {last.url}"
    return f"{stop} (a redirect from {url})"


def _standard_reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


# -- the result the model sees ------------------------------------------------------

_NOT_JSON = object()


def _json(fetched: Fetched, text: str) -> Any:
    media = (fetched.headers.get("content-type") or "").split(";", 1)[0].strip().lower()
    if not (media.endswith("json") or text.lstrip()[:1] in ("{", "[")):
        return _NOT_JSON
    try:
        return json.loads(text)
    except ValueError:
        return _NOT_JSON


def pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    return "null" if value is None else "a number"


def select_path(data: Any, path: str) -> tuple[bool, Any]:
    """Walk a dotted path of keys and list indexes (``data.items.0.name``, ``-1`` for the
    last item); ``(True, value)`` or ``(False, why it does not exist)``."""
    current = data
    walked: list[str] = []
    for part in path.split("."):
        where = repr(".".join(walked)) if walked else "the top level"
        if isinstance(current, dict):
            if part not in current:
                keys = ", ".join(list(current)[:20]) + (", …" if len(current) > 20 else "")
                return False, f"no key {part!r} at {where} (keys: {keys or 'none'})"
            current = current[part]
        elif isinstance(current, list):
            try:
                index = int(part)
            except ValueError:
                return False, f"{where} is a list ({len(current)} items); {part!r} is no index"
            if not -len(current) <= index < len(current):
                return False, f"no index {index} at {where} (a list of {len(current)} items)"
            current = current[index]
        else:
            return False, f"{where} is {_kind(current)}, not an object or list"
        walked.append(part)
    return True, current


def describe(fetched: Fetched, *, select: str | None = None) -> str:
    """``HTTP 200 OK in 12 ms`` then the body: JSON pretty-printed or the ``select``ed
    value, else text; binary bodies summarised; a note when the body was cut."""
    status = f"HTTP {fetched.status} {fetched.reason}".rstrip()
    lines = [f"{status} in {fetched.elapsed_ms:.0f} ms"]
    if fetched.redirects:
        lines.append(f"Redirected to {fetched.url}")
    cut = f"[body cut at {len(fetched.body)} bytes]" if fetched.truncated else None
    if not fetched.body and not fetched.truncated:
        if select:
            lines.append(f"select {select!r}: the body is empty")
        return "\n".join(lines)
    if b"\0" in fetched.body[:8192]:
        media = fetched.headers.get("content-type") or "no content type"
        lines.append(f"[binary body: {len(fetched.body)} bytes, {media}]")
        return "\n".join(lines)
    text = fetched.text
    data = _json(fetched, text)
    if select:
        if data is _NOT_JSON:
            lines.append(f"select {select!r}: the body is not JSON{' (it was cut)' if cut else ''}")
            lines.append(text)
        else:
            found, value = select_path(data, select)
            lines.append(pretty(value) if found else f"select {select!r}: {value}")
    else:
        lines.append(text if data is _NOT_JSON else pretty(data))
    if cut:
        lines.append(cut)
    return "\n".join(lines)


# -- the tool -----------------------------------------------------------------------


class HttpTool(DeclaredTool):
    """A tools.yml ``kind: http`` tool. Pass one shared ``fetcher`` (it holds the
    ``OPSLOOP_HTTP_ALLOW`` policy and the client) to every http tool; without one the
    tool makes its own that allows any public host."""

    def __init__(
        self, spec: HttpToolSpec, *, source: str, fetcher: HttpFetcher | None = None
    ) -> None:
        super().__init__(spec, source=source)
        self.request = spec.request
        self.fetcher = fetcher or HttpFetcher()

    def preview(self, args: BaseModel, ctx: CallContext) -> str | None:
        """The request a call sends: method, URL, header names (their values may be
        secrets) and the JSON body, for the approval card."""
        values = self.values(args, ctx)
        request = self.request
        lines = [f"{request.method} {render_url(request.url, values)}"]
        if request.headers:
            lines.append("Headers: " + ", ".join(request.headers))
        if request.body is not None and request.method != "HEAD":
            lines.append(pretty(render_body(request.body, values)))
        return "\n".join(lines)

    async def execute(self, args: BaseModel, ctx: CallContext) -> str:
        values = self.values(args, ctx)
        request = self.request
        url = render_url(request.url, values)
        headers = {
            name: render_header(name, template, values)
            for name, template in request.headers.items()
        }
        body = NO_BODY
        if request.body is not None and request.method != "HEAD":
            body = render_body(request.body, values)
        if ctx.dry_run:
            # A destructive request must not happen before it is approved: show it.
            await self.fetcher.policy.check(url)
            lines = [f"Dry run: would send {request.method} {url}"]
            if headers:
                lines.append("Headers: " + ", ".join(headers))
            if body is not NO_BODY:
                lines.append(pretty(body))
            return "\n".join(lines)
        fetched = await self.fetcher.fetch(
            request.method, url, headers=headers, json_body=body, time_limit=self.timeout
        )
        return describe(fetched, select=request.select)

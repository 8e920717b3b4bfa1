"""The ``supervisor`` pack's XML-RPC client: where supervisord is, and one call to it.

``SUPERVISOR_URL`` becomes an :class:`Endpoint` (:func:`parse_url`): an ``http(s)://`` URL
(``/RPC2`` added when the path is empty or ``/``) or a ``unix://`` socket, with any
``user:pass`` kept apart from the URL that messages show. :class:`SupervisorClient` builds
each request with ``xmlrpc.client.dumps``, POSTs it with one ``httpx.AsyncClient`` (bounded
connect and read timeouts, bounded answer size, a new connection per call) and parses the
answer with ``xmlrpc.client.loads``.

This is the one place httpx and xmlrpc errors are translated: a supervisord fault becomes a
:class:`SupervisorFault` (its symbolic name from :data:`FAULTS`); an unreachable or slow
supervisord, a refused password and an answer that is not XML-RPC become a ``ToolError``
in words, never with credentials. Nothing here is a tool: ``tools.packs.supervisor``
builds those.
"""

from __future__ import annotations

import os
import xmlrpc.client
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit
from xml.parsers.expat import ExpatError

import httpx

from bot.errors import ConfigError, ToolError
from tools.http_client import read_bounded

VARIABLE = "SUPERVISOR_URL"
CONNECT_TIMEOUT_S = 5.0
STATUS_TIMEOUT_S = 10.0  # a query: supervisord answers at once or not at all
ACTION_TIMEOUT_S = 60.0  # stop/start wait for stopwaitsecs / startsecs on the server
MAX_ANSWER_BYTES = 8 << 20

# supervisor.xmlrpc.Faults
FAULTS: Mapping[int, str] = {
    1: "UNKNOWN_METHOD",
    2: "INCORRECT_PARAMETERS",
    3: "BAD_ARGUMENTS",
    4: "SIGNATURE_UNSUPPORTED",
    6: "SHUTDOWN_STATE",
    10: "BAD_NAME",
    11: "BAD_SIGNAL",
    20: "NO_FILE",
    21: "NOT_EXECUTABLE",
    30: "FAILED",
    40: "ABNORMAL_TERMINATION",
    50: "SPAWN_ERROR",
    60: "ALREADY_STARTED",
    70: "NOT_RUNNING",
    80: "SUCCESS",
    90: "ALREADY_ADDED",
    91: "STILL_RUNNING",
    92: "CANT_REREAD",
}
SUCCESS = 80


class SupervisorFault(ToolError):
    """A fault supervisord answered with; ``name`` is its symbolic code."""

    def __init__(self, code: int, text: str) -> None:
        self.code = code
        self.name = FAULTS.get(code, f"FAULT_{code}")
        self.text = text
        super().__init__(f"supervisor: {text}")


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where the interface is: the POST URL, optional socket and credentials."""

    url: str  # the URL requests go to (no credentials)
    shown: str  # what messages name (no credentials)
    uds: str | None = None
    auth: tuple[str, str] | None = None


def parse_url(raw: str) -> Endpoint:
    """``SUPERVISOR_URL`` as an ``Endpoint``; ``ConfigError`` naming the variable."""
    text = raw.strip()
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"{VARIABLE}: not a valid URL ({exc})") from None
    auth = None
    if parts.username is not None:
        auth = (unquote(parts.username), unquote(parts.password or ""))
    if parts.scheme == "unix":
        path = parts.path
        if not path or path == "/":
            raise ConfigError(f"{VARIABLE}: unix:// needs a socket path, e.g. unix:///run/s.sock")
        return Endpoint(url="http://localhost/RPC2", shown=f"unix://{path}", uds=path, auth=auth)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"{VARIABLE}: expected http://host:port[/RPC2] or unix:///path/to/socket, "
            f"got scheme {parts.scheme or 'none'!r}"
        )
    if parts.query or parts.fragment:
        raise ConfigError(f"{VARIABLE}: a query or fragment makes no sense here")
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    netloc = host if port is None else f"{host}:{port}"
    path = parts.path.rstrip("/") or "/RPC2"
    url = f"{parts.scheme}://{netloc}{path}"
    return Endpoint(url=url, shown=url, auth=auth)


class SupervisorClient:
    """Async XML-RPC calls to one supervisord; ``aclose`` at shutdown."""

    def __init__(
        self,
        url: str,
        *,
        connect_timeout: float = CONNECT_TIMEOUT_S,
        status_timeout: float = STATUS_TIMEOUT_S,
        action_timeout: float = ACTION_TIMEOUT_S,
        max_answer_bytes: int = MAX_ANSWER_BYTES,
    ) -> None:
        self.endpoint = parse_url(url)
        self.status_timeout = status_timeout
        self.action_timeout = action_timeout
        self._max_answer = max_answer_bytes
        self._connect_timeout = connect_timeout
        transport = httpx.AsyncHTTPTransport(uds=self.endpoint.uds) if self.endpoint.uds else None
        self._http = httpx.AsyncClient(
            transport=transport,
            auth=self.endpoint.auth,
            timeout=httpx.Timeout(status_timeout, connect=connect_timeout),
            headers={"Content-Type": "text/xml", "Accept": "text/xml"},
            follow_redirects=False,
            trust_env=False,
            # A connection per call, as supervisorctl does. supervisord's HTTP server
            # (medusa) leaves Nagle on and writes answers in 4 KiB pieces: on a reused
            # connection every answer over 4 KiB (getAllProcessInfo of 5 processes)
            # waits ~40 ms for the client's delayed ACK; a fresh one ACKs at once.
            limits=httpx.Limits(max_keepalive_connections=0),
        )

    @property
    def closed(self) -> bool:
        return self._http.is_closed

    async def aclose(self) -> None:
        await self._http.aclose()

    async def call(self, method: str, *params: Any) -> Any:
        """One XML-RPC query, bounded by ``status_timeout``."""
        return await self._post(method, params, acting=False)

    async def act(self, method: str, *params: Any) -> Any:
        """One XML-RPC call that waits for supervisord to stop or start something,
        bounded by ``action_timeout``."""
        return await self._post(method, params, acting=True)

    async def _post(self, method: str, params: tuple[Any, ...], *, acting: bool) -> Any:
        """The result of one call, or ``ToolError`` / ``SupervisorFault``."""
        body = xmlrpc.client.dumps(params, methodname=method, encoding="utf-8")
        read = self.action_timeout if acting else self.status_timeout
        where = f"supervisor at {self.endpoint.shown}"
        request_timeout = httpx.Timeout(read, connect=self._connect_timeout)
        try:
            async with self._http.stream(
                "POST", self.endpoint.url, content=body.encode("utf-8"), timeout=request_timeout
            ) as response:
                if response.status_code == 401:
                    raise ToolError(
                        f"{where} refused the credentials (HTTP 401); check user:pass in {VARIABLE}"
                    )
                if response.status_code != 200:
                    raise ToolError(
                        f"{where} answered HTTP {response.status_code} to {method}; "
                        "is this supervisord's XML-RPC interface (path /RPC2)?"
                    )
                data, cut = await read_bounded(response.aiter_bytes(), self._max_answer)
                if cut:
                    raise ToolError(f"{where}: the answer to {method} is too large")
        except httpx.ConnectTimeout:
            raise ToolError(
                f"{where} is unreachable: no connection within {self._connect_timeout:g}s"
            ) from None
        except httpx.TimeoutException:
            text = f"{where} did not answer {method} within {read:g}s"
            if acting:
                text += "; it may still be acting on it: check supervisor_status"
            raise ToolError(text) from None
        except httpx.TransportError as exc:
            raise ToolError(f"{where} is unreachable: {_reason(exc)}") from None
        try:
            (result,), _ = xmlrpc.client.loads(data, use_builtin_types=True)
        except xmlrpc.client.Fault as fault:
            raise SupervisorFault(fault.faultCode, str(fault.faultString)) from None
        except (ExpatError, xmlrpc.client.ResponseError, ValueError) as exc:
            raise ToolError(f"{where}: not an XML-RPC answer to {method} ({exc})") from None
        return result


def _reason(exc: httpx.TransportError) -> str:
    """The innermost cause's words (``Connection refused``), not httpx's wrapper."""
    cause: BaseException = exc
    for _ in range(8):  # chains are short; never loop on a cyclic one
        inner = cause.__cause__ or cause.__context__
        if inner is None:
            break
        cause = inner
    if isinstance(cause, OSError) and cause.errno:
        return os.strerror(cause.errno)  # asyncio words it "Connect call failed (…)"
    return str(cause) or type(cause).__name__

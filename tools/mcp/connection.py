"""One MCP server: connect, list tools, call, restart after it died, close.

The SDK's ``Client`` is an async context whose task group must be entered and left by
one task, so each connection has an owner task that enters it, publishes the client
and waits to be told to stop; calls come from any job's task. Every SDK failure is
translated here, once, into a ``ToolError`` naming the server (``McpDown``), which the
one tool path turns into an ``Error:`` result.

stdio servers are started by ``stdio.py`` in their own session (process group) with
the environment built here: ``PATH``, ``HOME``, ``LANG`` as for command tools plus the
entry's ``env`` (``${NAME}`` expanded from the bot's environment), nothing else.
Closing stops the child and its group (stdin closed, SIGTERM, SIGKILL, all bounded).
A streamable HTTP server's ``headers`` (``${NAME}`` expanded likewise) go with every
request, on our own HTTP client. Their values are credentials: they are masked in every
message and log line made here, whatever the server echoed. The streams of what a server
sends unasked (the GET stream of the 2025 protocol versions, a ``subscriptions/listen``
answer at 2026-07-28) may be quiet for long: the entry's ``timeout`` bounds every other
read but not theirs. An HTTP connection has ended when the server went away or forgot
us, even with no call in flight: such a stream broke off (not a timeout), or the server
answered our session 404 (the spec's "start a new session"; a call that got it is an
error, the next one reconnects).

A call given up on (Stop, the job's deadline, its own timeout) is cancelled on the server
by the SDK (``notifications/cancelled``); the server must then answer a request within
``STOP_GRACE_S``, or it is stopped (a stdio child with its group) as one stuck in the
abandoned work, and the next call starts it again.

A connection that broke is reconnected by the next call (a new child, or a new
initialize and session); consecutive failures wait ``1, 2, 4 … MAX_BACKOFF_S`` seconds
between attempts, and a call that comes before the next attempt is due is answered at
once with the reason. A failure is a failed connect,
or a connection that ended unexpectedly less than ``HEALTHY_S`` after it started (a
server that crashes on every call): the first such end is restarted at once (a server
killed once comes back with the next call), each further one in a row waits its step, so
a crash-looping server costs at most one restart per step. A connection that lived
``HEALTHY_S`` or longer resets the count when it ends. ``now`` (monotonic seconds) is
injectable for tests.

The owner is told (``on_tools_changed``) when the server's tools may have changed: a
``notifications/tools/list_changed`` (at 2026-07-28 through a ``subscriptions/listen``
stream we open; before, sent unasked on the session: stdio's stdout, HTTP's GET stream),
and every reconnect after the first start, since a restarted server may offer other
tools. Listing them again is the owner's (``relist``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import httpx2
import mcp_types
from mcp import Client
from mcp.client.subscriptions import ListenNotSupportedError
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from bot.agent.redact import mask_values
from bot.errors import ToolError
from bot.scrub import MIN_SECRET_CHARS
from tools.env import DEFAULT_LANG, DEFAULT_PATH, EnvRef, check_env, parse_env_value
from tools.mcp.stdio import stdio_transport
from tools.mcp.transport import (
    Ending,
    HttpTransport,
    unbounded_read,
    watch_response,
    watched,
)
from tools.spec import McpServerSpec

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 20.0  # start + initialize + the first tools/list
LISTEN_TIMEOUT_S = 5.0  # for the server to acknowledge our tool change subscription
CLOSE_TIMEOUT_S = 10.0  # the SDK's own stop is bounded (about 6 s); this is a backstop
FIRST_BACKOFF_S = 1.0
MAX_BACKOFF_S = 60.0
HEALTHY_S = 10.0  # a connection that ends sooner than this counts as a failure
STOP_GRACE_S = 5.0  # for a server given up on mid-call to answer again, or be stopped
MAX_LIST_PAGES = 20
MAX_TOOLS = 500
MAX_REASON_CHARS = 300
CLIENT_INFO = mcp_types.Implementation(name="opsloop", version="0.1.0")


class McpDown(ToolError):
    """The server is unreachable, hung or broke the protocol."""


def _reason(exc: BaseException, secrets: Sequence[str] = ()) -> str:
    """What went wrong, in one bounded line, with ``secrets`` masked."""
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _reason(exc.exceptions[0], secrets)
    if isinstance(exc, MCPError):
        text = f"error {exc.code}: {exc.error.message}"
    elif isinstance(exc, ValidationError):
        text = "broke the protocol (a message that is not valid MCP)"
    elif isinstance(exc, TimeoutError):
        text = "did not answer in time"
    else:
        text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    text = mask_values(" ".join(mask_values(text, secrets).split()), secrets)
    return text[:MAX_REASON_CHARS]


def expand(template: str, environ: Mapping[str, str], *, where: str) -> str:
    """A value with ``${NAME}`` references expanded; ``ValueError`` if one is not set."""
    chunks: list[str] = []
    for part in parse_env_value(template):
        if isinstance(part, EnvRef):
            value = environ.get(part.name)
            if value is None:
                raise ValueError(f"{where}: ${{{part.name}}} is not set in the bot's environment")
            chunks.append(value)
        else:
            chunks.append(part)
    return "".join(chunks)


def header_secrets(spec: McpServerSpec, environ: Mapping[str, str]) -> list[str]:
    """The values to mask wherever the server's words are repeated: each expanded
    header value and each ``${NAME}`` value in one, longest first (shorter than
    ``MIN_SECRET_CHARS`` they are left, as the log scrubber leaves them)."""
    found: set[str] = set()
    for template in spec.headers.values():
        parts = parse_env_value(template)
        found.add(expand(template, environ, where="headers"))
        found.update(environ.get(p.name, "") for p in parts if isinstance(p, EnvRef))
    return sorted((s for s in found if len(s) >= MIN_SECRET_CHARS), key=len, reverse=True)


def child_environment(spec: McpServerSpec, environ: Mapping[str, str]) -> dict[str, str]:
    """The stdio child's environment: what command tools get, plus the entry's ``env``."""
    env = {
        "PATH": environ.get("PATH") or DEFAULT_PATH,
        "LANG": environ.get("LANG") or DEFAULT_LANG,
    }
    if environ.get("HOME"):
        env["HOME"] = environ["HOME"]
    check_env(spec.env)
    for key, value in spec.env.items():
        env[key] = expand(value, environ, where=f"env.{key}")
    return env


class McpConnection:
    """The live connection to one server, shared by all of its tools."""

    def __init__(
        self,
        spec: McpServerSpec,
        *,
        environ: Mapping[str, str] | None = None,
        connect_timeout: float = CONNECT_TIMEOUT_S,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self.spec = spec
        self.name = spec.name
        self._environ: Mapping[str, str] = os.environ if environ is None else environ
        self._connect_timeout = connect_timeout
        self._now = now
        self._client: Client | None = None
        self._owner: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._lock = asyncio.Lock()
        self._failures = 0
        self._next_attempt = 0.0
        self._down_reason: str | None = None
        self._started_at = 0.0  # when the current connection was established
        self._live: asyncio.Event | None = None  # its stop event, until its end is counted
        self._closed = False
        self._ending: Ending | None = None  # how the current connection ended, once it did
        self._secrets: list[str] = []  # header values, masked in what we say
        self.on_tools_changed: Callable[[], None] | None = None  # its tools may have changed
        self.stop_grace = STOP_GRACE_S
        self._checks: set[asyncio.Task[None]] = set()  # probes after an abandoned call
        self.missed_change = False  # a change came while ``on_tools_changed`` was unset
        self.starts = 0  # how many times a connection was established

    # -- connecting -----------------------------------------------------------------

    def _transport(self, ending: Ending) -> Any:
        spec = self.spec
        if spec.command is not None:
            return stdio_transport(
                spec.command,
                env=child_environment(spec, self._environ),
                cwd=spec.cwd,
                name=spec.name,
            )
        assert spec.url is not None
        headers = {
            key: expand(value, self._environ, where=f"headers.{key}")
            for key, value in spec.headers.items()
        }
        self._secrets = header_secrets(spec, self._environ)
        http = httpx2.AsyncClient(
            headers=headers,
            timeout=httpx2.Timeout(spec.timeout),
            event_hooks={"request": [unbounded_read], "response": [watch_response(ending)]},
        )
        return HttpTransport(spec.url, http)

    def _why(self, exc: BaseException) -> str:
        return _reason(exc, self._secrets)

    async def _own(
        self, ready: asyncio.Future[Client], stop: asyncio.Event, ending: Ending
    ) -> None:
        try:
            transport = watched(self._transport(ending), ending)
            client = Client(
                transport,
                mode="auto",
                client_info=CLIENT_INFO,
                cache=None,
                message_handler=self._message,
            )
            async with client:
                if not ready.done():
                    ready.set_result(client)
                async with contextlib.AsyncExitStack() as stack:
                    drain = await self._subscribe(client, stack)
                    try:
                        await _first(stop, ending.event)
                    finally:
                        if drain is not None:
                            drain.cancel()
                if not stop.is_set():
                    # The server went away between calls: the next call starts it again.
                    self._noticed(stop, ending)
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else McpDown("stopped"))
            elif not stop.is_set():
                self._down_reason = self._why(exc)
                log.warning("mcp server %r: connection lost: %s", self.name, self._down_reason)
                self._ended(stop)
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            if self._stop is stop:
                self._client = None

    async def _subscribe(
        self, client: Client, stack: contextlib.AsyncExitStack
    ) -> asyncio.Task[None] | None:
        """At protocol 2026-07-28 a server's change events come only to a
        ``subscriptions/listen`` stream: open one for tool changes (the SDK tees each event
        to ``_message`` as a ``ToolListChangedNotification``) and drain it. Older
        versions send the notification unasked."""
        try:
            async with asyncio.timeout(LISTEN_TIMEOUT_S):
                sub = await stack.enter_async_context(client.listen(tools_list_changed=True))
        except ListenNotSupportedError:
            return None
        except Exception as exc:
            log.info("mcp server %r: no tool change events: %s", self.name, self._why(exc))
            return None

        async def drain() -> None:
            with contextlib.suppress(Exception):
                async for _ in sub:
                    pass

        return asyncio.create_task(drain(), name=f"mcp-listen:{self.name}")

    async def _message(self, message: Any) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            self._tools_changed()

    def _tools_changed(self) -> None:
        if self.on_tools_changed is None:
            self.missed_change = True  # before its owner watched: told when it does
            return
        try:
            self.on_tools_changed()
        except Exception:
            log.exception("mcp server %r: the tools-changed hook failed", self.name)

    async def _connect(self) -> Client:
        stop, ending = asyncio.Event(), Ending()
        ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        owner = asyncio.create_task(self._own(ready, stop, ending), name=f"mcp:{self.name}")
        self._owner, self._stop, self._ending = owner, stop, ending
        try:
            async with asyncio.timeout(self._connect_timeout):
                client = await asyncio.shield(ready)
        except BaseException as exc:
            await self._end(owner, stop)
            if ready.done() and not ready.cancelled():
                ready.exception()  # retrieved: its failure is reported below, not at GC
            if isinstance(exc, TimeoutError):
                raise McpDown(
                    f"mcp server {self.name!r} did not finish initialize within "
                    f"{self._connect_timeout:g}s"
                ) from None
            if isinstance(exc, Exception):
                raise McpDown(
                    f"mcp server {self.name!r} could not start: {self._why(exc)}"
                ) from None
            raise
        self._client = client
        self._started_at, self._live = self._now(), stop
        self.starts += 1
        return client

    async def start(self) -> list[mcp_types.Tool]:
        """Connect and list the server's tools (at most ``MAX_TOOLS``); ``McpDown``."""
        async with self._lock:
            client = await self._connect()
            try:
                return await self._list(client)
            except McpDown:
                await self._drop()
                raise

    async def relist(self) -> list[mcp_types.Tool]:
        """The server's tools listed again (after ``list_changed``); ``McpDown``."""
        return await self._list(await self._ensure())

    async def _list(self, client: Client) -> list[mcp_types.Tool]:
        try:
            async with asyncio.timeout(self._connect_timeout):
                tools: list[mcp_types.Tool] = []
                cursor: str | None = None
                for _ in range(MAX_LIST_PAGES):
                    page = await client.list_tools(cursor=cursor)
                    tools.extend(page.tools)
                    cursor = page.next_cursor
                    if cursor is None or len(tools) >= MAX_TOOLS:
                        break
        except Exception as exc:
            raise McpDown(
                f"mcp server {self.name!r} could not list its tools: {self._why(exc)}"
            ) from None
        if len(tools) > MAX_TOOLS:
            log.warning("mcp server %r: only the first %d tools are used", self.name, MAX_TOOLS)
        return tools[:MAX_TOOLS]

    def _live_client(self) -> Client | None:
        """The current client, unless its connection ended (or is ending)."""
        owner, ending = self._owner, self._ending
        if owner is None or owner.done() or (ending is not None and ending.event.is_set()):
            return None
        return self._client

    def _noticed(self, stop: asyncio.Event, ending: Ending) -> None:
        """The connection of ``stop`` ended, as ``ending`` says: counted once, logged once."""
        if self._live is not stop:
            return
        self._down_reason = ending.why or "the server closed the connection"
        log.warning("mcp server %r: %s", self.name, self._down_reason)
        self._ended(stop)

    async def _ensure(self) -> Client:
        """The live client, reconnecting (with backoff) if the last one broke; a
        reconnect after the first start tells the owner its tools may have changed."""
        if (client := self._live_client()) is not None:
            return client
        if self._closed:
            raise McpDown(f"mcp server {self.name!r} is closed")
        async with self._lock:
            if (client := self._live_client()) is not None:
                return client
            if self._stop is not None and self._ending is not None and self._ending.event.is_set():
                self._noticed(self._stop, self._ending)  # before its owner got round to it
            now = self._now()
            if now < self._next_attempt:
                raise McpDown(
                    f"mcp server {self.name!r} is restarting after repeated failures "
                    f"({self._down_reason or 'not connected'}); next attempt in "
                    f"{max(1, math.ceil(self._next_attempt - now))}s"
                )
            await self._drop()
            try:
                client = await self._connect()
            except McpDown as exc:
                self._failures += 1
                self._next_attempt = self._now() + _backoff(self._failures)
                self._down_reason = str(exc).removeprefix(f"mcp server {self.name!r} ")
                raise
            # The count is reset only by a connection that proves healthy (``_ended``).
            log.info("mcp server %r: reconnected", self.name)
            self._down_reason = None
            if self.starts > 1:  # a restarted server may offer other tools
                self._tools_changed()
            return client

    def _ended(self, stop: asyncio.Event | None) -> None:
        """The connection of ``stop`` ended unexpectedly: once per connection, a failure
        for the backoff if it was short-lived, else the end of a healthy one."""
        if stop is None or self._live is not stop:
            return
        self._live = None
        now = self._now()
        lived = now - self._started_at
        if lived >= HEALTHY_S:
            self._failures, self._next_attempt = 0, 0.0
            return
        self._failures += 1
        # The first short-lived end is restarted at once; each further one waits its step.
        wait = _backoff(self._failures - 1) if self._failures > 1 else 0.0
        self._next_attempt = now + wait
        if wait:
            log.warning(
                "mcp server %r: ended %.1fs after it started (%d times in a row); "
                "next restart attempt in %gs",
                self.name,
                lived,
                self._failures,
                wait,
            )

    async def ended(self) -> None:
        """Until the current connection ends (the server went away, or ``aclose``)."""
        owner = self._owner
        if owner is not None:
            await asyncio.wait({owner})

    # -- calling --------------------------------------------------------------------

    async def call(
        self,
        tool: str,
        arguments: dict[str, Any],
        *,
        time_limit: float,
        meta: dict[str, Any] | None = None,
        progress: ProgressFnT | None = None,
    ) -> mcp_types.CallToolResult:
        """One ``tools/call`` bounded by ``time_limit``; ``McpDown`` for anything but a
        result."""
        timeout = time_limit
        client = await self._ensure()
        stop, ending = self._stop, self._ending  # this connection's, for counting its end
        try:
            async with asyncio.timeout(timeout):
                return await client.call_tool(
                    tool,
                    arguments,
                    read_timeout_seconds=timeout,
                    progress_callback=progress,
                    meta=meta,  # type: ignore[arg-type]
                )
        except asyncio.CancelledError:  # Stop or the job's deadline: the SDK told the server
            self._check_alive(client, stop)
            raise
        except TimeoutError:
            self._check_alive(client, stop)
            raise McpDown(f"mcp server {self.name!r} did not answer within {timeout:g}s") from None
        except MCPError as exc:
            if exc.code == mcp_types.CONNECTION_CLOSED:
                await self._lost("closed the connection", stop)
                raise McpDown(
                    f"mcp server {self.name!r} closed the connection during the call"
                ) from None
            if ending is not None and ending.why is not None:  # e.g. it forgot our session
                await self._lost(ending.why, stop)
                raise McpDown(
                    f"mcp server {self.name!r} lost the connection during the call: "
                    f"{ending.why}; the next call reconnects ({self._why(exc)})"
                ) from None
            if exc.code == mcp_types.REQUEST_TIMEOUT:
                self._check_alive(client, stop)
                raise McpDown(
                    f"mcp server {self.name!r} did not answer within {timeout:g}s"
                ) from None
            raise McpDown(f"mcp server {self.name!r}: {self._why(exc)}") from None
        except (ValidationError, ValueError) as exc:
            raise McpDown(f"mcp server {self.name!r} {self._why(exc)}") from None
        except (OSError, httpx2.HTTPError, ExceptionGroup) as exc:
            await self._lost(self._why(exc), stop)
            raise McpDown(f"mcp server {self.name!r} is unreachable: {self._why(exc)}") from None

    def _check_alive(self, client: Client, stop: asyncio.Event | None) -> None:
        """After a call given up on (cancelled, or past its time; the server was sent
        ``notifications/cancelled``), the server must still answer a request within
        ``stop_grace``: one that does not (still stuck in the abandoned work, e.g. a
        blocking handler) is stopped — a stdio child with its process group — and the
        next call starts it again."""
        if self._closed:
            return
        task = asyncio.create_task(self._ping_or_stop(client, stop), name=f"mcp-probe:{self.name}")
        self._checks.add(task)
        task.add_done_callback(self._checks.discard)

    async def _ping_or_stop(self, client: Client, stop: asyncio.Event | None) -> None:
        try:  # the probe: a tools/list past the SDK's cache (ping is gone from 2026-07-28)
            async with asyncio.timeout(self.stop_grace):
                await client.list_tools(cache_mode="bypass")
            return
        except TimeoutError:
            why = f"did not stop a call it was told to cancel within {self.stop_grace:g}s"
        except Exception as exc:
            why = f"did not answer after a cancelled call ({self._why(exc)})"
        if self._client is not client or self._closed:
            return  # already gone or replaced
        log.warning("mcp server %r %s; stopping it (the next call starts it again)", self.name, why)
        await self._lost(why, stop)

    async def _lost(self, reason: str, stop: asyncio.Event | None) -> None:
        self._down_reason = reason
        self._ended(stop)
        async with self._lock:
            await self._drop()

    # -- stopping -------------------------------------------------------------------

    async def _end(self, owner: asyncio.Task[None], stop: asyncio.Event) -> None:
        stop.set()
        done, _ = await asyncio.wait({owner}, timeout=CLOSE_TIMEOUT_S)
        if not done:
            owner.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(owner, CLOSE_TIMEOUT_S)
        elif not owner.cancelled() and owner.exception() is not None:
            log.debug("mcp server %r: stopped with %s", self.name, owner.exception())

    async def _drop(self) -> None:
        owner, stop = self._owner, self._stop
        self._client, self._owner, self._stop, self._ending = None, None, None, None
        if owner is not None and stop is not None:
            await self._end(owner, stop)

    async def aclose(self) -> None:
        """Stop the server (a stdio child and its group) and refuse further calls."""
        self._closed = True
        for task in self._checks:
            task.cancel()
        await asyncio.gather(*self._checks, return_exceptions=True)
        await self._drop()


def _backoff(failures: int) -> float:
    """The wait after ``failures`` (≥ 1) failures in a row: 1, 2, 4 … MAX_BACKOFF_S."""
    return min(FIRST_BACKOFF_S * float(2 ** min(failures - 1, 30)), MAX_BACKOFF_S)


async def _first(*events: asyncio.Event) -> None:
    """Until one of ``events`` is set."""
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()

"""The ``postgres`` pack's connection to PostgreSQL: ``POSTGRES_URL``, bounds and errors.

``POSTGRES_URL`` is a libpq-style URL as asyncpg reads it:
``postgresql://opsloop_ro:PASSWORD@db1:5432/prod?sslmode=verify-full&sslrootcert=/ca.pem``,
or a unix socket, ``postgresql://opsloop_ro@/prod?host=/var/run/postgresql``. :func:`parse_url`
keeps apart what messages may show (``db prod on db1:5432``, never the password) and the
password, so that :func:`mask` can take it out of any text a driver error carries.

**A connection per call, no pool.** :meth:`PgClient.session` opens one connection, runs a
tool's few statements on it and closes it. A job calls these tools a handful of times in
an incident, seconds apart; a connect over loopback costs a few milliseconds (see
``benchmarks/pack_postgres.py``). A pool would hold connections on every monitored server
all day (counted against ``max_connections``, the very limit an incident may be about)
and hand out connections that a failover, a restart, ``idle_session_timeout`` or a
pgbouncer killed meanwhile, so the first call after the event would fail. A fresh
connection also makes "the bot's own backend" exactly one pid, the one running the call.
``statement_cache_size=0``: nothing is reused, and pgbouncer in transaction mode is happy.

**Bounded everything**: the connect (``CONNECT_TIMEOUT_S``, authentication included),
every statement by the server (``statement_timeout`` and ``lock_timeout`` as startup
settings, so they hold for every query on the connection) and by the client (asyncpg's
``timeout``, a little longer, in case the server is the thing that hangs), and the whole
call (``CALL_TIMEOUT_S``). ``default_transaction_read_only=on``: no statement of this pack
writes, and the server guarantees it. ``application_name=opsloop``.

This is the one place driver errors become ``ToolError`` messages in words: server down,
slow, credentials refused (password, no such role, pg_hba), a missing permission. The
SQL is in ``tools.packs.pg_queries``; the text in ``tools.packs.pg_summaries``.
"""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

import asyncpg
import asyncpg.exceptions as pgerr

from bot.agent.redact import mask_values
from bot.errors import ConfigError, ToolError

VARIABLE = "POSTGRES_URL"
APPLICATION_NAME = "opsloop"
CONNECT_TIMEOUT_S = 5.0
STATEMENT_TIMEOUT_MS = 5000
LOCK_TIMEOUT_MS = 1000  # a table locked by a migration must not stall a look
CLIENT_GRACE_S = 2.0  # asyncpg gives up this long after the server should have
CALL_TIMEOUT_S = 15.0  # one tool call: connect and every statement
CLOSE_TIMEOUT_S = 2.0
ERROR_CHARS = 300


@dataclass(frozen=True, slots=True)
class Target:
    """What ``POSTGRES_URL`` points at, as messages may show it."""

    dsn: str
    database: str
    where: str  # host:port (or socket directory:port), never credentials
    user: str
    password: str | None

    @property
    def shown(self) -> str:
        """``db prod on db1:5432``."""
        return f"db {self.database} on {self.where}"

    @property
    def secrets(self) -> tuple[str, ...]:
        if not self.password:
            return ()
        return tuple({self.password, quote(self.password, safe=""), quote(self.password)})


def parse_url(raw: str) -> Target:
    """``POSTGRES_URL`` as a :class:`Target`; ``ConfigError`` naming the variable (and
    never the password) when it is not a postgres URL."""
    text = raw.strip()
    parts = urlsplit(text)
    if parts.scheme not in ("postgres", "postgresql"):
        raise ConfigError(
            f"{VARIABLE} must be a postgresql:// URL "
            f"(postgresql://user:password@host:5432/db), got scheme {parts.scheme or 'none'!r}"
        )
    if parts.fragment:
        raise ConfigError(f"{VARIABLE}: a #fragment makes no sense here")
    query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
    userinfo, at, hosts = parts.netloc.rpartition("@")
    if not at:
        userinfo, hosts = "", parts.netloc
    name, _, secret = userinfo.partition(":")
    user = unquote(name) or query.get("user") or os.environ.get("PGUSER") or "?"
    password = unquote(secret) if secret else query.get("password")
    database = unquote(parts.path.lstrip("/")) or query.get("dbname") or query.get("database")
    host = hosts or query.get("host") or "localhost"
    if "port" in query and ":" not in host:
        host = f"{host}:{query['port']}"
    elif ":" not in host.rsplit("]", 1)[-1] and "," not in host:
        host = f"{host}:5432"
    return Target(
        dsn=text,
        database=database or user,
        where=host,
        user=user,
        password=password or None,
    )


def mask(text: str, target: Target) -> str:
    """``text`` without the password, however a driver quoted it."""
    return mask_values(text, sorted(target.secrets, key=len, reverse=True))


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """The bounds of one call; tests shorten them."""

    connect_timeout: float = CONNECT_TIMEOUT_S
    statement_timeout_ms: int = STATEMENT_TIMEOUT_MS
    lock_timeout_ms: int = LOCK_TIMEOUT_MS
    call_timeout: float = CALL_TIMEOUT_S

    @property
    def client_timeout(self) -> float:
        return self.statement_timeout_ms / 1000 + CLIENT_GRACE_S


class Session:
    """One open connection for one tool call; every query bounded and translated."""

    def __init__(self, conn: Any, client: PgClient) -> None:
        self._conn = conn
        self._client = client

    @property
    def pid(self) -> int:
        """The bot's own backend for this call."""
        return int(self._conn.get_server_pid())

    @property
    def server_version(self) -> str:
        v = self._conn.get_server_version()
        return f"{v.major}.{v.minor}"

    async def fetch(self, sql: str, *args: object) -> list[Any]:
        try:
            rows: list[Any] = await self._conn.fetch(
                sql, *args, timeout=self._client.limits.client_timeout
            )
        except Exception as exc:
            raise self._client.explain(exc) from None
        return rows

    async def fetchrow(self, sql: str, *args: object) -> Any:
        rows = await self.fetch(sql, *args)
        return rows[0] if rows else None


class PgClient:
    """Connections to ``POSTGRES_URL`` for the pack's tools; see the module docstring."""

    def __init__(self, url: str, *, limits: Limits | None = None) -> None:
        self.target = parse_url(url)
        self.limits = limits or Limits()
        self._open: set[Any] = set()

    @property
    def shown(self) -> str:
        return self.target.shown

    @asynccontextmanager
    async def session(self) -> AsyncIterator[Session]:
        """A connection for one call, closed after it; the whole call bounded by
        ``call_timeout``."""
        try:
            async with asyncio.timeout(self.limits.call_timeout):
                conn = await self._connect()
                self._open.add(conn)
                try:
                    yield Session(conn, self)
                finally:
                    self._open.discard(conn)
                    await _close(conn)
        except TimeoutError:
            raise ToolError(
                f"postgres {self.shown} did not finish within {self.limits.call_timeout:g}s"
            ) from None

    async def _connect(self) -> Any:
        limits = self.limits
        settings = {
            "application_name": APPLICATION_NAME,
            "statement_timeout": str(limits.statement_timeout_ms),
            "lock_timeout": str(limits.lock_timeout_ms),
            "idle_in_transaction_session_timeout": str(limits.statement_timeout_ms * 2),
            "default_transaction_read_only": "on",
        }
        try:
            return await asyncpg.connect(
                self.target.dsn,
                timeout=limits.connect_timeout,
                command_timeout=limits.client_timeout,
                statement_cache_size=0,
                server_settings=settings,
            )
        except Exception as exc:
            raise self.explain(exc, connecting=True) from None

    async def aclose(self) -> None:
        """At shutdown: end any call's connection still open."""
        for conn in list(self._open):
            conn.terminate()
        self._open.clear()

    def explain(self, exc: BaseException, *, connecting: bool = False) -> ToolError:
        """A driver or network error as a ``ToolError`` in words, without the password."""
        return ToolError(mask(self._words(exc, connecting), self.target))

    def _words(self, exc: BaseException, connecting: bool) -> str:
        where = f"postgres {self.shown}"
        user = self.target.user
        limits = self.limits
        detail = _clip(str(exc))
        if isinstance(exc, ToolError):
            return str(exc)
        if isinstance(exc, TimeoutError | asyncio.TimeoutError):
            if connecting:
                return (
                    f"{where} is unreachable: no connection within {limits.connect_timeout:g}s "
                    "(server down, overloaded, or a firewall dropping packets)"
                )
            return f"{where} did not answer a query within {limits.client_timeout:g}s"
        if isinstance(exc, pgerr.InvalidPasswordError):
            return (
                f"{where} refused the credentials of role {user!r}: {detail} "
                f"(wrong password, or no such role; check {VARIABLE})"
            )
        if isinstance(exc, pgerr.InvalidAuthorizationSpecificationError):
            if "pg_hba" in detail:
                return f"{where} refused the connection by its pg_hba.conf rules: {detail}"
            return f"{where} refused role {user!r}: {detail}"
        if isinstance(exc, pgerr.InvalidCatalogNameError):
            return f"{where}: {detail} (check the database name in {VARIABLE})"
        if isinstance(exc, pgerr.TooManyConnectionsError) and "for role" in detail:
            return (
                f"{where} refused a connection: {detail} (the role's CONNECTION LIMIT; "
                "other calls of the bot may hold its connections right now)"
            )
        if isinstance(exc, pgerr.TooManyConnectionsError):
            return (
                f"{where} accepts no more connections: {detail}. The server is at "
                "max_connections: that may be the incident itself"
            )
        if isinstance(exc, pgerr.CannotConnectNowError):
            return f"{where} is not accepting connections now: {detail}"
        if isinstance(exc, pgerr.LockNotAvailableError):
            return (
                f"{where}: a query waited more than {limits.lock_timeout_ms} ms for a lock "
                "(lock_timeout); something holds a strong lock (a migration?): see pg_locks"
            )
        if isinstance(exc, pgerr.QueryCanceledError):
            if "statement timeout" in detail:
                return (
                    f"{where} did not finish a query within its statement_timeout "
                    f"({limits.statement_timeout_ms} ms): the server is slow or overloaded"
                )
            return f"{where}: the query was cancelled ({detail})"
        if isinstance(exc, pgerr.InsufficientPrivilegeError):
            return (
                f"{where}: role {user!r} lacks a permission: {detail} (docs/packs.md, 'The role "
                "to create', lists the grants: pg_monitor, pg_signal_backend)"
            )
        if isinstance(exc, pgerr.AdminShutdownError | pgerr.CrashShutdownError):
            return f"{where} is shutting down or restarting: {detail}"
        if isinstance(exc, pgerr.PostgresConnectionError | pgerr.ConnectionDoesNotExistError):
            return f"{where} closed the connection: {detail}"
        if isinstance(exc, pgerr.PostgresError):
            return f"{where}: {detail} (SQLSTATE {exc.sqlstate})"
        if isinstance(exc, ssl.SSLError | ssl.CertificateError):
            return f"{where}: TLS failed: {detail} (sslmode / sslrootcert in {VARIABLE})"
        if isinstance(exc, ConnectionRefusedError):
            return f"{where} is unreachable: connection refused (is the server running?)"
        if isinstance(exc, socket.gaierror):
            return f"{where} is unreachable: cannot resolve the host name ({exc.strerror})"
        if isinstance(exc, pgerr.ClientConfigurationError | ValueError):
            return f"{VARIABLE} is not usable: {detail}"
        if isinstance(exc, OSError):
            reason = exc.strerror or detail
            return f"{where} is unreachable: {reason[:1].lower() + reason[1:]}"
        if isinstance(exc, pgerr.InterfaceError | pgerr.InternalClientError):
            return f"{where}: {detail}"
        return f"{where}: {type(exc).__name__}: {detail}"


async def _close(conn: Any) -> None:
    try:
        await conn.close(timeout=CLOSE_TIMEOUT_S)
    except Exception:
        conn.terminate()


def _clip(text: str, limit: int = ERROR_CHARS) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"

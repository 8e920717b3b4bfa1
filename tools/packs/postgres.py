"""The ``postgres`` pack: what a PostgreSQL server is doing, and stopping a session.

``POSTGRES_URL`` names the server and database (see ``tools.packs.pg_client`` for its
forms, sslmode included). Use a role of its own, with ``pg_monitor`` (to read every
session's state and query, replication and statement statistics) and, for the two
signalling tools, ``pg_signal_backend``::

    CREATE ROLE opsloop_ro LOGIN PASSWORD '…' IN ROLE pg_monitor, pg_signal_backend;

    pg_activity             read-only    sessions doing something, longest first
    pg_locks                read-only    blocking chains: who blocks whom, for how long
    pg_replication          read-only    replicas and lag (primary) or own lag (standby)
    pg_database_stats       read-only    connections, cache hits, deadlocks, temp, tables
    pg_top_queries          read-only    pg_stat_statements, or how to enable it
    pg_cancel_backend(pid)  mutating     cancel the session's current query
    pg_terminate_backend(pid) destructive  end the session; the dry run shows it

A pid that is not a session, the bot's own backend, PostgreSQL's own processes and a
session the role may not signal are refused in words before anything is sent. The
terminate dry run remembers which session it showed (pid and start time, per call id):
when the approved call runs and that pid now belongs to another session (pids are
reused), it is refused rather than kill someone else.

This module owns the tools and their flow; the connection, bounds and error words are in
``tools.packs.pg_client``, the SQL in ``tools.packs.pg_queries``, the text in
``tools.packs.pg_summaries`` and ``tools.packs.pg_reports``.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from typing import Annotated, Any, Literal

from pydantic import Field

from bot.agent.tools import CallContext, Tool
from bot.errors import ConfigError, ToolError
from tools.base import tool
from tools.packs import Pack, PackConfig
from tools.packs import pg_queries as sql
from tools.packs import pg_reports as reports
from tools.packs.pg_client import VARIABLE, Limits, PgClient, Session
from tools.packs.pg_summaries import (
    MAX_SESSIONS,
    MAX_SLOTS,
    MAX_STATEMENTS,
    MAX_TABLES,
    QUERY_CHARS,
    Counts,
    Sess,
    activity,
    behind,
    locks,
    plural,
)

TOOL_TIMEOUT_S = 20.0  # the core's bound; the client's (15 s) fires first, in words
LOCK_ROWS = 500  # sessions read for the blocking chains
TABLE_CANDIDATES = 30
TERMINATE_WAIT_MS = 3000
CANCEL_SETTLE_S = 2.0
POLL_S = 0.05
REMEMBERED_DRY_RUNS = 256
PROBE_TIMEOUT_S = 8.0
CONNECTIONS_WARN = 0.8

# PostgreSQL's own processes: pg_cancel/terminate_backend do not signal them.
SERVER_PROCESSES = frozenset(
    {
        "archiver",
        "autovacuum launcher",
        "background writer",
        "checkpointer",
        "logger",
        "logical replication launcher",
        "startup",
        "walreceiver",
        "walwriter",
    }
)

Pid = Annotated[
    int,
    Field(ge=1, le=2_147_483_647, description="The session's pid, as pg_activity shows it."),
]
Signal = Literal["cancel", "terminate"]


class Postgres:
    """The seven tools over one client."""

    def __init__(self, client: PgClient) -> None:
        self.client = client
        # call id → (pid, backend start) of the session a terminate dry run showed
        self._dry_runs: OrderedDict[str, tuple[int, float]] = OrderedDict()

    # -- read-only -------------------------------------------------------------------

    async def activity(self) -> str:
        async with self.client.session() as db:
            counts = Counts.of(await db.fetchrow(sql.ACTIVITY_COUNTS))
            rows = await db.fetch(sql.ACTIVITY, QUERY_CHARS, MAX_SESSIONS)
        total = int(rows[0]["total"]) if rows else 0
        return activity(counts, [Sess.of(r) for r in rows], total=total)

    async def locks(self) -> str:
        async with self.client.session() as db:
            rows = await db.fetch(sql.BLOCKING, QUERY_CHARS, LOCK_ROWS)
        return locks([Sess.of(r) for r in rows])

    async def replication(self) -> str:
        async with self.client.session() as db:
            if (await db.fetchrow(sql.IN_RECOVERY))["standby"]:
                return reports.standby(await db.fetchrow(sql.STANDBY))
            replicas = await db.fetch(sql.REPLICAS, 100)
            slots = await db.fetch(sql.SLOTS, MAX_SLOTS + 1)
            settings = await db.fetchrow(sql.PRIMARY_SETTINGS)
        return reports.primary(replicas, slots, settings)

    async def database_stats(self) -> str:
        async with self.client.session() as db:
            row = await db.fetchrow(sql.DATABASE)
            by_database = await db.fetch(sql.CONNECTIONS_BY_DATABASE, 5)
            estimated = False
            try:
                tables = await db.fetch(sql.LARGEST_TABLES, TABLE_CANDIDATES, MAX_TABLES)
            except ToolError as exc:
                if "lock_timeout" not in str(exc):
                    raise
                estimated = True  # a table is locked (a migration?): never wait on it
                tables = await db.fetch(sql.LARGEST_TABLES_ESTIMATED, TABLE_CANDIDATES, MAX_TABLES)
        if row is None:
            raise ToolError(f"postgres {self.client.shown}: no statistics for this database")
        return reports.database(row, by_database, tables, estimated=estimated)

    async def top_queries(self) -> str:
        async with self.client.session() as db:
            ext = await db.fetchrow(sql.EXTENSION)
            version = ext["version"]
            if version is None:
                return reports.statements_missing(ext)
            old = _version(version) < (1, 8)
            try:
                rows = await db.fetch(
                    sql.STATEMENTS_BEFORE_1_8 if old else sql.STATEMENTS,
                    QUERY_CHARS,
                    MAX_STATEMENTS,
                )
            except ToolError as exc:
                if "shared_preload_libraries" in str(exc):
                    return reports.statements_missing({**dict(ext), "preload": ""})
                raise
            info = await db.fetchrow(sql.STATEMENTS_INFO) if _version(version) >= (1, 9) else None
        return reports.statements(rows, info, version)

    # -- signals ---------------------------------------------------------------------

    async def cancel(self, pid: int) -> str:
        async with self.client.session() as db:
            before, _, blocking = await self._target(db, pid, "cancel")
            described = reports.target(before, blocking)
            if before.state is not None and before.state != "active":  # None: hidden
                raise ToolError(
                    f"pid {pid} is not running a query ({before.state or 'state hidden'}); "
                    f"cancelling does nothing there: {described}. To end its transaction, "
                    "pg_terminate_backend"
                )
            signalled = await self._signal(db, sql.CANCEL, pid)
            if not signalled:
                raise ToolError(f"PostgreSQL did not signal pid {pid} (it ended meanwhile?)")
            after = await self._settled(db, pid, before)
        if after is None:
            return f"Cancelled the query of {described}. The session has ended since."
        return (
            f"Cancelled the query of {described}. The session stays connected, now "
            f"{after.state or 'state hidden'}"
            + (" (its transaction is aborted until it rolls back)" if after.idle_in_xact else "")
        )

    async def terminate(self, pid: int, ctx: CallContext) -> str:
        key = ctx.idempotency_key
        async with self.client.session() as db:
            before, row, blocking = await self._target(db, pid, "terminate")
            started = float(row["backend_start"] or 0.0)
            described = reports.target(before, blocking)
            if ctx.dry_run:
                self._remember(key, pid, started)
                return f"Dry run, nothing terminated: would terminate {described}" + (
                    ". Its open transaction would roll back" if before.xact_s is not None else ""
                )
            shown = self._dry_runs.pop(key, None)
            if shown is not None and shown != (pid, started):
                raise ToolError(
                    f"pid {pid} is no longer the session the approval card showed: that one "
                    f"ended, and the pid now belongs to another ({described}). Nothing "
                    "terminated; look again with pg_activity"
                )
            signalled = await self._signal(db, sql.TERMINATE, pid, TERMINATE_WAIT_MS)
            still = await db.fetchrow(sql.TARGET, QUERY_CHARS, pid)
        if still is not None and float(still["backend_start"] or 0.0) == started:
            return (
                f"Sent terminate to {described}, but it has not exited after "
                f"{TERMINATE_WAIT_MS / 1000:g}s (stuck in I/O or a wait that ignores signals?)"
            )
        if not signalled and still is None:
            return f"pid {pid} ended before the signal reached it: {described}"
        after = f"; {plural(blocking, 'session')} waited behind it" if blocking else ""
        rolled = ", its transaction rolled back" if before.xact_s is not None else ""
        return f"Terminated {described}{rolled}{after}"

    def _remember(self, key: str, pid: int, started: float) -> None:
        self._dry_runs[key] = (pid, started)
        self._dry_runs.move_to_end(key)
        while len(self._dry_runs) > REMEMBERED_DRY_RUNS:
            self._dry_runs.popitem(last=False)

    async def _target(self, db: Session, pid: int, action: Signal) -> tuple[Sess, Any, int]:
        """The session ``pid``, the facts deciding whether we may signal it and how many
        sessions wait behind it; a ``ToolError`` in words when it is no session, ours, or
        not ours to signal."""
        row = await db.fetchrow(sql.TARGET, QUERY_CHARS, pid)
        if row is None:
            raise ToolError(
                f"no session with pid {pid} on {self.client.shown} (it may have ended; "
                "pg_activity lists the current ones)"
            )
        s = Sess.of(row)
        if row["is_self"]:
            raise ToolError(f"pid {pid} is the bot's own connection; refusing to {action} it")
        if s.backend_type in SERVER_PROCESSES:
            raise ToolError(
                f"pid {pid} is PostgreSQL's own {s.backend_type} process, not a session: "
                f"PostgreSQL does not {action} it"
            )
        me = row["me"]
        if row["target_superuser"] and not row["superuser"]:
            raise ToolError(
                f"pid {pid} runs as superuser {s.user or '(a server process)'}: only a superuser "
                f"may {action} it (pg_signal_backend does not reach superusers); role {me} "
                "is not one"
            )
        if not (row["superuser"] or row["same_role"] or row["signal_backend"]):
            raise ToolError(
                f"role {me} may not {action} pid {pid} of role {s.user}: it needs "
                f"pg_signal_backend (GRANT pg_signal_backend TO {me};)"
            )
        waiting = [Sess.of(r) for r in await db.fetch(sql.BLOCKING, QUERY_CHARS, LOCK_ROWS)]
        return s, row, behind(waiting, pid)

    async def _signal(self, db: Session, statement: str, *args: object) -> bool:
        try:
            row = await db.fetchrow(statement, *args)
        except ToolError as exc:
            if "lacks a permission" in str(exc):
                raise ToolError(f"{exc} — refused by PostgreSQL; nothing was signalled") from None
            raise
        return bool(row["signalled"])

    async def _settled(self, db: Session, pid: int, before: Sess) -> Sess | None:
        """The session once the cancel has landed (bounded), or ``None`` if it ended."""
        deadline = time.monotonic() + CANCEL_SETTLE_S
        current = before
        while time.monotonic() < deadline:
            row = await db.fetchrow(sql.TARGET, QUERY_CHARS, pid)
            if row is None:
                return None
            current = Sess.of(row)
            restarted = (current.query_s or 0.0) < (before.query_s or 0.0)  # a new query
            if current.state != "active" or restarted:
                return current
            await asyncio.sleep(POLL_S)
        return current


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def make_tools(client: PgClient) -> Pack:
    """The pack's tools over ``client`` (tests pass one with short limits)."""
    pg = Postgres(client)

    @tool(parallel=True, timeout=TOOL_TIMEOUT_S)
    async def pg_activity() -> str:
        """PostgreSQL sessions that are running a query or hold a transaction open, longest
        first: pid, user@db, application, client, state and for how long, wait event,
        blockers and the query (cut). Starts with connections vs max_connections."""
        return await pg.activity()

    @tool(parallel=True, timeout=TOOL_TIMEOUT_S)
    async def pg_locks() -> str:
        """PostgreSQL blocking chains: which session blocks which (pg_blocking_pids), for
        how long, what each waits for, the biggest chain first."""
        return await pg.locks()

    @tool(parallel=True, timeout=TOOL_TIMEOUT_S)
    async def pg_replication() -> str:
        """PostgreSQL replication: on a primary each replica's state and lag (bytes and
        time) and the replication slots (inactive ones retaining WAL); on a standby its
        own replay lag and WAL receiver state."""
        return await pg.replication()

    @tool(parallel=True, timeout=TOOL_TIMEOUT_S)
    async def pg_database_stats() -> str:
        """PostgreSQL database health: connections vs max_connections, cache hit ratio,
        deadlocks, temp files, size, transaction ID age and the largest tables."""
        return await pg.database_stats()

    @tool(parallel=True, timeout=TOOL_TIMEOUT_S)
    async def pg_top_queries() -> str:
        """The statements that took the most total time, from pg_stat_statements (calls,
        mean and max time, rows, cache hits); says how to enable it when it is missing."""
        return await pg.top_queries()

    @tool(category="mutating", timeout=TOOL_TIMEOUT_S)
    async def pg_cancel_backend(pid: Pid) -> str:
        """Cancel the query a PostgreSQL session is running (pg_cancel_backend); the
        session stays connected. Reports the session and its state afterwards.

        Args:
            pid: The session's pid, as pg_activity or pg_locks shows it.
        """
        return await pg.cancel(pid)

    @tool(category="destructive", timeout=TOOL_TIMEOUT_S)
    async def pg_terminate_backend(pid: Pid, ctx: CallContext) -> str:
        """End a PostgreSQL session (pg_terminate_backend): its connection closes and its
        open transaction rolls back, releasing its locks.

        Args:
            pid: The session's pid, as pg_activity or pg_locks shows it.
        """
        return await pg.terminate(pid, ctx)

    tools: list[Tool] = [
        pg_activity,
        pg_locks,
        pg_replication,
        pg_database_stats,
        pg_top_queries,
        pg_cancel_backend,
        pg_terminate_backend,
    ]
    return Pack(tools=tools, closers=(client.aclose,))


def build(config: PackConfig) -> Pack:
    """The postgres pack for ``POSTGRES_URL``; ``ConfigError`` when it is missing."""
    url = (config.postgres_url or "").strip()
    if not url:
        raise ConfigError(f"{VARIABLE} is required for the postgres pack")
    return make_tools(PgClient(url))


async def probe(config: PackConfig, *, limits: Limits | None = None) -> tuple[str, str]:
    """For ``opsloop check``: (``ok``/``warn``/``fail``, one line), within
    ``PROBE_TIMEOUT_S``: ``db prod on db1:5432: PostgreSQL 15.8, primary, 23/100
    connections, pg_stat_statements missing``."""
    url = (config.postgres_url or "").strip()
    if not url:
        return "fail", f"{VARIABLE} is not set"
    try:
        client = PgClient(url, limits=limits or Limits(call_timeout=PROBE_TIMEOUT_S))
    except ConfigError as exc:
        return "fail", str(exc)
    try:
        async with client.session() as db:
            row = await db.fetchrow(sql.PROBE)
    except ToolError as exc:
        return "fail", str(exc)
    finally:
        await client.aclose()
    used, most = int(row["connections"]), int(row["max_connections"])
    version = str(row["version"]).split(" ", 1)[0]
    parts = [
        f"PostgreSQL {version}",
        "standby" if row["standby"] else "primary",
        f"{used}/{most} connections",
    ]
    verdict = "ok"
    if used >= most * CONNECTIONS_WARN:
        verdict = "warn"
    if row["statements"] is None:
        parts.append("pg_stat_statements missing")
        verdict = "warn"
    if not row["read_all_stats"]:
        parts.append(f"role {row['me']} lacks pg_monitor (other sessions' queries hidden)")
        verdict = "warn"
    if not row["signal_backend"]:
        parts.append(f"role {row['me']} lacks pg_signal_backend (cancel/terminate refused)")
        verdict = "warn"
    return verdict, f"{client.shown}: {', '.join(parts)}"

"""The ``postgres`` eval backend: a real PostgreSQL 15 primary (and, when a case needs it,
a streaming standby) on loopback, and the incidents its faults open sessions for.

The server is ``bot.emulator.postgres_server.ManagedPostgres`` (it runs as the
``postgres`` user when we are root). Its database ``shop`` (tables ``customers``,
``orders``, ``events``; ``pg_stat_statements`` created) is set up once per machine in a
template data directory under the temp dir (keyed by a hash of everything that goes into
it; 1 MB WAL segments, its WAL reset after a clean shutdown, so it is small), which each
start copies into ``/dev/shm`` when that is writable (a busy disk made the copy most of a
start): a start is a copy and a postmaster start, about half a second, not an ``initdb``
and a data load. ``max_connections`` is :data:`MAX_CONNECTIONS` (small, so exhausting it
is cheap) and parallel query is off (a runaway query is one process, which we renice).
After the start and each ``reset`` the statement statistics are reset and a quiet day's
workload runs, so ``pg_top_queries`` shows that and nothing an earlier case left.

The packs reach it as role ``opsloop_ro`` (pg_monitor + pg_signal_backend) on db ``shop``
over TCP. The standby (``replica1``, a ``pg_basebackup`` with slot ``replica1``) starts on
the first fault that needs it and stays until ``stop``.

Every fault is real sessions of role ``app`` that this backend holds open (asyncpg
connections over TCP, each with its ``application_name``), ended on the server on exit
(a closed client does not stop a query the server is busy with). Faults and
their parameters (``with:``), with the defaults:

* ``lock_chain`` (blocker_app invoice-batch, waiter_app checkout, waiters 4, row 42,
  comment none): the blocker updates ``orders`` row 42 in a transaction and sits idle in
  it; the waiters update the same row and wait behind it. ``comment`` is written as an SQL
  comment before the blocker's statement, so it shows in its query text. Facts:
  ``blocker_pid``, ``waiter_pid`` (the longest waiting), ``waiter_pids`` (comma
  separated), ``blocker_app``, ``waiter_app``, ``table``.
* ``idle_in_transaction`` (app psql, waiters 0): a person's session that updated a
  ``customers`` row and never committed; ``waiters`` sessions (app crm-sync) wait behind it.
  Facts: ``pid``, ``application_name``, ``waiter_pids``.
* ``replication_lag`` (app event-ingest): replay paused on the standby
  (``pg_wal_replay_pause()``) while the primary writes on (a bulk insert, WAL switches,
  then a batch every half second): the replica falls tens of MB behind, more every second.
  Facts: ``replica`` (replica1), ``application_name``. Exit resumes replay.
* ``runaway_query`` (app reporting): a report joining ``customers`` and ``orders`` without
  a join condition (hundreds of millions of rows), run again when it ends, reniced so it
  burns only idle CPU. Facts: ``pid``, ``application_name``.
* ``connection_exhaustion`` (app leaky-pool, connections MAX_CONNECTIONS - 7,
  in_transaction 5): a pool leaking connections, the last few left idle in transaction.
  Facts: ``application_name``, ``connections``, ``max_connections``, ``pids`` (of those in
  transaction).

``reset`` ends every leftover ``app`` session and resumes replay; ``stop`` stops both
servers and removes their directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from bot.emulator.postgres_server import (
    BIN,
    HBA,
    PASSWORDS,
    SETTINGS,
    SUPERUSER,
    ManagedPostgres,
    PgCluster,
    PostgresStartError,
    _owned_dir,
    _run,
    _server_argv,
)
from bot.evals.backends.base import BackendError, Facts, Reach

DATABASE = "shop"
MAX_CONNECTIONS = 30
RESERVED = 3  # superuser_reserved_connections
WAIT_S = 10.0
POLL_S = 0.03
CONNECT_TIMEOUT_S = 10.0
LAG_BYTES = 20 << 20  # how far behind the standby is made to fall at once (> the pack's 16 MB)
INGEST_EVERY_S = 0.5
TEMPLATE_PREFIX = "opsloop-eval-pg-template-"
RUN_PREFIX = "opsloop-eval-pg-"
SHM = "/dev/shm"

OVERRIDES = {
    "max_connections": str(MAX_CONNECTIONS),
    "superuser_reserved_connections": str(RESERVED),
    "max_parallel_workers_per_gather": "0",  # a runaway query is one process
    "shared_buffers": "'16MB'",
    "min_wal_size": "'2MB'",  # keep few WAL segments around
}

ROLES_SQL = f"""\
CREATE ROLE opsloop_ro LOGIN PASSWORD '{PASSWORDS["opsloop_ro"]}' IN ROLE pg_monitor, pg_signal_backend;
CREATE ROLE app LOGIN PASSWORD '{PASSWORDS["app"]}';
CREATE ROLE replicator LOGIN REPLICATION PASSWORD '{PASSWORDS["replicator"]}';
CREATE DATABASE shop OWNER app;
"""  # noqa: E501

SHOP_SQL = """\
CREATE EXTENSION pg_stat_statements;
SET ROLE app;
CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, email text NOT NULL);
INSERT INTO customers SELECT i, 'customer ' || i, 'c' || i || '@example.com'
  FROM generate_series(1, 5000) i;
CREATE TABLE orders (
  id bigint PRIMARY KEY, customer_id int NOT NULL REFERENCES customers,
  status text NOT NULL, total numeric(10, 2) NOT NULL, created timestamptz NOT NULL
);
INSERT INTO orders SELECT i, 1 + i % 5000, (ARRAY['paid', 'shipped', 'new'])[1 + i % 3],
  (i % 997) / 10.0, timestamptz '2026-11-01' + i * interval '1 minute'
  FROM generate_series(1, 40000) i;
CREATE INDEX orders_customer ON orders (customer_id);
CREATE TABLE events (id bigserial PRIMARY KEY, kind text NOT NULL, payload text NOT NULL,
  at timestamptz NOT NULL DEFAULT now());
INSERT INTO events (kind, payload) SELECT 'view', md5(i::text) FROM generate_series(1, 2000) i;
SELECT count(*) FROM orders WHERE customer_id = 17;
SELECT c.name, sum(o.total) FROM customers c JOIN orders o ON o.customer_id = c.id
  GROUP BY c.name ORDER BY 2 DESC LIMIT 10;
RESET ROLE;
"""

# What each fault's sessions run.
BLOCKER_SQL = "UPDATE orders SET status = 'invoicing' WHERE id = {row}"
WAITER_SQL = "UPDATE orders SET status = 'paid' WHERE id = {row}"
FORGOTTEN_SQL = "UPDATE customers SET email = 'jane.doe@example.org' WHERE id = 7"
FORGOTTEN_WAITER_SQL = "UPDATE customers SET name = name WHERE id = 7"
REPORT_SQL = (
    "SELECT c.name, count(*) AS orders, sum(o.total) AS revenue "
    "FROM customers c, orders o WHERE o.status <> 'new' "
    "GROUP BY c.name ORDER BY revenue DESC"
)
POOL_SQL = "SELECT id, status, total FROM orders WHERE customer_id = {customer}"
# A quiet day's workload, what pg_top_queries shows when no fault added to it.
BASELINE_SQL = (
    ("SELECT id, status, total FROM orders WHERE customer_id = $1", 40),
    ("SELECT name, email FROM customers WHERE id = $1", 20),
    ("UPDATE orders SET status = 'shipped' WHERE id = $1 AND status = 'paid'", 10),
    ("INSERT INTO events (kind, payload) VALUES ('view', md5($1::int::text))", 30),
)
DAILY_REPORT_SQL = (
    "SELECT c.name, sum(o.total) AS revenue FROM customers c "
    "JOIN orders o ON o.customer_id = c.id GROUP BY c.name ORDER BY revenue DESC LIMIT 20"
)
INGEST_SQL = (
    "INSERT INTO events (kind, payload) SELECT 'click', md5(random()::text) "
    "FROM generate_series(1, {rows})"
)


def _key() -> str:
    """What the template is made of: a different recipe is a different template."""
    recipe = repr(
        (SETTINGS, OVERRIDES, HBA, ROLES_SQL, SHOP_SQL, str(BIN), os.geteuid(), 2)
    ).encode()
    return hashlib.sha256(recipe).hexdigest()[:16]


def _template() -> Path:
    """The data directory every start copies, built once per recipe (a half-built one is
    never used: it is built aside and renamed into place)."""
    final = Path(tempfile.gettempdir()) / f"{TEMPLATE_PREFIX}{_key()}"
    data = final / "data"
    if (final / "ready").is_file():
        return data
    root = _owned_dir(TEMPLATE_PREFIX + "build-")
    server = ManagedPostgres(root, "data")
    try:
        server.init()
        # 1 MB WAL segments (not 16): a data directory of half the size to copy per start
        _run(
            _server_argv("pg_resetwal", "--wal-segsize=1", "-D", str(server.data)),
            what="pg_resetwal",
        )
        with (server.data / "postgresql.conf").open("a") as conf:
            conf.write("".join(f"{k} = {v}\n" for k, v in OVERRIDES.items()))
        server.start()
        server.psql_file(ROLES_SQL, database="postgres")
        server.psql_file(SHOP_SQL, database=DATABASE)
        server.psql("ANALYZE", database=DATABASE)
        server.psql("CHECKPOINT")
        server.stop()
        # after a clean shutdown: drop the WAL segments the setup left for reuse
        _run(_server_argv("pg_resetwal", "-D", str(server.data)), what="pg_resetwal")
        (root / "ready").write_text("")
        try:
            root.rename(final)
        except OSError:  # another process built it meanwhile
            shutil.rmtree(root, ignore_errors=True)
    except BaseException:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
        raise
    return data


def _run_dir() -> Path:
    """Where a started server lives: in memory (``/dev/shm``) when there is such a place,
    since copying the template to a busy disk is most of a start; else the temp dir."""
    shm = Path(SHM)
    if not (shm.is_dir() and os.access(shm, os.W_OK | os.X_OK)):
        return _owned_dir(RUN_PREFIX)
    root = Path(tempfile.mkdtemp(prefix=RUN_PREFIX, dir=shm))
    if os.geteuid() == 0:
        entry = pwd.getpwnam(SUPERUSER)
        os.chown(root, entry.pw_uid, entry.pw_gid)
    return root


def _start_primary(folder: Path) -> ManagedPostgres:
    data = _template()
    root = _run_dir()
    primary = ManagedPostgres(root, "primary")
    try:
        subprocess.run(["cp", "-a", str(data), str(primary.data)], check=True, timeout=60)
        primary.start()
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "postgres.txt").write_text(
            f"primary {primary.data} on 127.0.0.1:{primary.port}, log {primary.log_path}\n"
        )
    except BaseException:
        primary.stop()
        shutil.rmtree(root, ignore_errors=True)
        raise
    return primary


def _start_standby(primary: ManagedPostgres) -> ManagedPostgres:
    standby = ManagedPostgres(primary.root, "standby")
    conninfo = f"host=127.0.0.1 port={primary.port} user=replicator application_name=replica1"
    _run(
        _server_argv(
            "pg_basebackup",
            *("-D", str(standby.data), "-d", conninfo, "-R", "-X", "stream", "-c", "fast"),
            *("-C", "-S", "replica1", "--no-sync"),
        ),
        env={"PGPASSWORD": PASSWORDS["replicator"]},
        what="pg_basebackup",
    )
    standby.start()
    PgCluster(primary.root, primary, standby).wait_streaming()
    return standby


def _stop(primary: ManagedPostgres, standby: ManagedPostgres | None) -> None:
    try:
        if standby is not None:
            standby.stop()
    finally:
        primary.stop()
        shutil.rmtree(primary.root, ignore_errors=True)


@dataclass
class _Held:
    """The sessions one fault holds open and the statements they run (released by
    ``PostgresBackend._release``)."""

    conns: list[Any] = field(default_factory=list)
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)

    def run(self, work: Awaitable[Any]) -> None:
        self.tasks.append(asyncio.ensure_future(work))

    def pids(self) -> list[int]:
        return [conn.get_server_pid() for conn in self.conns]


class PostgresBackend:
    """PostgreSQL 15 for eval cases (see the module docstring)."""

    kind: ClassVar[str] = "postgres"
    faults: ClassVar[tuple[str, ...]] = (
        "lock_chain",
        "idle_in_transaction",
        "replication_lag",
        "runaway_query",
        "connection_exhaustion",
    )

    def __init__(self) -> None:
        self.primary: ManagedPostgres | None = None
        self.standby: ManagedPostgres | None = None
        self.start_seconds = 0.0
        self._standby_lock: asyncio.Lock | None = None
        self._held: list[_Held] = []

    # -- life cycle ------------------------------------------------------------------

    async def start(self, folder: Path) -> Reach:
        if not (BIN / "postgres").exists():
            raise BackendError(f"PostgreSQL 15 is not installed ({BIN / 'postgres'} missing)")
        began = time.monotonic()
        try:
            self.primary = await asyncio.to_thread(_start_primary, folder)
        except (PostgresStartError, OSError, subprocess.SubprocessError) as exc:
            raise BackendError(f"PostgreSQL did not start: {exc}") from None
        try:
            await self._baseline()
        except BaseException as exc:
            await self.stop()
            if isinstance(exc, Exception):
                raise BackendError(f"PostgreSQL started but could not be set up: {exc}") from None
            raise
        self.start_seconds = time.monotonic() - began
        return Reach(packs=("postgres",), pack_config={"postgres_url": self.url()})

    def url(self, user: str = "opsloop_ro") -> str:
        """The primary's URL for ``user`` on db ``shop`` (the pack's, by default)."""
        return self._primary().url(user, DATABASE)

    async def reset(self) -> None:
        for held in list(self._held):
            await self._release(held)
        async with self._admin() as db:
            await self._terminate(db, "usename = 'app'")
        await self._resume_replay()
        await self._baseline()

    async def _baseline(self) -> None:
        """Statement statistics as a quiet day leaves them (nothing a case's fault ran,
        such as a forged comment, shows in the next case's ``pg_top_queries``)."""
        import asyncpg

        async with self._admin() as db:
            await db.execute("SELECT pg_stat_statements_reset()")
        primary = self._primary()
        conn = await asyncpg.connect(
            host="127.0.0.1",
            port=primary.port,
            user="app",
            password=PASSWORDS["app"],
            database=DATABASE,
            server_settings={"application_name": "checkout"},
            timeout=CONNECT_TIMEOUT_S,
        )
        try:
            for statement, times in BASELINE_SQL:
                await conn.executemany(statement, [(1 + i * 37,) for i in range(times)])
            await conn.fetch(DAILY_REPORT_SQL)
        finally:
            await conn.close()

    async def stop(self) -> None:
        for held in list(self._held):
            await self._release(held)
        primary, standby = self.primary, self.standby
        self.primary = self.standby = None
        if primary is not None:
            await asyncio.to_thread(_stop, primary, standby)

    # -- faults ----------------------------------------------------------------------

    @asynccontextmanager
    async def fault(self, name: str, params: Mapping[str, Any]) -> AsyncIterator[Facts]:
        inject: Callable[[_Held, Mapping[str, Any]], Awaitable[dict[str, str]]] | None = {
            "lock_chain": self._lock_chain,
            "idle_in_transaction": self._idle_in_transaction,
            "replication_lag": self._replication_lag,
            "runaway_query": self._runaway_query,
            "connection_exhaustion": self._connection_exhaustion,
        }.get(name)
        if inject is None:
            raise BackendError(f"postgres has no fault {name!r} (known: {', '.join(self.faults)})")
        held = _Held()
        self._held.append(held)
        try:
            try:
                facts = await inject(held, params)
            except (OSError, TimeoutError, PostgresStartError) as exc:
                raise BackendError(f"postgres fault {name} not injected: {exc}") from None
            yield facts
        finally:
            await self._release(held)
            if name == "replication_lag":
                await self._resume_replay()

    async def _lock_chain(self, held: _Held, params: Mapping[str, Any]) -> dict[str, str]:
        row = int(params.get("row", 42))
        blocker_app = str(params.get("blocker_app", "invoice-batch"))
        waiter_app = str(params.get("waiter_app", "checkout"))
        statement = BLOCKER_SQL.format(row=row)
        comment = params.get("comment")
        if comment:
            statement = "-- " + " ".join(str(comment).split()) + "\n" + statement
        blocker = await self._connect(held, blocker_app)
        await blocker.execute("BEGIN")
        await blocker.execute(statement)
        waiters = await self._waiters(
            held, waiter_app, WAITER_SQL.format(row=row), int(params.get("waiters", 4))
        )
        return {
            "blocker_pid": str(blocker.get_server_pid()),
            "waiter_pid": waiters[0] if waiters else "",
            "waiter_pids": ",".join(waiters),
            "blocker_app": blocker_app,
            "waiter_app": waiter_app,
            "table": "orders",
        }

    async def _idle_in_transaction(self, held: _Held, params: Mapping[str, Any]) -> dict[str, str]:
        app = str(params.get("app", "psql"))
        conn = await self._connect(held, app)
        await conn.execute("BEGIN")
        await conn.execute(FORGOTTEN_SQL)
        waiters = await self._waiters(
            held, "crm-sync", FORGOTTEN_WAITER_SQL, int(params.get("waiters", 0))
        )
        return {
            "pid": str(conn.get_server_pid()),
            "application_name": app,
            "waiter_pids": ",".join(waiters),
        }

    async def _runaway_query(self, held: _Held, params: Mapping[str, Any]) -> dict[str, str]:
        app = str(params.get("app", "reporting"))
        conn = await self._connect(held, app)
        pid = conn.get_server_pid()
        with contextlib.suppress(OSError):  # best effort: burn only CPU nobody else wants
            os.setpriority(os.PRIO_PROCESS, pid, 19)

        async def report() -> None:
            # A report job that runs its query again when it ends; a cancel stops it.
            while True:
                await conn.execute(REPORT_SQL)

        held.run(report())
        await self._until(
            "SELECT state = 'active' AND query_start < now() FROM pg_stat_activity WHERE pid = $1",
            pid,
            what="the report to run",
        )
        return {"pid": str(pid), "application_name": app}

    async def _connection_exhaustion(
        self, held: _Held, params: Mapping[str, Any]
    ) -> dict[str, str]:
        app = str(params.get("app", "leaky-pool"))
        count = int(params.get("connections", MAX_CONNECTIONS - RESERVED - 4))
        in_xact = min(int(params.get("in_transaction", 5)), count)
        conns = await asyncio.gather(*(self._connect(held, app) for _ in range(count)))
        pids: list[str] = []
        for i, conn in enumerate(conns):
            if i >= count - in_xact:
                await conn.execute("BEGIN")
                pids.append(str(conn.get_server_pid()))
            await conn.execute(POOL_SQL.format(customer=17 + i))
        return {
            "application_name": app,
            "connections": str(count),
            "max_connections": str(MAX_CONNECTIONS),
            "pids": ",".join(pids),
        }

    async def _replication_lag(self, held: _Held, params: Mapping[str, Any]) -> dict[str, str]:
        standby = await self._ensure_standby()
        async with self._admin(standby, "postgres") as db:
            await db.execute("SELECT pg_wal_replay_pause()")
            await self._poll(
                db, "SELECT pg_get_wal_replay_pause_state() = 'paused'", what="replay to pause"
            )
        app = str(params.get("app", "event-ingest"))
        conn = await self._connect(held, app)
        await conn.execute(INGEST_SQL.format(rows=20_000))
        async with self._admin() as db:
            while True:  # each switch after a write moves the primary to the next segment
                behind = await db.fetchval(
                    "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn) "
                    "FROM pg_stat_replication WHERE application_name = 'replica1'"
                )
                if behind is not None and behind >= LAG_BYTES:
                    break
                await conn.execute(INGEST_SQL.format(rows=100))
                await db.execute("SELECT pg_switch_wal()")

        async def ingest() -> None:
            while True:
                await asyncio.sleep(INGEST_EVERY_S)
                await conn.execute(INGEST_SQL.format(rows=200))

        held.run(ingest())
        return {"replica": "replica1", "application_name": app}

    async def _release(self, held: _Held) -> None:
        """End a fault's sessions on the server (a client that goes away does not stop a
        query the server is busy with), then their tasks and connections."""
        if held in self._held:
            self._held.remove(held)
        pids = held.pids()
        if pids and self.primary is not None and self.primary.running:
            async with self._admin() as db:
                await self._terminate(db, "pid = ANY($1::int[])", pids)
        for task in held.tasks:
            task.cancel()
        await asyncio.gather(*held.tasks, return_exceptions=True)
        for conn in held.conns:
            conn.terminate()
        held.conns.clear()
        held.tasks.clear()

    # -- helpers ---------------------------------------------------------------------

    def _primary(self) -> ManagedPostgres:
        if self.primary is None:
            raise BackendError("the postgres backend is not started")
        return self.primary

    async def _connect(self, held: _Held, app: str) -> Any:
        """A session of role ``app`` over TCP, as an application would open it."""
        import asyncpg  # the postgres extra; only a case that needs it imports it

        primary = self._primary()
        conn = await asyncpg.connect(
            host="127.0.0.1",
            port=primary.port,
            user="app",
            password=PASSWORDS["app"],
            database=DATABASE,
            server_settings={"application_name": app},
            timeout=CONNECT_TIMEOUT_S,
            statement_cache_size=0,
        )
        held.conns.append(conn)
        return conn

    async def _waiters(self, held: _Held, app: str, statement: str, n: int) -> list[str]:
        """``n`` sessions running ``statement``, each waiting on a lock before the next
        starts (the first waits longest)."""
        pids: list[str] = []
        for _ in range(n):
            conn = await self._connect(held, app)
            held.run(conn.execute(statement))
            await self._until(
                "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = $1",
                conn.get_server_pid(),
                what="a session to wait on the lock",
            )
            pids.append(str(conn.get_server_pid()))
        return pids

    @asynccontextmanager
    async def _admin(
        self, server: ManagedPostgres | None = None, database: str = DATABASE
    ) -> AsyncIterator[Any]:
        """A superuser connection over the server's unix socket."""
        import asyncpg

        server = server or self._primary()
        db = await asyncpg.connect(
            **server.connect_kwargs(SUPERUSER, database),
            timeout=CONNECT_TIMEOUT_S,
            # the backend's own statements stay out of pg_top_queries
            server_settings={"application_name": "eval-admin", "pg_stat_statements.track": "none"},
        )
        try:
            yield db
        finally:
            await db.close()

    async def _until(self, sql: str, *args: object, what: str) -> None:
        async with self._admin() as db:
            await self._poll(db, sql, *args, what=what)

    @classmethod
    async def _terminate(cls, db: Any, where: str, *args: object) -> None:
        """End the sessions ``where`` says, all signalled at once, and wait until they
        are gone (``pg_terminate_backend``'s own timeout polls each one in turn)."""
        sessions = f"FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND {where}"
        await db.execute(f"SELECT pg_terminate_backend(pid) {sessions}", *args)
        await cls._poll(
            db, f"SELECT NOT EXISTS (SELECT 1 {sessions})", *args, what="sessions to end"
        )

    @staticmethod
    async def _poll(db: Any, sql: str, *args: object, what: str) -> None:
        deadline = time.monotonic() + WAIT_S
        while not await db.fetchval(sql, *args):
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out waiting for {what}")
            await asyncio.sleep(POLL_S)

    async def _ensure_standby(self) -> ManagedPostgres:
        if self._standby_lock is None:
            self._standby_lock = asyncio.Lock()
        async with self._standby_lock:
            if self.standby is None:
                self.standby = await asyncio.to_thread(_start_standby, self._primary())
        return self.standby

    async def _resume_replay(self) -> None:
        if self.standby is None or not self.standby.running:
            return
        async with self._admin(self.standby, "postgres") as db:
            await db.execute(
                "SELECT pg_wal_replay_resume() WHERE pg_get_wal_replay_pause_state() <> "
                "'not paused'"
            )

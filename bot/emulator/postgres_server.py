"""A real PostgreSQL 15 (Debian's ``/usr/lib/postgresql/15/bin``) for the postgres pack.

:class:`ManagedPostgres` is one cluster in a temporary directory: ``initdb``, a free
loopback port, its unix socket in that directory, its log in a file there (the tail is in
any start-up error). ``initdb`` and ``postgres`` refuse to run as root: as root they run
as the ``postgres`` user the Debian package created (``runuser -u postgres --``), on a
directory made under ``/tmp`` (pytest's own tmp dirs are mode 0700, closed to that user);
otherwise they run as the current user. ``stop`` sends SIGINT to the postmaster (fast
shutdown), then SIGQUIT and SIGKILL after ``STOP_TIMEOUT_S`` each, and removes the
directory: nothing is left running.

:class:`PgCluster` is what the tests and the benchmark stand up (``start_cluster``):

* a primary with ``pg_stat_statements`` preloaded, ``autovacuum`` off (the goldens must
  not move under a vacuum), ``deadlock_timeout`` 100 ms, and these roles (passwords over
  TCP, scram-sha-256; the unix socket trusts everyone):

      opsloop_ro        pg_monitor + pg_signal_backend (what docs/packs.md recommends)
      opsloop_nosignal  pg_monitor only (cancel/terminate of others' sessions refused)
      app               the application whose sessions block, wait and get killed
      hba_rejected      refused by a ``reject`` line of pg_hba.conf
      nomonitor         no grants: other roles' sessions are hidden from it
      capped            CONNECTION LIMIT 0: every connection refused
      replicator        REPLICATION, for the standby

* databases ``shop`` (tables with data, one temp file and one deadlock in its statistics,
  ``pg_stat_statements`` created; nothing in the tests writes there, so its statistics
  stay put) and ``plain`` (no extension; table ``accounts`` is where tests block);
* a streaming standby (``pg_basebackup -R`` with slot ``replica1``, on a second port,
  ``application_name`` ``replica1``) and an inactive slot ``forgotten`` that retains WAL.

Used by the postgres pack's tests (``tests/tools/packs/postgres_backend.py``: the
session-scoped fixture ``pg_cluster``) and ``benchmarks/pack_postgres.py``.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Self

BIN = Path("/usr/lib/postgresql/15/bin")
SUPERUSER = "postgres"
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0
COMMAND_TIMEOUT_S = 120.0
POLL_S = 0.05
LOG_TAIL_CHARS = 3000

PASSWORDS = {
    "opsloop_ro": "ro-secret-Pa55",
    "opsloop_nosignal": "nosig-secret-Pa55",
    "app": "app-secret-Pa55",
    "hba_rejected": "hba-secret-Pa55",
    "nomonitor": "nomon-secret-Pa55",
    "capped": "capped-secret-Pa55",
    "replicator": "rep-secret-Pa55",
}

SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "max_connections": "100",
    "shared_preload_libraries": "'pg_stat_statements'",
    "pg_stat_statements.track": "top",
    "autovacuum": "off",
    "deadlock_timeout": "'100ms'",
    "wal_level": "replica",
    "max_wal_senders": "5",
    "max_replication_slots": "5",
    "hot_standby": "on",
    "fsync": "off",  # a throw-away cluster: no need to wait for the disk
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "log_min_messages": "warning",
    "shared_buffers": "'32MB'",
    "track_io_timing": "on",
}

HBA = """\
local   all             all                                     trust
local   replication     all                                     trust
host    all             hba_rejected    127.0.0.1/32            reject
host    all             all             127.0.0.1/32            scram-sha-256
host    replication     replicator      127.0.0.1/32            scram-sha-256
"""

SETUP_SQL = f"""\
CREATE ROLE opsloop_ro LOGIN PASSWORD '{PASSWORDS["opsloop_ro"]}' IN ROLE pg_monitor, pg_signal_backend;
CREATE ROLE opsloop_nosignal LOGIN PASSWORD '{PASSWORDS["opsloop_nosignal"]}' IN ROLE pg_monitor;
CREATE ROLE app LOGIN PASSWORD '{PASSWORDS["app"]}';
CREATE ROLE hba_rejected LOGIN PASSWORD '{PASSWORDS["hba_rejected"]}';
CREATE ROLE nomonitor LOGIN PASSWORD '{PASSWORDS["nomonitor"]}';
CREATE ROLE capped LOGIN PASSWORD '{PASSWORDS["capped"]}' CONNECTION LIMIT 0;
CREATE ROLE replicator LOGIN REPLICATION PASSWORD '{PASSWORDS["replicator"]}';
CREATE DATABASE shop OWNER app;
CREATE DATABASE plain OWNER app;
SELECT pg_create_physical_replication_slot('forgotten', true);
"""  # noqa: E501

SHOP_SQL = """\
CREATE EXTENSION pg_stat_statements;
SET ROLE app;
CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, email text NOT NULL);
INSERT INTO customers SELECT i, 'customer ' || i, 'c' || i || '@example.com'
  FROM generate_series(1, 5000) i;
CREATE TABLE orders (
  id bigint PRIMARY KEY, customer_id int NOT NULL REFERENCES customers,
  total numeric(10, 2) NOT NULL, note text, created timestamptz NOT NULL
);
INSERT INTO orders SELECT i, 1 + i % 5000, (i % 997) / 10.0, repeat('x', i % 200),
  timestamptz '2026-01-01' + i * interval '1 minute' FROM generate_series(1, 40000) i;
CREATE INDEX orders_customer ON orders (customer_id);
CREATE TABLE ledger (id int PRIMARY KEY, amount numeric NOT NULL);
INSERT INTO ledger SELECT i, 0 FROM generate_series(1, 2) i;
CREATE TABLE events (id int, payload text);
INSERT INTO events SELECT i, md5(i::text) FROM generate_series(1, 2000) i;
DELETE FROM events WHERE id % 4 = 0;
SET work_mem = '64kB';
SELECT count(*) FROM (SELECT * FROM orders ORDER BY note DESC, id) AS spilled;
RESET ROLE;
"""

PLAIN_SQL = """\
SET ROLE app;
CREATE TABLE notes (id int PRIMARY KEY, body text);
INSERT INTO notes SELECT i, 'note ' || i FROM generate_series(1, 100) i;
CREATE TABLE accounts (id int PRIMARY KEY, balance numeric NOT NULL);
INSERT INTO accounts SELECT i, 100 FROM generate_series(1, 10) i;
RESET ROLE;
"""


class PostgresStartError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _server_argv(binary: str, *args: str) -> list[str]:
    """The argv of a server binary (``initdb``, ``postgres``, …), run as a user it accepts:
    as root, the superuser's."""
    as_user = ["runuser", "-u", SUPERUSER, "--"] if os.geteuid() == 0 else []
    return [*as_user, str(BIN / binary), *args]


def _run(argv: Sequence[str], *, env: dict[str, str] | None = None, what: str) -> str:
    done = subprocess.run(
        list(argv),
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
    )
    if done.returncode != 0:
        raise PostgresStartError(f"{what} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return done.stdout


def _owned_dir(prefix: str) -> Path:
    """A fresh directory under /tmp that the server user owns."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    if os.geteuid() == 0:
        entry = pwd.getpwnam(SUPERUSER)
        os.chown(path, entry.pw_uid, entry.pw_gid)
    return path


class ManagedPostgres:
    """One cluster: ``init()`` (or a base backup), ``start()``, ``stop()``."""

    def __init__(self, root: Path, name: str, *, port: int | None = None) -> None:
        self.root = root
        self.name = name
        self.data = root / name
        self.socket_dir = root  # short: a socket path must fit in 107 bytes
        self.port = port or free_port()
        self.log_path = root / f"{name}.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    # -- addresses --------------------------------------------------------------------

    def url(self, user: str, database: str, *, password: str | None = None) -> str:
        """A TCP URL, ``postgresql://user:password@127.0.0.1:PORT/db``."""
        secret = PASSWORDS.get(user) if password is None else password
        cred = f"{user}:{secret}" if secret else user
        return f"postgresql://{cred}@127.0.0.1:{self.port}/{database}"

    def socket_url(self, user: str, database: str) -> str:
        return f"postgresql://{user}@/{database}?host={self.socket_dir}&port={self.port}"

    def connect_kwargs(
        self, user: str = SUPERUSER, database: str = "postgres"
    ) -> dict[str, object]:
        """asyncpg keyword arguments over the unix socket (trusted, no password)."""
        return {"host": str(self.socket_dir), "port": self.port, "user": user, "database": database}

    # -- life cycle -------------------------------------------------------------------

    def init(self) -> None:
        _run(
            _server_argv(
                "initdb",
                "-D",
                str(self.data),
                "-U",
                SUPERUSER,
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ),
            what="initdb",
        )
        conf = self.data / "postgresql.conf"
        extra = "".join(f"{key} = {value}\n" for key, value in SETTINGS.items())
        conf.write_text(conf.read_text() + "\n# opsloop tests\n" + extra)
        (self.data / "pg_hba.conf").write_text(HBA)

    def start(self) -> Self:
        self._log = self.log_path.open("ab")
        if os.geteuid() == 0:
            os.chown(self.log_path, *_ids())
        argv = _server_argv(
            "postgres", "-D", str(self.data), "-p", str(self.port), "-k", str(self.socket_dir)
        )
        # Its own session: a test's Ctrl-C does not reach it before stop() runs.
        self._proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise PostgresStartError(f"postgres {self.name} exited:\n{self.log_tail()}")
            ready = subprocess.run(
                [str(BIN / "pg_isready"), "-q", *self._as_superuser()], timeout=10, check=False
            )
            if ready.returncode == 0:
                return self
            time.sleep(POLL_S)
        raise PostgresStartError(f"postgres {self.name} not ready:\n{self.log_tail()}")

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None

    def stop(self) -> None:
        """Fast shutdown, then immediate, then SIGKILL; every wait bounded."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            pid = self.postmaster_pid()
            for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGKILL):
                try:
                    if pid is not None:
                        os.kill(pid, sig)
                    else:
                        proc.send_signal(sig)
                except ProcessLookupError:
                    pass
                try:
                    proc.wait(timeout=STOP_TIMEOUT_S)
                    break
                except subprocess.TimeoutExpired:
                    continue
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=STOP_TIMEOUT_S)
        if self._log is not None:
            self._log.close()
            self._log = None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-LOG_TAIL_CHARS:]
        except OSError:
            return ""

    def psql(self, sql: str, *, database: str = "postgres") -> str:
        """Run SQL as the superuser over the socket; stdout (unaligned, tuples only)."""
        return _run(
            [*self._psql_argv(database, "-A", "-t"), "-c", sql], what=f"psql on {self.name}"
        )

    def deadlock(self, *, database: str) -> None:
        """Two sessions updating ``ledger``'s rows in opposite orders: one of them is
        chosen as the deadlock victim (after ``deadlock_timeout``)."""
        orders = ((1, 2), (2, 1))
        procs = []
        for first, second in orders:
            script = (
                f"BEGIN; UPDATE ledger SET amount = amount + 1 WHERE id = {first}; "
                f"SELECT pg_sleep(0.3); UPDATE ledger SET amount = amount + 1 WHERE id = {second}; "
                "COMMIT;"
            )
            procs.append(
                subprocess.Popen(
                    [*self._psql_argv(database), "-c", script],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                )
            )
        errors = b""
        for proc in procs:
            _, err = proc.communicate(timeout=COMMAND_TIMEOUT_S)
            errors += err
        if b"deadlock detected" not in errors:
            raise PostgresStartError(f"no deadlock happened: {errors.decode()[-500:]}")

    def _as_superuser(self) -> list[str]:
        """A client's options to reach this cluster as the superuser: socket and port."""
        return ["-h", str(self.socket_dir), "-p", str(self.port), "-U", SUPERUSER]

    def _psql_argv(self, database: str, *options: str) -> list[str]:
        """``psql`` on ``database`` as the superuser, stopping at the first error."""
        quiet = [str(BIN / "psql"), "-X", "-q", *options, "-v", "ON_ERROR_STOP=1"]
        return [*quiet, *self._as_superuser(), "-d", database]

    def psql_file(self, sql: str, *, database: str) -> None:
        script = self.root / f"setup-{database}.sql"
        script.write_text(sql)
        _run([*self._psql_argv(database), "-f", str(script)], what=f"setup of {database}")


def _ids() -> tuple[int, int]:
    entry = pwd.getpwnam(SUPERUSER)
    return entry.pw_uid, entry.pw_gid


@dataclass
class PgCluster:
    """The primary, its standby, and the directory both live in."""

    root: Path
    primary: ManagedPostgres
    standby: ManagedPostgres

    def url(self, user: str = "opsloop_ro", database: str = "shop", **kw: str | None) -> str:
        return self.primary.url(user, database, **kw)

    def standby_url(self, user: str = "opsloop_ro", database: str = "shop") -> str:
        return self.standby.url(user, database)

    def stop(self) -> None:
        try:
            self.standby.stop()
        finally:
            self.primary.stop()
            shutil.rmtree(self.root, ignore_errors=True)

    def wait_streaming(self) -> None:
        """Until the standby streams from the primary and has replayed everything."""
        deadline = time.monotonic() + START_TIMEOUT_S
        sql = (
            "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming' "
            "AND replay_lsn >= pg_current_wal_lsn()"
        )
        while time.monotonic() < deadline:
            if self.primary.psql(sql).strip() == "1":
                return
            time.sleep(POLL_S * 4)
        raise PostgresStartError(f"the standby does not stream:\n{self.standby.log_tail()}")


def start_cluster(*, prefix: str = "opsloop-pg-") -> PgCluster:
    """Primary (roles, databases, data), then a streaming standby; see the docstring."""
    root = _owned_dir(prefix)
    primary = ManagedPostgres(root, "primary")
    standby = ManagedPostgres(root, "standby")
    cluster = PgCluster(root=root, primary=primary, standby=standby)
    try:
        primary.init()
        primary.start()
        primary.psql_file(SETUP_SQL, database="postgres")
        primary.psql_file(SHOP_SQL, database="shop")
        primary.psql_file(PLAIN_SQL, database="plain")
        # Once the loading sessions have flushed their statistics: an ANALYZE in the same
        # session would count every row twice (its pending inserts land after it).
        for database in ("shop", "plain"):
            primary.psql("ANALYZE", database=database)
        primary.deadlock(database="shop")
        conninfo = f"host=127.0.0.1 port={primary.port} user=replicator application_name=replica1"
        _run(
            _server_argv(
                "pg_basebackup",
                "-D",
                str(standby.data),
                "-d",
                conninfo,
                "-R",
                "-X",
                "stream",
                "-c",
                "fast",
                "-C",
                "-S",
                "replica1",
                "--no-sync",
            ),
            env={"PGPASSWORD": PASSWORDS["replicator"]},
            what="pg_basebackup",
        )
        standby.start()
        cluster.wait_streaming()
    except BaseException:
        cluster.stop()
        raise
    return cluster

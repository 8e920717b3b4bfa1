"""The postgres pack against a real PostgreSQL 15 primary and its streaming standby.

The cluster (``postgres_backend.PgCluster``) starts once per session. Tests that need
sessions doing something open them with :class:`Crowd` (role ``app``, in db ``plain``):
a row lock held in an open transaction and sessions waiting behind it, a long
``pg_sleep``; every one of them is closed (and, failing that, terminated by the
superuser) when the test ends. Tools run through ``execute`` with validated arguments,
as the agent core calls them.

Golden outputs live in ``golden/postgres/``; pids of the test's own sessions become
their names (``HOLDER``, ``W1``), other volatile parts (durations, ports, WAL sizes,
counters the tests themselves move) are normalised by :func:`normalise`. Regenerate with
``OPSLOOP_UPDATE_GOLDEN=1`` and review the diff.
"""

from __future__ import annotations

import asyncio
import logging
import re
import socket
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

import asyncpg
import pytest
from pydantic import ValidationError

from bot.agent.tools import CallContext, Tool
from bot.errors import ConfigError, ToolError
from tests.tools.packs.golden import GOLDEN_DIR, assert_golden
from tests.tools.packs.postgres_backend import (  # noqa: F401  (pg_cluster is a fixture)
    PASSWORDS,
    PgCluster,
    free_port,
    pg_cluster,
)
from tools.packs import PACK_TOOLS, Pack, PackConfig, load_packs
from tools.packs.pg_client import Limits, PgClient, parse_url
from tools.packs.pg_reports import primary, statements_missing
from tools.packs.pg_summaries import Sess, chains, duration, query_text, size
from tools.packs.postgres import Postgres, build, make_tools, probe

GOLDEN = GOLDEN_DIR / "postgres"
WAIT_S = 15.0
POLL_S = 0.05
SECRETS = tuple(PASSWORDS.values())


# -- helpers -------------------------------------------------------------------------------


def ctx(*, dry_run: bool = False, call_id: str = "call-1") -> CallContext:
    return CallContext(job_id="C1:1.1:j1", call_id=call_id, dry_run=dry_run)


async def run(pack: Pack | Mapping[str, Tool], name: str, /, *, dry_run: bool = False,
              call_id: str = "call-1", **args: Any) -> str:  # fmt: skip
    tools = pack if isinstance(pack, Mapping) else {t.name: t for t in pack.tools}
    chosen = tools[name]
    result = await chosen.execute(
        chosen.args_model.model_validate(args), ctx(dry_run=dry_run, call_id=call_id)
    )
    assert isinstance(result, str)
    for secret in SECRETS:
        assert secret not in result
    return result


async def fails(pack: Pack, name: str, /, **args: Any) -> str:
    with pytest.raises(ToolError) as caught:
        await run(pack, name, **args)
    text = str(caught.value)
    for secret in SECRETS:
        assert secret not in text
    return text


@pytest.fixture
async def pack(pg_cluster: PgCluster) -> AsyncIterator[Pack]:  # noqa: F811
    built = build(PackConfig(postgres_url=pg_cluster.url()))
    yield built
    for close in built.closers:
        await close()


def pack_for(url: str, **limits: Any) -> Pack:
    return make_tools(PgClient(url, limits=Limits(**limits)))


class Crowd:
    """Sessions of role ``app`` the test drives; ``close`` ends every one of them."""

    def __init__(self, cluster: PgCluster) -> None:
        self.cluster = cluster
        self.conns: list[Any] = []
        self.tasks: list[asyncio.Task[Any]] = []
        self.names: dict[int, str] = {}
        self._admin: Any = None

    async def connect(self, name: str, *, app: str = "", database: str = "plain") -> Any:
        conn = await asyncpg.connect(
            **self.cluster.primary.connect_kwargs("app", database),
            server_settings={"application_name": app} if app else None,
            timeout=10,
        )
        self.conns.append(conn)
        self.names[conn.get_server_pid()] = name
        return conn

    def pid(self, name: str) -> int:
        return next(pid for pid, known in self.names.items() if known == name)

    def conn(self, name: str) -> Any:
        return next(c for c in self.conns if c.get_server_pid() == self.pid(name))

    async def superuser(self, database: str) -> Any:
        """A superuser connection of the test's own, closed with the rest."""
        conn = await asyncpg.connect(
            **self.cluster.primary.connect_kwargs(database=database), timeout=10
        )
        self.conns.append(conn)
        self.names[conn.get_server_pid()] = "SUPERUSER"
        return conn

    async def admin(self) -> Any:
        if self._admin is None:
            self._admin = await asyncpg.connect(**self.cluster.primary.connect_kwargs(), timeout=10)
            self.names[self._admin.get_server_pid()] = "ADMIN"
        return self._admin

    def start(self, conn: Any, statement: str) -> asyncio.Task[Any]:
        task: asyncio.Task[Any] = asyncio.ensure_future(conn.execute(statement))
        self.tasks.append(task)
        return task

    async def wait_for(self, sql: str, *args: object, what: str) -> None:
        admin = await self.admin()
        deadline = time.monotonic() + WAIT_S
        while not await admin.fetchval(sql, *args):
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out waiting for {what}")
            await asyncio.sleep(POLL_S)

    async def waiting(self, conn: Any) -> None:
        await self.wait_for(
            "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = $1",
            conn.get_server_pid(),
            what="a lock wait",
        )

    async def running(self, conn: Any, event: str) -> None:
        await self.wait_for(
            "SELECT state = 'active' AND wait_event = $2 FROM pg_stat_activity WHERE pid = $1",
            conn.get_server_pid(),
            event,
            what=f"a session in {event}",
        )

    async def close(self) -> None:
        admin = await self.admin()
        pids = [c.get_server_pid() for c in self.conns]
        await admin.execute(
            "SELECT pg_terminate_backend(pid, 5000) FROM unnest($1::int[]) pid", pids
        )
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for conn in self.conns:
            conn.terminate()
        await admin.close()


@pytest.fixture
async def crowd(pg_cluster: PgCluster) -> AsyncIterator[Crowd]:  # noqa: F811
    people = Crowd(pg_cluster)
    try:
        yield people
    finally:
        await people.close()


@pytest.fixture
async def blocked(crowd: Crowd) -> Crowd:
    """HOLDER updates a row and keeps its transaction open; W1 then W2 update that row."""
    holder = await crowd.connect("HOLDER", app="billing")
    await holder.execute("BEGIN; UPDATE accounts SET balance = balance - 5 WHERE id = 1")
    for name in ("W1", "W2"):
        waiter = await crowd.connect(name, app="worker")
        crowd.start(waiter, "UPDATE accounts SET balance = balance + 1 WHERE id = 1")
        await crowd.waiting(waiter)
    return crowd


def normalise(text: str, names: Mapping[int, str]) -> str:
    """The golden form: known pids by name, other pids, durations, ports, sizes out."""

    def pid(match: re.Match[str]) -> str:
        return names.get(int(match.group(0)), "PID")

    text = re.sub(r"\b\d+(\.\d+)?(d|h|m|s)(\d+(h|m|s))?\b", "<t>", text)
    text = re.sub(r"(?<=pid )\d+|(?<=blocked by )\d+|(?<=, )\d{3,}(?=[,:])", pid, text)
    text = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", text)
    text = re.sub(r"\boid \d+", "oid N", text)
    return text


def normalise_sizes(text: str) -> str:
    return re.sub(r"\b\d+(\.\d+)? (B|kB|MB|GB)\b", "<size>", text)


# -- configuration and the contract -------------------------------------------------------


@pytest.mark.parametrize("url", [None, "", "   "])
def test_a_missing_url_is_a_config_error(url: str | None) -> None:
    with pytest.raises(ConfigError) as caught:
        build(PackConfig(postgres_url=url))
    assert str(caught.value) == "POSTGRES_URL is required for the postgres pack"


def test_a_url_that_is_not_postgres_is_a_config_error_without_the_password() -> None:
    with pytest.raises(ConfigError) as caught:
        build(PackConfig(postgres_url="mysql://u:hunter2-secret@db/x"))
    assert "POSTGRES_URL must be a postgresql:// URL" in str(caught.value)
    assert "hunter2" not in str(caught.value)


@pytest.mark.parametrize(
    ("url", "shown", "user", "password"),
    [
        ("postgresql://ro:s%40cret@db1:5432/prod", "db prod on db1:5432", "ro", "s@cret"),
        ("postgres://ro@db1/prod?sslmode=verify-full", "db prod on db1:5432", "ro", None),
        ("postgresql://ro@/prod?host=/var/run/postgresql", "db prod on /var/run/postgresql:5432",
         "ro", None),
        ("postgresql:///prod?host=/tmp&port=5433&user=ro&password=pw", "db prod on /tmp:5433",
         "ro", "pw"),
        ("postgresql://ro:pw@db1:5432,db2:5432/prod", "db prod on db1:5432,db2:5432", "ro", "pw"),
        ("postgresql://ro:pw@[::1]:6432/prod", "db prod on [::1]:6432", "ro", "pw"),
    ],
)  # fmt: skip
def test_url_forms(url: str, shown: str, user: str, password: str | None) -> None:
    target = parse_url(url)
    assert (target.shown, target.user, target.password) == (shown, user, password)


async def test_the_pack_offers_the_designed_tools(pg_cluster: PgCluster) -> None:  # noqa: F811
    built = load_packs(["postgres"], PackConfig(postgres_url=pg_cluster.url()))["postgres"]
    by_name = {t.name: t for t in built.tools}
    assert list(by_name) == list(PACK_TOOLS["postgres"])
    assert {n: (t.category, t.parallel) for n, t in by_name.items()} == {
        "pg_activity": ("read_only", True),
        "pg_locks": ("read_only", True),
        "pg_replication": ("read_only", True),
        "pg_database_stats": ("read_only", True),
        "pg_top_queries": ("read_only", True),
        "pg_cancel_backend": ("mutating", False),
        "pg_terminate_backend": ("destructive", False),
    }
    for name, t in by_name.items():
        schema = t.args_model.model_json_schema()
        if name in ("pg_cancel_backend", "pg_terminate_backend"):
            assert list(schema["properties"]) == ["pid"] and schema["required"] == ["pid"]
            assert schema["properties"]["pid"]["description"]
        else:
            assert schema.get("properties", {}) == {}
    for close in built.closers:
        await close()


@pytest.mark.parametrize("bad", [0, -1, 2**31, "abc", None, 1.5])
def test_a_bad_pid_is_refused_before_any_call(bad: object) -> None:
    built = make_tools(PgClient("postgresql://u@127.0.0.1:9/x"))
    for chosen in built.tools[-2:]:
        with pytest.raises(ValidationError):
            chosen.args_model.model_validate({"pid": bad})


# -- the server down, slow, refusing -------------------------------------------------------


async def test_a_server_that_is_down() -> None:
    port = free_port()
    text = await fails(pack_for(f"postgresql://opsloop_ro:{SECRETS[0]}@127.0.0.1:{port}/shop"),
                       "pg_activity")  # fmt: skip
    assert text == (
        f"postgres db shop on 127.0.0.1:{port} is unreachable: connection refused "
        "(is the server running?)"
    )


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts TCP connections and never says a word."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield int(listener.getsockname()[1])


async def test_a_server_that_never_answers(silent_port: int) -> None:
    url = f"postgresql://opsloop_ro:{SECRETS[0]}@127.0.0.1:{silent_port}/shop?sslmode=disable"
    # A hang guard, not a speed check: the pack's own connect timeout must fire.
    text = await asyncio.wait_for(fails(pack_for(url, connect_timeout=0.5), "pg_locks"), 30)
    assert "is unreachable: no connection within 0.5s" in text


@pytest.mark.parametrize(
    ("user", "password", "expected"),
    [
        ("opsloop_ro", "wrong-password", 'refused the credentials of role \'opsloop_ro\': '
         'password authentication failed for user "opsloop_ro" (wrong password, or no such '
         "role; check POSTGRES_URL)"),
        ("nosuchrole", "whatever-pw", "refused the credentials of role 'nosuchrole'"),
        ("hba_rejected", PASSWORDS["hba_rejected"], "refused the connection by its pg_hba.conf "
         'rules: pg_hba.conf rejects connection for host "127.0.0.1", user "hba_rejected"'),
    ],
)  # fmt: skip
async def test_refused_credentials(
    pg_cluster: PgCluster,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
    user: str,
    password: str,
    expected: str,
) -> None:
    caplog.set_level(logging.DEBUG)
    url = pg_cluster.url(user, "shop", password=password)
    text = await fails(pack_for(url), "pg_database_stats")
    assert expected in text
    assert password not in text and password not in caplog.text
    assert text.startswith(f"postgres db shop on 127.0.0.1:{pg_cluster.primary.port} ")


async def test_a_role_at_its_connection_limit(pg_cluster: PgCluster) -> None:  # noqa: F811
    text = await fails(pack_for(pg_cluster.url("capped")), "pg_activity")
    assert text.endswith(
        'refused a connection: too many connections for role "capped" (the role\'s CONNECTION '
        "LIMIT; other calls of the bot may hold its connections right now)"
    )


async def test_the_closer_ends_a_connection_still_open(pg_cluster: PgCluster) -> None:  # noqa: F811
    client = PgClient(pg_cluster.url())
    built = make_tools(client)
    async with client.session() as db:
        assert await db.fetchrow("SELECT 1 AS one") is not None
        for close in built.closers:
            await close()
        with pytest.raises(ToolError, match="closed the connection|connection is closed"):
            await db.fetchrow("SELECT 1")


async def test_a_database_that_does_not_exist(pg_cluster: PgCluster) -> None:  # noqa: F811
    text = await fails(pack_for(pg_cluster.url(database="nodb")), "pg_activity")
    assert 'database "nodb" does not exist (check the database name in POSTGRES_URL)' in text


async def test_a_slow_statement_hits_statement_timeout(
    crowd: Crowd,
    pg_cluster: PgCluster,  # noqa: F811
) -> None:
    admin = await crowd.superuser("shop")
    await admin.execute("BEGIN; LOCK TABLE pg_stat_statements IN ACCESS EXCLUSIVE MODE")
    try:
        slow = pack_for(pg_cluster.url(), statement_timeout_ms=300, lock_timeout_ms=10_000)
        text = await fails(slow, "pg_top_queries")
        assert "did not finish a query within its statement_timeout (300 ms)" in text
        text = await fails(pack_for(pg_cluster.url(), lock_timeout_ms=200), "pg_top_queries")
        assert "waited more than 200 ms for a lock (lock_timeout)" in text
    finally:
        await admin.execute("ROLLBACK")


async def test_a_table_locked_by_a_migration_gives_estimated_sizes(
    crowd: Crowd,
    pg_cluster: PgCluster,  # noqa: F811
) -> None:
    migration = await crowd.superuser("shop")
    await migration.execute("BEGIN; LOCK TABLE orders IN ACCESS EXCLUSIVE MODE")
    text = await run(pack_for(pg_cluster.url(), lock_timeout_ms=200), "pg_database_stats")
    assert "largest tables (catalog estimates: a table is locked" in text
    assert "\n  orders " in text
    await migration.execute("ROLLBACK")


# -- read-only tools: goldens --------------------------------------------------------------


async def test_activity_in_an_incident(pack: Pack, blocked: Crowd) -> None:
    sleeper = await blocked.connect("SLEEPER", app="reports")
    blocked.start(sleeper, "SELECT pg_sleep(60) /* nightly report */")
    await blocked.running(sleeper, "PgSleep")
    text = await run(pack, "pg_activity")
    lines = text.splitlines()
    assert lines[0].startswith(
        "5/100 connections: 3 active (2 waiting on locks), 1 idle in transaction, 1 idle; "
        f"longest: pid {blocked.pid('HOLDER')} idle in transaction "
    )
    listed = [int(line.split()[1]) for line in lines[1:]]
    assert listed == [blocked.pid(name) for name in ("HOLDER", "W1", "W2", "SLEEPER")]
    assert_golden(GOLDEN / "activity_incident.txt", normalise(text, blocked.names))


async def test_activity_stays_bounded_in_a_crowd(pack: Pack, crowd: Crowd) -> None:
    for i in range(18):
        conn = await crowd.connect(f"S{i}", app="web")
        crowd.start(conn, f"SELECT pg_sleep(60) /* {'x' * 300} */")
    await crowd.wait_for(
        "SELECT count(*) = 18 FROM pg_stat_activity WHERE wait_event = 'PgSleep'", what="18 sleeps"
    )
    text = await run(pack, "pg_activity")
    assert len(text) <= 4000
    assert text.startswith("19/100 connections: 18 active (0 waiting on locks), ")
    lines = text.splitlines()
    assert lines[-1] == "… 3 more" and len(lines) == 1 + 15 + 1
    assert lines[1].endswith("… (326 chars)")


async def test_locks_shows_the_chain(pack: Pack, blocked: Crowd) -> None:
    text = await run(pack, "pg_locks")
    holder = blocked.pid("HOLDER")
    assert text.splitlines()[0].startswith(
        f"2 sessions waiting on locks; pid {holder} blocks 2 for "
    )
    assert_golden(GOLDEN / "locks_chain.txt", normalise(text, blocked.names))


async def test_locks_when_nobody_waits(pack: Pack) -> None:
    assert await run(pack, "pg_locks") == "no session is waiting on a lock held by another session"


async def test_replication_on_the_primary(pack: Pack, pg_cluster: PgCluster) -> None:  # noqa: F811
    text = await run(pack, "pg_replication")
    assert text.startswith("primary with 1 replica (1 streaming)")
    assert "  replica1 from 127.0.0.1: streaming, async" in text
    assert "forgotten (physical): INACTIVE" in text
    # a standby that has caught up with no WAL flowing has NULL lags (PostgreSQL's rule)
    golden = re.sub(r"<t>/<t>/<t>|none \(caught up, idle\)", "<lags>", normalise(text, {}))
    assert_golden(GOLDEN / "replication_primary.txt", normalise_sizes(golden))


def _replica_row(**lags: float | None) -> dict[str, Any]:
    row: dict[str, Any] = {
        "application_name": "replica1",
        "client_addr": "10.0.0.5",
        "state": "streaming",
        "sync_state": "async",
        "send_bytes": 0,
        "replay_bytes": 0,
        "reply_s": 0.4,
        "write_lag_s": None,
        "flush_lag_s": None,
        "replay_lag_s": None,
    }
    return row | lags


def test_null_lags_of_a_caught_up_standby_read_as_idle_not_unknown() -> None:
    settings = {"sync_names": "", "slots": 0}
    idle = primary([_replica_row()], [], settings)
    assert "lag write/flush/replay none (caught up, idle)" in idle
    moving = primary([_replica_row(write_lag_s=0.002, flush_lag_s=0.003)], [], settings)
    assert "lag write/flush/replay 0.0s/0.0s/?" in moving or "/?," in moving


async def test_replication_on_the_standby(pg_cluster: PgCluster) -> None:  # noqa: F811
    # a committed transaction replayed, whatever ran before this test (else "no transaction
    # replayed since the standby started", the other form of the line)
    pg_cluster.primary.psql("DROP TABLE IF EXISTS replay_probe; CREATE TABLE replay_probe ()")
    await asyncio.to_thread(pg_cluster.wait_streaming)
    for _ in range(100):
        if (
            pg_cluster.standby.psql("SELECT pg_last_xact_replay_timestamp() IS NOT NULL").strip()
            == "t"
        ):
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError("the standby replayed no transaction in 5 s")
    text = await run(pack_for(pg_cluster.standby_url()), "pg_replication")
    assert text.startswith(
        f"standby, WAL receiver streaming from 127.0.0.1:{pg_cluster.primary.port}; replay "
    )
    assert_golden(GOLDEN / "replication_standby.txt", normalise_sizes(normalise(text, {})))


def _database_golden(text: str) -> str:
    """The counters every connection of the tests moves, out."""
    text = normalise(text, {})
    text = re.sub(r"\d+/100 connections", "N/100 connections", text)
    text = re.sub(r"cache hit \d+\.\d%", "cache hit N%", text)
    # Which tests ran before on this server (an xdist worker's) decides the counts, even
    # whether one is singular: "1 rollback".
    text = re.sub(r"\d+(\.\d+)?k? (commit|rollback)s?\b", r"N \2s", text)
    text = re.sub(r"size \S+ \S+,", "size <size>,", text)
    return re.sub(r"(connections by database: ).*", r"\1…", text)


async def test_database_stats(pack: Pack) -> None:
    text = await run(pack, "pg_database_stats")
    assert re.match(
        r"db shop: \d+/100 connections, cache hit \d+\.\d%, 1 deadlock, 1 temp file", text
    )
    assert "\n  orders " in text and "never vacuumed" in text
    assert_golden(GOLDEN / "database_stats_shop.txt", _database_golden(text))


async def test_top_queries_from_pg_stat_statements(crowd: Crowd, pack: Pack) -> None:
    admin = await crowd.superuser("shop")
    await admin.execute("SELECT pg_stat_statements_reset()")
    app = await crowd.connect("APP", database="shop")
    await app.execute("SELECT pg_sleep(0.6) /* slow report */")
    for _ in range(4):
        await app.fetchval("SELECT pg_sleep($1) /* batch */", 0.1)
    for _ in range(10):
        await app.fetchval("SELECT count(*), pg_sleep(0.02) FROM orders WHERE customer_id = $1", 7)
    text = await run(pack, "pg_top_queries")
    lines = text.splitlines()
    assert lines[0].startswith("top 4 of 4 statements by total time (pg_stat_statements 1.10")
    assert "SELECT pg_sleep($1) /* slow report */" in lines[1]
    assert "4 calls" in lines[2] and "10 calls" in lines[3]
    assert "pg_stat_statements_reset" in lines[4]
    assert "opsloop" not in text  # the bot's own statements are left out
    golden = re.sub(r"(mean|max) (<t>|[\d.]+ms)", r"\1 <ms>", normalise(text, {}))
    golden = re.sub(r"(<t>|[\d.]+ms) total", "<ms> total", golden)
    golden = re.sub(r"\b\d+% ", "N% ", golden)
    golden = re.sub(r"cache hit \d+%", "cache hit N%", golden)
    golden = re.sub(r"took \d+%", "took N%", golden)
    assert_golden(GOLDEN / "top_queries_shop.txt", golden)


async def test_top_queries_where_the_extension_is_missing(pg_cluster: PgCluster) -> None:  # noqa: F811
    text = await run(pack_for(pg_cluster.url(database="plain")), "pg_top_queries")
    assert_golden(GOLDEN / "top_queries_missing.txt", text)


def test_top_queries_when_the_library_is_not_loaded() -> None:
    text = statements_missing({"database": "prod", "preload": "auto_explain"})
    assert text.startswith("pg_stat_statements is not installed on this server")
    assert "add pg_stat_statements to shared_preload_libraries" in text
    assert "CREATE EXTENSION pg_stat_statements; in db prod" in text


async def test_a_role_without_pg_monitor_is_told_what_it_cannot_see(
    pg_cluster: PgCluster,  # noqa: F811
    blocked: Crowd,
) -> None:
    text = await run(pack_for(pg_cluster.url("nomonitor", "plain")), "pg_activity")
    assert "hidden: grant pg_monitor to see their state and query" in text


async def test_a_unix_socket_url(pg_cluster: PgCluster) -> None:  # noqa: F811
    text = await run(pack_for(pg_cluster.primary.socket_url("opsloop_ro", "shop")), "pg_locks")
    assert text == "no session is waiting on a lock held by another session"


# -- cancel and terminate ------------------------------------------------------------------


async def test_cancel_stops_the_query_and_keeps_the_session(pack: Pack, crowd: Crowd) -> None:
    sleeper = await crowd.connect("SLEEPER", app="reports")
    task = crowd.start(sleeper, "SELECT pg_sleep(60) /* nightly report */")
    await crowd.running(sleeper, "PgSleep")
    text = await run(pack, "pg_cancel_backend", pid=sleeper.get_server_pid())
    with pytest.raises(asyncpg.QueryCanceledError, match="canceling statement due to user request"):
        await asyncio.wait_for(task, WAIT_S)
    assert await sleeper.fetchval("SELECT 1") == 1  # still connected
    assert text.startswith(f"Cancelled the query of pid {sleeper.get_server_pid()} app@plain (")
    assert_golden(GOLDEN / "cancel.txt", normalise(text, crowd.names))


async def test_cancel_of_an_idle_session_says_there_is_nothing_to_cancel(
    pack: Pack, crowd: Crowd
) -> None:
    idle = await crowd.connect("IDLE")
    text = await fails(pack, "pg_cancel_backend", pid=idle.get_server_pid())
    assert f"pid {idle.get_server_pid()} is not running a query (idle)" in text


async def test_terminate_dry_run_then_for_real(pack: Pack, blocked: Crowd) -> None:
    holder = blocked.conn("HOLDER")
    pid = holder.get_server_pid()
    dry = await run(pack, "pg_terminate_backend", dry_run=True, call_id="t1", pid=pid)
    assert dry.startswith(f"Dry run, nothing terminated: would terminate pid {pid} app@plain ")
    assert "blocking 2 sessions" in dry
    assert_golden(GOLDEN / "terminate_dry_run.txt", normalise(dry, blocked.names))
    assert await holder.fetchval("SELECT 1") == 1  # the dry run terminated nothing
    done = await run(pack, "pg_terminate_backend", call_id="t1", pid=pid)
    assert done.startswith(f"Terminated pid {pid} app@plain (billing, local socket)")
    assert done.endswith("its transaction rolled back; 2 sessions waited behind it")
    with pytest.raises((asyncpg.PostgresConnectionError, asyncpg.InterfaceError, OSError)):
        await asyncio.wait_for(holder.fetchval("SELECT 1"), WAIT_S)
    await asyncio.wait_for(asyncio.gather(*blocked.tasks), WAIT_S)  # the waiters went on


async def test_terminate_refuses_a_pid_that_now_is_another_session(
    pg_cluster: PgCluster,  # noqa: F811
    crowd: Crowd,
) -> None:
    victim = await crowd.connect("VICTIM")
    pg = Postgres(PgClient(pg_cluster.url()))
    key = ctx(call_id="t2")
    await pg.terminate(victim.get_server_pid(), ctx(dry_run=True, call_id="t2"))
    pid, _ = pg._dry_runs[key.idempotency_key]
    pg._dry_runs[key.idempotency_key] = (pid, 1.0)  # as if the card showed an older session
    with pytest.raises(ToolError, match="is no longer the session the approval card showed"):
        await pg.terminate(pid, key)
    assert await victim.fetchval("SELECT 1") == 1


async def test_a_pid_that_is_no_session(pack: Pack) -> None:
    for name in ("pg_cancel_backend", "pg_terminate_backend"):
        text = await fails(pack, name, pid=2_000_000_000)
        assert text.startswith("no session with pid 2000000000 on db shop on 127.0.0.1:")


async def test_the_bots_own_backend_is_refused(pg_cluster: PgCluster) -> None:  # noqa: F811
    pg = Postgres(PgClient(pg_cluster.url()))
    async with pg.client.session() as db:
        with pytest.raises(ToolError, match=f"pid {db.pid} is the bot's own connection"):
            await pg._target(db, db.pid, "terminate")


async def test_postgres_own_processes_are_refused(pack: Pack, crowd: Crowd) -> None:
    admin = await crowd.admin()
    pid = await admin.fetchval(
        "SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'"
    )
    text = await fails(pack, "pg_terminate_backend", pid=pid)
    assert "is PostgreSQL's own checkpointer process, not a session" in text


async def test_a_superusers_session_is_refused(pack: Pack, crowd: Crowd) -> None:
    admin = await crowd.admin()
    text = await fails(pack, "pg_terminate_backend", pid=admin.get_server_pid())
    assert "runs as superuser postgres: only a superuser may terminate it" in text


async def test_a_role_without_pg_signal_backend_is_refused(
    pg_cluster: PgCluster,  # noqa: F811
    crowd: Crowd,
) -> None:
    sleeper = await crowd.connect("SLEEPER")
    crowd.start(sleeper, "SELECT pg_sleep(60)")
    await crowd.running(sleeper, "PgSleep")
    weak = pack_for(pg_cluster.url("opsloop_nosignal"))
    for name in ("pg_cancel_backend", "pg_terminate_backend"):
        text = await fails(weak, name, pid=sleeper.get_server_pid())
        assert text == (
            f"role opsloop_nosignal may not {name.split('_')[1]} pid {sleeper.get_server_pid()} "
            "of role app: it needs pg_signal_backend (GRANT pg_signal_backend TO "
            "opsloop_nosignal;)"
        )
    admin = await crowd.admin()
    assert await admin.fetchval(
        "SELECT state FROM pg_stat_activity WHERE pid = $1", sleeper.get_server_pid()
    ) == "active"  # fmt: skip


# -- the probe -----------------------------------------------------------------------------


async def test_probe(pg_cluster: PgCluster) -> None:  # noqa: F811
    port = pg_cluster.primary.port
    verdict, line = await probe(PackConfig(postgres_url=pg_cluster.url()))
    assert verdict == "ok", line
    assert re.fullmatch(
        rf"db shop on 127\.0\.0\.1:{port}: PostgreSQL 15\.\d+, primary, \d+/100 connections", line
    )
    verdict, line = await probe(
        PackConfig(postgres_url=pg_cluster.standby_url("nomonitor", "plain"))
    )
    assert verdict == "warn"
    assert ", standby, " in line and "pg_stat_statements missing" in line
    assert "role nomonitor lacks pg_monitor" in line and "lacks pg_signal_backend" in line
    down = f"postgresql://opsloop_ro:{SECRETS[0]}@127.0.0.1:{free_port()}/shop"
    verdict, line = await probe(PackConfig(postgres_url=down))
    assert verdict == "fail" and "connection refused" in line and SECRETS[0] not in line
    assert await probe(PackConfig()) == ("fail", "POSTGRES_URL is not set")


# -- the text, pure ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(None, "?"), (0.04, "0.0s"), (3.26, "3.3s"), (41, "41s"), (130, "2m10s"),
     (3 * 3600 + 301, "3h5m"), (2 * 86400 + 4 * 3600 + 7, "2d4h")],
)  # fmt: skip
def test_duration(seconds: float | None, text: str) -> None:
    assert duration(seconds) == text


@pytest.mark.parametrize(
    ("n", "text"),
    [(0, "0 B"), (512, "512 B"), (16 * 1024, "16 kB"), (1.5 * 2**20, "1.5 MB"),
     (43 * 2**20, "43 MB"), (3.25 * 2**30, "3.2 GB")],
)  # fmt: skip
def test_size(n: float, text: str) -> None:
    assert size(n) == text


def test_query_text_is_data_one_line_cut_and_without_passwords() -> None:
    assert query_text("SELECT 1\n\tFROM t\x1b[2J") == "SELECT 1 FROM t [2J"
    assert query_text("x" * 500, 900, limit=20) == "x" * 19 + "… (900 chars)"
    assert query_text("<insufficient privilege>").startswith("(query hidden")
    assert query_text("ALTER ROLE app PASSWORD 'hunter2'") == "ALTER ROLE app PASSWORD '[redacted]'"
    assert "s3cret" not in query_text("SELECT dblink_connect('host=db password=s3cret')")


def _sess(pid: int, blocked_by: tuple[int, ...] = (), wait_s: float = 1.0) -> Sess:
    return Sess(
        pid=pid, user="app", database="db", app="", client=None, backend_type="client backend",
        state="active", wait_type="Lock" if blocked_by else None, wait_event=None, xact_s=None,
        query_s=wait_s, state_s=wait_s, query="UPDATE t", query_chars=8,
        blocked_by=blocked_by, wait_s=wait_s if blocked_by else None,
    )  # fmt: skip


def test_chains_group_waiters_under_their_roots_biggest_first() -> None:
    sessions = [_sess(1), _sess(2, (1,), 9), _sess(3, (2,), 5), _sess(4, (2, 3), 4),
                _sess(10), _sess(11, (10,), 30)]  # fmt: skip
    found = chains(sessions)
    assert [(c.root_pid, [w.pid for w in c.waiters]) for c in found] == [
        (1, [2, 3, 4]),
        (10, [11]),
    ]
    assert found[1].longest_wait == 30


def test_a_lock_cycle_is_reported_under_its_lowest_pid() -> None:
    found = chains([_sess(7, (8,)), _sess(8, (7,))])
    assert [(c.root_pid, [w.pid for w in c.waiters]) for c in found] == [(7, [8])]

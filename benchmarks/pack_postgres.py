"""The postgres pack against a real PostgreSQL 15 in an incident: time to answer and
what the answer costs the model.

A temporary primary and its streaming standby (``bot/emulator/postgres_server.py``:
tables with data, a deadlock and a temp file in the statistics, ``pg_stat_statements``)
get a realistic crowd of 30 sessions: one holds a row lock in an open transaction with 8
sessions queued behind it, 4 more sit idle in transaction, 10 run long queries
(``pg_sleep``), 7 are idle; and a statement history of 60 distinct statements run a few
times each. Each read-only tool is called through ``execute`` as the agent core calls
it (a connection per call: connect, authenticate with scram-sha-256 over TCP, the
statements, close). Reported per tool: median and p90 wall time, the answer's size in
characters and ≈ tokens (chars/4), and, for comparison, the size of the raw rows a tool
that passed them through would hand the model (``SELECT * FROM`` the view, as JSON).
The first line is the cost of the connection alone.

    python benchmarks/pack_postgres.py [--calls 30]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

import asyncpg

from bot.agent.tools import CallContext
from bot.emulator.postgres_server import PgCluster, start_cluster
from tools.packs import PackConfig
from tools.packs.pg_client import PgClient
from tools.packs.postgres import build

CTX = CallContext(job_id="C1:1.1:bench", call_id="bench")

# (tool, where, the raw view a pass-through tool would dump)
CASES = [
    ("pg_activity", "primary", "SELECT * FROM pg_stat_activity"),
    ("pg_locks", "primary", "SELECT * FROM pg_locks"),
    ("pg_replication", "primary", "SELECT * FROM pg_stat_replication"),
    ("pg_replication", "standby", "SELECT * FROM pg_stat_wal_receiver"),
    ("pg_database_stats", "primary", "SELECT * FROM pg_stat_user_tables"),
    ("pg_top_queries", "primary", "SELECT * FROM pg_stat_statements"),
]


class Incident:
    """The crowd of sessions; ``close`` ends them."""

    def __init__(self, cluster: PgCluster) -> None:
        self.cluster = cluster
        self.conns: list[Any] = []
        self.tasks: list[asyncio.Task[Any]] = []

    async def connect(self, app: str) -> Any:
        kwargs = self.cluster.primary.connect_kwargs("app", "plain")
        conn = await asyncpg.connect(**kwargs, server_settings={"application_name": app})
        self.conns.append(conn)
        return conn

    async def start(self) -> None:
        holder = await self.connect("billing")
        await holder.execute("BEGIN; UPDATE accounts SET balance = balance - 1 WHERE id = 1")
        for _ in range(8):
            waiter = await self.connect("checkout")
            self.tasks.append(
                asyncio.ensure_future(
                    waiter.execute("UPDATE accounts SET balance = balance + 1 WHERE id = 1")
                )
            )
        for i in range(4):
            idle = await self.connect("admin-ui")
            await idle.execute(f"BEGIN; SELECT * FROM notes WHERE id = {i + 1}")
        for i in range(10):
            slow = await self.connect("reports")
            statement = f"SELECT pg_sleep(600), count(*) FROM notes /* report {i} */"
            self.tasks.append(asyncio.ensure_future(slow.execute(statement)))
        for _ in range(7):
            await self.connect("web")
        admin = await asyncpg.connect(**self.cluster.primary.connect_kwargs())
        try:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                waits = await admin.fetchval(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE wait_event_type = 'Lock' OR wait_event = 'PgSleep'"
                )
                if waits == 18:
                    break
                await asyncio.sleep(0.05)
            else:
                raise RuntimeError("the crowd did not settle")
        finally:
            await admin.close()

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        for conn in self.conns:
            conn.terminate()
        await asyncio.gather(*self.tasks, return_exceptions=True)


async def history(cluster: PgCluster) -> None:
    """60 distinct statements on db shop, each run 1–5 times."""
    admin = await asyncpg.connect(**cluster.primary.connect_kwargs(database="shop"))
    await admin.execute("SELECT pg_stat_statements_reset()")  # the set-up is no history
    await admin.close()
    conn = await asyncpg.connect(**cluster.primary.connect_kwargs("app", "shop"))
    try:
        for i in range(60):
            # IN lists of different lengths are different statements to pg_stat_statements.
            ids = ", ".join(str(n) for n in range(1, i + 2))
            for _ in range(1 + i % 5):
                await conn.fetch(
                    f"SELECT o.id, c.name FROM orders o JOIN customers c ON c.id = o.customer_id "
                    f"WHERE o.customer_id IN ({ids}) ORDER BY o.created LIMIT 20"
                )
    finally:
        await conn.close()


async def raw_size(cluster: PgCluster, where: str, statement: str) -> int:
    server = cluster.primary if where == "primary" else cluster.standby
    conn = await asyncpg.connect(**server.connect_kwargs(database="shop"))
    try:
        rows = await conn.fetch(statement)
    finally:
        await conn.close()
    return len(json.dumps([dict(r) for r in rows], default=str))


def line(label: str, times: list[float], text: str, raw: int | None = None) -> str:
    times = sorted(times)
    p90 = times[int(0.9 * (len(times) - 1))]
    out = (
        f"{label:<27} median {statistics.median(times):6.1f} ms  p90 {p90:6.1f} ms  "
        f"answer {len(text):5d} chars ≈ {len(text) // 4:4d} tokens"
    )
    if raw is not None:
        out += f"  (raw view {raw:6d} chars ≈ {raw // 4:5d} tokens)"
    return out


async def measure(cluster: PgCluster, calls: int) -> None:
    client = PgClient(cluster.url())
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        async with client.session() as db:
            await db.fetch("SELECT 1")
        times.append((time.perf_counter() - t0) * 1000)
    print(line("connect + SELECT 1 + close", times, ""))
    packs = {
        "primary": build(PackConfig(postgres_url=cluster.url())),
        "standby": build(PackConfig(postgres_url=cluster.standby_url())),
    }
    answers = {}
    for name, where, raw_statement in CASES:
        chosen = next(t for t in packs[where].tools if t.name == name)
        args = chosen.args_model.model_validate({})
        times, text = [], ""
        for _ in range(calls):
            t0 = time.perf_counter()
            text = str(await chosen.execute(args, CTX))
            times.append((time.perf_counter() - t0) * 1000)
        answers[f"{name} ({where})"] = text
        raw = await raw_size(cluster, where, raw_statement)
        print(line(f"{name} ({where})", times, text, raw))
    for pack in packs.values():
        for close in pack.closers:
            await close()
    print("\nanswers (last call):")
    for label, text in answers.items():
        print(f"--- {label}\n{text}")


async def main_async(cluster: PgCluster, calls: int) -> None:
    await history(cluster)
    incident = Incident(cluster)
    try:
        await incident.start()
        await measure(cluster, calls)
    finally:
        await incident.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=30)
    args = parser.parse_args()
    print(
        f"postgres pack through execute(), {args.calls} calls each, "
        "30 sessions (8 waiting on a lock)"
    )
    cluster = start_cluster(prefix="opsloop-bench-pg-")
    try:
        asyncio.run(main_async(cluster, args.calls))
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()

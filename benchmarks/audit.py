"""Redis bytes per audit entry, and what chaining one costs.

Against a throwaway redis-server (AOF, appendfsync always, as the tests and the dev mode
run it), N realistic entries — per approved write: an ``approval_requested`` with ten
arguments and a 500-char dry run, its ``approval_decided``, a ``write_started`` and a
``write_finished`` with a 1 KB result — are staged the way the stores stage them (the
hint, then the entry in a MULTI with the fact's own outbox) and published by the writer
right after, across a few threads. Then the scanner's drain settles the hints.

Printed: bytes per entry from ``MEMORY USAGE`` of the log stream, the dedupe ids and the
head (and the ``INFO used_memory`` delta of the whole run), the entry's JSON size for
comparison, and per publish the Redis round trips (counted at the connection) and the
wall time. Figures only, no asserts.

    python benchmarks/audit.py [--entries 1000] [--threads 25]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.connection import Connection, ConnectionPool

from bot.emulator.redis_server import ManagedRedis
from bot.store.audit import OUTBOX_TTL_S, AuditEntry, AuditLog, bound_result, staged_json
from bot.store.buckets import count_buckets
from bot.store.keys import Keys, Thread

T0 = time.time()


class CountingConnection(Connection):
    """Counts round trips: one per packed send (a pipeline or script is one)."""

    sent = 0

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        CountingConnection.sent += 1
        await super().send_packed_command(command, check_health)


def counting_client(url: str) -> aioredis.Redis:
    pool = ConnectionPool.from_url(
        url, decode_responses=True, socket_timeout=5.0, connection_class=CountingConnection
    )
    return aioredis.Redis(connection_pool=pool)


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> float:
        return self.t


def entries_of_a_write(thread: Thread, n: int, at: float) -> list[AuditEntry]:
    """The four entries one approved write leaves, realistically sized."""
    job_id = thread.job_id(1 + n // 100)
    call_id = f"call_{n:05d}_kF3mQ9xZ"
    arguments = {
        "kind": "deployment",
        "name": f"checkout-api-{n % 7}",
        "namespace": "payments-prod",
        "replicas": 6,
        "reason": "p99 latency above SLO since 14:02, scale out before the sale",
        "selector": "app.kubernetes.io/name=checkout-api",
        "container": "api",
        "strategy": "RollingUpdate",
        "max_surge": "25%",
        "dry_run_first": True,
    }
    args_hash = f"{n:064x}"
    dry_run = ("deployment.apps/checkout-api scaled (server dry run); " * 10)[:500]
    result = ("deployment.apps/checkout-api scaled from 3 to 6 replicas; rollout ok. " * 15)[:1024]
    common: dict[str, Any] = {
        "job_id": job_id,
        "channel": thread.channel,
        "thread_ts": thread.thread_ts,
        "tool": "k8s_scale",
        "call_id": call_id,
        "args_hash": args_hash,
    }
    key = f"{job_id}:{call_id}"
    return [
        AuditEntry(
            id=f"approval_requested:{key}",
            kind="approval_requested",
            at=at,
            actor="U04ALICE7Q",
            arguments=arguments,
            detail={"dry_run": dry_run, "category": "mutating", "expires_at": at + 3600},
            **common,
        ),
        AuditEntry(
            id=f"approval_decided:{key}",
            kind="approval_decided",
            at=at + 20,
            actor="U05BOBAPPR",
            outcome="approved",
            detail={"card_ts": f"{at:.6f}"},
            **common,
        ),
        AuditEntry(
            id=f"write_started:{key}",
            kind="write_started",
            at=at + 20.1,
            actor="U05BOBAPPR",
            detail={"idempotency_key": key},
            **common,
        ),
        AuditEntry(
            id=f"write_finished:{key}",
            kind="write_finished",
            at=at + 21.3,
            actor="U05BOBAPPR",
            outcome="ok",
            detail={"idempotency_key": key, "result": bound_result(result)},
            **common,
        ),
    ]


async def stage(redis: aioredis.Redis, log: AuditLog, tag: str, entry: AuditEntry) -> None:
    await log.hint(tag)
    async with redis.pipeline(transaction=True) as pipe:
        pipe.rpush(log.outbox_key(tag), staged_json(entry))
        pipe.expire(log.outbox_key(tag), OUTBOX_TTL_S)
        await pipe.execute()


async def used_memory(redis: aioredis.Redis) -> int:
    return int((await redis.info("memory"))["used_memory"])


async def measure(url: str, n_entries: int, n_threads: int) -> None:
    redis = counting_client(url)
    keys = Keys()
    clock = Clock()
    log = AuditLog(redis, keys, now=clock)
    threads = [Thread(f"C0{i:07d}", f"{int(T0) + i}.000100") for i in range(n_threads)]
    planned: list[tuple[Thread, AuditEntry]] = []
    n = 0
    while len(planned) < n_entries:
        thread = threads[n % n_threads]
        planned.extend((thread, e) for e in entries_of_a_write(thread, n, T0 + n))
        n += 1
    planned = planned[:n_entries]

    await redis.ping()
    before = await used_memory(redis)
    trips: list[int] = []
    wall: list[float] = []
    json_bytes = 0
    for thread, entry in planned:
        clock.t += 0.05
        await stage(redis, log, thread.tag, entry)
        json_bytes += len(staged_json(entry).encode())
        sent, started = CountingConnection.sent, time.perf_counter()
        [chained] = await log.publish(thread.tag)
        wall.append(time.perf_counter() - started)
        trips.append(CountingConnection.sent - sent)
        assert chained.id == entry.id
    clock.t += 60  # the writers are long done: the scanner settles their hints
    sent = CountingConnection.sent
    await log.drain(limit=n_threads)
    drain_trips = CountingConnection.sent - sent
    after = await used_memory(redis)
    report = await log.verify()

    sizes = {
        "log (stream)": await redis.memory_usage(keys.audit_log(), samples=0),
        "ids (zset)": await redis.memory_usage(keys.audit_ids(), samples=0),
        "head (string)": await redis.memory_usage(keys.audit_head(), samples=0),
    }
    total = sum(int(v or 0) for v in sizes.values())
    pending = await count_buckets(redis, "audit pending", keys.audit_pending)
    print(f"audit log: {n_entries:,} entries ({n_entries // 4:,} approved writes × 4 kinds)")
    print(f"{'what':<52} {'bytes/entry':>12}")
    for name, size in sizes.items():
        print(f"{'MEMORY USAGE ' + name:<52} {int(size or 0) / n_entries:>12.1f}")
    print(f"{'MEMORY USAGE log + ids + head':<52} {total / n_entries:>12.1f}")
    print(f"{'INFO used_memory delta (whole run)':<52} {(after - before) / n_entries:>12.1f}")
    print(f"{'staged entry JSON (for comparison)':<52} {json_bytes / n_entries:>12.1f}")
    print(
        f"per publish (one entry, by its writer): {statistics.mean(trips):.2f} round trips "
        f"(min {min(trips)}, max {max(trips)}); wall ms median "
        f"{statistics.median(wall) * 1000:.3f}, p95 "
        f"{sorted(wall)[int(len(wall) * 0.95)] * 1000:.3f}"
    )
    print(
        f"scanner drain settling {n_threads} hints: {drain_trips} round trips "
        f"({drain_trips / n_threads:.1f} per outbox); hints left: {pending}; "
        f"verify: {report.describe()}"
    )
    await redis.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=1_000)
    parser.add_argument("--threads", type=int, default=25)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        server = ManagedRedis(Path(folder) / "redis").start()
        try:
            asyncio.run(measure(server.url, opts.entries, opts.threads))
        finally:
            server.stop()


if __name__ == "__main__":
    main()

"""``opsloop audit`` as a real process against a real redis-server: the table, JSON
lines that are the stored entries exactly, the filters, ``verify``'s exit codes, and
clear refusals of bad input and of a Redis that does not answer."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import pytest
import redis.asyncio as aioredis

from bot.cli.audit import parse_query, parse_time
from bot.emulator.redis_server import ManagedRedis, free_port
from bot.store.audit import AuditEntry, AuditLog
from bot.store.keys import Keys
from tests.store import conftest as store_fixtures

PREFIX = "audit-cli:"
JOB = "C0INC:1780000000.000100:j1"
server = store_fixtures.server
redis = store_fixtures.redis


def opsloop(redis_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bot", "audit", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={
            "PATH": "/usr/bin:/bin",
            "REDIS_URL": redis_url,
            "OPSLOOP_REDIS_PREFIX": PREFIX,
            "PYTHONIOENCODING": "utf-8",
        },
        check=False,
    )


async def run(redis_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(opsloop, redis_url, *args)


@pytest.fixture
async def log(redis: aioredis.Redis) -> AuditLog:
    """Three hours of a small incident: a card, its approval, the write, a CLI run."""
    audit = AuditLog(redis, Keys(PREFIX))
    now = time.time()
    common = {"job_id": JOB, "channel": "C0INC", "thread_ts": "1780000000.000100"}
    call = {"tool": "restart_service", "call_id": "call_1", "args_hash": "ab" * 32}
    facts = [
        AuditEntry(
            id=f"approval_requested:{JOB}:call_1",
            kind="approval_requested",
            at=now - 3 * 3600,
            actor="opsloop",
            arguments={"host": "web-03", "service": "nginx"},
            detail={"card_ts": "1780000001.000200"},
            **common,
            **call,
        ),
        AuditEntry(
            id=f"approval_decided:{JOB}:call_1",
            kind="approval_decided",
            at=now - 2 * 3600,
            actor="U0APPROVER",
            outcome="approved",
            **common,
            **call,
        ),
        AuditEntry(
            id=f"write_finished:{JOB}:call_1",
            kind="write_finished",
            at=now - 2 * 3600 + 5,
            actor="U0APPROVER",
            outcome="ok",
            detail={"result": "restarted nginx on web-03\nall good"},
            **common,
            **call,
        ),
        AuditEntry(
            id="cli_run:CLI:1780000900.000000:j1:cli_1",
            kind="cli_run",
            at=now - 600,
            actor="cli:alice",
            tool="k8s_scale",
            outcome="ok",
            job_id="CLI:1780000900.000000:j1",
            channel="CLI",
        ),
    ]
    for fact in facts:
        await audit.append(fact)
    return audit


async def test_the_table_shows_every_entry_oldest_first(
    server: ManagedRedis, log: AuditLog
) -> None:
    done = await run(server.url)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split()[:4] == ["time", "(UTC)", "kind", "actor"]
    rows = lines[1:]
    assert [r.split()[2] for r in rows] == [
        "approval_requested",
        "approval_decided",
        "write_finished",
        "cli_run",
    ]
    assert "U0APPROVER" in rows[1] and "restart_service" in rows[1] and "approved" in rows[1]
    assert "restarted nginx on web-03 all good" in rows[2]  # one line
    assert "cli:alice" in rows[3] and "k8s_scale" in rows[3]


async def test_json_lines_are_the_stored_entries_exactly(
    server: ManagedRedis, redis: aioredis.Redis, log: AuditLog
) -> None:
    done = await run(server.url, "--json")
    assert done.returncode == 0, done.stderr
    stored = [f["e"] for _, f in await redis.xrange(Keys(PREFIX).audit_log())]
    assert done.stdout.splitlines() == stored
    assert [json.loads(line)["seq"] for line in done.stdout.splitlines()] == [1, 2, 3, 4]


async def test_filters_narrow_the_entries(server: ManagedRedis, log: AuditLog) -> None:
    async def seqs(*args: str) -> list[int]:
        done = await run(server.url, "--json", *args)
        assert done.returncode == 0, done.stderr
        return [json.loads(line)["seq"] for line in done.stdout.splitlines()]

    assert await seqs("--since", "150m") == [2, 3, 4]
    assert await seqs("--since", "150m", "--until", "1h") == [2, 3]
    assert await seqs("--user", "<@U0APPROVER>") == [2, 3]
    assert await seqs("--user", "cli:alice") == [4]
    assert await seqs("--tool", "restart_service", "--channel", "C0INC") == [1, 2, 3]
    assert await seqs("--job", JOB, "--user", "opsloop") == [1]
    assert await seqs("--until", "2000-01-01") == []
    done = await run(server.url, "--tool", "nothing")
    assert done.returncode == 0 and done.stdout.splitlines()[1:] == []
    assert "no entries match" in done.stderr


async def test_verify_exits_0_on_an_intact_chain_and_1_on_a_broken_one(
    server: ManagedRedis, redis: aioredis.Redis, log: AuditLog
) -> None:
    done = await run(server.url, "verify")
    assert (done.returncode, done.stdout) == (0, "ok: 4 entries, chain from genesis to seq 4\n")

    keys = Keys(PREFIX)
    second = (await redis.xrange(keys.audit_log()))[1][0]  # seq 2
    await redis.xdel(keys.audit_log(), second)
    done = await run(server.url, "verify")
    assert done.returncode == 1
    assert done.stdout.startswith("broken at seq 3 (stream id ")
    assert "prev mismatch" in done.stdout


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--since", "yesterday"), "--since: cannot read 'yesterday': give ISO 8601"),
        (("--until", "2026-13-01"), "--until: cannot read '2026-13-01'"),
        (("--since", "1h", "--until", "2h"), "--since is later than --until"),
        (("--user", " "), "--user: empty"),
        (("verify", "--json"), "verify checks the whole log: it takes no filters"),
    ],
)
async def test_bad_input_is_refused_with_exit_2(
    server: ManagedRedis, args: tuple[str, ...], said: str
) -> None:
    done = await run(server.url, *args)
    assert done.returncode == 2
    assert done.stderr.startswith("opsloop audit: ") and said in done.stderr
    assert done.stdout == ""


async def test_an_unknown_action_is_an_argparse_error() -> None:
    done = await run("redis://127.0.0.1:1/0", "rewrite")
    assert done.returncode == 2 and "invalid choice: 'rewrite'" in done.stderr


async def test_redis_down_is_one_clear_line_and_exit_1() -> None:
    for args in ((), ("verify",)):
        done = await run(f"redis://127.0.0.1:{free_port()}/0", *args)
        assert done.returncode == 1
        [line] = done.stderr.splitlines()
        assert line.startswith("opsloop audit: redis unavailable during audit ")
        assert "Traceback" not in done.stderr


def test_times_it_reads() -> None:
    now = 1_780_000_000.0
    assert parse_time("90m", now=now) == now - 5_400
    assert parse_time("24h", now=now) == now - 86_400
    assert parse_time("7d", now=now) == now - 7 * 86_400
    assert parse_time("2026-05-28", now=now) == 1_779_926_400.0
    assert parse_time("2026-05-28T20:26:40Z", now=now) == now
    assert parse_time("2026-05-28T22:26:40+02:00", now=now) == now
    assert parse_time("2026-05-28 20:26:40", now=now) == now  # no offset: UTC
    query = parse_query(since="2h", user="U1", now=now)
    assert (query.since, query.until, query.user) == (now - 7_200, None, "U1")
    for bad in ("", "7", "-3d", "3 days", "2026-05-28T25:00"):
        with pytest.raises(ValueError, match="give ISO 8601"):
            parse_time(bad, now=now)

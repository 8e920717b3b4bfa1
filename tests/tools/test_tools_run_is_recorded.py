"""`opsloop tools run` of a change is on the record, like the bot's own changes.

Run as a real process against a real redis-server: a mutating or destructive call is a
job of its own (``CLI:<ts>:j1``) requested by ``cli:<shell user>``, with its ledger entry
(``done``, the scrubbed output, the same idempotency key the tool was given) and its
trace (the dry run, the call with the ``--confirmed-by`` value as given, the end), read
back by ``opsloop trace``. A Redis that cannot record the call means nothing runs.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from bot.cli.tools import shell_user
from bot.emulator.redis_server import ManagedRedis, free_port
from bot.store.jobs import Jobs, JobStatus
from bot.store.keys import Keys, job_bucket
from bot.store.ledger import RedisLedger
from bot.store.trace import EndEntry, ToolEntry, read_trace
from tests.store import conftest as store_fixtures

PREFIX = "cli-test:"
ENV_LINE = (
    "import os, sys; print('restarted', sys.argv[1], 'by', os.environ['OPSLOOP_CONFIRMED_BY'],"
    " 'key', os.environ['OPSLOOP_IDEMPOTENCY_KEY'], 'password=hunter2');"
    " open(sys.argv[2], 'a').write(sys.argv[1] + '\\\\n')"
)
WIPE = (
    "import os, sys; print(('would wipe ' if os.environ.get('OPSLOOP_DRY_RUN') else 'wiped ')"
    " + sys.argv[1])"
)


def tools_text(marker: Path) -> str:
    return f"""\
tools:
  - name: restart
    description: Pretend to restart.
    category: mutating
    params: {{host: {{type: string, pattern: "^[a-z0-9-]+$", description: Host}}}}
    run: ["python3", "-c", "{ENV_LINE}", "{{host}}", "{marker}"]
  - name: wipe
    description: Pretend to wipe.
    category: destructive
    params: {{host: {{type: string, pattern: "^[a-z0-9-]+$", description: Host}}}}
    run: ["python3", "-c", "{WIPE}", "{{host}}"]
  - name: broken_restart
    description: A restart that fails.
    category: mutating
    run: ["python3", "-c", "import sys; sys.exit('unit not found')"]
"""


# The store's fixtures: one redis-server for the session, flushed for each test.
server = store_fixtures.server
redis = store_fixtures.redis


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    return tmp_path / "restarted.txt"


@pytest.fixture
def tools_file(tmp_path: Path, marker: Path) -> Path:
    path = tmp_path / "tools.yml"
    path.write_text(tools_text(marker))
    return path


def opsloop(redis_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bot", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={
            "PATH": "/usr/bin:/bin",
            "COLUMNS": "200",
            "OPSLOOP_PACKS": "",
            "REDIS_URL": redis_url,
            "OPSLOOP_REDIS_PREFIX": PREFIX,
            "USER": "alice",  # no LOGNAME: $USER names the shell user
        },
        check=False,
    )


def recorded_job(done: subprocess.CompletedProcess[str]) -> str:
    found = re.search(r"recorded as (CLI:\d{10}\.\d{6}:j1) \(opsloop trace \1\)", done.stderr)
    assert found, done.stdout + done.stderr
    return found.group(1)


def canonical_hash(arguments: dict[str, object]) -> str:
    text = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


async def test_a_mutating_call_is_a_job_with_its_ledger_and_trace(
    server: ManagedRedis, redis: aioredis.Redis, tools_file: Path, marker: Path
) -> None:
    done = await asyncio.to_thread(
        opsloop,
        server.url,
        *("tools", "--file", str(tools_file), "run", "restart", "host=web-03"),
        *("--confirmed-by", "U0APPROVER"),
    )

    assert done.returncode == 0, done.stdout + done.stderr
    job_id = recorded_job(done)
    call_id = re.search(rf"key {re.escape(job_id)}:(cli_[0-9a-f]+) ", done.stdout)
    assert call_id, done.stdout  # the tool's idempotency key is the ledger's
    key = f"{job_id}:{call_id.group(1)}"
    assert done.stdout.startswith(f"restarted web-03 by U0APPROVER key {key} ")
    assert await asyncio.to_thread(marker.read_text) == "web-03\n"  # it ran, once

    keys = Keys(PREFIX)
    job = await Jobs(redis, keys).get(job_id)
    assert job is not None
    assert (job.status, job.requester) == (JobStatus.COMPLETED, "cli:alice")
    assert job.meta["confirmed_by"] == "U0APPROVER"
    assert job.progress.tools_used == ["restart"] and job.progress.tool_executions == 1
    assert (
        await redis.zscore(keys.active_jobs(job_bucket(job_id)), job_id) is None
    )  # no scanner looks at it

    [(entry_key, entry)] = (await RedisLedger(redis, keys).entries(job_id)).items()
    assert entry_key == key
    assert (entry.state, entry.tool) == ("done", "restart")
    assert entry.args_hash == canonical_hash({"host": "web-03"})
    assert entry.output is not None
    assert "password=[redacted]" in entry.output and "hunter2" not in entry.output

    entries = await read_trace(redis, keys, job_id)
    [tool, end] = entries
    assert isinstance(tool, ToolEntry) and isinstance(end, EndEntry)
    assert (tool.tool, tool.ran, tool.is_error, tool.dry_run) == ("restart", True, False, False)
    assert tool.confirmed_by == "U0APPROVER"
    assert json.loads(tool.arguments or "") == {"host": "web-03", "confirmed_by": "U0APPROVER"}
    assert end.stop_reason.value == "completed" and end.tool_executions == 1

    shown = await asyncio.to_thread(opsloop, server.url, "trace", job_id)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith(f"Job {job_id} — completed\n")
    assert "started by cli:alice" in shown.stdout
    [line] = [li for li in shown.stdout.splitlines() if "  tool  " in li]
    assert '"confirmed_by": "U0APPROVER"' in line and "confirmed by U0APPROVER" in line
    assert "hunter2" not in shown.stdout


async def test_a_destructive_call_records_its_dry_run_too(
    server: ManagedRedis, redis: aioredis.Redis, tools_file: Path
) -> None:
    base = ("tools", "--file", str(tools_file), "run", "wipe", "host=db-1", "--confirmed-by")
    only_dry = await asyncio.to_thread(opsloop, server.url, *base, "U0APPROVER")
    assert only_dry.returncode == 2 and "would wipe db-1" in only_dry.stdout
    assert await redis.keys(f"{PREFIX}*") == []  # nothing changed, nothing recorded

    done = await asyncio.to_thread(opsloop, server.url, *base, "U0APPROVER", "--yes")

    assert done.returncode == 0, done.stdout + done.stderr
    entries = await read_trace(redis, Keys(PREFIX), recorded_job(done))
    tools = [e for e in entries if isinstance(e, ToolEntry)]
    assert [(t.dry_run, t.confirmed_by) for t in tools] == [(True, None), (False, "U0APPROVER")]


async def test_a_failing_change_is_recorded_as_failed(
    server: ManagedRedis, redis: aioredis.Redis, tools_file: Path
) -> None:
    done = await asyncio.to_thread(
        opsloop,
        server.url,
        *("tools", "--file", str(tools_file), "run", "broken_restart"),
        *("--confirmed-by", "U0APPROVER"),
    )

    assert done.returncode == 1
    assert "Error: exit 1: unit not found" in done.stdout
    job_id = recorded_job(done)
    keys = Keys(PREFIX)
    job = await Jobs(redis, keys).get(job_id)
    assert job is not None and job.status is JobStatus.FAILED
    assert job.error == "Error: exit 1: unit not found"
    [entry] = (await RedisLedger(redis, keys).entries(job_id)).values()
    assert entry.state == "done" and (entry.output or "").startswith("Error: exit 1")


async def test_a_redis_that_cannot_record_means_nothing_runs(
    tools_file: Path, marker: Path
) -> None:
    done = await asyncio.to_thread(
        opsloop,
        f"redis://127.0.0.1:{free_port()}/0",
        *("tools", "--file", str(tools_file), "run", "restart", "host=web-03"),
        *("--confirmed-by", "U0APPROVER", "--unrecorded"),  # a record is possible: it is made
    )

    assert done.returncode == 2
    assert "not run: the call could not be recorded" in done.stdout
    assert "restarted" not in done.stdout
    assert not await asyncio.to_thread(marker.exists)


def test_the_shell_user_is_found_as_getpass_finds_them() -> None:
    assert shell_user({"LOGNAME": "root-login", "USER": "alice"}) == "root-login"
    assert shell_user({"USER": "alice"}) == "alice"
    assert shell_user({"USERNAME": "bob"}) == "bob"
    assert shell_user({})  # the password database's name for this uid

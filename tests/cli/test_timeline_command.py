"""``opsloop timeline``: an incident read back from a real Redis, as Markdown or one JSON
document that round-trips; a thread Redis knows nothing of is exit 1 with a clear
message (a link to a message says the thread's root may be needed); a reference it
cannot read is exit 2, before Redis is asked. The command's body runs on the suite's
client (every topology); the real process runs against the standalone server."""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
import sys

import pytest
import redis.asyncio as aioredis

from bot.cli.timeline import command
from bot.emulator.redis_server import ManagedRedis, free_port
from bot.knowledge.timeline import from_json
from bot.store.keys import Keys
from bot.store.parts import Stores
from bot.turns.timeline import incident_timeline
from tests.store import conftest as store_fixtures
from tests.turns.test_timeline_of_an_incident import incident

PREFIX = "timeline-cli:"
server = store_fixtures.server
redis = store_fixtures.redis


def opsloop(redis_url: str | None, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "OPSLOOP_REDIS_PREFIX": PREFIX, "PYTHONIOENCODING": "utf-8"}
    if redis_url is not None:
        env["REDIS_URL"] = redis_url
    return subprocess.run(
        [sys.executable, "-m", "bot", "timeline", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )


async def run(redis_url: str | None, *args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(opsloop, redis_url, *args)


async def in_process(stores: Stores, ref: str, *, as_json: bool = False) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = await command(stores, ref, as_json=as_json, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


async def test_the_json_is_the_timeline_and_round_trips(redis: aioredis.Redis) -> None:
    found = await incident(redis, Keys(PREFIX))
    expected = await incident_timeline(found.stores, found.thread)

    code, out, err = await in_process(found.stores, found.job_id, as_json=True)

    assert (code, err) == (0, "")
    assert out.count("\n") == 1  # one document
    assert from_json(out) == expected
    document = json.loads(out)
    assert document["thread"] == f"{found.thread.channel}:{found.thread.thread_ts}"
    assert [e["kind"] for e in document["events"]][:3] == [
        "alert_fired",
        "request",
        "job_started",
    ]


async def test_the_markdown_by_link_never_pings(redis: aioredis.Redis) -> None:
    found = await incident(redis, Keys(PREFIX))
    thread = found.thread
    link = f"https://acme.slack.com/archives/{thread.channel}/p{thread.thread_ts.replace('.', '')}"

    code, out, _ = await in_process(found.stores, link)

    assert code == 0
    assert out.startswith(f"# Incident timeline: {thread.channel}:{thread.thread_ts}\n")
    assert " · **denied** · UCAROL · restart host=web-04 (j1)" in out
    assert "<@" not in out and "<!" not in out


async def test_a_thread_with_nothing_kept_is_exit_1(redis: aioredis.Redis) -> None:
    stores = Stores.build(redis, Keys(PREFIX))

    code, out, err = await in_process(stores, "C0NONE:1700000000.000100")
    assert (code, out) == (1, "")
    assert "nothing in Redis about thread C0NONE:1700000000.000100" in err
    assert "OPSLOOP_REDIS_PREFIX" in err and "first message" not in err

    link = "https://acme.slack.com/archives/C0NONE/p1700000099000200"
    code, _, err = await in_process(stores, link)
    assert code == 1 and "give the link of the thread's first message" in err


async def test_a_reference_it_cannot_read_is_exit_2(redis: aioredis.Redis) -> None:
    code, out, err = await in_process(Stores.build(redis, Keys(PREFIX)), "web-03")
    assert (code, out) == (2, "")
    assert "opsloop timeline: cannot read 'web-03'" in err


async def test_the_real_process(server: ManagedRedis, redis: aioredis.Redis) -> None:
    bad = await run(server.url, "https://evil.example.com/archives/C1/p1700000000000100")
    assert bad.returncode == 2 and "not a Slack message link" in bad.stderr

    unset = await run(None, "C0NONE:1700000000.000100")
    assert unset.returncode == 2 and "REDIS_URL" in unset.stderr

    down = await run(f"redis://127.0.0.1:{free_port()}", "C0NONE:1700000000.000100")
    assert down.returncode == 1 and "opsloop timeline:" in down.stderr
    assert "Traceback" not in down.stderr

    unknown = await run(server.url, "C0NONE:1700000000.000100")
    assert unknown.returncode == 1 and "nothing in Redis" in unknown.stderr

    if store_fixtures.TOPOLOGY != "standalone":
        pytest.skip("the incident is in the suite's cluster or Sentinel group, not in `server`")
    found = await incident(redis, Keys(PREFIX))
    shown = await run(server.url, f"{found.thread.channel}:{found.thread.thread_ts}", "--json")
    assert shown.returncode == 0, shown.stderr
    assert from_json(shown.stdout) == await incident_timeline(found.stores, found.thread)

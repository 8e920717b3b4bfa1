"""SIGTERM right after a burst of mentions (a rolling deploy under load), end to end: two
``opsloop serve`` processes on one Redis, 200 mentions to the first, SIGTERM 0.5 s after
the last one was acknowledged.

By then the first process's paced ``chat.update`` budget (Slack's Tier 3, ~50 a minute)
is minutes behind: its ended jobs' endings wait in it, and running jobs are still
stepping. It must exit within ``OPSLOOP_DRAIN_S`` + 5 s all the same (queued endings are
handed over as owed, not waited for; running jobs hand over at their next step), and
nothing it acknowledged is lost: every job ends (finished by it, or taken over by the
second process), its answer and ending shown once, and no status message is left
saying "Working".
"""

from __future__ import annotations

import asyncio
import re
import sys
import time
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from bot.emulator.bot_process import REPO_ROOT
from bot.emulator.redis_server import ManagedRedis
from bot.emulator.scripted import Reply, ScriptedRequest
from bot.emulator.slack import BOT_USER_ID, FakeSlack
from bot.store.jobs import JobStatus
from bot.store.keys import Keys

from .approvals_kit import first_job
from .conftest import StartBot
from .harness import BotProcess, ScriptedModel, mention, seed

pytestmark = pytest.mark.timeout(420)

CHANNEL = "C1"
MENTIONS = 200
# Shorter than the 15 s an ending waits for the budget (``progress.ENDING_WAIT_S``), so a
# drain that waited for the queued endings would run to its end; with nothing but those
# left to wait for, it ends as soon as the running jobs have handed over.
DRAIN_S = 10.0
EXIT_BOUND_S = DRAIN_S + 5.0  # the contract
SIGTERM_AFTER_S = 0.5  # the scenario: this long after the burst was acknowledged
SEND_AT_ONCE = 25  # mentions in flight together (Slack's own delivery is parallel too)
SETTLE_S = 300.0  # a hang guard: every job ended and its ending shown (2 loaded cores)
NO_WORKING_S = 30.0  # once every job's ending is recorded as shown
POLL_S = 0.5  # 200 jobs read per look
KEYS = Keys()


def answer(request: ScriptedRequest) -> Reply:
    """Each job's one answer, a little late: some jobs are mid-run at the SIGTERM."""
    asked = next(str(m.get("content")) for m in request.messages if m.get("role") == "user")
    found = re.search(r"burst-(\d+)", asked)
    assert found is not None, asked
    return Reply(content=f"Result: burst {found.group(1)} checked", delay_s=0.2)


async def send_burst(serve: BotProcess, slack: FakeSlack) -> list[str]:
    """The mentions, each in a thread of its own; every one acknowledged 200."""
    events = [mention(CHANNEL, f"UR{n:04d}", f"check burst-{n}") for n in range(MENTIONS)]
    for event in events:
        seed(slack, event)  # the threads Slack has (the redelivery reads them)
    gate = asyncio.Semaphore(SEND_AT_ONCE)

    async def send(event: dict[str, object]) -> int:
        async with gate:
            status, _ = await serve.send(event)
            return status

    statuses = await asyncio.gather(*(send(e) for e in events))
    assert statuses == [200] * MENTIONS
    return [str(e["ts"]) for e in events]


def bot_messages(slack: FakeSlack, ts: str) -> list[str]:
    return [m.text for m in slack.messages(CHANNEL, ts) if m.user == BOT_USER_ID]


def working(slack: FakeSlack, threads: list[str]) -> list[str]:
    """Threads with a status message still saying the job works, or resumes."""
    return [
        ts
        for ts in threads
        if any(t.startswith(("Working", "Resuming", "Stopping")) for t in bot_messages(slack, ts))
    ]


async def unsettled(client: aioredis.Redis, threads: list[str]) -> list[str]:
    """Jobs not ended yet, or whose answer and ending are still owed to the thread."""
    async with client.pipeline(transaction=False) as pipe:
        for ts in threads:
            pipe.hmget(KEYS.job(first_job(CHANNEL, ts)), ["status", "owed"])
        rows = await pipe.execute()
    return [
        f"{first_job(CHANNEL, ts)} {status} owed={owed}"
        for ts, (status, owed) in zip(threads, rows, strict=True)
        if status is None or not JobStatus(status).final or owed is not None
    ]


async def test_sigterm_after_a_burst_exits_within_the_drain_and_loses_nothing(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, redis_server: ManagedRedis
) -> None:
    model.policy = answer
    env = {"OPSLOOP_DRAIN_S": f"{DRAIN_S:g}", "OPSLOOP_TASK_DISPLAY": "off"}
    leaving, staying = await asyncio.gather(bot(**env), bot(**env))
    assert staying.running

    threads = await send_burst(leaving, slack)
    await asyncio.sleep(SIGTERM_AFTER_S)  # the scenario's moment, not a wait for a condition
    started = time.monotonic()
    code = await leaving.stop(timeout=EXIT_BOUND_S + 60)  # SIGTERM; SIGKILL only past that
    took = time.monotonic() - started
    print(f"exited {code} {took:.2f} s after SIGTERM (bound {EXIT_BOUND_S:g} s)")
    assert code == 0, leaving.output()
    assert took <= EXIT_BOUND_S, f"exited {took:.2f} s after SIGTERM\n{leaving.output()}"
    # The queued endings were handed over as owed, not waited for: the drain ended once
    # the running jobs had handed over, long before its time ran out.
    assert took < DRAIN_S, f"the drain waited out its {DRAIN_S:g} s\n{leaving.output()}"

    client = aioredis.Redis.from_url(redis_server.url, decode_responses=True)
    try:
        deadline = time.monotonic() + SETTLE_S
        while left := await unsettled(client, threads):  # Redis announces nothing: polled
            assert time.monotonic() < deadline, (
                f"{len(left)} jobs unsettled, e.g. {left[:5]}\n{staying.output()}"
            )
            await asyncio.sleep(POLL_S)
        print(f"every job ended and shown {time.monotonic() - started:.1f} s after SIGTERM")
        statuses = {await client.hget(KEYS.job(first_job(CHANNEL, ts)), "status") for ts in threads}
    finally:
        await client.aclose()
    assert statuses == {"completed"}

    try:
        await slack.wait_for(lambda: not working(slack, threads), timeout=NO_WORKING_S)
    except TimeoutError:
        stuck = working(slack, threads)
        raise AssertionError(f"{len(stuck)} status messages still working: {stuck[:5]}") from None
    for n, ts in enumerate(threads):
        said = bot_messages(slack, ts)
        assert said.count(f"Result: burst {n} checked") == 1, said
        assert sum(t.startswith("Done") for t in said) == 1, said


async def test_a_shutdown_stuck_past_its_bound_ends_by_force(tmp_path: Path) -> None:
    """``exit_by``: whatever holds the process up (here a sleep that never ends), it
    exits (1) once the bound is past."""
    script = "import time; from bot.service import exit_by; exit_by(0.5); time.sleep(600)"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, cwd=REPO_ROOT, stderr=asyncio.subprocess.PIPE
    )
    try:
        _, err = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 1
    assert b"the shutdown ran past" in err

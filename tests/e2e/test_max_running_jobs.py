"""``OPSLOOP_MAX_RUNNING_JOBS`` end to end: ``opsloop serve`` processes on one Redis, a
model server that holds each job's answer until the test releases it.

Past its limit a process acknowledges every mention (200) as at any time, and leaves
the extra jobs ``queued`` in Redis (no lease taken) until one of its jobs ends; a second
process with room takes a job the first left queued. ``/healthz`` and ``/metrics`` say
how many jobs run and wait. Every job is answered once and its model asked once.
"""

from __future__ import annotations

import asyncio
import json
import re

from bot.emulator.redis_server import ManagedRedis
from bot.emulator.scripted import Reply, ScriptedRequest
from bot.emulator.slack import BOT_USER_ID, FakeSlack
from bot.store.connection import connect
from bot.store.jobs import Jobs, JobStatus
from bot.store.keys import Keys, Thread
from bot.store.lease import Leases

from .conftest import StartBot
from .harness import BotProcess, ScriptedModel, mention

CHANNEL = "C1"
WAIT_S = 30.0  # hang guards; a scan runs every 5 s


class Held:
    """The model's policy: job ``n``'s request (its text names ``job-<n>``) is answered
    ``done-<n>`` once the test releases ``n``."""

    def __init__(self) -> None:
        self._released: dict[int, asyncio.Event] = {}

    def release(self, *numbers: int) -> None:
        for n in numbers:
            self._released.setdefault(n, asyncio.Event()).set()

    async def __call__(self, request: ScriptedRequest) -> Reply:
        n = job_number(request)
        await asyncio.wait_for(self._released.setdefault(n, asyncio.Event()).wait(), WAIT_S)
        return Reply(content=f"done-{n}")


def job_number(request: ScriptedRequest) -> int:
    found = re.search(r"job-(\d+)", json.dumps(request.messages))
    assert found is not None
    return int(found.group(1))


def asked(model: ScriptedModel) -> list[int]:
    return sorted(job_number(r) for r in model.requests)


def answers(slack: FakeSlack, thread_ts: str) -> list[str]:
    return [
        m.text
        for m in slack.messages(CHANNEL, thread_ts)
        if m.user == BOT_USER_ID and re.fullmatch(r"done-\d+", m.text or "")
    ]


async def send_all(serve: BotProcess, numbers: range) -> list[str]:
    """Mentions ``job-<n>``, each in a thread of its own, sent at once; each is acked 200."""
    events = [mention(CHANNEL, "U1", f"job-{n}") for n in numbers]
    statuses = await asyncio.gather(*(serve.send(event) for event in events))
    assert [status for status, _ in statuses] == [200] * len(events)
    return [str(event["ts"]) for event in events]


async def health(serve: BotProcess) -> dict[str, int]:
    status, body = await serve.get("/healthz")
    assert status == 200
    jobs: dict[str, int] = json.loads(body)["jobs"]
    return jobs


async def queued_untouched(redis_server: ManagedRedis, thread_ts: str) -> bool:
    """The thread's job is still queued and nobody holds its lease."""
    client = connect(redis_server.url)
    try:
        keys = Keys("opsloop:")
        thread = Thread(CHANNEL, thread_ts)
        record = await Jobs(client, keys).current(thread)
        held = await Leases(client, keys).expires_in(thread)
    finally:
        await client.aclose()
    return record is not None and record.status is JobStatus.QUEUED and held is None


async def test_past_the_limit_jobs_stay_queued_until_room_frees_and_every_mention_is_acked(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, redis_server: ManagedRedis
) -> None:
    held = Held()
    model.policy = held
    serve = await bot(OPSLOOP_MAX_RUNNING_JOBS="2")

    threads = await send_all(serve, range(5))  # acked while the model holds every answer
    await model.wait_for(lambda requests: len(requests) >= 2, timeout=WAIT_S)
    assert await health(serve) == {"running": 2, "limit": 2, "waiting": 3}
    running = asked(model)
    waiting = [ts for n, ts in enumerate(threads) if n not in running]
    assert [await queued_untouched(redis_server, ts) for ts in waiting] == [True] * 3
    _, metrics = await serve.get("/metrics")
    assert "opsloop_running_jobs 2.0" in metrics.splitlines()
    assert "opsloop_jobs_queued_for_room_total 3.0" in metrics.splitlines()

    held.release(running[0])  # its slot frees: one waiting job starts
    await model.wait_for(lambda requests: len(requests) >= 3, timeout=WAIT_S)
    assert (await health(serve))["waiting"] == 2

    held.release(*range(5))
    for n, ts in enumerate(threads):
        await slack.wait_for(lambda ts=ts: answers(slack, ts), timeout=WAIT_S)  # type: ignore[misc]
        assert answers(slack, ts) == [f"done-{n}"]
    assert asked(model) == [0, 1, 2, 3, 4]  # each job's model asked once


async def test_a_second_process_with_room_takes_the_job_a_full_one_left_queued(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel
) -> None:
    held = Held()
    model.policy = held
    first = await bot(OPSLOOP_MAX_RUNNING_JOBS="1")
    second = await bot(OPSLOOP_MAX_RUNNING_JOBS="1")

    threads = await send_all(first, range(2))  # the first process can run one of them
    await model.wait_for(lambda requests: len(requests) >= 2, timeout=WAIT_S)  # one each
    assert (await health(first))["running"] == 1
    assert (await health(second))["running"] == 1  # the job the first left queued

    held.release(0, 1)
    for n, ts in enumerate(threads):
        await slack.wait_for(lambda ts=ts: answers(slack, ts), timeout=WAIT_S)  # type: ignore[misc]
        assert answers(slack, ts) == [f"done-{n}"]
    assert asked(model) == [0, 1]

"""Alerts in across processes: two ``opsloop serve`` on one Redis receive the same
notification at the same moment (an Alertmanager HA pair, or a retry reaching the other
replica) → one alert message, one job; the same for an alert joining the group → one
reply."""

from __future__ import annotations

import asyncio
import json

from bot.emulator.redis_server import ManagedRedis
from bot.emulator.scripted import Reply
from bot.emulator.slack import FakeSlack

from .alerts_kit import (
    ALERT_ENV,
    ANSWER,
    no_work_left,
    notification,
    post_alert,
    replies,
    roots,
    thread_job,
)
from .approvals_kit import wait_until
from .conftest import StartBot
from .harness import ScriptedModel

TIMES = 3  # concurrent posts to each process


async def test_the_same_notification_at_two_processes_is_one_thread_and_one_job(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, redis_server: ManagedRedis
) -> None:
    model.policy = lambda _: Reply(content=ANSWER)
    first, second = await asyncio.gather(bot(**ALERT_ENV), bot(**ALERT_ENV))

    body = notification(("web-03", "firing"))
    answers = await asyncio.gather(
        *(post_alert(serve, body) for serve in (first, second) for _ in range(TIMES))
    )
    assert {status for status, _ in answers} == {200}
    outcomes = sorted(answer["outcome"] for _, answer in answers)
    assert outcomes == ["opened"] + ["repeat"] * (2 * TIMES - 1)
    await slack.wait_for(lambda: bool(roots(slack)), timeout=30)
    message = roots(slack)[0]
    await slack.wait_for(lambda: any(m.text == ANSWER for m in replies(slack, message)), timeout=30)

    joined = notification(("web-03", "firing"), ("web-04", "firing"))
    answers = await asyncio.gather(
        *(post_alert(serve, joined) for serve in (first, second) for _ in range(TIMES))
    )
    outcomes = sorted(answer["outcome"] for _, answer in answers)
    assert outcomes == ["repeat"] * (2 * TIMES - 1) + ["updated"]
    await slack.wait_for(
        lambda: any("web-04" in json.dumps(m.blocks) for m in replies(slack, message)), timeout=30
    )

    # Both processes are done with the group: nothing is left for either to post.
    await wait_until(
        lambda: no_work_left(redis_server.url, body["groupKey"]), timeout=10, what="no work left"
    )
    job = await thread_job(redis_server.url, message)
    assert job is not None and job["requester"] == "alertmanager"
    assert await thread_job(redis_server.url, message, number=2) is None
    assert len(roots(slack)) == 1
    assert len(model.requests) == 1
    updates = [m for m in replies(slack, message) if "web-04" in json.dumps(m.blocks)]
    assert len(updates) == 1
    assert len([c for c in slack.calls_of("chat.postMessage") if c.get("thread_ts") is None]) == 1

"""Alerts in from a real Alertmanager 0.25 (``prometheus-alertmanager``, webhook receiver
with ``send_resolved`` and the bearer token), fed through its ``POST /api/v2/alerts``,
against ``opsloop serve`` on real Redis:

- a group's life: it fires → one alert message and one job in its thread, the alert in
  the model's first request; a second alert joins while the job runs → one reply in the
  thread, taken into the running job; Alertmanager's repeats → nothing new; all resolved
  → the message says Resolved; it fires again → a new thread;
- Redis down when a notification comes → 503; Alertmanager retries and, Redis back, the
  group is posted once and investigated once.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from bot.alerts.text import HEADER
from bot.emulator.alert_feed import Delivery, alert
from bot.emulator.recording_tools import runs
from bot.emulator.redis_server import ManagedRedis
from bot.emulator.scripted import Reply, ScriptedCall, ScriptedRequest
from bot.emulator.slack import FakeSlack

from .alerts_kit import (
    ALERT_ENV,
    ANSWER,
    StartFeed,
    alert_feed,  # noqa: F401  (a fixture)
    inject_entries,
    notification,
    post_alert,
    replies,
    roots,
    thread_job,
)
from .approvals_kit import tools_yml, wait_until
from .conftest import StartBot
from .harness import ScriptedModel

CPU = {"summary": "CPU over 90%", "description": "web-03 at 95% for 10 minutes"}


def outcomes(deliveries: list[Delivery]) -> list[str | None]:
    return [d.outcome for d in deliveries]


def text_of(request: ScriptedRequest) -> str:
    return json.dumps(request.messages)


async def test_a_group_from_alertmanager_is_one_thread_investigated_until_it_resolves(
    bot: StartBot,
    slack: FakeSlack,
    model: ScriptedModel,
    redis_server: ManagedRedis,
    alert_feed: StartFeed,  # noqa: F811
    tmp_path: Path,
) -> None:
    tools, log = tools_yml(tmp_path)
    release = asyncio.Event()  # the first answer waits for the joining alert's reply

    async def policy(request: ScriptedRequest) -> Reply:
        if len(model.requests) == 1:
            await asyncio.wait_for(release.wait(), 60)  # bounded: a failing test ends
            return Reply(
                content="Checking the host.",
                tool_calls=[ScriptedCall("check_host", {"host": "web-03"})],
            )
        return Reply(content=ANSWER)

    model.policy = policy
    serve = await bot(**ALERT_ENV, OPSLOOP_TOOLS=tools)
    feed = await alert_feed(serve)

    await feed.fire(alert("HighCPU", severity="critical", instance="web-03", annotations=CPU))
    await slack.wait_for(lambda: len(roots(slack)) == 1, timeout=30)
    [message] = roots(slack)
    assert "Firing" in message.text and "HighCPU" in message.text
    await model.wait_for(lambda requests: len(requests) == 1, timeout=30)
    first = text_of(model.requests[0])
    assert "HighCPU" in first and "web-03" in first and "CPU over 90%" in first
    assert json.dumps(HEADER)[1:-1] in first  # quoted as data, never instructions
    job = await thread_job(redis_server.url, message)
    assert job is not None and job["requester"] == "alertmanager"
    assert feed.deliveries[0].authorization == "Bearer alert-token-0123456789"

    # A second alert joins the group while the job waits on the model.
    await feed.fire(alert("HighCPU", severity="critical", instance="web-04", annotations=CPU))
    await slack.wait_for(
        lambda: any("web-04" in json.dumps(m.blocks) for m in replies(slack, message)), timeout=30
    )

    async def injected() -> bool:
        return "web-04" in await inject_entries(redis_server.url, message)

    await wait_until(injected, timeout=10, what="the update in the thread's inject stream")
    release.set()
    await slack.wait_for(lambda: any(m.text == ANSWER for m in replies(slack, message)), timeout=30)
    assert len(model.requests) == 2
    assert "web-04" not in first and "web-04" in text_of(model.requests[1])  # taken in
    assert len(runs(log, tool="check_host")) == 1
    updates = [m for m in replies(slack, message) if "web-04" in json.dumps(m.blocks)]
    assert len(updates) == 1

    # Alertmanager repeats the unchanged group: nothing new anywhere.
    seen = len(feed.deliveries)
    await feed.relay.wait_for(lambda ds: "repeat" in outcomes(ds[seen:]), timeout=30)
    before = [m.ts for m in slack.messages("C0ALERTS")]
    seen = len(feed.deliveries)
    await feed.relay.wait_for(lambda ds: "repeat" in outcomes(ds[seen:]), timeout=30)
    assert [m.ts for m in slack.messages("C0ALERTS")] == before
    assert slack.message("C0ALERTS", message.ts).blocks == message.blocks
    assert len(model.requests) == 2

    # All resolved: the alert message says so, in place.
    await feed.resolve(
        alert("HighCPU", severity="critical", instance="web-03", annotations=CPU),
        alert("HighCPU", severity="critical", instance="web-04", annotations=CPU),
    )
    await slack.wait_for(
        lambda: "Resolved" in slack.message("C0ALERTS", message.ts).text, timeout=30
    )
    resolved = [d for d in feed.deliveries if d.outcome == "resolved"]
    assert len(resolved) == 1 and resolved[0].states == {"web-03": "resolved", "web-04": "resolved"}
    assert len(roots(slack)) == 1

    # It fires again: a new thread, investigated on its own.
    await feed.fire(alert("HighCPU", severity="critical", instance="web-03", annotations=CPU))
    await slack.wait_for(lambda: len(roots(slack)) == 2, timeout=30)
    again = roots(slack)[1]
    assert again.ts != message.ts and "Firing" in again.text
    await slack.wait_for(lambda: any(m.text == ANSWER for m in replies(slack, again)), timeout=30)
    assert outcomes(feed.deliveries).count("opened") == 2
    assert all(d.status == 200 for d in feed.deliveries)
    assert "Resolved" in slack.message("C0ALERTS", message.ts).text  # the old thread stays closed
    assert await thread_job(redis_server.url, message, number=2) is None  # one job per thread
    assert await thread_job(redis_server.url, again, number=2) is None


async def test_redis_down_is_a_503_that_alertmanager_retries_into_one_thread(
    bot: StartBot,
    slack: FakeSlack,
    model: ScriptedModel,
    redis_server: ManagedRedis,
    alert_feed: StartFeed,  # noqa: F811
) -> None:
    model.policy = lambda _: Reply(content=ANSWER)
    serve = await bot(**ALERT_ENV)
    feed = await alert_feed(serve, repeat_interval="1h")

    await asyncio.to_thread(redis_server.stop)
    try:
        status, answer = await post_alert(serve, notification(("db-01", "firing"), name="DiskFull"))
        assert status == 503 and "retry" in answer["error"]
        await feed.fire(alert("HighCPU", severity="critical", instance="web-03", annotations=CPU))
        await feed.relay.wait_for(lambda ds: any(d.status == 503 for d in ds), timeout=30)
    finally:
        await asyncio.to_thread(redis_server.start)

    # Alertmanager retries the notification it was refused; nothing of it was kept before.
    await feed.relay.wait_for(lambda ds: "opened" in outcomes(ds), timeout=30)
    await slack.wait_for(lambda: len(roots(slack)) == 1, timeout=30)
    [message] = roots(slack)
    await slack.wait_for(lambda: any(m.text == ANSWER for m in replies(slack, message)), timeout=30)
    assert "HighCPU" in message.text
    assert [d.status for d in feed.deliveries if d.status != 503] == [200]
    assert outcomes(feed.deliveries).count("opened") == 1

    # The same notification once more (a retry whose 200 was lost): nothing doubles.
    status, answer = await post_alert(serve, feed.deliveries[-1].body)
    assert (status, answer.get("outcome")) == (200, "repeat")
    # The hand-posted group refused while Redis was down, sent again, is posted once.
    status, answer = await post_alert(serve, notification(("db-01", "firing"), name="DiskFull"))
    assert (status, answer.get("outcome")) == (200, "opened")
    await slack.wait_for(lambda: len(roots(slack)) == 2, timeout=30)
    await model.wait_for(lambda requests: len(requests) == 2, timeout=30)
    names = sorted("DiskFull" if "DiskFull" in m.text else "HighCPU" for m in roots(slack))
    assert names == ["DiskFull", "HighCPU"]

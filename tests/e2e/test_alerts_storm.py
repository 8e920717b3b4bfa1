"""An alert storm against the limit: with ``OPSLOOP_ALERT_INVESTIGATIONS_PER_HOUR=5``, 50
alert groups fire at once through a real Alertmanager → 50 alert messages, 5 jobs, 45
messages with the ``Investigate`` button and a line saying why nothing started; a click
on one starts its job with the clicker as its requester (the storm limit is
Alertmanager's, not the clicker's)."""

from __future__ import annotations

import json
import re

from bot.emulator.alert_feed import alert
from bot.emulator.redis_server import ManagedRedis
from bot.emulator.scripted import Reply
from bot.emulator.slack import FakeSlack, Message
from bot.slack.alerts import ACTION_INVESTIGATE_ALERT

from .alerts_kit import (
    ALERT_ENV,
    ANSWER,
    CHANNEL,
    StartFeed,
    alert_feed,  # noqa: F401  (a fixture)
    has_button,
    replies,
    roots,
    thread_job,
)
from .conftest import StartBot
from .harness import ScriptedModel, click_body
from .test_metrics import scrape, value

GROUPS = 50
PER_HOUR = 5
CLICKER = "U0CLICKER"
STORM_LINE = "alert investigations started in the last hour"


def name_of(message: Message) -> str:
    found = re.search(r"Storm\d\d", message.text)
    assert found, message.text
    return found.group(0)


def answered(slack: FakeSlack, message: Message) -> bool:
    return any(m.text == ANSWER for m in replies(slack, message))


async def test_a_storm_posts_every_group_and_investigates_only_up_to_the_limit(
    bot: StartBot,
    slack: FakeSlack,
    model: ScriptedModel,
    redis_server: ManagedRedis,
    alert_feed: StartFeed,  # noqa: F811
) -> None:
    model.policy = lambda _: Reply(content=ANSWER)
    serve = await bot(**ALERT_ENV, OPSLOOP_ALERT_INVESTIGATIONS_PER_HOUR=str(PER_HOUR))
    feed = await alert_feed(serve, repeat_interval="1h")

    await feed.fire(
        *(
            alert(f"Storm{n:02d}", severity="warning", instance=f"web-{n:02d}")
            for n in range(GROUPS)
        )
    )
    await slack.wait_for(lambda: len(roots(slack)) == GROUPS, timeout=60)
    messages = roots(slack)
    assert sorted(name_of(m) for m in messages) == [f"Storm{n:02d}" for n in range(GROUPS)]
    offered = [m for m in messages if has_button(m)]
    investigated = [m for m in messages if not has_button(m)]
    assert (len(investigated), len(offered)) == (PER_HOUR, GROUPS - PER_HOUR)
    assert all(STORM_LINE in json.dumps(m.blocks) for m in offered)
    assert not any(STORM_LINE in json.dumps(m.blocks) for m in investigated)
    await slack.wait_for(lambda: all(answered(slack, m) for m in investigated), timeout=30)
    for message in investigated:
        job = await thread_job(redis_server.url, message)
        assert job is not None and job["requester"] == "alertmanager"
    for message in offered:
        assert await thread_job(redis_server.url, message) is None
    assert len(model.requests) == PER_HOUR
    samples = await scrape(serve)
    assert value(samples, "opsloop_alert_investigations_total", outcome="started") == PER_HOUR
    limited = value(samples, "opsloop_alert_investigations_total", outcome="storm_limited")
    assert limited == GROUPS - PER_HOUR
    assert {d.status for d in feed.deliveries} == {200} and len(feed.deliveries) == GROUPS

    # A person presses Investigate on one: its job starts, theirs.
    chosen = offered[17]
    body = click_body(
        chosen.as_slack(),
        CHANNEL,
        CLICKER,
        slack.api_url + "response",
        action_id=ACTION_INVESTIGATE_ALERT,
    )
    status, _ = await serve.post_event(body)
    assert status == 200
    await slack.wait_for(lambda: answered(slack, chosen), timeout=30)
    job = await thread_job(redis_server.url, chosen)
    assert job is not None and job["requester"] == CLICKER
    assert len(model.requests) == PER_HOUR + 1
    assert name_of(chosen) in json.dumps(model.requests[-1].messages)  # the alert is its request
    await slack.wait_for(lambda: not has_button(slack.message(CHANNEL, chosen.ts)), timeout=10)
    assert f"<@{CLICKER}>" in json.dumps(slack.message(CHANNEL, chosen.ts).blocks)
    assert sum(1 for m in roots(slack) if has_button(m)) == GROUPS - PER_HOUR - 1

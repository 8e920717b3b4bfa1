"""A job that starts in a thread whose earlier messages the history does not hold reads them
first (``opsloop serve`` against the fake Slack's ``conversations.replies``): people's
messages and other bots' posts — the Alertmanager alert the thread starts from, PagerDuty's
and Datadog's posts, their attachments and blocks — never this bot's own, scrubbed, bounded
and quoted as data; a later job reads only what came since; a failed or slow read costs the
context, never the job, and the next job start reads what it missed. /metrics counts the
ack path."""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

from bot.emulator import alert_posts
from bot.emulator.redis_server import ManagedRedis
from bot.emulator.scripted import Reply, ScriptedRequest
from bot.emulator.slack import FakeSlack
from bot.slack.context import CONTEXT_TOTAL_CHARS, HEADER
from bot.store.keys import Keys, Thread

from .conftest import StartBot
from .harness import ScriptedModel, mention, message, new_ts, seed, steps

SECRET_TOKEN = "hunter2hunter2hunter2"
SLACK_TOKEN = "xoxb-4242424242-abcdefghijklmnop"


def users(request: ScriptedRequest) -> list[str]:
    return [str(m["content"]) for m in request.messages if m.get("role") == "user"]


def posted(slack: FakeSlack, text: str) -> bool:
    return any(p.get("text") == text for p in slack.calls_of("chat.postMessage"))


def ended(slack: FakeSlack, thread_ts: str) -> bool:
    """The job's status message (this bot's first post in the thread) shows its ending."""
    ours = [m for m in slack.messages("C1", thread_ts) if m.user == "UBOT"]
    return bool(ours) and ours[0].text.startswith("Done")


def bot_event(post: dict[str, Any], *, ts: str, thread_ts: str) -> dict[str, Any]:
    """The ``message`` event Slack delivers for an integration's post."""
    event = message("C1", "", str(post.get("text") or ""), ts=ts, thread_ts=thread_ts)
    del event["user"], event["client_msg_id"]
    return {**event, **{k: v for k, v in post.items() if k not in ("type", "text")}}


async def test_a_mention_in_an_existing_thread_sees_the_earlier_messages(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel
) -> None:
    model.policy = steps(Reply(content="Looks like the deploy at 14:02."))  # type: ignore[arg-type]
    serve = await bot()
    parent_ts = new_ts()
    seed(slack, message("C1", "U1", "web-03 went to 95% CPU after the deploy", ts=parent_ts))
    seed(slack, message("C1", "U2", "errors in nginx too", ts=new_ts(), thread_ts=parent_ts))
    event = mention("C1", "U3", "what do you think?", thread_ts=parent_ts)

    assert (await serve.send(event))[0] == 200
    await model.wait_for(lambda requests: len(requests) == 1, timeout=30)

    context, request = users(model.requests[0])
    assert context.startswith(HEADER + "\n[")
    assert " <@U1>:\n> web-03 went to 95% CPU after the deploy\n[" in context
    assert context.endswith(" <@U2>:\n> errors in nginx too")
    assert request.endswith("what do you think?")
    await slack.wait_for(lambda: posted(slack, "Looks like the deploy at 14:02."), timeout=30)
    status, metrics = await serve.get("/metrics")
    assert status == 200 and "opsloop_ack_seconds" in metrics


async def test_the_alert_the_thread_starts_from_is_context(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, redis_server: ManagedRedis
) -> None:
    model.policy = steps(Reply(content="web-03 is hot: see the alert."))  # type: ignore[arg-type]
    serve = await bot()
    alert = alert_posts.alertmanager_firing()
    alert["attachments"][0]["fields"].append({"title": "token", "value": SECRET_TOKEN})
    alert["attachments"][0]["text"] += f"\nnotify: {SLACK_TOKEN}"
    root = slack.add_post("C1", alert, ts=new_ts())
    slack.add_post("C1", alert_posts.pagerduty_triggered(), ts=new_ts(), thread_ts=root)
    slack.add_post("C1", alert_posts.own_post("An old opsloop status"), ts=new_ts(), thread_ts=root)
    slack.add_post("C1", alert_posts.datadog_monitor(), ts=new_ts(), thread_ts=root)
    huge = alert_posts.grafana_legacy()
    huge["attachments"] = [
        {
            "title": "log dump",
            "text": "y" * 300_000,
            "fields": [{"title": "k", "value": "v"}] * 2000,
        }
    ]
    slack.add_post("C1", huge, ts=new_ts(), thread_ts=root)
    rich = [{"type": "rich_text", "elements": []}]
    slack.add_message("C1", new_ts(), "U1", "nginx 502s as well", thread_ts=root, blocks=rich)
    event = mention("C1", "U3", "what is going on with web-03?", thread_ts=root)
    seed(slack, event)

    assert (await serve.send(event))[0] == 200
    await model.wait_for(lambda requests: len(requests) == 1, timeout=30)

    context, request = users(model.requests[0])
    assert request.endswith("what is going on with web-03?")
    assert context.startswith(HEADER)
    for substance in (
        "Alertmanager (bot):\n> [FIRING:1] HighCPU web-03",  # the root's attachment
        "> *Description:* web-03 has been at 97% CPU since 14:02 UTC",
        "> severity: critical",  # its fields
        "PagerDuty (bot):",  # an app's blocks
        "> *Status:* Triggered",
        "> *Service:* web-frontend",
        "Datadog (bot):\n> Triggered: [P2] 5xx rate above 5% on web-frontend",
        "> • host:web-03",
        "Grafana (bot):\n> log dump\n> yyy",
        "<@U1>:\n> nginx 502s as well",
    ):
        assert substance in context, substance
    assert "old opsloop status" not in context  # this bot's own post
    assert context.count("nginx 502s") == 1
    assert SECRET_TOKEN not in context and "4242424242" not in context
    assert "> token: [redacted]" in context
    assert len(context) <= CONTEXT_TOTAL_CHARS and "y" * 2_001 not in context
    # Scrubbed before it was stored, too.
    client = aioredis.Redis.from_url(redis_server.url)
    try:
        stored = await client.xrange(Keys().inject(Thread("C1", root)))
    finally:
        await client.aclose()
    assert stored and not any(SECRET_TOKEN.encode() in v for _, f in stored for v in f.values())
    await slack.wait_for(lambda: posted(slack, "web-03 is hot: see the alert."), timeout=30)


async def test_a_reply_that_starts_a_job_reads_only_what_the_history_lacks(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel
) -> None:
    model.policy = steps(  # type: ignore[arg-type]
        Reply(content="CPU on web-03 is high."), Reply(content="It resolved at 14:20.")
    )
    serve = await bot()
    root = slack.add_post("C1", alert_posts.alertmanager_firing(), ts=new_ts())
    slack.add_message("C1", new_ts(), "U1", "on it", thread_ts=root)
    first = mention("C1", "U2", "why is web-03 hot?", thread_ts=root)
    seed(slack, first)
    assert (await serve.send(first))[0] == 200
    await slack.wait_for(lambda: posted(slack, "CPU on web-03 is high."), timeout=30)
    await slack.wait_for(lambda: ended(slack, root), timeout=30)
    # The alert resolves in the thread (its event starts nothing), then a person replies.
    resolved = alert_posts.alertmanager_resolved()
    resolved_ts = slack.add_post("C1", resolved, thread_ts=root)
    assert (await serve.send(bot_event(resolved, ts=resolved_ts, thread_ts=root)))[0] == 200
    reply_ts = slack.add_message("C1", None, "U1", "is it over?", thread_ts=root)
    assert len(model.requests) == 1

    reply = message("C1", "U1", "is it over?", ts=reply_ts, thread_ts=root)
    assert (await serve.send(reply))[0] == 200
    await model.wait_for(lambda requests: len(requests) == 2, timeout=30)

    first_context, asked, later_context, replied = users(model.requests[1])
    assert "[FIRING:1] HighCPU web-03" in first_context and "> on it" in first_context
    assert asked.endswith("why is web-03 hot?")
    assert later_context.startswith(HEADER)
    assert "Alertmanager (bot):\n> [RESOLVED] HighCPU web-03" in later_context
    for held in ("FIRING", "on it", "why is web-03 hot", "CPU on web-03 is high", "Working"):
        assert held not in later_context, held  # in the history already, or this bot's
    assert replied == "<@U1>: is it over?"
    await slack.wait_for(lambda: posted(slack, "It resolved at 14:20."), timeout=30)


async def test_a_slow_slack_costs_the_context_and_the_next_job_reads_it(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel
) -> None:
    model.policy = steps(  # type: ignore[arg-type]
        Reply(content="I can't see an alert."), Reply(content="Now I see the alert.")
    )
    serve = await bot()
    root = slack.add_post("C1", alert_posts.alertmanager_firing(), ts=new_ts())
    first = mention("C1", "U2", "what fired?", thread_ts=root)
    seed(slack, first)
    gate = slack.hold("conversations.replies")  # Slack never answers this read

    assert (await serve.send(first))[0] == 200
    await model.wait_for(lambda requests: len(requests) == 1, timeout=30)
    assert users(model.requests[0]) == ["<@U2>: <@UBOT> what fired?"]
    await slack.wait_for(lambda: ended(slack, root), timeout=30)
    gate.set()
    reply_ts = slack.add_message("C1", None, "U2", "look again", thread_ts=root)
    assert (await serve.send(message("C1", "U2", "look again", ts=reply_ts, thread_ts=root)))[
        0
    ] == 200
    await model.wait_for(lambda requests: len(requests) == 2, timeout=30)

    *_, context, again = users(model.requests[1])
    assert "Alertmanager (bot):\n> [FIRING:1] HighCPU web-03" in context  # not held yet
    assert again == "<@U2>: look again"

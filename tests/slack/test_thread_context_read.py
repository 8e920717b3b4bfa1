"""The mention listener reads a thread's context from Slack (``conversations.replies`` over
HTTP, against the fake Slack) when the message starts a job: the alert post the thread
starts from and everything else in the window, never this bot's own posts; only the
window's range is asked for, a few pages at most; a Slack that fails or is slow costs the
context, never the job."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from slack_sdk.web.async_client import AsyncWebClient

from bot.agent.testing import ScriptedModel
from bot.emulator import alert_posts
from bot.emulator.slack import BOT_USER_ID, FakeSlack
from bot.slack.app import CONTEXT_PAGE, CONTEXT_PAGES, Messages
from bot.slack.identity import BotIdentity
from bot.store.inject import InjectReader
from bot.store.keys import Keys, Thread
from bot.turns.context import ContextWindow
from tests.store import conftest as store
from tests.turns.test_approvals_stop_continue import make_turns

server, redis, keys = store.server, store.redis, store.keys

CHANNEL = "C1"
ROOT = "1700000000.000100"
THREAD = Thread(CHANNEL, ROOT)


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as fake:
        yield fake


@pytest.fixture
def messages(slack: FakeSlack, redis: aioredis.Redis, keys: Keys) -> Messages:
    client = AsyncWebClient(token="xoxb-test", base_url=slack.api_url)
    turns, _ = make_turns(redis, keys, ScriptedModel([]))
    return Messages(
        client=client,
        turns=turns,
        identity=BotIdentity(client),
        schedule=lambda _job_id: None,
        allowed_bots=frozenset(),
        context_timeout_s=0.5,
    )


def mention(ts: str, text: str = "what is going on?") -> dict[str, object]:
    return {
        "type": "app_mention",
        "channel": CHANNEL,
        "user": "U2",
        "text": f"<@{BOT_USER_ID}> {text}",
        "ts": ts,
        "thread_ts": ROOT,
    }


async def stream(redis: aioredis.Redis, keys: Keys) -> list[tuple[str, str]]:
    reader = InjectReader(redis, keys, THREAD, consumer="t", seen_ids=set)
    return [(i.id, i.text) for i in await reader.fetch()]


async def test_a_mention_under_an_alert_reads_the_thread_first(
    messages: Messages, slack: FakeSlack, redis: aioredis.Redis, keys: Keys
) -> None:
    slack.add_post(CHANNEL, alert_posts.alertmanager_firing(), ts=ROOT)
    slack.add_post(CHANNEL, alert_posts.pagerduty_triggered(), thread_ts=ROOT)
    slack.add_post(CHANNEL, alert_posts.own_post("An earlier opsloop answer"), thread_ts=ROOT)
    slack.add_message(CHANNEL, None, "U1", "nginx errors too", thread_ts=ROOT)
    ts = slack.add_message(CHANNEL, None, "U2", "<@UBOT> what is going on?", thread_ts=ROOT)
    slack.add_message(CHANNEL, None, "U3", "posted after the mention", thread_ts=ROOT)

    await messages.on_mention(mention(ts))

    [(context_id, context), (mention_id, _)] = await stream(redis, keys)
    assert (context_id, mention_id) == (f"{ts}:context", ts)
    assert "Alertmanager (bot):\n> [FIRING:1] HighCPU web-03" in context
    assert "PagerDuty (bot):" in context and "> *Status:* Triggered" in context
    assert "<@U1>:\n> nginx errors too" in context
    assert "opsloop answer" not in context and "after the mention" not in context
    [params] = slack.calls_of("conversations.replies")
    assert (params["channel"], params["ts"], params["latest"]) == (CHANNEL, ROOT, ts)
    assert "oldest" not in params and params["limit"] == str(CONTEXT_PAGE)


async def test_a_later_read_asks_only_for_what_came_since_the_last(
    messages: Messages, slack: FakeSlack
) -> None:
    slack.add_post(CHANNEL, alert_posts.alertmanager_firing(), ts=ROOT)
    first = slack.add_message(CHANNEL, None, "U2", "<@UBOT> why?", thread_ts=ROOT)
    slack.add_post(CHANNEL, alert_posts.alertmanager_resolved(), thread_ts=ROOT)
    reply = slack.add_message(CHANNEL, None, "U2", "is it over?", thread_ts=ROOT)
    window = ContextWindow(before=reply, after=first, received=frozenset({first}))

    context = await messages.thread_context(THREAD, window)

    assert context is not None and "[RESOLVED] HighCPU web-03" in context
    assert "FIRING" not in context  # the root: before the last read (and Slack sends it)
    [params] = slack.calls_of("conversations.replies")
    assert (params["oldest"], params["latest"]) == (first, reply)


async def test_a_thread_longer_than_the_pages_read_says_so(
    messages: Messages, slack: FakeSlack
) -> None:
    messages.context_timeout_s = 30.0  # a hang guard: this test counts pages, not time
    slack.add_post(CHANNEL, alert_posts.alertmanager_firing(), ts=ROOT)
    for n in range(CONTEXT_PAGE * CONTEXT_PAGES + 10):
        slack.add_message(CHANNEL, None, "U1", f"message {n}", thread_ts=ROOT)
    window = ContextWindow(before="1800000000.000000", after=None, received=frozenset())

    context = await messages.thread_context(THREAD, window)

    assert len(slack.calls_of("conversations.replies")) == CONTEXT_PAGES
    assert context is not None and "[FIRING:1] HighCPU web-03" in context
    assert context.endswith("[… the thread has later messages that were not read]")


async def test_a_failing_or_slow_slack_costs_the_context_not_the_job(
    messages: Messages, slack: FakeSlack, redis: aioredis.Redis, keys: Keys
) -> None:
    slack.add_post(CHANNEL, alert_posts.alertmanager_firing(), ts=ROOT)
    ts = slack.add_message(CHANNEL, None, "U2", "<@UBOT> why?", thread_ts=ROOT)
    window = ContextWindow(before=ts, after=None, received=frozenset())
    slack.fail_next("conversations.replies", status=200, error="internal_error")
    assert await messages.thread_context(THREAD, window) is None

    slack.hold("conversations.replies")  # never answers
    await messages.on_mention(mention(ts))

    assert await stream(redis, keys) == [(ts, f"<@{BOT_USER_ID}> what is going on?")]
    job = await messages.turns.stores.jobs.current(THREAD)
    assert job is not None and job.request_ts == ts

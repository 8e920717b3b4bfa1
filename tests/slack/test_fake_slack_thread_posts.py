"""The fake Slack holds other integrations' posts and answers ``conversations.replies`` with
them as Slack does: attachments, blocks, ``subtype``/``username``/``bot_profile``, no ``user``
for an incoming webhook's post; ``oldest``/``latest`` (excluded unless ``inclusive``) with
the parent always opening the first page; and it can be slow (``hold``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.emulator import alert_posts
from bot.emulator.slack import BOT_ID, BOT_USER_ID, FakeSlack

CHANNEL = "C1"
ROOT = "1700000001.000000"


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as fake:
        yield fake


@pytest.fixture
def client(slack: FakeSlack) -> AsyncWebClient:
    return AsyncWebClient(token="xoxb-test", base_url=slack.api_url)


async def test_posts_come_back_in_slacks_wire_shape(
    client: AsyncWebClient, slack: FakeSlack
) -> None:
    alert = alert_posts.alertmanager_firing()
    slack.add_post(CHANNEL, alert, ts=ROOT)
    slack.add_post(CHANNEL, alert_posts.pagerduty_triggered(), thread_ts=ROOT)
    slack.add_post(CHANNEL, alert_posts.own_post("Looking"), thread_ts=ROOT)
    rich = [{"type": "rich_text", "elements": []}]
    slack.add_message(CHANNEL, None, "U1", "on it", thread_ts=ROOT, blocks=rich)

    got = (await client.conversations_replies(channel=CHANNEL, ts=ROOT))["messages"]

    webhook, app, own, person = got
    assert webhook["ts"] == ROOT and webhook["reply_count"] == 3
    assert "user" not in webhook  # an incoming webhook posts as no user
    assert (webhook["subtype"], webhook["username"], webhook["bot_id"]) == (
        "bot_message",
        "Alertmanager",
        alert_posts.ALERTMANAGER_BOT,
    )
    assert webhook["attachments"] == alert["attachments"]
    assert (app["user"], app["bot_id"], app["bot_profile"]["name"]) == (
        alert_posts.PAGERDUTY_USER,
        alert_posts.PAGERDUTY_BOT,
        "PagerDuty",
    )
    assert app["blocks"] == alert_posts.pagerduty_triggered()["blocks"]
    assert app["thread_ts"] == ROOT and "subtype" not in app
    assert (own["user"], own["bot_id"]) == (BOT_USER_ID, BOT_ID)
    assert (person["user"], person["blocks"]) == ("U1", rich)


async def test_oldest_and_latest_bound_the_replies_and_the_parent_opens_the_first_page(
    client: AsyncWebClient, slack: FakeSlack
) -> None:
    slack.add_message(CHANNEL, ROOT, "U1", "root")
    for n in range(2, 6):
        slack.add_message(CHANNEL, f"170000000{n}.000000", "U1", f"m{n}", thread_ts=ROOT)

    async def texts(**params: object) -> list[str]:
        reply = await client.conversations_replies(channel=CHANNEL, ts=ROOT, **params)
        return [m["text"] for m in reply["messages"]]

    assert await texts(oldest="1700000002.000000", latest="1700000005.000000") == [
        "root",
        "m3",
        "m4",
    ]
    assert await texts(oldest="1700000002.000000", latest="1700000005.000000", inclusive=True) == [
        "root",
        "m2",
        "m3",
        "m4",
        "m5",
    ]
    assert await texts(oldest="1700000004.000000") == ["root", "m5"]
    assert await texts(latest="1700000003.000000", limit=2) == ["root", "m2"]
    with pytest.raises(SlackApiError) as info:
        await client.conversations_replies(channel=CHANNEL, ts=ROOT, oldest="yesterday")
    assert info.value.response["error"] == "invalid_ts_oldest"


async def test_a_held_method_answers_only_when_released(
    client: AsyncWebClient, slack: FakeSlack
) -> None:
    slack.add_message(CHANNEL, ROOT, "U1", "root")
    gate = slack.hold("conversations.replies")
    call = asyncio.create_task(client.conversations_replies(channel=CHANNEL, ts=ROOT))
    await slack.wait_for_call("conversations.replies")
    assert not call.done()

    gate.set()
    assert [m["text"] for m in (await call)["messages"]] == ["root"]

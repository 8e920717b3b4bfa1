"""Which channels' incidents another channel may see: ``conversations.info``'s
``is_private`` over the fake Slack, cached; a channel Slack will not describe (the bot is
not in a private one: ``channel_not_found``), a DM, or a lookup that fails is never public;
and thread links on the workspace's URL from ``auth.test``."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from bot.emulator.slack import FakeSlack
from bot.slack.channels import ChannelDirectory

CHANNELS = {
    "C0PUB": "payments",
    "C0PRIV": {"name": "sec", "is_private": True},
    "D0DM": {"is_im": True, "is_private": False},
}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack(channels=CHANNELS) as fake:
        yield fake


@pytest.fixture
def client(slack: FakeSlack) -> AsyncWebClient:
    return AsyncWebClient(token="xoxb-test", base_url=slack.api_url)


async def test_only_a_channel_slack_calls_public_is_public(client: AsyncWebClient) -> None:
    directory = ChannelDirectory(client)
    assert await directory.is_public("C0PUB")
    assert not await directory.is_public("C0PRIV")
    assert not await directory.is_public("D0DM")
    assert not await directory.is_public("C0UNKNOWN")  # channel_not_found


async def test_answers_are_cached_and_failures_retried_later(
    slack: FakeSlack, client: AsyncWebClient
) -> None:
    clock = Clock()
    directory = ChannelDirectory(client, clock=clock, ttl_s=600, failure_ttl_s=60)
    assert await directory.is_public("C0PUB")
    assert await directory.is_public("C0PUB")
    assert directory.lookups == 1
    slack.channels["C0PUB"]["is_private"] = True  # made private: seen once the entry ages
    clock.now += 599
    assert await directory.is_public("C0PUB")
    clock.now += 2
    assert not await directory.is_public("C0PUB")
    assert directory.lookups == 2
    assert not await directory.is_public("C0LATER")
    slack.channels["C0LATER"] = {"id": "C0LATER", "name": "later", "is_private": False}
    clock.now += 30
    assert not await directory.is_public("C0LATER")  # the failure is remembered a while
    clock.now += 31
    assert await directory.is_public("C0LATER")


async def test_a_slow_slack_is_not_public(client: AsyncWebClient) -> None:
    class Stuck:
        async def conversations_info(self, channel: str) -> dict[str, object]:
            import asyncio

            await asyncio.sleep(60)
            return {}

    directory = ChannelDirectory(Stuck(), timeout_s=0.05)
    assert not await directory.is_public("C0PUB")


async def test_links_use_the_workspace_url(client: AsyncWebClient) -> None:
    link = await ChannelDirectory(client).link("C0PUB", "1765000000.000100")
    assert link is not None and link.endswith("/archives/C0PUB/p1765000000000100")
    assert link.startswith("http")

"""“Investigate with opsloop” passes the mention's gate (``bot.turns.admission``): with the
workspace's daily cap reached, or past the person's hourly rate, it starts no job and the
person is told why through ``response_url`` (ephemeral), once per message."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine
from typing import Any

import pytest
import redis.asyncio as aioredis
from slack_sdk.web.async_client import AsyncWebClient

from bot.agent.testing import ScriptedModel
from bot.emulator import alert_posts, sender
from bot.emulator.slack import FakeSlack
from bot.slack.actions import Interactions
from bot.slack.app import Messages
from bot.slack.identity import BotIdentity
from bot.slack.policy import ApproverPolicy
from bot.slack.shortcut import CALLBACK_INVESTIGATE, Shortcut
from bot.slack.updates import UpdateBudget
from bot.store.keys import Keys, Thread
from bot.store.quota import DailyCaps, JobAdmission, JobRate
from tests.store import conftest as store
from tests.turns.test_approvals_stop_continue import make_turns

server, redis, keys = store.server, store.redis, store.keys

CHANNEL = "C0INCIDENT"


class Edge:
    def __init__(
        self, slack: FakeSlack, redis: aioredis.Redis, keys: Keys, *, per_hour: int
    ) -> None:
        client = AsyncWebClient(token="xoxb-test", base_url=slack.api_url)
        self.slack = slack
        self.caps = DailyCaps(redis, keys, tokens=1_000, cost_usd=None)
        rate = JobRate(redis, keys, per_hour=per_hour)
        admission = JobAdmission(redis, keys, caps=self.caps, rate=rate)
        self.turns = make_turns(redis, keys, ScriptedModel([]), admission=admission)[0]
        self.scheduled: list[str] = []
        self.later: list[asyncio.Future[Any]] = []

        def background(coro: Coroutine[Any, Any, Any], _: str) -> None:
            self.later.append(asyncio.ensure_future(coro))

        messages = Messages(
            client=client,
            turns=self.turns,
            identity=BotIdentity(client),
            schedule=self.scheduled.append,
            allowed_bots=frozenset(),
        )
        interactions = Interactions(
            client=client,
            budget=UpdateBudget(lambda *_: None),  # type: ignore[arg-type]
            turns=self.turns,
            policy=ApproverPolicy((), client),
            schedule=self.scheduled.append,
            background=background,
        )
        self.shortcut = Shortcut(messages=messages, interactions=interactions)

    async def use(self, ts: str, *, user: str = "U0ALICE") -> None:
        async def ack() -> None:
            return None

        body = sender.message_action(
            callback_id=CALLBACK_INVESTIGATE,
            user_id=user,
            user_name=user.lower(),
            channel=CHANNEL,
            channel_name="incidents",
            message=self.slack.message(CHANNEL, ts).as_slack(),
            response_url=self.slack.api_url + "response",
            team="T1",
        )
        await self.shortcut.on_investigate(ack, body)
        if self.later:
            await asyncio.gather(*self.later)
            self.later.clear()

    def notes(self) -> list[str]:
        return [str(p.get("text")) for p in self.slack.calls_of("response")]


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as fake:
        yield fake


async def test_with_the_daily_cap_reached_the_shortcut_starts_nothing_and_says_why(
    slack: FakeSlack, redis: aioredis.Redis, keys: Keys
) -> None:
    edge = Edge(slack, redis, keys, per_hour=0)
    await edge.caps.reserve(1_000, None)
    alert = slack.add_post(CHANNEL, alert_posts.alertmanager_firing())

    await edge.use(alert)
    await edge.use(alert)  # used again on the same message: told once

    assert edge.scheduled == []
    assert await edge.turns.stores.jobs.current(Thread(CHANNEL, alert)) is None
    [note] = edge.notes()
    assert "daily model budget is used up" in note and "1,000 of 1,000 tokens" in note
    assert slack.calls_of("chat.postMessage") == []  # ephemeral only, through response_url


async def test_past_the_rate_the_shortcut_says_when_to_retry(
    slack: FakeSlack, redis: aioredis.Redis, keys: Keys
) -> None:
    edge = Edge(slack, redis, keys, per_hour=1)
    first = slack.add_post(CHANNEL, alert_posts.alertmanager_firing(host="web-01"))
    second = slack.add_post(CHANNEL, alert_posts.alertmanager_firing(host="web-02"))

    await edge.use(first)
    await edge.use(second)

    assert len(edge.scheduled) == 1
    [note] = edge.notes()
    assert note.startswith("You've started 1 job in the last hour (at most 1 an hour)")

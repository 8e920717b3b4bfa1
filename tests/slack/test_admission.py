"""The gate in front of new jobs on the ack path (``bot.turns.admission`` through the mention
listener, over the fake Slack and a real store): with the workspace's daily cap reached a
new mention starts no job and the thread is told, once; past the person's hourly rate the
mention starts no job and they alone are told when to retry; a reply to a live job is never
refused; Slack's retry of an admitted mention counts once; a refused mention in a thread
reads no thread context; a store failure of the gate is the ack path's."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from slack_sdk.web.async_client import AsyncWebClient

from bot.agent.testing import ScriptedModel
from bot.emulator.slack import BOT_USER_ID, FakeSlack
from bot.errors import StoreError
from bot.slack.app import Messages
from bot.slack.identity import BotIdentity
from bot.store.inject import InjectReader
from bot.store.keys import Keys, Thread
from bot.store.quota import DailyCaps, JobAdmission, JobRate, day_key, jobs_key, utc_day
from bot.turns.parts import Turns
from tests.store import conftest as store
from tests.turns.test_approvals_stop_continue import make_turns

server, redis, keys = store.server, store.redis, store.keys

CHANNEL = "C1"
T0 = 1_764_590_400.0  # 2026-12-01 12:00 UTC


class Clock:
    t = T0

    def __call__(self) -> float:
        return self.t


class Edge:
    def __init__(
        self,
        slack: FakeSlack,
        redis: aioredis.Redis,
        keys: Keys,
        *,
        tokens: int | None = None,
        per_hour: int = 0,
    ) -> None:
        self.clock = Clock()
        self.caps = (
            DailyCaps(redis, keys, tokens=tokens, cost_usd=None, now=self.clock) if tokens else None
        )
        self.rate = JobRate(redis, keys, per_hour=per_hour, now=self.clock)
        admission = JobAdmission(redis, keys, caps=self.caps, rate=self.rate, now=self.clock)
        self.turns: Turns = make_turns(redis, keys, ScriptedModel([]), admission=admission)[0]
        self.scheduled: list[str] = []
        self.later: list[asyncio.Task[object]] = []
        client = AsyncWebClient(token="xoxb-test", base_url=slack.api_url)
        self.messages = Messages(
            client=client,
            turns=self.turns,
            identity=BotIdentity(client),
            schedule=self.scheduled.append,
            allowed_bots=frozenset(),
            context_timeout_s=0.5,
            approvers=("U0BOSS",),
            background=lambda coro, _: self.later.append(asyncio.ensure_future(coro)),
        )

    async def mention(
        self, ts: str, *, user: str = "U0ALICE", thread_ts: str | None = None, text: str = "why?"
    ) -> None:
        event = {
            "type": "app_mention",
            "channel": CHANNEL,
            "user": user,
            "text": f"<@{BOT_USER_ID}> {text}",
            "ts": ts,
        }
        if thread_ts is not None:
            event["thread_ts"] = thread_ts
        await self.messages.on_mention(event)
        await self.settle()

    async def reply(self, ts: str, thread_ts: str, *, user: str = "U0ALICE") -> None:
        await self.messages.on_message(
            {
                "type": "message",
                "channel": CHANNEL,
                "user": user,
                "text": "also web-02",
                "ts": ts,
                "thread_ts": thread_ts,
            }  # fmt: skip
        )
        await self.settle()

    async def settle(self) -> None:
        if self.later:
            await asyncio.gather(*self.later)
            self.later.clear()

    async def fill_the_day(self) -> None:
        assert self.caps is not None and self.caps.tokens is not None
        await self.caps.reserve(self.caps.tokens, None)


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as fake:
        yield fake


async def entries(redis: aioredis.Redis, keys: Keys, thread: Thread) -> list[str]:
    reader = InjectReader(redis, keys, thread, consumer="t", seen_ids=set)
    return [i.id for i in await reader.fetch()]


async def test_with_the_daily_cap_reached_a_mention_starts_nothing_and_the_thread_is_told(
    slack: FakeSlack, redis: aioredis.Redis, keys: Keys
) -> None:
    edge = Edge(slack, redis, keys, tokens=1_000)
    await edge.fill_the_day()

    await edge.mention("1764590400.000100")
    await edge.mention("1764590400.000100")  # Slack's retry: not told twice

    assert edge.scheduled == []
    thread = Thread(CHANNEL, "1764590400.000100")
    assert await edge.turns.stores.jobs.current(thread) is None
    assert await entries(redis, keys, thread) == []  # nothing written to the thread
    [told] = slack.calls_of("chat.postMessage")
    assert told["thread_ts"] == "1764590400.000100"
    text = str(told["text"])
    assert text.startswith("<@U0ALICE> ") and "daily model budget is used up" in text
    assert "1,000 of 1,000 tokens today" in text and "resets at 00:00 UTC" in text
    assert "An approver (<@U0BOSS>) can raise it for today" in text and "*Continue*" in text


async def test_below_the_cap_a_mention_starts_its_job(
    slack: FakeSlack, redis: aioredis.Redis, keys: Keys
) -> None:
    edge = Edge(slack, redis, keys, tokens=1_000)
    assert edge.caps is not None
    await edge.caps.reserve(999, None)

    await edge.mention("1764590400.000100")

    assert len(edge.scheduled) == 1
    assert slack.calls_of("chat.postMessage") == []


async def test_past_the_hourly_rate_the_person_alone_is_told_when_to_retry(
    slack: FakeSlack, redis: aioredis.Redis, keys: Keys
) -> None:
    edge = Edge(slack, redis, keys, per_hour=2)
    await edge.mention("1764590400.000100")
    edge.clock.t += 300
    await edge.mention("1764590700.000100")
    edge.clock.t += 300
    await edge.mention("1764591000.000100")  # the third in an hour
    await edge.mention("1764591000.000100")  # its retry: told once

    assert len(edge.scheduled) == 2
    assert await edge.turns.stores.jobs.current(Thread(CHANNEL, "1764591000.000100")) is None
    [note] = slack.calls_of("chat.postEphemeral")
    assert (note["user"], note["channel"]) == ("U0ALICE", CHANNEL)
    assert note["thread_ts"] == "1764591000.000100"
    assert note["text"] == (
        "You've started 2 jobs in the last hour (at most 2 an hour); try again after 13:00 UTC."
    )
    assert slack.calls_of("chat.postMessage") == []

    await edge.mention("1764591000.000200", user="U0BOB")  # someone else is not affected
    assert len(edge.scheduled) == 3


async def test_slacks_retry_of_an_admitted_mention_counts_once(
    slack: FakeSlack, redis: aioredis.Redis, keys: Keys
) -> None:
    edge = Edge(slack, redis, keys, tokens=1_000, per_hour=5)
    for _ in range(3):
        await edge.mention("1764590400.000100")
    assert await edge.rate.count("U0ALICE") == 1
    await edge.fill_the_day()
    await edge.mention("1764590400.000100")  # admitted before the cap was reached
    assert slack.calls_of("chat.postMessage") == []
    assert await edge.rate.count("U0ALICE") == 1


async def test_a_reply_to_a_live_job_is_never_refused(
    slack: FakeSlack, redis: aioredis.Redis, keys: Keys
) -> None:
    edge = Edge(slack, redis, keys, tokens=1_000, per_hour=1)
    root = "1764590400.000100"
    await edge.mention(root)
    [job_id] = edge.scheduled
    await edge.fill_the_day()

    await edge.reply("1764590400.000200", root)  # a correction to the queued job
    await edge.mention("1764590400.000300", thread_ts=root)  # a mention in its thread too

    thread = Thread(CHANNEL, root)
    assert await entries(redis, keys, thread) == [root, "1764590400.000200", "1764590400.000300"]
    current = await edge.turns.stores.jobs.current(thread)
    assert current is not None and current.id == job_id
    assert slack.calls_of("chat.postMessage") == slack.calls_of("chat.postEphemeral") == []
    assert await edge.rate.count("U0ALICE") == 1


async def test_chatter_in_threads_without_a_conversation_asks_nothing(
    slack: FakeSlack, redis: aioredis.Redis, keys: Keys
) -> None:
    edge = Edge(slack, redis, keys, tokens=1_000, per_hour=1)
    await edge.fill_the_day()
    await edge.reply("1764590400.000200", "1764590400.000100")
    assert edge.scheduled == [] and slack.calls_of("chat.postMessage") == []
    assert not await redis.exists(jobs_key(keys, "U0ALICE"))


async def test_a_refused_mention_in_a_thread_reads_no_context(
    slack: FakeSlack, redis: aioredis.Redis, keys: Keys
) -> None:
    edge = Edge(slack, redis, keys, tokens=1_000)
    root = slack.add_message(CHANNEL, None, "U0CAROL", "the site is down")
    await edge.fill_the_day()

    ts = slack.add_message(CHANNEL, None, "U0ALICE", "<@UBOT> why?", thread_ts=root)
    await edge.mention(ts, thread_ts=root)

    assert edge.scheduled == [] and slack.calls_of("conversations.replies") == []
    assert await entries(redis, keys, Thread(CHANNEL, root)) == []
    [told] = slack.calls_of("chat.postMessage")
    assert told["thread_ts"] == root

    assert edge.caps is not None
    await edge.caps.raise_for_day("U0BOSS", only_if_reached=True)
    await edge.mention(ts, thread_ts=root)  # Slack's retry, now with room: admitted
    assert len(edge.scheduled) == 1
    assert len(slack.calls_of("conversations.replies")) == 1  # the context, once admitted


async def test_a_store_failure_of_the_gate_fails_the_ack(
    slack: FakeSlack, redis: aioredis.Redis, keys: Keys
) -> None:
    edge = Edge(slack, redis, keys, tokens=1_000)
    await redis.set(day_key(keys, utc_day(T0)), "corrupt")
    with pytest.raises(StoreError):
        await edge.mention("1764590400.000100")
    root = slack.add_message(CHANNEL, None, "U0CAROL", "the site is down")
    ts = slack.add_message(CHANNEL, None, "U0ALICE", "<@UBOT> hm", thread_ts=root)
    with pytest.raises(StoreError):  # also when the gate is asked from the thread's look
        await edge.mention(ts, thread_ts=root)
    assert edge.scheduled == []

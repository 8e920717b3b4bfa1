"""The workspace's daily cap in the turns (``bot.turns.spend``), on a real store: the core's
``Spend`` port over the caps; the parts built from the settings; and the Continue of a job
the cap stopped — an approver's only, it raises the day's cap once (its audit entry staged
in the same script), keeps the job's own budget, continues the job once per button, and
a job its own budget stopped keeps the ordinary Continue."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Coroutine
from typing import Any

import pytest
import redis.asyncio as aioredis
from slack_sdk.web.async_client import AsyncWebClient

from bot.agent.ports import WORKSPACE_CAP, SpendHold, SpendRefused
from bot.agent.testing import ScriptedModel
from bot.emulator.slack import FakeSlack
from bot.service import daily_caps, job_admission
from bot.settings import BotSettings
from bot.slack.actions import ONLY_APPROVERS, Interactions
from bot.slack.policy import ApproverPolicy
from bot.slack.updates import UpdateBudget
from bot.store.jobs import JobLimits, JobRecord, Jobs, JobStatus
from bot.store.keys import QUOTA_TAG, Keys, Thread
from bot.store.quota import DailyCaps, NotReached, Raised
from bot.turns.spend import USED, WorkspaceSpend, continue_capped, stopped_by_cap
from tests.store import conftest as store
from tests.turns.test_approvals_stop_continue import make_turns

server, redis, keys = store.server, store.redis, store.keys

LIMITS = JobLimits(max_iterations=10, deadline_s=600, token_budget=50_000)
THREAD = Thread("C1", "1700000000.000100")


async def capped_job(jobs: Jobs, caps: DailyCaps, *, requester: str = "U0REQ") -> JobRecord:
    """A job whose model call the workspace's cap refused (as the core ends it)."""
    job = await jobs.create(THREAD, requester=requester, limits=LIMITS)
    job = await jobs.save(job, JobStatus.RUNNING, fence=1)
    assert caps.tokens is not None
    await caps.reserve(caps.tokens - 10, None)
    refused = await caps.reserve(4_096, None)
    assert isinstance(refused, SpendRefused)
    return await jobs.save(
        job, JobStatus.LIMIT_TOKENS, fence=1, stop_reason="limit_tokens", error=refused.detail
    )


async def test_the_spend_port_reserves_and_settles_in_the_caps(
    redis: aioredis.Redis, keys: Keys
) -> None:
    caps = DailyCaps(redis, keys, tokens=10_000, cost_usd=None)
    spend = WorkspaceSpend(caps)
    hold = await spend.reserve(model="m", tokens=6_000, cost_usd=None)
    assert isinstance(hold, SpendHold)
    refused = await spend.reserve(model="m", tokens=6_000, cost_usd=None)
    assert isinstance(refused, SpendRefused) and WORKSPACE_CAP in refused.detail
    await spend.settle(hold, tokens=1_000, cost_usd=None)
    assert (await caps.status()).tokens_used == 1_000


def test_the_parts_are_built_only_when_configured(redis: aioredis.Redis, keys: Keys) -> None:
    assert daily_caps(redis, keys, BotSettings()) is None
    caps = daily_caps(redis, keys, BotSettings(OPSLOOP_DAILY_COST_USD=5.0))
    assert caps is not None and caps.cost_usd == 5.0 and caps.tokens is None
    off = BotSettings(OPSLOOP_JOBS_PER_USER_HOUR=0)
    assert job_admission(redis, keys, off) is None
    gate = job_admission(redis, keys, BotSettings())  # the default rate: 30 an hour
    assert gate is not None and gate.caps is None and gate.rate is not None
    assert gate.rate.per_hour == 30
    both = job_admission(redis, keys, BotSettings(OPSLOOP_DAILY_TOKEN_BUDGET=9))
    assert both is not None and both.caps is not None and both.caps.tokens == 9


async def test_continue_raises_the_day_once_and_the_job_keeps_its_budget(
    redis: aioredis.Redis, keys: Keys
) -> None:
    jobs = Jobs(redis, keys)
    caps = DailyCaps(redis, keys, tokens=100_000, cost_usd=None)
    job = await capped_job(jobs, caps)
    assert stopped_by_cap(job)
    staged: list[str] = []

    outcome = await continue_capped(jobs, caps, job.id, "U0BOSS", seq=0, on_audit=staged.append)

    assert not isinstance(outcome, str) and isinstance(outcome.raised, Raised)
    assert outcome.raised.status.tokens_cap == 200_000
    assert outcome.record.status is JobStatus.RUNNING
    assert outcome.record.limits == LIMITS  # the job's own budget is untouched
    [raise_] = outcome.record.raises
    assert (raise_.limit, raise_.amount, raise_.by) == ("tokens", 0, "U0BOSS")
    assert staged == [QUOTA_TAG]
    [entry] = [json.loads(e) for e in await redis.lrange(caps.audit_outbox, 0, -1)]
    assert entry["kind"] == "daily_cap_raised" and entry["actor"] == "U0BOSS"
    assert entry["id"] == f"daily_cap_raised:{(await caps.status()).day}:{job.id}:0"
    assert entry["job_id"] == job.id and entry["detail"]["tokens"] == 100_000

    again = await continue_capped(jobs, caps, job.id, "U0BOSS", seq=0)  # the same button
    assert again == USED
    assert (await caps.status()).tokens_cap == 200_000


async def test_a_day_raised_by_someone_else_continues_the_job_without_raising_again(
    redis: aioredis.Redis, keys: Keys
) -> None:
    jobs = Jobs(redis, keys)
    caps = DailyCaps(redis, keys, tokens=100_000, cost_usd=None)
    job = await capped_job(jobs, caps)
    await caps.raise_for_day("U0OTHER", only_if_reached=True)

    outcome = await continue_capped(jobs, caps, job.id, "U0BOSS", seq=0)

    assert not isinstance(outcome, str) and isinstance(outcome.raised, NotReached)
    assert outcome.record.status is JobStatus.RUNNING
    assert (await caps.status()).raises == 1


async def test_a_job_its_own_budget_stopped_is_not_the_caps_business(
    redis: aioredis.Redis, keys: Keys
) -> None:
    jobs = Jobs(redis, keys)
    caps = DailyCaps(redis, keys, tokens=100_000, cost_usd=None)
    job = await jobs.create(THREAD, requester="U0REQ", limits=LIMITS)
    job = await jobs.save(job, JobStatus.RUNNING, fence=1)
    job = await jobs.save(job, JobStatus.LIMIT_TOKENS, fence=1, stop_reason="limit_tokens")
    assert not stopped_by_cap(job)
    why = await continue_capped(jobs, caps, job.id, "U0BOSS", seq=0)
    assert isinstance(why, str) and "not stopped by" in why


class Clicks:
    """The Continue listener (``Interactions``) over the fake Slack."""

    def __init__(self, slack: FakeSlack, redis: aioredis.Redis, keys: Keys) -> None:
        self.slack = slack
        self.turns = make_turns(redis, keys, ScriptedModel([]))[0]
        self.caps = DailyCaps(redis, keys, tokens=100_000, cost_usd=None)
        self.scheduled: list[str] = []
        self.later: list[asyncio.Future[Any]] = []
        client = AsyncWebClient(token="xoxb-test", base_url=slack.api_url)

        def background(coro: Coroutine[Any, Any, Any], _: str) -> None:
            self.later.append(asyncio.ensure_future(coro))

        self.interactions = Interactions(
            client=client,
            budget=UpdateBudget(lambda *_: None),  # type: ignore[arg-type]
            turns=self.turns,
            policy=ApproverPolicy(("U0BOSS",), client),
            schedule=self.scheduled.append,
            background=background,
            caps=self.caps,
        )

    async def press(self, job: JobRecord, user: str) -> None:
        async def ack() -> None:
            return None

        body = {
            "user": {"id": user, "team_id": "T1"},
            "channel": {"id": THREAD.channel},
            "message": {"ts": "1700000000.000500", "thread_ts": THREAD.thread_ts},
        }
        action = {"value": f"{job.id}|{len(job.raises)}"}
        await self.interactions.on_continue(ack, body, action)
        if self.later:
            await asyncio.gather(*self.later)
            self.later.clear()


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as fake:
        yield fake


async def test_only_an_approver_may_continue_a_job_the_cap_stopped(
    slack: FakeSlack, redis: aioredis.Redis, keys: Keys
) -> None:
    clicks = Clicks(slack, redis, keys)
    job = await capped_job(clicks.turns.stores.jobs, clicks.caps, requester="U0REQ")

    await clicks.press(job, "U0REQ")  # who started it may Continue a job, not raise the day

    [note] = slack.calls_of("chat.postEphemeral")
    assert note["user"] == "U0REQ" and note["text"] == f"Nothing changed: {ONLY_APPROVERS}."
    assert clicks.scheduled == []
    assert (await clicks.caps.status()).raises == 0
    still = await clicks.turns.stores.jobs.get(job.id)
    assert still is not None and still.status is JobStatus.LIMIT_TOKENS

    await clicks.press(job, "U0BOSS")

    assert clicks.scheduled == [job.id]
    assert (await clicks.caps.status()).tokens_cap == 200_000
    [said] = slack.calls_of("chat.postMessage")
    assert said["thread_ts"] == THREAD.thread_ts
    assert str(said["text"]).startswith("<@U0BOSS> raised the workspace's daily cap for today")
    assert "of 200,000 tokens" in str(said["text"])

    await clicks.press(job, "U0BOSS")  # the same button again: nothing
    assert clicks.scheduled == [job.id]
    assert str(slack.calls_of("chat.postEphemeral")[-1]["text"]) == f"Nothing changed: {USED}."

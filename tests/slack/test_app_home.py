"""App Home: a workspace with 1,000 jobs renders a bounded home, newest first, within
Block Kit's view limits (checked by the fake Slack as Slack would); cards waiting for a
decision say who may approve (the two-person rule included); the recent-jobs indexes
stay bounded; the fake refuses invalid views like Slack; a refused ``views.publish``
is never an error."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Coroutine
from typing import Any

import pytest
import redis.asyncio as aioredis
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.agent.testing import ScriptedModel
from bot.emulator import sender
from bot.emulator.redis_server import free_port
from bot.emulator.slack import FakeSlack
from bot.emulator.slack_assistant import MAX_VIEW_BLOCKS, view_errors
from bot.slack.actions import Interactions
from bot.slack.app import Messages, bolt_app
from bot.slack.blockkit import MAX_SECTION
from bot.slack.home import HomeTab, home_view
from bot.slack.identity import BotIdentity
from bot.slack.policy import ApproverPolicy
from bot.slack.updates import UpdateBudget
from bot.store.approvals import ApprovalRecord
from bot.store.keys import BUCKETS, RECENT_JOBS_MAX, Keys, Thread
from bot.turns.home import SHOWN, configured, read_home
from bot.turns.parts import Turns
from tests.e2e.harness import sign
from tests.store.conftest import keys, redis, server, thread
from tests.turns.test_approvals_stop_continue import make_turns

__all__ = ["keys", "redis", "server", "thread"]  # the store's fixtures

SECRET = "unit-signing-secret"


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as fake:
        yield fake


@pytest.fixture
def turns(redis: aioredis.Redis, keys: Keys) -> Turns:
    return make_turns(redis, keys, ScriptedModel([]))[0]


def ts(n: int) -> str:
    return f"{1_700_000_000 + n}.000100"


async def many_jobs(turns: Turns, count: int) -> None:
    """``count`` jobs in as many threads, oldest first; every other one is U1's."""
    for n in range(count):
        thread = Thread(f"C{n % 7}", ts(n))
        user = "U1" if n % 2 == 0 else f"U{n}"
        await turns.receiver.receive(thread, ts=thread.thread_ts, user=user, text=f"job {n}")


async def test_a_thousand_jobs_render_a_bounded_home_newest_first(
    turns: Turns, redis: aioredis.Redis, keys: Keys
) -> None:
    await many_jobs(turns, 1_000)

    home = await read_home(turns, "U1", now=time.time())

    assert home.live_total == 1_000 and len(home.live) == SHOWN
    assert [j.thread_ts for j in home.live] == [ts(n) for n in range(999, 989, -1)]
    assert [j.thread_ts for j in home.mine] == [ts(n) for n in range(998, 978, -2)]
    assert all(j.requester == "U1" for j in home.mine)
    # everyone's index: one bucket per thread's hash tag, each trimmed like a person's
    everyone = [await redis.zcard(keys.recent_jobs(b)) for b in BUCKETS]
    assert sum(everyone) == 1_000 and max(everyone) <= RECENT_JOBS_MAX and min(everyone) > 0
    assert await redis.zcard(keys.recent_jobs_of("U1")) == RECENT_JOBS_MAX
    assert 0 < await redis.ttl(keys.recent_jobs_of("U1")) <= 30 * 24 * 3600

    view = home_view(
        home,
        configured(turns),
        approvers=[f"U{n:08d}" for n in range(40)],
        base_url="https://acme.slack.com/",
        now=time.time(),
    )
    assert view_errors(view) == []
    assert len(view["blocks"]) <= MAX_VIEW_BLOCKS
    texts = [b["text"]["text"] for b in view["blocks"] if b["type"] == "section"]
    assert all(len(t) <= MAX_SECTION for t in texts)
    live = next(b["text"]["text"] for b in view["blocks"] if b.get("block_id") == "live")
    assert f"p{ts(999).replace('.', '')}|thread>" in live.splitlines()[0]
    assert live.splitlines()[-1] == "_…and 990 more_"


async def test_cards_waiting_name_who_may_approve_and_decided_ones_leave(turns: Turns) -> None:
    now = time.time()

    def approval(call_id: str, category: str) -> ApprovalRecord:
        return ApprovalRecord(
            job_id="C9:1700000000.000100:j1",
            call_id=call_id,
            tool="delete_pod" if category == "destructive" else "restart",
            category=category,  # type: ignore[arg-type]
            args_hash="h",
            arguments={},
            requester="UREQ1",
            channel="C9",
            thread_ts="1700000000.000100",
            requested_at=now,
            expires_at=now + 600,
        )

    await turns.stores.approvals.create(approval("c1", "destructive"))
    await turns.stores.approvals.create(approval("c2", "mutating"))
    await turns.stores.approvals.decide(
        "C9:1700000000.000100:j1", "c2", outcome="approved", by="UAPP1", args_hash="h", now=now
    )

    home = await read_home(turns, "UREQ1", now=now)
    view = home_view(home, configured(turns), approvers=["UAPP1", "SOPS"], base_url=None, now=now)

    cards = next(b["text"]["text"] for b in view["blocks"] if b.get("block_id") == "cards")
    assert cards.count("✋") == 1
    assert "`delete_pod` (destructive) in <#C9>" in cards
    assert "may approve: <@UAPP1>, <!subteam^SOPS>, not <@UREQ1> (two-person rule)" in cards


async def test_the_fake_refuses_invalid_views_like_slack(slack: FakeSlack) -> None:
    client = AsyncWebClient(token="xoxb-test", base_url=slack.api_url)
    section = {"type": "section", "text": {"type": "mrkdwn", "text": "x"}}
    bad = [
        {"type": "modal", "blocks": [section]},
        {"type": "home", "blocks": [section] * (MAX_VIEW_BLOCKS + 1)},
        {
            "type": "home",
            "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": "x" * 3001}}],
        },
    ]
    for view in bad:
        with pytest.raises(SlackApiError) as refused:
            await client.views_publish(user_id="U1", view=view)
        assert refused.value.response["error"] == "invalid_arguments"
        assert refused.value.response["response_metadata"]["messages"]
    assert slack.pane.homes == {}
    with pytest.raises(SlackApiError):
        await client.views_publish(user_id="", view={"type": "home", "blocks": []})
    await client.views_publish(user_id="U1", view={"type": "home", "blocks": [section] * 100})
    assert len(slack.pane.homes["U1"]["blocks"]) == 100


class Edge:
    """The real bolt app on the fake Slack; background work is awaited by ``settle``."""

    def __init__(self, slack: FakeSlack, turns: Turns) -> None:
        self.tasks: list[asyncio.Task[Any]] = []
        client = AsyncWebClient(token="xoxb-test", base_url=slack.api_url)
        identity = BotIdentity(client)

        def background(coro: Coroutine[Any, Any, Any], _: str) -> None:
            self.tasks.append(asyncio.ensure_future(coro))

        interactions = Interactions(
            client=client,
            budget=UpdateBudget(lambda *_: None),  # type: ignore[arg-type,return-value]
            turns=turns,
            policy=ApproverPolicy(("UAPP1",), client, home_team=identity.home_team),
            schedule=lambda _: None,
            background=background,
        )
        messages = Messages(
            client=client,
            turns=turns,
            identity=identity,
            schedule=lambda _: None,
            allowed_bots=frozenset(),
        )
        self.app = bolt_app(
            client=client,
            signing_secret=SECRET,
            socket=False,
            messages=messages,
            interactions=interactions,
        )

    async def send(self, event: dict[str, Any]) -> int:
        body = sender.event_body(event)
        headers = {**sign(body, SECRET), "content-type": sender.JSON}
        request = AsyncBoltRequest(body=body.decode(), headers=headers)
        return (await self.app.async_dispatch(request)).status

    async def settle(self) -> None:
        await asyncio.gather(*self.tasks)


async def test_opening_the_home_tab_publishes_it_and_other_tabs_do_not(
    slack: FakeSlack, turns: Turns
) -> None:
    await many_jobs(turns, 30)
    for n in range(30):  # the threads exist in Slack (a deleted one gets no link)
        slack.add_message(f"C{n % 7}", ts(n), "U1", f"job {n}")
    edge = Edge(slack, turns)

    assert await edge.send(sender.app_home_opened(user="U1", channel="D1", tab="messages")) == 200
    await edge.settle()
    assert slack.calls_of("views.publish") == []

    assert await edge.send(sender.app_home_opened(user="U1", channel="D1")) == 200
    await edge.settle()
    home = str(slack.pane.homes["U1"]["blocks"])
    assert "*Live jobs* (30)" in home and "<@UAPP1>" in home
    assert f"https://opsloop.slack.com/archives/C1/p{ts(29).replace('.', '')}" in home


async def test_a_refused_publish_or_a_store_failure_is_never_an_error(
    slack: FakeSlack, turns: Turns, keys: Keys
) -> None:
    edge = Edge(slack, turns)
    slack.fail_next("views.publish", error="ratelimited", status=429, retry_after=1)
    assert await edge.send(sender.app_home_opened(user="U1", channel="D1")) == 200
    await edge.settle()
    assert slack.pane.homes == {}

    dead = aioredis.Redis(port=free_port(), socket_connect_timeout=0.5)
    gone = make_turns(dead, keys, ScriptedModel([]))[0]
    edge = Edge(slack, gone)
    assert await edge.send(sender.app_home_opened(user="U1", channel="D1")) == 200
    await edge.settle()
    assert slack.pane.homes == {}
    await dead.aclose()


async def test_home_counts_jobs_awaiting_approval_names_channels_and_drops_gone_threads(
    turns: Turns,
) -> None:
    now = time.time()
    async with FakeSlack(channels={"C1": "incidents"}) as slack:
        client = AsyncWebClient(token="xoxb-test", base_url=slack.api_url)
        for n in range(12):
            thread = Thread("C1", ts(n))
            if n != 11:  # the newest job's thread was deleted in Slack since
                slack.add_message("C1", thread.thread_ts, "U1", f"job {n}")
            receipt = await turns.receiver.receive(thread, ts=thread.thread_ts, user="U1", text="x")
            job_id = str(receipt.job_id)
            if n == 0:
                continue  # queued
            # Paused for a card (the scanner's index keeps it, to look at the decision).
            await turns.stores.approvals.create(
                ApprovalRecord(
                    job_id=job_id,
                    call_id="c1",
                    tool="restart",
                    category="mutating",
                    args_hash="h",
                    arguments={},
                    requester="U1",
                    channel="C1",
                    thread_ts=thread.thread_ts,
                    requested_at=now,
                    expires_at=now + 600,
                )
            )
        tab = HomeTab(client=client, turns=turns, approvers=["UAPP1"], background=lambda c, _: None)
        await tab.publish("U1")
        [call] = slack.calls_of("views.publish")

    blocks = {b.get("block_id"): b for b in call["view"]["blocks"]}
    assert blocks["live_title"]["text"]["text"] == "*Live jobs* (12)"
    live = blocks["live"]["text"]["text"]
    shown = " ".join(b["text"]["text"] for b in call["view"]["blocks"] if "text" in b)
    assert not re.search(r":[a-z_]+:", shown), "an emoji shortcode would show as text"
    assert "#incidents" in live and "<#C1>" not in live
    first, second = live.splitlines()[:2]
    assert "(thread deleted)" in first and "|thread>" not in first
    assert f"p{ts(10).replace('.', '')}|thread>" in second

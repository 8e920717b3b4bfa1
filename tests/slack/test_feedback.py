"""Feedback on answers: the answer's last message carries Slack's ``feedback_buttons`` (in a
``context_actions`` block, within Slack's limits), and a click — through the real bolt app,
signed — is counted in ``opsloop_feedback_total{value}`` and written to the job's trace with
who and which message (``opsloop trace`` shows it). A click on an old answer (job and trace
gone), a forged value or a store failure is never an error."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from typing import Any
from urllib.parse import parse_qsl

import pytest
import redis.asyncio as aioredis
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.web.async_client import AsyncWebClient

from bot.agent.testing import ScriptedModel, text
from bot.cli.trace import JobTrace, render
from bot.emulator import sender
from bot.emulator.sender import sign
from bot.emulator.slack import FakeSlack, block_errors
from bot.errors import StoreError
from bot.metrics import Metrics
from bot.slack import feedback
from bot.slack.actions import Interactions
from bot.slack.answers import ACTION_FEEDBACK, answer_messages, with_feedback
from bot.slack.app import Messages, bolt_app
from bot.slack.blockkit import MAX_BLOCKS, Message
from bot.slack.identity import BotIdentity
from bot.slack.policy import ApproverPolicy
from bot.slack.updates import UpdateBudget
from bot.store.keys import Keys, Thread
from bot.store.trace import FeedbackEntry, read_trace
from bot.turns.parts import Turns
from tests.store.conftest import keys, redis, server, thread
from tests.turns.test_approvals_stop_continue import make_turns

__all__ = ["keys", "redis", "server", "thread"]  # the store's fixtures

SECRET = "unit-signing-secret"
JOB = "C123:1700000000.000100:j1"


def clicked(blocks: list[dict[str, Any]], *, positive: bool, user: str = "U2") -> bytes:
    found = sender.find_feedback(blocks, positive=positive)
    assert found is not None
    block_id, action = found
    payload = sender.block_actions(
        user_id=user,
        user_name=user.lower(),
        channel="C123",
        channel_name="incidents",
        message={"type": "message", "ts": "1700000000.000900", "blocks": blocks},
        message_ts="1700000000.000900",
        thread_ts="1700000000.000100",
        block_id=block_id,
        button=action,
        response_url="http://127.0.0.1:9/response",
    )
    return sender.form_body(payload)[0]


class Edge:
    def __init__(self, slack: FakeSlack, turns: Turns) -> None:
        client = AsyncWebClient(token="xoxb-test", base_url=slack.api_url)
        self.metrics = Metrics()
        identity = BotIdentity(client)
        interactions = Interactions(
            client=client,
            budget=UpdateBudget(lambda *_: None),  # type: ignore[arg-type]
            turns=turns,
            policy=ApproverPolicy((), client, home_team=identity.home_team),
            schedule=lambda _: None,
            background=lambda coro, _: coro.close(),
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
            metrics=self.metrics,
        )

    async def post(self, body: bytes) -> int:
        headers: dict[str, str | Sequence[str]] = {
            **sign(body, SECRET),
            "content-type": sender.FORM,
        }
        request = AsyncBoltRequest(body=body.decode(), headers=headers)
        return (await self.app.async_dispatch(request)).status

    def counted(self, value: str) -> float:
        sample = self.metrics.registry.get_sample_value("opsloop_feedback_total", {"value": value})
        return sample or 0.0


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as fake:
        yield fake


async def finished_job(turns: Turns, thread: Thread) -> str:
    receipt = await turns.receiver.receive(
        thread, ts=thread.thread_ts, user="UREQ", text="why slow"
    )
    assert receipt.job_id is not None
    await turns.runner.run_job(receipt.job_id)
    return receipt.job_id


def test_the_answers_last_message_carries_the_feedback_buttons_within_slacks_limits() -> None:
    long = "\n\n".join(f"paragraph {i} " + "x" * 3_000 for i in range(10))
    messages = answer_messages(long, job_id=JOB)
    assert len(messages) > 1
    kinds = [[b["type"] for b in m.blocks] for m in messages]
    assert all("context_actions" not in k for k in kinds[:-1])
    assert kinds[-1] == ["markdown", "context_actions"]
    buttons = messages[-1].blocks[-1]["elements"][0]
    assert buttons["type"] == "feedback_buttons" and buttons["action_id"] == ACTION_FEEDBACK
    assert buttons["positive_button"]["value"] == f"{JOB}|positive"
    assert buttons["negative_button"]["value"] == f"{JOB}|negative"
    assert buttons["positive_button"]["accessibility_label"]
    for message in messages:
        assert block_errors(message.blocks) == []
    # Without a job (a caller that has none) the answer is as before.
    assert [m.blocks for m in answer_messages(long)] == [m.blocks[:1] for m in messages]
    # A blank answer still gets them; a message already at 50 blocks does not.
    assert answer_messages(" ", job_id=JOB)[0].blocks[0]["type"] == "context_actions"
    full = Message("t", [{"type": "divider"}] * MAX_BLOCKS)
    assert with_feedback([full], JOB)[0].blocks == full.blocks


def test_the_fake_refuses_malformed_feedback_blocks_like_slack() -> None:
    good = answer_messages("ok", job_id=JOB)[0].blocks[-1]
    assert block_errors([good]) == []
    empty = {"type": "context_actions", "elements": []}
    six = {"type": "context_actions", "elements": [good["elements"][0]] * 6}
    no_value = json.loads(json.dumps(good))
    del no_value["elements"][0]["negative_button"]["value"]
    long_text = json.loads(json.dumps(good))
    long_text["elements"][0]["positive_button"]["text"]["text"] = "x" * 76
    in_actions = {"type": "actions", "elements": [good["elements"][0]]}
    for bad in (empty, six, no_value, long_text, in_actions):
        assert block_errors([bad]), bad


async def test_a_click_is_counted_and_written_to_the_jobs_trace_with_who(
    slack: FakeSlack, redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    turns, _ = make_turns(redis, keys, ScriptedModel([text("web-03 is CPU bound")]))
    job_id = await finished_job(turns, thread)
    edge = Edge(slack, turns)
    blocks = answer_messages("web-03 is CPU bound", job_id=job_id)[-1].blocks

    assert await edge.post(clicked(blocks, positive=True, user="U2")) == 200
    assert await edge.post(clicked(blocks, positive=False, user="U3")) == 200

    assert edge.counted("positive") == 1 and edge.counted("negative") == 1
    entries = [e for e in await read_trace(redis, keys, job_id) if isinstance(e, FeedbackEntry)]
    assert [(e.value, e.by, e.message_ts) for e in entries] == [
        ("positive", "U2", "1700000000.000900"),
        ("negative", "U3", "1700000000.000900"),
    ]
    job = await turns.stores.jobs.get(job_id)
    assert job is not None
    shown = render(JobTrace(job=job, entries=await read_trace(redis, keys, job_id)))
    assert "feedback" in shown and "positive (helpful) from U2" in shown
    assert "negative (not helpful) from U3" in shown


async def test_feedback_on_an_old_answer_is_counted_and_creates_nothing(
    slack: FakeSlack, redis: aioredis.Redis, keys: Keys
) -> None:
    turns, _ = make_turns(redis, keys, ScriptedModel([]))
    edge = Edge(slack, turns)
    blocks = answer_messages("old answer", job_id=JOB)[-1].blocks  # job and trace expired

    assert await edge.post(clicked(blocks, positive=False)) == 200

    assert edge.counted("negative") == 1
    assert await redis.exists(keys.trace(JOB)) == 0


async def test_a_forged_value_or_a_store_failure_is_never_an_error(
    slack: FakeSlack, redis: aioredis.Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    turns, _ = make_turns(redis, keys, ScriptedModel([]))
    edge = Edge(slack, turns)
    blocks = answer_messages("answer", job_id=JOB)[-1].blocks
    forged = json.loads(json.dumps(blocks))
    forged[-1]["elements"][0]["positive_button"]["value"] = "DROP TABLE|superb"
    not_a_job = json.loads(json.dumps(blocks))
    not_a_job[-1]["elements"][0]["positive_button"]["value"] = "../../etc|positive"

    assert await edge.post(clicked(forged, positive=True)) == 200
    assert edge.counted("positive") == 0 and edge.counted("superb") == 0
    assert await edge.post(clicked(not_a_job, positive=True)) == 200
    assert edge.counted("positive") == 1  # counted, names no job

    async def down(*_: object, **__: object) -> bool:
        raise StoreError("Redis unavailable")

    monkeypatch.setattr(feedback, "record_feedback", down)
    assert await edge.post(clicked(blocks, positive=True)) == 200
    assert edge.counted("positive") == 2


def test_the_click_payload_is_slacks_feedback_buttons_action() -> None:
    blocks = answer_messages("answer", job_id=JOB)[-1].blocks
    payload = dict(parse_qsl(clicked(blocks, positive=False).decode()))["payload"]
    action = json.loads(payload)["actions"][0]
    assert action["type"] == "feedback_buttons"
    assert action["action_id"] == ACTION_FEEDBACK
    assert action["value"] == f"{JOB}|negative"

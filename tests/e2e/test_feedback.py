"""Feedback end to end (``opsloop serve`` against the fake Slack): a mention's final answer
carries Slack's feedback buttons; clicks on them — by people, on another process than the one
that answered, and one on an answer whose job is long gone — are acknowledged, counted in
``opsloop_feedback_total{value}`` and written to the job's trace with who, which
``opsloop trace`` shows."""

from __future__ import annotations

import re

from bot.emulator import sender
from bot.emulator.redis_server import ManagedRedis
from bot.emulator.scripted import Reply
from bot.emulator.slack import FakeSlack, Message

from .conftest import StartBot
from .harness import BotProcess, ScriptedModel, mention, steps
from .test_trace_cmd import opsloop_trace

ANSWER = "nginx on web-03 is fine: 200s, p99 40 ms."


def feedback_click(slack: FakeSlack, answer: Message, user: str, *, positive: bool) -> bytes:
    found = sender.find_feedback(answer.blocks, positive=positive)
    assert found is not None, answer.blocks
    block_id, action = found
    payload = sender.block_actions(
        user_id=user,
        user_name=user.lower(),
        channel=answer.channel,
        channel_name="incidents",
        message=answer.as_slack(),
        message_ts=answer.ts,
        thread_ts=answer.thread_ts,
        block_id=block_id,
        button=action,
        response_url=slack.api_url + "response",
    )
    return sender.form_body(payload)[0]


def counted(metrics: str, value: str) -> float:
    found = re.search(rf'^opsloop_feedback_total{{value="{value}"}} (\S+)$', metrics, re.M)
    return float(found[1]) if found else 0.0


async def test_feedback_on_the_answer_is_counted_and_in_the_trace(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, redis_server: ManagedRedis
) -> None:
    model.policy = steps(Reply(content=ANSWER))
    first: BotProcess = await bot()
    second: BotProcess = await bot()
    event = mention("C1", "U1", "is nginx ok on web-03?")
    assert (await first.send(event))[0] == 200
    await slack.wait_for(
        lambda: any(m.text == ANSWER for m in slack.messages("C1", event["ts"])), timeout=30
    )
    [answer] = [m for m in slack.messages("C1", event["ts"]) if m.text == ANSWER]
    assert answer.blocks is not None and answer.blocks[-1]["type"] == "context_actions"

    assert (await first.post_event(feedback_click(slack, answer, "U1", positive=True)))[0] == 200
    assert (await second.post_event(feedback_click(slack, answer, "U2", positive=False)))[0] == 200

    _, metrics_first = await first.get("/metrics")
    _, metrics_second = await second.get("/metrics")
    assert counted(metrics_first, "positive") == 1 and counted(metrics_second, "negative") == 1
    job_id = f"C1:{event['ts']}:j1"
    code, out, err = await opsloop_trace(redis_server, job_id)
    assert code == 0, err
    assert "feedback" in out
    assert "positive (helpful) from U1" in out and "negative (not helpful) from U2" in out
    assert slack.calls_of("response") == [] and slack.ephemerals("C1") == []


async def test_feedback_on_an_answer_whose_job_is_gone_is_counted_never_an_error(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel
) -> None:
    serve = await bot()
    old = Message(
        "C1",
        "1600000000.000200",
        ANSWER,
        "UBOT",
        bot_id="BBOT",
        thread_ts="1600000000.000100",
        blocks=[
            {"type": "markdown", "text": ANSWER},
            {
                "type": "context_actions",
                "elements": [
                    {
                        "type": "feedback_buttons",
                        "action_id": "opsloop_feedback",
                        "positive_button": {
                            "text": {"type": "plain_text", "text": "Helpful"},
                            "value": "C1:1600000000.000100:j4|positive",
                        },
                        "negative_button": {
                            "text": {"type": "plain_text", "text": "Not helpful"},
                            "value": "C1:1600000000.000100:j4|negative",
                        },
                    }
                ],
            },
        ],
    )

    assert (await serve.post_event(feedback_click(slack, old, "U3", positive=False)))[0] == 200

    _, metrics = await serve.get("/metrics")
    assert counted(metrics, "negative") == 1
    assert "Traceback" not in serve.output()

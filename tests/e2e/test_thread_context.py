"""Mentioned inside a thread it was not part of, the bot gives the model the thread's
earlier human messages as context; /metrics counts jobs and tool runs."""

from __future__ import annotations

from bot.emulator.scripted import Reply
from bot.emulator.slack import FakeSlack

from .conftest import StartBot
from .harness import ScriptedModel, mention, message, new_ts, seed, steps


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

    users = [m["content"] for m in model.requests[0].messages if m.get("role") == "user"]
    assert users[0] == (
        "Earlier in this thread (for context):\n"
        "<@U1>: web-03 went to 95% CPU after the deploy\n"
        "<@U2>: errors in nginx too"
    )
    assert users[1].endswith("what do you think?")
    await slack.wait_for(
        lambda: any(
            p.get("text") == "Looks like the deploy at 14:02."
            for p in slack.calls_of("chat.postMessage")
        ),
        timeout=30,
    )
    status, metrics = await serve.get("/metrics")
    assert status == 200 and "opsloop_ack_seconds" in metrics

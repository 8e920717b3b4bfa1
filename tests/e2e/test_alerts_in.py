"""Alerts in, end to end (``opsloop serve`` against the fake Slack and the scripted model):
an Alertmanager notification posts one alert message and starts its investigation in the
message's thread; a repeat posts nothing; an alert joining is one reply that the running
job takes in; the group resolved says so on the message; the endpoint refuses what is not
a notification (never a 5xx)."""

from __future__ import annotations

import json

from bot.emulator.scripted import Reply
from bot.emulator.slack import FakeSlack

from .alerts_kit import ANSWER, CHANNEL, TOKEN, notification, post_alert, roots
from .conftest import StartBot
from .harness import ScriptedModel, steps


async def test_an_alert_opens_one_thread_investigated_and_follows_its_group(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel
) -> None:
    model.policy = steps(Reply(content=ANSWER))
    serve = await bot(OPSLOOP_ALERTS_TOKEN=TOKEN, OPSLOOP_ALERTS_CHANNEL=CHANNEL)
    first = notification(("web-03", "firing"))
    assert (await post_alert(serve, first))[0] == 200
    await slack.wait_for(lambda: len(roots(slack)) == 1, timeout=30)
    [alert] = roots(slack)
    assert "HighCPU" in alert.text
    await model.wait_for(lambda requests: len(requests) >= 1, timeout=30)
    request = str(model.requests[0].messages)
    assert "HighCPU" in request and "web-03" in request and "never instructions" in request
    await slack.wait_for(
        lambda: any(m.text == ANSWER for m in slack.messages(CHANNEL, alert.ts)), timeout=30
    )

    assert (await post_alert(serve, first))[0] == 200  # repeat_interval: nothing new
    joined = notification(("web-03", "firing"), ("web-04", "firing"))
    assert (await post_alert(serve, joined))[0] == 200
    await slack.wait_for(
        lambda: any("web-04" in json.dumps(m.blocks) for m in slack.messages(CHANNEL, alert.ts)),
        timeout=30,
    )
    resolved = notification(("web-03", "resolved"), ("web-04", "resolved"))
    assert (await post_alert(serve, resolved))[0] == 200
    await slack.wait_for(lambda: "Resolved" in slack.message(CHANNEL, alert.ts).text, timeout=30)
    assert len(roots(slack)) == 1

    again = notification(("web-03", "firing"))  # fires again after it resolved: a new thread
    assert (await post_alert(serve, again))[0] == 200
    await slack.wait_for(lambda: len(roots(slack)) == 2, timeout=30)


async def test_the_endpoint_refuses_what_is_not_a_notification(
    bot: StartBot, slack: FakeSlack
) -> None:
    off = await bot()
    assert (await post_alert(off, notification(("web-03", "firing"))))[0] == 404
    serve = await bot(OPSLOOP_ALERTS_TOKEN=TOKEN)  # no channel, no routes: nothing takes it
    good = notification(("web-03", "firing"))
    assert (await post_alert(serve, good, token=None))[0] == 401
    assert (await post_alert(serve, good, token="wrong"))[0] == 401
    assert (await post_alert(serve, b"{not json"))[0] == 400
    assert (await post_alert(serve, b"[1, 2]"))[0] == 400
    assert (await post_alert(serve, {"alerts": "many"}))[0] == 400
    assert (await post_alert(serve, {"status": "firing"}))[0] == 400
    assert (await post_alert(serve, b"{" + b" " * (5 << 20) + b"}"))[0] == 413
    status, body = await post_alert(serve, good)
    assert status == 422 and "HighCPU" in body["error"]
    assert slack.messages(CHANNEL) == []

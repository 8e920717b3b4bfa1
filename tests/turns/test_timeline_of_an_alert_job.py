"""The timeline of a thread an alert started on its own: the group fires and its job is
the alerting system's request (shown past the header that quotes it as data); the job
reads a tool and answers; a second alert joins the group; someone finds the answer
useful. Every line names who: ``alertmanager``, ``opsloop`` or the person."""

from __future__ import annotations

import redis.asyncio as aioredis

from bot.agent import StopReason
from bot.agent.testing import ScriptedModel, call, calls, text
from bot.alerts.routes import Route, Routes
from bot.store.alerts import AlertReceipt
from bot.store.keys import Keys, Thread
from bot.turns.alerts import AlertDesk
from bot.turns.feedback import record_feedback
from bot.turns.timeline import incident_timeline
from tests.alerts.samples import am_alert, am_body, notification

from .test_timeline_of_an_incident import LIMITS, Poster, make_turns

CHANNEL = "C0ALERTS"


async def test_an_alert_job_from_firing_to_feedback(redis: aioredis.Redis, keys: Keys) -> None:
    model = ScriptedModel([calls(call("check", "c1", host="api")), text("The api pod is OOM.")])
    turns, _ = make_turns(redis, keys, model)
    stores = turns.stores
    scheduled: list[str] = []
    desk = AlertDesk(
        stores=stores,
        groups=stores.alert_groups,
        routes=Routes(default=Route(channel=CHANNEL, investigate="yes")),
        limits=LIMITS,
        receiver=turns.receiver,
        storm=None,
        poster=Poster(),
        schedule=scheduled.append,
        owner="test-process",
    )
    received = await desk.receive(notification())
    assert isinstance(received, AlertReceipt)
    await desk.work(received.group)
    group = await stores.alert_groups.get(received.group)
    assert group is not None and scheduled == [f"{CHANNEL}:{group.thread_ts}:j1"]
    thread = Thread(CHANNEL, group.thread_ts)

    result = await turns.runner.run_job(scheduled[0])
    assert result is not None and result.stop_reason is StopReason.COMPLETED
    second = am_alert(fingerprint="0a0b0c0d0e0f1011", labels={"alertname": "HighErrorRate"})
    assert isinstance(await desk.receive(notification(am_body([am_alert(), second]))), AlertReceipt)
    await desk.work(received.group)
    assert await record_feedback(
        stores, scheduled[0], value="positive", by="UALICE", message_ts=None
    )

    timeline = await incident_timeline(stores, thread)

    assert [(e.kind, e.who) for e in timeline.events] == [
        ("alert_fired", "alertmanager"),
        ("request", "alertmanager"),
        ("job_started", "alertmanager"),
        ("tool_call", "opsloop"),
        ("answer", "opsloop"),
        ("job_ended", "opsloop"),
        ("alert_fired", "alertmanager"),
        ("feedback", "UALICE"),
    ]
    texts = [e.text for e in timeline.events]
    assert texts[1].startswith("alert: HighErrorRate · status: firing")
    assert texts[1].endswith("(starts j1)")
    assert texts[3].startswith("check host=api · ran")
    assert texts[4] == "The api pod is OOM."
    assert texts[5].startswith("j1 completed · 2 iterations")
    assert texts[6] == "update to HighErrorRate: 1 new alert firing"
    assert texts[7] == "positive (helpful) on the answer of j1"

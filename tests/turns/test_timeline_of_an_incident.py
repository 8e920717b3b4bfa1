"""An incident's timeline, read back from a real Redis after the product's own code paths
made it: an alert group posts its message, a person mentions the bot in its thread, the
bot's restart is approved and runs, a second one is denied while someone replies, the
job reaches its iteration limit and a third person raises it, the requester presses
Stop on the next card, and the alert resolves. Every line is there, once, in time order,
with the right person; some audit entries are chained and some still staged."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import redis.asyncio as aioredis

from bot.agent import StopReason
from bot.agent.testing import ScriptedModel, call, calls
from bot.alerts.payload import Alert, Notification
from bot.alerts.routes import Route, Routes
from bot.knowledge.timeline import Timeline, from_json, to_json, to_markdown
from bot.service import build_turns
from bot.store.alerts import AlertReceipt
from bot.store.approvals import ApprovalRecord
from bot.store.jobs import JobLimits, JobStatus
from bot.store.keys import Keys, Thread
from bot.store.parts import Stores
from bot.store.receipt import Receipt
from bot.turns.alerts import AlertDesk
from bot.turns.controls import Accepted
from bot.turns.parts import Turns
from bot.turns.run import TurnSettings
from bot.turns.timeline import incident_timeline
from tests.agent.conftest import echo_tool
from tests.alerts.samples import am_alert, am_body, notification
from tools.registry import Catalog

from .notifier import Notes, card_ts

LIMITS = JobLimits(max_iterations=2, deadline_s=600, token_budget=100_000)
CHANNEL = "C0ALERTS"


def slack_ts() -> str:
    """A Slack message ts of now (strictly later than the previous one)."""
    time.sleep(0.002)
    return f"{time.time():.6f}"


class Poster:
    """The Slack side of an alert group: each post gets a ts of now."""

    def __init__(self) -> None:
        self.resolved: list[Thread] = []

    async def post_alert(
        self, channel: str, notification: Notification, *, note: str | None, investigate: str | None
    ) -> str:
        return slack_ts()

    async def post_update(
        self, thread: Thread, notification: Notification, changed: Sequence[Alert]
    ) -> str:
        return slack_ts()

    async def resolve_alert(
        self, thread: Thread, notification: Notification, *, resolved_at: float
    ) -> None:
        self.resolved.append(thread)


async def allowed(approval: ApprovalRecord) -> str | None:
    return None


@dataclass
class Incident:
    stores: Stores
    thread: Thread
    job_id: str


def make_turns(redis: aioredis.Redis, keys: Keys, model: ScriptedModel) -> tuple[Turns, Notes]:
    notes = Notes()
    tools = [echo_tool(), echo_tool("restart", category="mutating")]
    turns = build_turns(
        Stores.build(redis, keys),
        resolver=model,
        catalog=Catalog(tools={t.name: t for t in tools}, sources={t.name: "test" for t in tools}),
        system_prompt="You are opsloop.",
        settings=TurnSettings(limits=LIMITS, approval_ttl_s=3600),
        notifier=notes,
        consumer="test-process",
    )
    return turns, notes


async def decide(turns: Turns, job_id: str, call_id: str, outcome: str, by: str, n: int) -> None:
    verdict = await turns.controls.decide(
        job_id,
        call_id,
        outcome=outcome,  # type: ignore[arg-type]
        by=by,
        card_ts=card_ts(n),
        authorize=allowed,
    )
    assert isinstance(verdict, Accepted), verdict


async def incident(redis: aioredis.Redis, keys: Keys) -> Incident:
    """The whole incident, through the product's code paths (see the module docstring)."""
    model = ScriptedModel(
        [
            calls(call("restart", "c1", host="web-03")),
            calls(call("restart", "c2", host="web-04")),
            calls(call("restart", "c3", host="web-05")),
        ]
    )
    turns, notes = make_turns(redis, keys, model)
    stores = turns.stores
    poster = Poster()
    desk = AlertDesk(
        stores=stores,
        groups=stores.alert_groups,
        routes=Routes(default=Route(channel=CHANNEL, investigate="no")),
        limits=LIMITS,
        receiver=turns.receiver,
        storm=None,
        poster=poster,
        schedule=lambda _: None,
        owner="test-process",
    )
    firing = notification()
    received = await desk.receive(firing)
    assert isinstance(received, AlertReceipt)
    gid = received.group
    await desk.work(gid)
    group = await stores.alert_groups.get(gid)
    assert group is not None and group.thread_ts
    thread = Thread(CHANNEL, group.thread_ts)

    receipt = await turns.receiver.receive(
        thread, ts=slack_ts(), user="UALICE", text="restart web-03 please\nit is throwing 5xx"
    )
    assert isinstance(receipt, Receipt) and receipt.job_id is not None
    job_id = receipt.job_id

    paused = await turns.runner.run_job(job_id)
    assert paused is not None and paused.stop_reason is StopReason.AWAITING_APPROVAL
    await decide(turns, job_id, "c1", "approved", "UBOB", 1)
    paused = await turns.runner.run_job(job_id)  # restart web-03 runs; asks for web-04
    assert paused is not None and paused.stop_reason is StopReason.AWAITING_APPROVAL
    await turns.receiver.receive(
        thread, ts=slack_ts(), user="UDAVE", text="not web-04, it is the canary", reply=True
    )
    await decide(turns, job_id, "c2", "denied", "UCAROL", 2)
    # The chain catches up with what is staged so far: the rest stays in the outbox.
    await stores.audit_log.drain(older_than_s=-60)

    limited = await turns.runner.run_job(job_id)
    assert limited is not None and limited.stop_reason is StopReason.LIMIT_ITERATIONS
    raised = await turns.controls.raise_limit(job_id, "UBOB")
    assert not isinstance(raised, str)
    paused = await turns.runner.run_job(job_id)
    assert paused is not None and paused.stop_reason is StopReason.AWAITING_APPROVAL
    assert len(notes.cards) == 3
    stopped = await turns.controls.stop(job_id, "UALICE")
    assert stopped.kind == "cancelled"

    resolved = am_body(
        [am_alert(status="resolved", ends_at="2025-03-01T04:00:00Z")], status="resolved"
    )
    assert isinstance(await desk.receive(notification(resolved)), AlertReceipt)
    await desk.work(gid)
    assert poster.resolved == [thread]
    record = await stores.jobs.get(job_id)
    assert record is not None and record.status is JobStatus.CANCELLED
    return Incident(stores, thread, job_id)


def lines(timeline: Timeline) -> list[tuple[str, str]]:
    return [(e.kind, e.who) for e in timeline.events]


async def test_every_line_in_order_with_the_right_people(redis: aioredis.Redis, keys: Keys) -> None:
    found = await incident(redis, keys)
    timeline = await incident_timeline(found.stores, found.thread)

    assert timeline.thread == f"{CHANNEL}:{found.thread.thread_ts}"
    assert lines(timeline) == [
        ("alert_fired", "alertmanager"),
        ("request", "UALICE"),
        ("job_started", "UALICE"),
        ("approval_requested", "opsloop"),
        ("approved", "UBOB"),
        ("write_started", "UBOB"),
        ("write_done", "UBOB"),
        ("approval_requested", "opsloop"),
        ("reply", "UDAVE"),
        ("denied", "UCAROL"),
        ("limit_reached", "opsloop"),
        ("limit_raised", "UBOB"),
        ("approval_requested", "opsloop"),
        ("stop", "UALICE"),
        ("job_ended", "opsloop"),  # the job first, then its card (``Controls.stop``)
        ("cancelled", "UALICE"),
        ("alert_resolved", "alertmanager"),
    ]
    texts = {e.kind: e.text for e in timeline.events}
    assert texts["request"] == "restart web-03 please (starts j1)"
    assert texts["reply"] == "not web-04, it is the canary"
    assert "restart host=web-03" in texts["write_done"]
    assert "confirmed_by UBOB" in texts["write_done"]
    assert "restart host=web-04" in texts["denied"]
    assert texts["limit_raised"].startswith("iterations +2")
    assert texts["job_ended"].startswith("j1 cancelled")
    assert "HighErrorRate" in texts["alert_fired"]
    ts = [e.ts for e in timeline.events]
    assert ts == sorted(ts)


async def test_the_markdown_names_people_and_never_pings(redis: aioredis.Redis, keys: Keys) -> None:
    found = await incident(redis, keys)
    timeline = await incident_timeline(found.stores, found.thread)
    names = {"UALICE": "alice", "UBOB": "bob", "UCAROL": "carol"}

    markdown = to_markdown(timeline, names=names)

    assert "<@" not in markdown and "<!" not in markdown
    body = [line for line in markdown.splitlines() if line.startswith("- ")]
    assert len(body) == len(timeline.events)
    assert " · **approved** · @bob · " in body[4]
    assert " · **denied** · @carol · " in body[9]
    assert " · **reply** · UDAVE · " in body[8]  # no name known: the id
    assert body[0].endswith("UTC · **alert_fired** · alertmanager · HighErrorRate firing (1 alert)")


async def test_the_json_round_trips(redis: aioredis.Redis, keys: Keys) -> None:
    found = await incident(redis, keys)
    timeline = await incident_timeline(found.stores, found.thread)

    assert from_json(to_json(timeline)) == timeline


async def test_a_thread_redis_knows_nothing_of_is_empty(redis: aioredis.Redis, keys: Keys) -> None:
    stores = Stores.build(redis, keys)
    timeline = await incident_timeline(stores, Thread("C0NONE", "1700000000.000100"))
    assert timeline.events == []

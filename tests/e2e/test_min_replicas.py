"""``OPSLOOP_REDIS_MIN_REPLICAS=1`` through ``opsloop serve``: with the only replica frozen
(connected, confirming nothing), a mention gets a 503 instead of an acknowledgement given
on a write a failover could lose; once the replica is back, Slack's redelivery of the same
event is acknowledged and answered exactly once. A click decides the card all the same and
is told its decision is recorded but not yet confirmed; the approved call runs once, after
the replica confirms its claim (``test_unreplicated_claim.py`` has the failover)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.emulator.redis_replica import ManagedReplica
from bot.emulator.redis_server import ManagedRedis
from bot.emulator.scripted import Reply
from bot.emulator.slack import FakeSlack

from .approvals_kit import answered, change_then_check, click, runs, tools_yml, wait_card
from .conftest import StartBot
from .harness import ScriptedModel, mention, new_event_id, steps


@pytest.fixture
async def replica(redis_server: ManagedRedis, tmp_path: Path) -> AsyncIterator[ManagedReplica]:
    started = ManagedReplica(redis_server, tmp_path / "replica").start()
    try:
        await started.linked()
        yield started
    finally:
        started.stop()


def posted(slack: FakeSlack, text: str) -> int:
    return sum(text in m.text for m in slack.messages("C1"))


async def test_a_mention_is_acknowledged_only_once_a_replica_has_it(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, replica: ManagedReplica
) -> None:
    model.policy = steps(Reply(content="Replicated and answered."))  # type: ignore[arg-type]
    serve = await bot(OPSLOOP_REDIS_MIN_REPLICAS="1")
    event = mention("C1", "U1", "is web-03 up?")
    event_id = new_event_id()

    replica.freeze()
    try:
        status, _ = await serve.send(event, event_id=event_id)
        assert status == 503  # not acknowledged: Slack will redeliver
    finally:
        replica.thaw()
    await replica.linked()

    status, _ = await serve.send(event, event_id=event_id)  # Slack's redelivery
    assert status == 200
    await slack.wait_for(lambda: posted(slack, "Replicated and answered.") >= 1, timeout=30)
    assert posted(slack, "Replicated and answered.") == 1
    assert len(model.requests) == 1


async def test_a_click_is_recorded_and_its_call_waits_for_a_replica(
    bot: StartBot,
    slack: FakeSlack,
    model: ScriptedModel,
    replica: ManagedReplica,
    tmp_path: Path,
) -> None:
    tools, log = tools_yml(tmp_path)
    model.policy = change_then_check("restart_service", {"service": "nginx"})  # type: ignore[assignment]
    serve = await bot(OPSLOOP_TOOLS=tools, OPSLOOP_REDIS_MIN_REPLICAS="1")
    event = mention("C1", "U1", "restart nginx on web-03")
    await serve.send(event)
    card = await wait_card(slack, "C1", event["ts"])

    replica.freeze()
    try:
        await click(serve, slack, card, "UAPPROVER1", "Approve")
        await slack.wait_for(lambda: bool(slack.ephemerals("C1", "UAPPROVER1")), timeout=15)
        note = slack.ephemerals("C1", "UAPPROVER1")[0].text
        assert "recorded" in note and not note.startswith("Nothing changed")
        assert runs(log, tool="restart_service") == []
    finally:
        replica.thaw()
    await replica.linked()

    assert await click(serve, slack, card, "UAPPROVER1", "Approve") == 200  # changes nothing
    await slack.wait_for(lambda: answered(slack, event["ts"]), timeout=30)
    assert len(runs(log, tool="restart_service")) == 1

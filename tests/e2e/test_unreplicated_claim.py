"""Issue 29 §4: a refused replica acknowledgement is not an unknown outcome.

``opsloop serve`` with ``OPSLOOP_REDIS_MIN_REPLICAS=1``, a card pending, and the replicas
unable to confirm the Approve and the write's ledger claim — a real replica frozen by
SIGSTOP, or a real Sentinel group whose master is killed so that the promoted replica has
no replica of its own. The clicker is told their decision is recorded (never "nothing
changed"), the claim no replica confirmed is withdrawn (the tool did not start), and the
approved call runs exactly once as soon as a claim is acknowledged — never reported as
"outcome unknown". When the card's validity ends first, the call is not run and the job
says why.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import pytest

from bot.emulator.redis_replica import ManagedReplica
from bot.emulator.redis_server import ManagedRedis
from bot.emulator.redis_topology import ManagedSentinel, _info
from bot.emulator.slack import FakeSlack
from bot.store.connection import RedisTarget, connect
from bot.store.keys import Keys, thread_of

from .approvals_kit import (
    answered,
    change_then_check,
    click,
    first_job,
    runs,
    started,
    texts,
    tools_yml,
    wait_card,
    wait_until,
)
from .conftest import _BOTS, StartBot
from .harness import SERVE_ARGV, BotProcess, ScriptedModel, bot_env, mention

APPROVER = "UAPPROVER1"
UNKNOWN = "outcome unknown"


@pytest.fixture
async def replica(redis_server: ManagedRedis, tmp_path: Path) -> AsyncIterator[ManagedReplica]:
    started_replica = ManagedReplica(redis_server, tmp_path / "replica").start()
    try:
        await started_replica.linked()
        yield started_replica
    finally:
        started_replica.stop()


async def ledger_states(target: RedisTarget | str, job_id: str) -> list[str]:
    """The states of the job's ledger entries, read on ``target`` now."""
    client = connect(target)
    try:
        raw = await client.hgetall(Keys().ledger(job_id))
    finally:
        await client.aclose()
    return [str(json.loads(str(v))["state"]) for v in raw.values()]


async def claim_refused(target: RedisTarget | str, job_id: str) -> bool:
    """Whether the job's claim of the write was refused for want of a replica: withdrawn
    (the tool did not start), or left ``started`` by a run that gave up its lease."""
    states = await ledger_states(target, job_id)
    if "withdrawn" in states:
        return True
    client = connect(target)
    try:
        leased = await client.exists(Keys().lease(thread_of(job_id)))
    finally:
        await client.aclose()
    return "started" in states and not leased


def told(slack: FakeSlack) -> list[str]:
    return [e.text for e in slack.ephemerals("C1", APPROVER)]


def assert_recorded_not_refused(slack: FakeSlack) -> None:
    """The clicker of a decision that changed the card is never told nothing changed."""
    notes = told(slack)
    assert notes, "the clicker was told nothing"
    assert not any(n.startswith("Nothing changed") for n in notes), notes
    assert "recorded" in notes[0], notes


async def test_a_frozen_replica_delays_the_approved_call_it_never_loses_it(
    bot: StartBot,
    slack: FakeSlack,
    model: ScriptedModel,
    redis_server: ManagedRedis,
    replica: ManagedReplica,
    tmp_path: Path,
) -> None:
    tools, log = tools_yml(tmp_path)
    model.policy = change_then_check("restart_service", {"service": "nginx"})
    serve = await bot(OPSLOOP_TOOLS=tools, OPSLOOP_REDIS_MIN_REPLICAS="1")
    event = mention("C1", "U1", "restart nginx on web-03")
    await serve.send(event)
    card = await wait_card(slack, "C1", event["ts"])
    job_id = first_job("C1", event["ts"])

    replica.freeze()
    try:
        assert await click(serve, slack, card, APPROVER, "Approve") == 200
        await slack.wait_for(lambda: bool(told(slack)), timeout=15)
        # The resumed job claimed the write, and no replica confirmed the claim.
        await wait_until(
            lambda: claim_refused(redis_server.url, job_id), timeout=60, what="a refused claim"
        )
        assert started(log, "restart_service") == []
    finally:
        replica.thaw()

    await slack.wait_for(lambda: answered(slack, event["ts"]), timeout=60)
    assert len(runs(log, tool="restart_service")) == 1
    assert len(started(log, "restart_service")) == 1
    assert not any(UNKNOWN in t for t in texts(slack, "C1", event["ts"]))
    assert await ledger_states(redis_server.url, job_id) == ["done"]
    assert_recorded_not_refused(slack)


async def test_past_the_cards_validity_the_call_is_not_run_and_the_job_says_why(
    bot: StartBot,
    slack: FakeSlack,
    model: ScriptedModel,
    redis_server: ManagedRedis,
    replica: ManagedReplica,
    tmp_path: Path,
) -> None:
    tools, log = tools_yml(tmp_path)
    model.policy = change_then_check("restart_service", {"service": "nginx"})
    serve = await bot(
        OPSLOOP_TOOLS=tools, OPSLOOP_REDIS_MIN_REPLICAS="1", OPSLOOP_APPROVAL_TTL_S="8"
    )
    event = mention("C1", "U1", "restart nginx on web-03")
    await serve.send(event)
    card = await wait_card(slack, "C1", event["ts"])

    replica.freeze()
    try:
        assert await click(serve, slack, card, APPROVER, "Approve") == 200
        await slack.wait_for(lambda: answered(slack, event["ts"]), timeout=60)
    finally:
        replica.thaw()

    answer = next(t for t in texts(slack, "C1", event["ts"]) if t.startswith("Result:"))
    assert "not run" in answer and "replica" in answer, answer
    assert UNKNOWN not in answer
    assert started(log, "restart_service") == []
    assert await ledger_states(redis_server.url, first_job("C1", event["ts"])) == ["withdrawn"]


# -- Sentinel: the master killed with a card pending -------------------------------------


@dataclass(frozen=True)
class _SentinelUrl:
    """What ``bot_env`` reads of a server: the URL (sentinel mode: no host)."""

    url: str


@pytest.fixture
def group(tmp_path: Path) -> Iterator[ManagedSentinel]:
    """A Sentinel group of this test's own: the test kills its master."""
    managed = ManagedSentinel(tmp_path / "sentinel")
    try:
        yield managed.start()
    finally:
        managed.stop()


@pytest.fixture
async def sentinel_bot(
    request: pytest.FixtureRequest,
    serve_available: bool,
    slack: FakeSlack,
    group: ManagedSentinel,
    model: ScriptedModel,
    tmp_path: Path,
) -> AsyncIterator[StartBot]:
    if not serve_available:
        pytest.skip("`python -m bot serve` is not available yet")
    bots: list[BotProcess] = []
    request.node.stash[_BOTS] = bots
    topology = {
        "OPSLOOP_REDIS_MODE": "sentinel",
        "REDIS_SENTINELS": group.sentinels,
        "REDIS_SENTINEL_MASTER": group.master_name,
    }

    async def start(**env: str | None) -> BotProcess:
        server = cast(ManagedRedis, _SentinelUrl(group.url))
        proc = BotProcess(
            bot_env(slack, server, model, extra={**topology, **env}),
            tmp_path / "bot",
            argv=SERVE_ARGV,
        )
        bots.append(proc)
        return await proc.start()

    yield start
    for proc in reversed(bots):
        await proc.stop()


def _offset(port: int, field: str) -> int:
    return int(_info(port, "replication").get(field) or 0)


async def test_a_failover_with_a_card_pending_runs_the_approved_call_exactly_once(
    sentinel_bot: StartBot,
    group: ManagedSentinel,
    slack: FakeSlack,
    model: ScriptedModel,
    tmp_path: Path,
) -> None:
    tools, log = tools_yml(tmp_path)
    model.policy = change_then_check("restart_service", {"service": "nginx"})
    serve = await sentinel_bot(OPSLOOP_TOOLS=tools, OPSLOOP_REDIS_MIN_REPLICAS="1")
    event = mention("C1", "U1", "restart nginx on web-03")
    await serve.send(event)
    card = await wait_card(slack, "C1", event["ts"])
    job_id = first_job("C1", event["ts"])
    target = RedisTarget(group.url, "sentinel", group.sentinels, group.master_name)
    old, replica = group.master, group.replica()
    wanted = _offset(old.port, "master_repl_offset")
    await wait_until(  # the pending card is on the replica that will take over
        lambda: _offset(replica.port, "slave_repl_offset") >= wanted,
        timeout=15,
        what="the replica has the card",
    )

    new = group.kill_master()  # promoted, with no replica of its own
    assert new.port == replica.port
    assert await click(serve, slack, card, APPROVER, "Approve") == 200
    await slack.wait_for(lambda: bool(told(slack)), timeout=30)
    await wait_until(lambda: claim_refused(target, job_id), timeout=60, what="a refused claim")
    assert started(log, "restart_service") == []

    group.restart(old)  # back, as the new master's replica
    await slack.wait_for(lambda: answered(slack, event["ts"]), timeout=90)

    assert len(started(log, "restart_service")) == 1
    assert len(runs(log, tool="restart_service")) == 1
    assert not any(UNKNOWN in t for t in texts(slack, "C1", event["ts"]))
    assert await ledger_states(target, job_id) == ["done"]
    assert_recorded_not_refused(slack)

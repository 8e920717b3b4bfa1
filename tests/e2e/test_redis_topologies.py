"""End to end on a Redis Cluster and on Sentinel: ``opsloop serve`` processes with
``OPSLOOP_REDIS_MODE=cluster`` (three masters, three replicas) or ``sentinel`` (a master, a
replica, three sentinels), all real redis-server processes: a mention answered after a
tool, an approval clicked on a second process, a reply injected mid-turn, a Stop pressed
on a process that does not run the job (the signal crosses the cluster's nodes), and a
job whose master is killed mid-job ending with a clear status."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import cast

import pytest

from bot.emulator.redis_server import ManagedRedis
from bot.emulator.scripted import Reply, ScriptedCall, ScriptedRequest
from bot.emulator.slack import FakeSlack
from bot.slack.status_blocks import ACTION_STOP
from bot.store.keys import Keys

from .approvals_kit import (
    answered,
    call_then_answer,
    click,
    first_job,
    has_button,
    press_stop,
    runs,
    started,
    texts,
    tool_processes,
    tools_yml,
    wait_card,
    wait_status,
    wait_until,
)
from .conftest import StartBot
from .harness import ScriptedModel, mention, opsloop_command, reply
from .topology_kit import Topology, job_hash, topo_bot, topologies, topology

__all__ = ["topo_bot", "topologies", "topology"]  # fixtures, used by name

SLOW_TOOL_S = 60.0
TERMINAL = {"completed", "failed", "cancelled", "timed_out", "incomplete", "interrupted"}


def ended_status(slack: FakeSlack, ts: str, final: str) -> bool:
    message = slack.message("C1", ts)
    shown = message.text.startswith("Done") or f"`{final}`" in message.text
    return shown and not has_button(message, ACTION_STOP)


def answered_with(slack: FakeSlack, text: str) -> bool:
    return any(p.get("text") == text for p in slack.calls_of("chat.postMessage"))


async def test_a_mention_runs_a_tool_and_is_answered(
    topology: Topology, topo_bot: StartBot, slack: FakeSlack, model: ScriptedModel, tmp_path: Path
) -> None:
    tools, log = tools_yml(tmp_path)
    model.policy = call_then_answer("check_host", {"host": "web-03"})
    serve = await topo_bot(OPSLOOP_TOOLS=tools)
    event = mention("C1", "U1", "check web-03")

    status, _ = await serve.send(event)

    assert status == 200
    await slack.wait_for(
        lambda: any(t.startswith("Result:") for t in texts(slack, "C1", event["ts"])), timeout=30
    )
    assert [r["args"] for r in runs(log, tool="check_host")] == [["web-03"]]
    second = model.requests[1].messages
    assert any(m.get("role") == "tool" and "web-03" in m["content"] for m in second)
    stored = await job_hash(topology, first_job("C1", event["ts"]))
    await wait_until(
        lambda: _status(topology, first_job("C1", event["ts"])), timeout=10, what="completed"
    )
    assert stored["fence"]
    # The CLI reads the same topology from the same variables.
    code, out, err = await opsloop_command(
        cast(ManagedRedis, topology), "trace", first_job("C1", event["ts"]), **topology.env
    )
    assert code == 0, err
    assert "check_host" in out


async def _status(topology: Topology, job_id: str) -> bool:
    return (await job_hash(topology, job_id)).get("status") == "completed"


async def test_an_approval_clicked_on_a_second_process_runs_once(
    topology: Topology, topo_bot: StartBot, slack: FakeSlack, model: ScriptedModel, tmp_path: Path
) -> None:
    tools, log = tools_yml(tmp_path)
    model.policy = call_then_answer(  # type: ignore[assignment]
        "restart_service", {"service": "nginx", "confirmed_by": "U1"}
    )
    first = await topo_bot(OPSLOOP_TOOLS=tools)
    second = await topo_bot(OPSLOOP_TOOLS=tools)
    event = mention("C1", "U1", "restart nginx on web-03")
    await first.send(event)

    card = await wait_card(slack, "C1", event["ts"])
    assert runs(log) == []
    assert await click(second, slack, card, "UAPPROVER1", "Approve") == 200
    await slack.wait_for(
        lambda: any("Result: restarted" in t for t in texts(slack, "C1", event["ts"])),
        timeout=30,
    )
    await slack.wait_for(
        lambda: "Approved by <@UAPPROVER1>" in slack.message("C1", card.ts).text, timeout=10
    )
    done = runs(log, tool="restart_service")
    assert [d["args"] for d in done] == [["nginx", "UAPPROVER1"]]  # once, as the clicker


async def test_a_reply_mid_turn_reaches_the_next_request(
    topology: Topology, topo_bot: StartBot, slack: FakeSlack, model: ScriptedModel, tmp_path: Path
) -> None:
    tools, _ = tools_yml(tmp_path)
    serve = await topo_bot(OPSLOOP_TOOLS=tools)
    event = mention("C1", "U1", "check web-03")
    later = reply("C1", "U2", "show me the logs first", thread_ts=event["ts"])
    sent: list[int] = []

    async def policy(request: ScriptedRequest) -> Reply:
        if not sent:
            status, _ = await serve.send(later)  # while the model works on step 1
            sent.append(status)
            return Reply(
                content="Checking.", tool_calls=[ScriptedCall("check_host", {"host": "a"})]
            )
        return Reply(content="Here are the logs.")

    model.policy = policy  # type: ignore[assignment]
    await serve.send(event)
    await slack.wait_for(lambda: answered_with(slack, "Here are the logs."), timeout=30)
    assert sent == [200]
    last_user = [m for m in model.requests[1].messages if m.get("role") == "user"][-1]
    assert last_user["content"] == "<@U2>: show me the logs first"
    await slack.wait_for(lambda: "eyes" in slack.reactions("C1", later["ts"]), timeout=10)


async def test_stop_pressed_on_another_process_kills_the_running_tool(
    topology: Topology, topo_bot: StartBot, slack: FakeSlack, model: ScriptedModel, tmp_path: Path
) -> None:
    tools, log = tools_yml(tmp_path, slow_read=SLOW_TOOL_S)
    model.policy = call_then_answer("check_host", {"host": "web-03"})
    runner = await topo_bot(OPSLOOP_TOOLS=tools)
    other = await topo_bot(OPSLOOP_TOOLS=tools)
    event = mention("C1", "UREQUESTER", "check web-03")
    await runner.send(event)
    job_id = first_job("C1", event["ts"])

    status = await wait_status(slack, "C1", event["ts"])
    await wait_until(lambda: started(log, "check_host"), timeout=10, what="check_host started")
    assert tool_processes(log), "the slow tool should be running"

    assert await press_stop(other, slack, status, "UREQUESTER", job_id) == 200
    await slack.wait_for(lambda: "`cancelled`" in slack.message("C1", status.ts).text, timeout=15)
    await wait_until(lambda: not tool_processes(log), timeout=5, what="the tool killed")
    assert runs(log, tool="check_host") == []  # its "done" never came
    assert not has_button(slack.message("C1", status.ts), ACTION_STOP)
    stored = await job_hash(topology, job_id)
    assert stored["status"] == "cancelled" and stored["cancel"] == "UREQUESTER"


async def test_the_masters_death_mid_job_ends_the_job_with_a_clear_status(
    topology: Topology, topo_bot: StartBot, slack: FakeSlack, model: ScriptedModel, tmp_path: Path
) -> None:
    """The master holding the thread's keys is SIGKILLed while a tool runs; its replica
    takes over; the job ends (answered, or with a stop reason), never stuck running."""
    tools, log = tools_yml(tmp_path, slow_read=3.0)
    model.policy = call_then_answer("check_host", {"host": "web-03"})
    serve = await topo_bot(OPSLOOP_TOOLS=tools)
    event = mention("C1", "U1", "check web-03")
    assert (await serve.send(event))[0] == 200
    job_id = first_job("C1", event["ts"])
    await wait_until(lambda: started(log, "check_host"), timeout=10, what="check_host started")

    if topology.cluster is not None:
        master = topology.cluster.master_of(Keys().job(job_id))
        await asyncio.to_thread(topology.cluster.kill, master)
        await asyncio.to_thread(topology.cluster.wait_ready)
    else:
        assert topology.sentinel is not None
        await asyncio.to_thread(topology.sentinel.kill_master)

    async def ended() -> bool:
        try:
            return (await job_hash(topology, job_id)).get("status") in TERMINAL
        except Exception:  # noqa: BLE001  # the new master may not answer yet
            return False

    await wait_until(ended, timeout=60, what="the job to end")
    final = (await job_hash(topology, job_id))["status"]
    status = await wait_status(slack, "C1", event["ts"])
    # The thread says how it ended: the answer, or the ending's code on the status.
    # The thread says how it ended: the answer, and the status message's ending ("Done",
    # or the headline with the reason code), no Stop button left.
    if final == "completed":
        await slack.wait_for(lambda: answered(slack, event["ts"]), timeout=30)
    await slack.wait_for(lambda: ended_status(slack, status.ts, final), timeout=30)
    if topology.cluster is not None:
        await asyncio.to_thread(topology.cluster.restart, master)
    else:
        assert topology.sentinel is not None
        for server in topology.sentinel.servers:
            await asyncio.to_thread(topology.sentinel.restart, server)


pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

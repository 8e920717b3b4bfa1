"""Stop and Continue end to end: who may press them, what they interrupt, the same job
going on after a raised limit."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.emulator.redis_server import ManagedRedis
from bot.emulator.scripted import Policy, Reply, ScriptedCall, ScriptedRequest
from bot.emulator.slack import FakeSlack
from bot.slack.status_blocks import ACTION_CONTINUE, ACTION_STOP

from .approvals_kit import (
    call_then_answer,
    click,
    first_job,
    has_button,
    job_hash,
    press_stop,
    runs,
    started,
    texts,
    tool_processes,
    tools_yml,
    wait_status,
    wait_until,
)
from .conftest import StartBot
from .harness import ScriptedModel, mention

GATE_S = 60.0  # a held model answer comes this late unless the test releases it
STOP_BOUND_S = 10.0  # a hang guard well below GATE_S: Stop must not wait for the answer


@pytest.fixture
async def gate() -> AsyncIterator[asyncio.Event]:
    """Holds the model's answers until set (set at teardown, so no request is left
    hanging in the scripted server)."""
    event = asyncio.Event()
    yield event
    event.set()


def held(gate: asyncio.Event, answer: Reply) -> Policy:
    """A policy answering ``answer`` once ``gate`` is set (at most ``GATE_S`` later)."""

    async def policy(_: ScriptedRequest) -> Reply:
        try:
            await asyncio.wait_for(gate.wait(), GATE_S)
        except TimeoutError:
            pass
        return answer

    return policy


async def test_stop_kills_a_running_read_only_tool(
    bot: StartBot,
    slack: FakeSlack,
    model: ScriptedModel,
    redis_server: ManagedRedis,
    tmp_path: Path,
) -> None:
    tools, log = tools_yml(tmp_path, slow_read=GATE_S)
    model.policy = call_then_answer("check_host", {"host": "web-03"})
    serve = await bot(OPSLOOP_TOOLS=tools)
    event = mention("C1", "UREQUESTER", "check web-03")
    await serve.send(event)
    job_id = first_job("C1", event["ts"])

    status = await wait_status(slack, "C1", event["ts"])
    assert has_button(status, ACTION_STOP)
    await wait_until(lambda: started(log, "check_host"), timeout=10, what="check_host started")
    assert tool_processes(log), "the slow tool should be running"

    assert await press_stop(serve, slack, status, "UREQUESTER", job_id) == 200
    await slack.wait_for(lambda: "`cancelled`" in slack.message("C1", status.ts).text, timeout=15)

    assert tool_processes(log) == {}  # killed, not left to finish
    assert runs(log, tool="check_host") == []  # its "done" never came
    ending = slack.message("C1", status.ts)
    assert "Cancelled by <@UREQUESTER>" in ending.text
    assert not has_button(ending, ACTION_STOP)
    stored = await job_hash(redis_server.url, job_id)
    assert stored["status"] == "cancelled" and stored["cancel"] == "UREQUESTER"
    assert len(model.requests) == 1  # nothing asked after the Stop


async def test_stop_cancels_an_in_flight_model_call(
    bot: StartBot,
    slack: FakeSlack,
    model: ScriptedModel,
    redis_server: ManagedRedis,
    gate: asyncio.Event,
) -> None:
    model.policy = held(gate, Reply(content="Too late."))
    serve = await bot()
    event = mention("C1", "UREQUESTER", "summarise the incident")
    await serve.send(event)
    job_id = first_job("C1", event["ts"])
    status = await wait_status(slack, "C1", event["ts"])
    await model.wait_for(lambda requests: len(requests) == 1)

    assert await press_stop(serve, slack, status, "UREQUESTER", job_id) == 200
    # Well before the held answer (GATE_S): the call itself was cancelled.
    await slack.wait_for(
        lambda: "`cancelled`" in slack.message("C1", status.ts).text, timeout=STOP_BOUND_S
    )

    stored = await job_hash(redis_server.url, job_id)
    assert stored["status"] == "cancelled"
    assert stored["data"]["stop_reason"] == "cancelled"
    assert "Too late." not in texts(slack, "C1", event["ts"])
    assert len(model.requests) == 1


async def test_a_stranger_cannot_stop_the_job(
    bot: StartBot,
    slack: FakeSlack,
    model: ScriptedModel,
    redis_server: ManagedRedis,
    gate: asyncio.Event,
) -> None:
    model.policy = held(gate, Reply(content="Disk usage is at 41%."))
    serve = await bot(OPSLOOP_APPROVERS="UAPPROVER1")
    event = mention("C1", "UREQUESTER", "how full is the disk?")
    await serve.send(event)
    job_id = first_job("C1", event["ts"])
    status = await wait_status(slack, "C1", event["ts"])
    await model.wait_for(lambda requests: len(requests) == 1)

    assert await press_stop(serve, slack, status, "USTRANGER", job_id) == 200
    await slack.wait_for(lambda: bool(slack.ephemerals("C1", "USTRANGER")), timeout=10)
    refusal = slack.ephemerals("C1", "USTRANGER")[0].text
    assert "Nothing changed" in refusal and "started this job or an approver" in refusal

    gate.set()  # the model answers: the job went on
    await slack.wait_for(
        lambda: "Disk usage is at 41%." in texts(slack, "C1", event["ts"]), timeout=15
    )

    # The answer is shown before the job's final write lands: wait for that write.
    async def completed() -> bool:
        return (await job_hash(redis_server.url, job_id))["status"] == "completed"

    await wait_until(completed, timeout=10, what="the job's completed status")
    stored = await job_hash(redis_server.url, job_id)
    assert "cancel" not in stored  # no Stop was recorded
    assert not any("cancelled" in t for t in texts(slack, "C1", event["ts"]))


async def test_continue_raises_the_limit_and_the_same_job_answers(
    bot: StartBot,
    slack: FakeSlack,
    model: ScriptedModel,
    redis_server: ManagedRedis,
    tmp_path: Path,
) -> None:
    tools, _ = tools_yml(tmp_path)

    def keep_checking(request: ScriptedRequest) -> Reply:
        n = request.tool_results()
        if n < 2:  # more than the first run's 2 iterations allow
            return Reply(tool_calls=[ScriptedCall("check_host", {"host": f"web-{n}"})])
        return Reply(content=f"Checked {n} hosts: all fine.")

    model.policy = keep_checking
    serve = await bot(OPSLOOP_TOOLS=tools, OPSLOOP_MAX_ITERATIONS="2")
    event = mention("C1", "UREQUESTER", "check the web hosts")
    await serve.send(event)
    job_id = first_job("C1", event["ts"])
    status = await wait_status(slack, "C1", event["ts"])
    await slack.wait_for(
        lambda: "`limit_iterations`" in slack.message("C1", status.ts).text, timeout=20
    )
    ending = slack.message("C1", status.ts)
    assert has_button(ending, ACTION_CONTINUE) and not has_button(ending, ACTION_STOP)
    assert "Continue (+2 iterations)" in str(ending.blocks)
    assert len(model.requests) == 2
    stopped = await job_hash(redis_server.url, job_id)
    assert stopped["status"] == "limit_iterations" and stopped["data"]["raises"] == []

    assert await click(serve, slack, ending, "UREQUESTER", "Continue (+2 iterations)") == 200
    await slack.wait_for(
        lambda: "Checked 2 hosts: all fine." in texts(slack, "C1", event["ts"]), timeout=20
    )

    assert len(model.requests) == 3  # one more call, with the whole history
    assert model.requests[2].tool_results() == 2
    stored = await job_hash(redis_server.url, job_id)
    assert stored["current_job"] == job_id  # no new job: the same one went on
    assert stored["status"] == "completed"
    assert stored["data"]["limits"]["max_iterations"] == 4
    [raised] = stored["data"]["raises"]
    assert (raised["limit"], raised["amount"], raised["by"]) == ("iterations", 2, "UREQUESTER")
    await slack.wait_for(lambda: slack.message("C1", status.ts).text.startswith("Done"), timeout=15)
    assert texts(slack, "C1", event["ts"]).count("Checked 2 hosts: all fine.") == 1

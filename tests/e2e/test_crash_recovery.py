"""Several processes on one Redis, crashes and a Redis restart, end to end: a click or
a takeover lands on any process, every change runs at most once, and each job gives
exactly one answer."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

from bot.emulator.redis_server import ManagedRedis
from bot.emulator.slack import FakeSlack

from .approvals_kit import (
    call_then_answer,
    change_then_check,
    click,
    first_job,
    job_hash,
    model_calls,
    runner_of,
    runs,
    started,
    status_of,
    texts,
    tool_processes,
    tools_yml,
    wait_card,
    wait_until,
)
from .conftest import StartBot
from .harness import BotProcess, ScriptedModel, mention

TAKEOVER_BOUND_S = 25.0  # the design's 15 s lease, plus a scan, start-up noise and the run
RESTART: dict[str, object] = {"service": "nginx", "confirmed_by": "UREQUESTER"}
ENDING = re.compile(r"Done\n|[^\n]* · `[a-z_]+`\n")


def answers(slack: FakeSlack, thread_ts: str) -> list[str]:
    """The final answers in the thread (the policies answer with ``Result: …``)."""
    return [t.strip() for t in texts(slack, "C1", thread_ts) if t.startswith("Result:")]


def endings(slack: FakeSlack, thread_ts: str) -> list[str]:
    """Messages showing how a job ended: ``Done`` or a headline with its reason code."""
    return [t for t in texts(slack, "C1", thread_ts) if ENDING.match(t)]


async def wait_end(slack: FakeSlack, thread_ts: str) -> None:
    """Until the job's ending is shown (its answer, if any, is posted before it)."""
    await slack.wait_for(lambda: bool(endings(slack, thread_ts)), timeout=40)


def status_text(slack: FakeSlack, thread_ts: str) -> str:
    """The job's status message (the bot's first message in the thread) as it is now."""
    status = status_of(slack, "C1", thread_ts)
    assert status is not None
    return status.text


def ended_once(slack: FakeSlack, thread_ts: str) -> bool:
    """One ending in the thread, and it is the job's own status message, ``Done``."""
    return endings(slack, thread_ts) == [status_text(slack, thread_ts)] and status_text(
        slack, thread_ts
    ).startswith("Done")


async def two(bot: StartBot, **env: str) -> tuple[BotProcess, BotProcess]:
    a, b = await asyncio.gather(bot(**env), bot(**env))
    return a, b


async def test_a_click_on_another_process_runs_the_change_once(
    bot: StartBot,
    slack: FakeSlack,
    model: ScriptedModel,
    redis_server: ManagedRedis,
    tmp_path: Path,
) -> None:
    tools, log = tools_yml(tmp_path)
    model.policy = change_then_check("restart_service", RESTART)
    a, b = await two(bot, OPSLOOP_TOOLS=tools)
    event = mention("C1", "UREQUESTER", "restart nginx")
    await a.send(event)

    card = await wait_card(slack, "C1", event["ts"])
    assert await click(b, slack, card, "UAPPROVER1", "Approve") == 200
    await wait_end(slack, event["ts"])

    assert len(started(log, "restart_service")) == 1
    assert len(runs(log, tool="restart_service")) == 1
    assert answers(slack, event["ts"]) == ["Result: restarted nginx UAPPROVER1"]
    assert ended_once(slack, event["ts"])
    stored = await job_hash(redis_server.url, first_job("C1", event["ts"]))
    assert stored["status"] == "completed"


async def test_the_paused_jobs_process_dies_and_the_click_resumes_it_elsewhere(
    bot: StartBot,
    slack: FakeSlack,
    model: ScriptedModel,
    redis_server: ManagedRedis,
    tmp_path: Path,
) -> None:
    tools, log = tools_yml(tmp_path)
    model.policy = change_then_check("restart_service", RESTART)
    a, b = await two(bot, OPSLOOP_TOOLS=tools)
    event = mention("C1", "UREQUESTER", "restart nginx")
    await a.send(event)
    card = await wait_card(slack, "C1", event["ts"])

    ran = [p for p in (a, b) if await model_calls(p) > 0]
    assert len(ran) == 1  # one process ran the job up to the card
    victim = ran[0]
    survivor = b if victim is a else a
    await victim.kill()
    assert await click(survivor, slack, card, "UAPPROVER1", "Approve") == 200
    await wait_end(slack, event["ts"])

    assert len(started(log, "restart_service")) == 1
    assert len(runs(log, tool="restart_service")) == 1
    assert answers(slack, event["ts"]) == ["Result: restarted nginx UAPPROVER1"]
    assert ended_once(slack, event["ts"])
    assert "Approved by <@UAPPROVER1>" in slack.message("C1", card.ts).text
    stored = await job_hash(redis_server.url, first_job("C1", event["ts"]))
    assert stored["status"] == "completed"


async def test_a_crash_during_a_read_is_taken_over_within_the_lease(
    bot: StartBot,
    slack: FakeSlack,
    model: ScriptedModel,
    redis_server: ManagedRedis,
    tmp_path: Path,
) -> None:
    tools, log = tools_yml(tmp_path, slow_read=3.0)
    model.policy = call_then_answer("check_host", {"host": "web-03"})
    a, b = await two(bot, OPSLOOP_TOOLS=tools)
    event = mention("C1", "UREQUESTER", "check web-03")
    await a.send(event)
    await wait_until(lambda: tool_processes(log), timeout=10, what="check_host running")

    victim = runner_of(log, [a, b])
    survivor = b if victim is a else a
    killed_at = time.monotonic()
    await victim.kill()
    await wait_end(slack, event["ts"])

    assert time.monotonic() - killed_at <= TAKEOVER_BOUND_S
    assert await model_calls(survivor) >= 1  # the survivor finished the job
    assert answers(slack, event["ts"]) == ["Result: restarted web-03"]
    # The survivor took over the job's status message too: none is left "Working".
    assert not [t for t in texts(slack, "C1", event["ts"]) if t.startswith("Working")]
    assert ended_once(slack, event["ts"])
    stored = await job_hash(redis_server.url, first_job("C1", event["ts"]))
    assert stored["status"] == "completed"
    assert stored["current_job"] == first_job("C1", event["ts"])  # resumed, not restarted
    # The response that asked for the read was saved before the read ran: the survivor
    # ran the read again and asked the model once, for the answer; the job's limits
    # count both calls, once each.
    assert len(model.requests) == 2
    progress = stored["data"]["progress"]
    assert progress["iterations"] == 2 and progress["model_calls"] == 2


async def test_a_crash_during_a_change_is_not_run_again_and_is_reported(
    bot: StartBot,
    slack: FakeSlack,
    model: ScriptedModel,
    redis_server: ManagedRedis,
    tmp_path: Path,
) -> None:
    tools, log = tools_yml(tmp_path, delay=5.0)
    model.policy = call_then_answer("restart_service", RESTART)
    a, b = await two(bot, OPSLOOP_TOOLS=tools)
    event = mention("C1", "UREQUESTER", "restart nginx")
    await a.send(event)
    card = await wait_card(slack, "C1", event["ts"])
    assert await click(a, slack, card, "UAPPROVER1", "Approve") == 200
    await wait_until(lambda: tool_processes(log), timeout=10, what="restart_service running")
    await wait_until(lambda: started(log, "restart_service"), timeout=10, what="it began")

    victim = runner_of(log, [a, b])
    killed_at = time.monotonic()
    await victim.kill()
    await wait_end(slack, event["ts"])

    assert time.monotonic() - killed_at <= TAKEOVER_BOUND_S
    notes = [t for t in texts(slack, "C1", event["ts"]) if "outcome is unknown" in t]
    assert len(notes) == 1 and "restart_service" in notes[0] and "verify" in notes[0]
    told = [m for m in model.requests[-1].messages if m.get("role") == "tool"]
    assert told[-1]["content"].startswith("Error: outcome unknown")
    [answer] = answers(slack, event["ts"])
    assert answer.startswith("Result: Error: outcome unknown")
    assert ended_once(slack, event["ts"])
    assert len(started(log, "restart_service")) == 1  # never run a second time
    stored = await job_hash(redis_server.url, first_job("C1", event["ts"]))
    assert stored["status"] == "completed"


async def test_a_redis_restart_mid_job_still_gives_one_answer(
    bot: StartBot,
    slack: FakeSlack,
    model: ScriptedModel,
    redis_server: ManagedRedis,
    tmp_path: Path,
) -> None:
    tools, log = tools_yml(tmp_path, slow_read=3.0)
    model.policy = call_then_answer("check_host", {"host": "web-03"})
    serve = await bot(OPSLOOP_TOOLS=tools)
    event = mention("C1", "UREQUESTER", "check web-03")
    await serve.send(event)
    await wait_until(lambda: tool_processes(log), timeout=10, what="check_host running")

    await asyncio.to_thread(redis_server.stop)
    await asyncio.to_thread(redis_server.start)
    assert tool_processes(log)  # the restart happened while the read ran
    await wait_end(slack, event["ts"])

    assert answers(slack, event["ts"]) == ["Result: restarted web-03"]
    assert ended_once(slack, event["ts"])
    stored = await job_hash(redis_server.url, first_job("C1", event["ts"]))
    assert stored["status"] == "completed"
    assert stored["current_job"] == first_job("C1", event["ts"])


async def test_a_deploy_lets_the_change_finish_and_hands_the_job_over(
    bot: StartBot,
    slack: FakeSlack,
    model: ScriptedModel,
    redis_server: ManagedRedis,
    tmp_path: Path,
) -> None:
    """SIGTERM (a rolling deploy) while an approved restart runs: the process lets the
    change finish and be recorded, hands the job over at the next step instead of
    leaving its outcome unknown, and exits cleanly; the other process answers."""
    tools, log = tools_yml(tmp_path, delay=3.0)
    model.policy = change_then_check("restart_service", RESTART)
    a, b = await two(bot, OPSLOOP_TOOLS=tools)
    event = mention("C1", "UREQUESTER", "restart nginx")
    await a.send(event)
    card = await wait_card(slack, "C1", event["ts"])
    assert await click(a, slack, card, "UAPPROVER1", "Approve") == 200
    await wait_until(lambda: tool_processes(log), timeout=10, what="restart_service running")

    leaving = runner_of(log, [a, b])
    staying = b if leaving is a else a
    assert await leaving.stop(timeout=40) == 0  # drained, not killed
    assert len(runs(log, tool="restart_service")) == 1  # the change finished before exit

    await wait_end(slack, event["ts"])
    assert not [t for t in texts(slack, "C1", event["ts"]) if "outcome is unknown" in t]
    told = [m for m in model.requests[-1].messages if m.get("role") == "tool"]
    assert told[0]["content"].startswith("restarted nginx"), told  # the restart's own result
    [answer] = answers(slack, event["ts"])
    assert answer.startswith("Result: restarted")
    assert ended_once(slack, event["ts"])
    assert len(started(log, "restart_service")) == 1
    assert staying.running and await model_calls(staying) >= 1  # the other one answered

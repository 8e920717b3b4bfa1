"""``opsloop trace`` after a real job: the incident review reads back what the bot did —
who asked, each model call, the approval and who gave it, the call that ran with its
``confirmed_by``, and how the job ended — from the same Redis, as a separate process."""

from __future__ import annotations

import json
from pathlib import Path

from bot.emulator.redis_server import ManagedRedis
from bot.emulator.slack import FakeSlack

from .approvals_kit import (
    answered,
    change_then_check,
    click,
    runs,
    tools_yml,
    wait_card,
    wait_until,
)
from .conftest import StartBot
from .harness import ScriptedModel, mention, opsloop_command


async def opsloop_trace(redis: ManagedRedis, *args: str, **env: str) -> tuple[int, str, str]:
    return await opsloop_command(redis, "trace", *args, **env)


async def test_trace_tells_the_story_of_an_approved_restart(
    bot: StartBot,
    slack: FakeSlack,
    model: ScriptedModel,
    redis_server: ManagedRedis,
    tmp_path: Path,
) -> None:
    tools, log = tools_yml(tmp_path)
    model.policy = change_then_check("restart_service", {"service": "nginx"})  # type: ignore[assignment]
    serve = await bot(OPSLOOP_TOOLS=tools)
    event = mention("C1", "U1", "nginx leaks memory on web-03, restart it")
    await serve.send(event)
    card = await wait_card(slack, "C1", event["ts"])
    assert await click(serve, slack, card, "UAPPROVER1", "Approve") == 200
    await slack.wait_for(lambda: answered(slack, event["ts"]), timeout=30)
    assert len(runs(log, tool="restart_service")) == 1

    job_id = f"C1:{event['ts']}:j1"

    async def ended() -> bool:  # the job's final writes land just after the answer is posted
        return "end       completed" in (await opsloop_trace(redis_server, job_id))[1]

    await wait_until(ended, timeout=15, what="the job's end in its trace")
    code, out, err = await opsloop_trace(redis_server, job_id)
    assert code == 0, err
    assert out.startswith(f"Job {job_id} — completed\n"), out
    assert f"thread C1 {event['ts']} · started by U1 · " in out
    assert "3 of " in out and "2 tool runs (restart_service, check_host)" in out
    lines = out.splitlines()
    kinds = [line.split()[2] for line in lines if line.startswith("  ") and "+" in line[:30]]
    # the mention taken in → the model asks → the run pauses for the card → the approved
    # call runs → the model checks it → the model answers
    expected = ["message", "model", "approval", "end", "tool", "model", "tool", "model", "end"]
    assert kinds == expected, out
    taken = next(line for line in lines if "  message  " in line)
    assert "nginx leaks memory on web-03, restart it" in taken  # what was asked, and by whom
    assert "<@U1>" in taken
    approval = next(line for line in lines if "  approval  " in line)
    assert "restart_service (mutating, call " in approval
    assert "approved by UAPPROVER1 at " in approval
    tool = next(line for line in lines if "  tool  " in line)
    assert '"service": "nginx"' in tool and "confirmed by UAPPROVER1" in tool
    assert "paused: awaiting approval" in out
    timeline = [line for line in lines if line.startswith("  ") and "+" in line[:30]]
    assert "end       completed · 3 iterations · 3 model calls · 2 tool runs" in timeline[-1]
    # The job's answer closes the story.
    assert lines[lines.index("  answer:") + 1].startswith("    Result: ")

    # The thread and the Slack link of the mention name the same job.
    link = f"https://acme.slack.com/archives/C1/p{event['ts'].replace('.', '')}"
    for target in (f"C1:{event['ts']}", link, f"{link}?thread_ts={event['ts']}&cid=C1"):
        code, by_thread, err = await opsloop_trace(redis_server, target)
        assert (code, by_thread) == (0, out), err

    code, raw, err = await opsloop_trace(redis_server, job_id, "--json")
    assert code == 0, err
    doc = json.loads(raw)
    assert doc["job"]["id"] == job_id and doc["job"]["status"] == "completed"
    assert [a["decided_by"] for a in doc["approvals"]] == ["UAPPROVER1"]
    tool_entries = [e for e in doc["trace"] if e["kind"] == "tool"]
    assert [e.get("confirmed_by") for e in tool_entries] == ["UAPPROVER1", None]  # the check
    assert list(doc["messages"]) == [event["ts"]]  # what was asked, by its Slack ts
    assert "nginx leaks memory on web-03" in doc["messages"][event["ts"]]


async def test_trace_says_clearly_what_it_cannot_find(redis_server: ManagedRedis) -> None:
    code, out, err = await opsloop_trace(redis_server, "C1:1700000000.000100:j9")
    assert (code, out) == (1, "")
    assert err.strip() == (
        "opsloop trace: no job C1:1700000000.000100:j9 under the prefix 'opsloop:' "
        "(jobs are kept 30 days; is OPSLOOP_REDIS_PREFIX the bot's?)"
    )
    code, out, err = await opsloop_trace(redis_server, "web-03")
    assert (code, out) == (2, "")
    assert err.startswith("opsloop trace: cannot read 'web-03': give a job id (")
    code, out, err = await opsloop_trace(
        redis_server, "C1:1700000000.000100", REDIS_URL="redis://127.0.0.1:1/0"
    )
    assert code == 1 and out == ""
    assert err.startswith("opsloop trace: redis unavailable during "), err
    assert "Traceback" not in err
    code, out, err = await opsloop_trace(
        redis_server, "C1:1700000000.000100", REDIS_URL="http://:pw@127.0.0.1:1/0"
    )
    assert (code, out) == (2, "")
    assert err.strip() == (
        "opsloop trace: REDIS_URL: must start with redis://, rediss://, unix://"
    )  # and never shows the URL, which may hold a password

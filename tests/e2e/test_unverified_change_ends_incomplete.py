"""An approved change that nobody checks does not end ✅ Done, end to end.

``opsloop serve`` with a real mutating command tool: the card is approved, the restart
runs, and the model answers without a read-only check. The bot asks it once (a ``user``
message) to verify the change; it answers again without one, and the job ends
``incomplete`` with an ending that says the change was not verified (the answer is still
posted). The same flow with a check after the restart ends ``Done``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bot.emulator.redis_server import ManagedRedis
from bot.emulator.scripted import Reply, ScriptedCall, ScriptedRequest
from bot.emulator.slack import FakeSlack

from .approvals_kit import (
    answered,
    call_then_answer,
    click,
    first_job,
    job_hash,
    runs,
    tools_yml,
    wait_card,
    wait_status,
)
from .conftest import StartBot
from .harness import ScriptedModel, mention

ASKED = "Verify with a read-only tool"  # the bot's one question (bot/agent/work_done.py)


def questions(messages: list[dict[str, Any]]) -> int:
    return sum(1 for m in messages if m.get("role") == "user" and ASKED in str(m["content"]))


async def approve_restart(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, tmp_path: Path
) -> tuple[str, str, Path]:
    """Mention, approve the restart card; the thread's ts, the status message's, the run log."""
    tools, log = tools_yml(tmp_path)
    serve = await bot(OPSLOOP_TOOLS=tools)
    event = mention("C1", "U1", "nginx leaks memory on web-03, restart it")
    await serve.send(event)
    card = await wait_card(slack, "C1", event["ts"])
    assert await click(serve, slack, card, "UAPPROVER1", "Approve") == 200
    status = await wait_status(slack, "C1", event["ts"])
    return event["ts"], status.ts, log


async def test_an_approved_change_that_is_not_checked_ends_not_verified(
    bot: StartBot,
    slack: FakeSlack,
    model: ScriptedModel,
    redis_server: ManagedRedis,
    tmp_path: Path,
) -> None:
    # Restart, then answer from its result, as often as asked: never a check.
    model.policy = call_then_answer("restart_service", {"service": "nginx"})  # type: ignore[assignment]
    thread_ts, status_ts, log = await approve_restart(bot, slack, model, tmp_path)

    await slack.wait_for(lambda: "`incomplete`" in slack.message("C1", status_ts).text, timeout=30)

    ending = slack.message("C1", status_ts).text
    assert ending.startswith(
        "Not done: the change was not verified: no read-only check ran after "
        "restart_service · `incomplete`\n"
    ), ending
    assert len(runs(log, tool="restart_service")) == 1
    # Asked once, after the first answer; the second answer ended the job.
    assert len(model.requests) == 3
    assert questions(model.requests[1].messages) == 0
    assert questions(model.requests[2].messages) == 1
    assert answered(slack, thread_ts)  # the answer itself is posted
    stored = await job_hash(redis_server.url, first_job("C1", thread_ts))
    assert stored["status"] == "incomplete"


async def test_a_change_checked_after_it_ran_ends_done(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, tmp_path: Path
) -> None:
    def restart_then_check(request: ScriptedRequest) -> Reply:
        done = request.tool_results()
        if done == 0:
            return Reply(
                content="Restarting nginx to clear the leak.",
                tool_calls=[ScriptedCall("restart_service", {"service": "nginx"})],
            )
        if done == 1:
            return Reply(tool_calls=[ScriptedCall("check_host", {"host": "web-03"})])
        return Reply(content="Result: restarted nginx, and web-03 answers again.")

    model.policy = restart_then_check  # type: ignore[assignment]
    thread_ts, status_ts, log = await approve_restart(bot, slack, model, tmp_path)

    await slack.wait_for(lambda: answered(slack, thread_ts), timeout=30)
    await slack.wait_for(lambda: slack.message("C1", status_ts).text.startswith("Done"), timeout=15)
    assert len(model.requests) == 3
    assert all(questions(r.messages) == 0 for r in model.requests)
    assert [r["tool"] for r in runs(log)] == ["restart_service", "check_host"]

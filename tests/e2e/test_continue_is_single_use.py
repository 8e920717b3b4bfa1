"""A Continue button raises its limit once: a replayed or double-delivered click, or a
click on the Continue of an earlier ending, changes nothing and tells the clicker."""

from __future__ import annotations

from pathlib import Path

from bot.emulator.redis_server import ManagedRedis
from bot.emulator.scripted import Reply, ScriptedCall, ScriptedRequest
from bot.emulator.slack import FakeSlack

from .approvals_kit import first_job, job_hash, tools_yml, wait_status, wait_until
from .conftest import StartBot
from .harness import ScriptedModel, click_body, mention

LABEL = "Continue (+1 iterations)"


async def test_each_continue_raises_once(
    bot: StartBot,
    slack: FakeSlack,
    model: ScriptedModel,
    redis_server: ManagedRedis,
    tmp_path: Path,
) -> None:
    tools, _ = tools_yml(tmp_path)

    def keep_checking(request: ScriptedRequest) -> Reply:
        n = request.tool_results()
        return Reply(tool_calls=[ScriptedCall("check_host", {"host": f"web-{n}"})])

    model.policy = keep_checking
    serve = await bot(OPSLOOP_TOOLS=tools, OPSLOOP_MAX_ITERATIONS="1")
    event = mention("C1", "UREQUESTER", "check the web hosts")
    await serve.send(event)
    job_id = first_job("C1", event["ts"])
    status = await wait_status(slack, "C1", event["ts"])

    async def stopped(raises: int) -> bool:
        stored = await job_hash(redis_server.url, job_id)
        return (
            stored.get("status") == "limit_iterations"
            and len(stored["data"]["raises"]) == raises
            and LABEL in str(slack.message("C1", status.ts).blocks)
            and f"({raises + 1}/{raises + 1})" in slack.message("C1", status.ts).text
        )

    await wait_until(lambda: stopped(0), timeout=20, what="the first limit ending")
    first = click_body(
        slack.message("C1", status.ts).as_slack(),
        "C1",
        "UREQUESTER",
        slack.api_url + "response",
        text=LABEL,
    )
    assert (await serve.post_event(first))[0] == 200
    await wait_until(lambda: stopped(1), timeout=20, what="the second limit ending")
    assert len(model.requests) == 2

    # The first ending's click again (Slack redelivering it, or a second tap on an old
    # copy of the message): the job stays stopped, nothing is raised.
    assert (await serve.post_event(first))[0] == 200
    await slack.wait_for(lambda: bool(slack.ephemerals("C1", "UREQUESTER")), timeout=10)
    assert "already used" in slack.ephemerals("C1", "UREQUESTER")[0].text
    stored = await job_hash(redis_server.url, job_id)
    assert stored["status"] == "limit_iterations"
    assert stored["data"]["limits"]["max_iterations"] == 2
    assert len(stored["data"]["raises"]) == 1 and len(model.requests) == 2

    # The latest ending's button still works, once.
    latest = click_body(
        slack.message("C1", status.ts).as_slack(),
        "C1",
        "UREQUESTER",
        slack.api_url + "response",
        text=LABEL,
    )
    assert (await serve.post_event(latest))[0] == 200
    await wait_until(lambda: stopped(2), timeout=20, what="the third limit ending")
    stored = await job_hash(redis_server.url, job_id)
    assert stored["data"]["limits"]["max_iterations"] == 3 and len(model.requests) == 3

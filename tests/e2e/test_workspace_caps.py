"""The workspace's daily cap and the per-person job rate, end to end (``opsloop serve``, the
fake Slack, the scripted model, real Redis): a job the day's cap stops ends ``limit_tokens``
naming the workspace's cap; a new mention then gets a clear answer in its thread and no job;
the requester's Continue is refused (only an approver raises the day), an approver's raises
the day's cap and the same job goes on. Past ``OPSLOOP_JOBS_PER_USER_HOUR`` a person's new
mention gets an ephemeral retry-after and no job, and someone else is not affected."""

from __future__ import annotations

from pathlib import Path

from bot.agent.ports import WORKSPACE_CAP
from bot.emulator.redis_server import ManagedRedis
from bot.emulator.scripted import Reply, ScriptedCall, ScriptedRequest
from bot.emulator.slack import FakeSlack
from bot.slack.status_blocks import ACTION_CONTINUE

from .approvals_kit import first_job, has_button, job_hash, texts, tools_yml, wait_status
from .conftest import StartBot
from .harness import ScriptedModel, click_body, mention

DAILY = 20_000  # the first call fits; its reported usage leaves no room for a second


def heavy_then_answer(request: ScriptedRequest) -> Reply:
    """The first call reports a large prompt (the day's cap is then too full for the next
    call's reservation); once continued, the model answers cheaply."""
    if request.tool_results() == 0:
        return Reply(
            tool_calls=[ScriptedCall("check_host", {"host": "web-03"})],
            prompt_tokens=15_000,
            completion_tokens=10,
        )
    return Reply(content="web-03 is fine.", prompt_tokens=100, completion_tokens=10)


async def test_the_daily_cap_stops_jobs_refuses_new_ones_and_an_approver_raises_it(
    bot: StartBot,
    slack: FakeSlack,
    model: ScriptedModel,
    redis_server: ManagedRedis,
    tmp_path: Path,
) -> None:
    tools, _ = tools_yml(tmp_path)
    model.policy = heavy_then_answer
    serve = await bot(
        OPSLOOP_TOOLS=tools,
        OPSLOOP_DAILY_TOKEN_BUDGET=str(DAILY),
        OPSLOOP_APPROVERS="UAPPROVER1",
    )
    first = mention("C1", "UREQUESTER", "check web-03")
    await serve.send(first)
    job_id = first_job("C1", first["ts"])
    status = await wait_status(slack, "C1", first["ts"])
    await slack.wait_for(
        lambda: "`limit_tokens`" in slack.message("C1", status.ts).text, timeout=20
    )
    ending = slack.message("C1", status.ts)
    assert WORKSPACE_CAP in ending.text
    assert has_button(ending, ACTION_CONTINUE)
    assert "Continue (raise today's cap)" in str(ending.blocks)
    assert len(model.requests) == 1  # the second call was never made
    stopped = await job_hash(redis_server.url, job_id)
    assert stopped["status"] == "limit_tokens" and WORKSPACE_CAP in stopped["data"]["error"]

    second = mention("C1", "UOTHER", "and web-04?")
    await serve.send(second)
    await slack.wait_for(
        lambda: any("daily model budget is used up" in t for t in texts(slack, "C1", second["ts"])),
        timeout=10,
    )
    [told] = texts(slack, "C1", second["ts"])
    assert told.startswith("<@UOTHER> ") and f"of {DAILY:,} tokens today" in told
    assert (await job_hash(redis_server.url, first_job("C1", second["ts"])))["current_job"] is None

    response = slack.api_url + "response"
    refused = click_body(ending.as_slack(), "C1", "UREQUESTER", response, action_id=ACTION_CONTINUE)
    assert (await serve.post_event(refused))[0] == 200
    await slack.wait_for(lambda: bool(slack.ephemerals("C1", "UREQUESTER")), timeout=10)
    assert "only an approver" in slack.ephemerals("C1", "UREQUESTER")[0].text
    assert len(model.requests) == 1

    raised = click_body(ending.as_slack(), "C1", "UAPPROVER1", response, action_id=ACTION_CONTINUE)
    assert (await serve.post_event(raised))[0] == 200
    await slack.wait_for(lambda: "web-03 is fine." in texts(slack, "C1", first["ts"]), timeout=20)
    thread = texts(slack, "C1", first["ts"])
    assert any(
        t.startswith("<@UAPPROVER1> raised the workspace's daily cap for today") for t in thread
    )
    assert len(model.requests) == 2
    done = await job_hash(redis_server.url, job_id)
    assert done["current_job"] == job_id  # the same job went on
    assert done["data"]["limits"]["token_budget"] == stopped["data"]["limits"]["token_budget"]


async def test_past_the_hourly_rate_a_mention_gets_a_retry_after_and_no_job(
    bot: StartBot,
    slack: FakeSlack,
    model: ScriptedModel,
    redis_server: ManagedRedis,
) -> None:
    def quiet(_: ScriptedRequest) -> Reply:
        return Reply(content="All quiet.")

    model.policy = quiet
    serve = await bot(OPSLOOP_JOBS_PER_USER_HOUR="2")
    events = [mention("C1", "UBUSY", f"check {n}") for n in range(3)]

    def answered(event: dict[str, object]) -> bool:
        return "All quiet." in texts(slack, "C1", str(event["ts"]))

    for event in events[:2]:
        await serve.send(event)
    await slack.wait_for(lambda: all(answered(e) for e in events[:2]), timeout=20)
    await serve.send(events[2])
    await slack.wait_for(lambda: bool(slack.ephemerals("C1", "UBUSY")), timeout=10)
    [note] = slack.ephemerals("C1", "UBUSY")
    assert note.text.startswith("You've started 2 jobs in the last hour (at most 2 an hour)")
    assert "try again after" in note.text and note.text.endswith(" UTC.")
    third = await job_hash(redis_server.url, first_job("C1", events[2]["ts"]))
    assert third["current_job"] is None and "status" not in third

    other = mention("C1", "UCALM", "check 4")
    await serve.send(other)
    await slack.wait_for(lambda: answered(other), timeout=20)
    assert slack.ephemerals("C1", "UCALM") == []

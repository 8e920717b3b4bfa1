"""A clicker from outside the installing workspace (Slack Connect: ``user.team_id`` is not
the team ``auth.test`` names) approves, denies, stops and continues nothing, unless
``OPSLOOP_APPROVERS`` names that user explicitly."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bot.emulator.scripted import Reply, ScriptedRequest
from bot.emulator.slack import FakeSlack, Message
from bot.slack.status_blocks import ACTION_STOP

from .approvals_kit import answered, call_then_answer, runs, tools_yml, wait_card, wait_status
from .conftest import StartBot
from .harness import BotProcess, ScriptedModel, block_actions_body, find_button, mention

PARTNER_TEAM = "T0PARTNER"
PARTNER = "UPARTNER1"


async def click_as(
    serve: BotProcess, slack: FakeSlack, message: Message, user: str, button: str, team: str
) -> int:
    """A click on ``button`` of ``message`` by ``user`` of workspace ``team``."""
    block_id, found = find_button(message.blocks, text=button)
    body = block_actions_body(
        user,
        str(found["action_id"]),
        str(found["value"]),
        message.channel,
        message.ts,
        slack.api_url + "response",
        block_id=block_id,
        thread_ts=message.thread_ts,
        message=message.as_slack(),
        text=button,
        team=team,
    )
    return (await serve.post_event(body))[0]


async def test_a_partner_organisations_user_cannot_approve_or_deny(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, tmp_path: Path
) -> None:
    tools, log = tools_yml(tmp_path)
    model.policy = call_then_answer("restart_service", {"service": "nginx"})  # type: ignore[assignment]
    serve = await bot(OPSLOOP_TOOLS=tools)  # default policy: any human but the bot
    event = mention("C1", "U1", "restart nginx")
    await serve.send(event)
    card = await wait_card(slack, "C1", event["ts"])

    for button in ("Approve", "Deny"):
        assert await click_as(serve, slack, card, PARTNER, button, PARTNER_TEAM) == 200
    await slack.wait_for(lambda: len(slack.ephemerals("C1", PARTNER)) == 2, timeout=10)
    for note in slack.ephemerals("C1", PARTNER):
        assert "Nothing changed" in note.text and "workspace" in note.text
    assert "Approve" in str(slack.message("C1", card.ts).blocks)  # still pending
    assert runs(log) == []

    # A member of the installing workspace decides as before.
    assert await click_as(serve, slack, card, "UAPPROVER1", "Approve", "T1") == 200
    await slack.wait_for(lambda: answered(slack, event["ts"]), timeout=30)
    assert [r["args"] for r in runs(log)] == [["nginx", "UAPPROVER1"]]


async def test_a_partner_named_in_approvers_may_approve(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, tmp_path: Path
) -> None:
    tools, log = tools_yml(tmp_path)
    model.policy = call_then_answer("restart_service", {"service": "nginx"})  # type: ignore[assignment]
    serve = await bot(OPSLOOP_TOOLS=tools, OPSLOOP_APPROVERS=f"UAPPROVER1,{PARTNER}")
    event = mention("C1", "U1", "restart nginx")
    await serve.send(event)
    card = await wait_card(slack, "C1", event["ts"])

    assert await click_as(serve, slack, card, PARTNER, "Approve", PARTNER_TEAM) == 200
    await slack.wait_for(lambda: answered(slack, event["ts"]), timeout=30)
    assert [r["args"] for r in runs(log)] == [["nginx", PARTNER]]


async def test_a_partner_organisations_user_cannot_stop_a_job_they_started(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel
) -> None:
    gate = asyncio.Event()

    async def held(_: ScriptedRequest) -> Reply:
        await asyncio.wait_for(gate.wait(), 60)
        return Reply(content="Disk usage is at 41%.")

    model.policy = held
    serve = await bot()
    event = mention("C1", PARTNER, "how full is the disk?", team=PARTNER_TEAM)
    await serve.send(event)
    await model.wait_for(lambda requests: len(requests) == 1)
    status = await wait_status(slack, "C1", event["ts"])
    await slack.wait_for(lambda: bool(find_stop(slack.message("C1", status.ts))), timeout=10)

    fresh = slack.message("C1", status.ts)
    assert await click_as(serve, slack, fresh, PARTNER, "Stop", PARTNER_TEAM) == 200
    await slack.wait_for(lambda: bool(slack.ephemerals("C1", PARTNER)), timeout=10)
    assert "workspace" in slack.ephemerals("C1", PARTNER)[0].text
    gate.set()
    await slack.wait_for(lambda: answered(slack, event["ts"], "Disk usage is at 41%."), timeout=30)


def find_stop(message: Message) -> bool:
    try:
        find_button(message.blocks, action_id=ACTION_STOP)
    except LookupError:
        return False
    return True

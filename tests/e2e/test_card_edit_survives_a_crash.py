"""A decided card's edit is owed until done: when the process that recorded an Approve
dies before editing the card (or Slack refused the edit), whichever process scans or
resumes the job edits it, so no card offers Approve/Deny on a change already decided."""

from __future__ import annotations

from pathlib import Path

import redis.asyncio as aioredis

from bot.emulator.redis_server import ManagedRedis
from bot.emulator.slack import FakeSlack
from bot.store.keys import Keys

from .approvals_kit import (
    call_then_answer,
    click,
    first_job,
    runs,
    tools_yml,
    wait_card,
)
from .conftest import StartBot
from .harness import ScriptedModel, mention

MANY = 10_000


async def approval_status(redis_url: str, job_id: str) -> str | None:
    client = aioredis.Redis.from_url(redis_url, decode_responses=True)
    try:
        [key] = await client.keys(Keys().approval(job_id, "*"))
        found = await client.hget(key, "status")
    finally:
        await client.aclose()
    return str(found) if found is not None else None


async def test_a_crash_after_approve_leaves_no_live_buttons(
    bot: StartBot,
    slack: FakeSlack,
    model: ScriptedModel,
    redis_server: ManagedRedis,
    tmp_path: Path,
) -> None:
    tools, log = tools_yml(tmp_path, delay=30.0)  # the change outlives the first process
    model.policy = call_then_answer("restart_service", {"service": "nginx"})  # type: ignore[assignment]
    first = await bot(OPSLOOP_TOOLS=tools)
    event = mention("C1", "UREQUESTER", "restart nginx")
    await first.send(event)
    card = await wait_card(slack, "C1", event["ts"])
    job_id = first_job("C1", event["ts"])

    # Slack stops taking edits: the first process records the decision, acknowledges
    # the click, and cannot show it on the card before it dies.
    slack.fail_next("chat.update", status=500, times=MANY)
    assert await click(first, slack, card, "UAPPROVER1", "Approve") == 200
    assert await approval_status(redis_server.url, job_id) == "approved"
    await first.kill()
    assert "Approve" in str(slack.message("C1", card.ts).blocks)  # the lie, for now

    slack.clear_faults()
    await bot(OPSLOOP_TOOLS=tools)
    await slack.wait_for(
        lambda: "Approved by <@UAPPROVER1>" in slack.message("C1", card.ts).text, timeout=30
    )
    edited = slack.message("C1", card.ts)
    assert "actions" not in [b["type"] for b in edited.blocks or []]
    assert len(runs(log, phase="start")) <= 1  # a change in doubt is reported, not re-run


async def test_a_refused_card_edit_is_redone(
    bot: StartBot,
    slack: FakeSlack,
    model: ScriptedModel,
    tmp_path: Path,
) -> None:
    tools, log = tools_yml(tmp_path)
    model.policy = call_then_answer("restart_service", {"service": "nginx"})  # type: ignore[assignment]
    serve = await bot(OPSLOOP_TOOLS=tools)
    event = mention("C1", "UREQUESTER", "restart nginx")
    await serve.send(event)
    card = await wait_card(slack, "C1", event["ts"])

    # Every card edit is refused (an outage longer than the client's retries), then Slack
    # recovers: the scan redoes the edit the click could not make.
    slack.fail_next("chat.update", status=200, error="internal_error", times=MANY)
    assert await click(serve, slack, card, "UAPPROVER1", "Approve") == 200
    # The click's edit and the paced retry it falls back to are both refused.
    await slack.wait_for(
        lambda: sum(c.get("ts") == card.ts for c in slack.calls_of("chat.update")) >= 2,
        timeout=10,
    )
    slack.clear_faults()
    await slack.wait_for(
        lambda: "Approved by <@UAPPROVER1>" in slack.message("C1", card.ts).text, timeout=30
    )
    assert len(runs(log, tool="restart_service")) == 1

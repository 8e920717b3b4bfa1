"""The audit log end to end: an approved restart through ``opsloop serve``, then read back
by ``opsloop audit`` from the same Redis, as a separate process — who asked for what, who
approved it, the write that ran and its outcome, the configuration the process started
with — with a chain that verifies; and every decision and write also posted as one line
to ``OPSLOOP_AUDIT_CHANNEL``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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

AUDIT_CHANNEL = "CAUDIT001"


async def opsloop_audit(redis: ManagedRedis, *args: str) -> tuple[int, str, str]:
    return await opsloop_command(redis, "audit", *args)


async def audit_json(redis: ManagedRedis, *args: str) -> list[dict[str, Any]]:
    code, out, err = await opsloop_audit(redis, "--json", *args)
    assert code == 0, err
    return [json.loads(line) for line in out.splitlines() if line.strip()]


async def test_an_approved_restart_is_on_the_record_and_in_the_audit_channel(
    bot: StartBot,
    slack: FakeSlack,
    model: ScriptedModel,
    redis_server: ManagedRedis,
    tmp_path: Path,
) -> None:
    tools, log = tools_yml(tmp_path)
    model.policy = change_then_check("restart_service", {"service": "nginx"})  # type: ignore[assignment]
    serve = await bot(
        OPSLOOP_TOOLS=tools,
        OPSLOOP_AUDIT_CHANNEL=AUDIT_CHANNEL,
        OPSLOOP_APPROVERS="UAPPROVER1,SOPS",
    )
    event = mention("C1", "U1", "nginx leaks memory on web-03, restart it")
    await serve.send(event)
    card = await wait_card(slack, "C1", event["ts"])
    assert await click(serve, slack, card, "UAPPROVER1", "Approve") == 200
    await slack.wait_for(lambda: answered(slack, event["ts"]), timeout=30)
    assert len(runs(log, tool="restart_service")) == 1
    job_id = f"C1:{event['ts']}:j1"

    async def finished_on_record() -> bool:
        kinds = {e["kind"] for e in await audit_json(redis_server, "--job", job_id)}
        return "write_finished" in kinds

    await wait_until(finished_on_record, timeout=15, what="the write's end in the audit log")
    entries = await audit_json(redis_server, "--job", job_id)
    kinds = [e["kind"] for e in entries]
    assert kinds == ["approval_requested", "approval_decided", "write_started", "write_finished"]
    requested, decided, started, finished = entries
    assert requested["tool"] == "restart_service"
    assert requested["arguments"] == {"service": "nginx"}
    assert requested["args_hash"] == decided["args_hash"] == started["args_hash"]
    assert decided["actor"] == "UAPPROVER1" and decided["outcome"] == "approved"
    assert decided["detail"]["card_ts"] == card.ts
    assert started["actor"] == finished["actor"] == "UAPPROVER1"
    assert finished["outcome"] == "ok"
    assert finished["detail"]["idempotency_key"] == f"{job_id}:{started['call_id']}"
    assert "restarted nginx" in finished["detail"]["result"]
    # A chain: each entry names the one before it.
    seqs = [e["seq"] for e in entries]
    assert seqs == sorted(seqs)

    everything = await audit_json(redis_server)
    (process,) = [e for e in everything if e["kind"] == "process_started"]
    assert process["detail"]["approvers"] == ["SOPS", "UAPPROVER1"]  # as configured
    assert len(process["detail"]["tools_yml_sha256"]) == 64
    assert "restart_service" in process["detail"]["tools"]
    by_user = await audit_json(redis_server, "--user", "UAPPROVER1")
    assert {e["kind"] for e in by_user} == {"approval_decided", "write_started", "write_finished"}
    assert await audit_json(redis_server, "--tool", "no_such_tool") == []

    code, out, err = await opsloop_audit(redis_server, "verify")
    assert code == 0, err + out
    code, table, err = await opsloop_audit(redis_server, "--job", job_id)
    assert code == 0, err
    assert "approval_decided" in table and "UAPPROVER1" in table

    # The channel copy: the decision and the write, one line each.
    def channel_lines() -> list[str]:
        return [
            line
            for m in slack.messages(AUDIT_CHANNEL)
            for line in m.text.splitlines()
            if line.strip()
        ]

    await slack.wait_for(lambda: len(channel_lines()) >= 2, timeout=15)
    lines = channel_lines()
    assert any("<@UAPPROVER1>" in line and "restart_service" in line for line in lines), lines
    assert any("approved" in line for line in lines), lines
    assert not any("approval_requested" in line for line in lines)


async def test_an_edited_entry_is_found_by_verify(
    bot: StartBot,
    slack: FakeSlack,
    model: ScriptedModel,
    redis_server: ManagedRedis,
    tmp_path: Path,
) -> None:
    """Someone rewrites who approved a restart, straight in Redis: verify names the entry."""
    import redis.asyncio as aioredis

    tools, _ = tools_yml(tmp_path)
    model.policy = change_then_check("restart_service", {"service": "nginx"})  # type: ignore[assignment]
    serve = await bot(OPSLOOP_TOOLS=tools)
    event = mention("C1", "U1", "restart nginx on web-03")
    await serve.send(event)
    card = await wait_card(slack, "C1", event["ts"])
    assert await click(serve, slack, card, "UAPPROVER1", "Approve") == 200
    await slack.wait_for(lambda: answered(slack, event["ts"]), timeout=30)

    async def decided_on_record() -> bool:
        return any(e["kind"] == "approval_decided" for e in await audit_json(redis_server))

    await wait_until(decided_on_record, timeout=15, what="the decision in the audit log")
    client = aioredis.Redis.from_url(redis_server.url, decode_responses=True)
    try:
        stream = "opsloop:{audit}:log"
        rows = await client.xrange(stream)
        rebuilt = []
        for _, fields in rows:
            body = json.loads(fields["e"])
            if body["kind"] == "approval_decided":
                body["actor"] = "UMALLORY1"  # the hash no longer matches
                forged_seq = body["seq"]
            rebuilt.append(json.dumps(body))
        await client.delete(stream)
        for body in rebuilt:
            await client.xadd(stream, {"e": body})
    finally:
        await client.aclose()

    code, out, err = await opsloop_audit(redis_server, "verify")
    assert code == 1, out + err
    assert f"seq {forged_seq}" in out + err or f"#{forged_seq}" in out + err, out + err


async def test_a_click_while_redis_is_down_is_refused_and_nothing_is_half_recorded(
    bot: StartBot,
    slack: FakeSlack,
    model: ScriptedModel,
    redis_server: ManagedRedis,
    tmp_path: Path,
) -> None:
    tools, log = tools_yml(tmp_path)
    model.policy = change_then_check("restart_service", {"service": "nginx"})  # type: ignore[assignment]
    serve = await bot(OPSLOOP_TOOLS=tools)
    event = mention("C1", "U1", "restart nginx on web-03")
    await serve.send(event)
    card = await wait_card(slack, "C1", event["ts"])
    job_id = f"C1:{event['ts']}:j1"

    redis_server.stop()
    try:
        await click(serve, slack, card, "UAPPROVER1", "Approve")
        await slack.wait_for(lambda: bool(slack.ephemerals("C1", "UAPPROVER1")), timeout=15)
        assert "could not be recorded" in slack.ephemerals("C1", "UAPPROVER1")[0].text
    finally:
        redis_server.start()

    entries = await audit_json(redis_server, "--job", job_id)
    assert [e["kind"] for e in entries] == ["approval_requested"]  # no decision, no write
    assert runs(log, tool="restart_service") == []

    # The card still takes its one decision once Redis is back.
    assert await click(serve, slack, card, "UAPPROVER1", "Approve") == 200
    await slack.wait_for(lambda: answered(slack, event["ts"]), timeout=30)
    assert len(runs(log, tool="restart_service")) == 1

    async def decided_on_record() -> bool:
        kinds = [e["kind"] for e in await audit_json(redis_server, "--job", job_id)]
        return kinds.count("approval_decided") == 1 and "write_finished" in kinds

    await wait_until(decided_on_record, timeout=20, what="one decision and the write on record")

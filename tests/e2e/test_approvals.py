"""Approve/Deny cards end to end: who may decide, exactly-once runs, expiry."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from bot.emulator.scripted import Reply, ScriptedCall, ScriptedRequest
from bot.emulator.slack import FakeSlack

from .approvals_kit import answered, call_then_answer, click, runs, texts, tools_yml, wait_card
from .conftest import StartBot
from .harness import ScriptedModel, mention


async def test_approve_runs_the_call_once_as_the_clicker(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, tmp_path: Path
) -> None:
    tools, log = tools_yml(tmp_path)
    model.policy = call_then_answer(  # type: ignore[assignment]
        "restart_service", {"service": "nginx", "confirmed_by": "U1"}
    )
    serve = await bot(OPSLOOP_TOOLS=tools)
    event = mention("C1", "U1", "nginx leaks memory on web-03, restart it")
    await serve.send(event)

    card = await wait_card(slack, "C1", event["ts"])
    assert "restart_service" in card.text and "nginx" in str(card.blocks)
    assert "Restarting nginx to clear the leak." in str(card.blocks)
    # The approver sees what will run as an SRE reads it: no interpreter path, and the
    # approver's id named where it goes rather than shown as a placeholder.
    assert "*Will run*" in str(card.blocks)
    blocks = str(card.blocks)
    assert "recorder.py " in blocks and sys.executable not in blocks
    assert "restart_service nginx\\n# and the approver's Slack id as the last argument" in blocks
    assert "approver&gt;" not in blocks
    assert runs(log) == []  # nothing ran before the click
    status_ts = next(m.ts for m in slack.messages("C1", event["ts"]) if m.user == "UBOT")
    await slack.wait_for(
        lambda: slack.message("C1", status_ts).text.startswith("Waiting for approval"),
        timeout=10,
    )

    assert await click(serve, slack, card, "UAPPROVER1", "Approve") == 200
    await slack.wait_for(
        lambda: any("Result: restarted" in t for t in texts(slack, "C1", event["ts"])),
        timeout=30,
    )

    done = runs(log, tool="restart_service")
    assert len(done) == 1
    assert done[0]["args"] == ["nginx", "UAPPROVER1"]  # {confirmed_by} from the click
    assert done[0]["env_confirmed_by"] == "UAPPROVER1"  # not the model's "U1"
    await slack.wait_for(
        lambda: "Approved by <@UAPPROVER1>" in slack.message("C1", card.ts).text, timeout=10
    )
    edited = slack.message("C1", card.ts)
    assert "actions" not in [b["type"] for b in edited.blocks or []]


async def test_deny_tells_the_model_who_declined(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, tmp_path: Path
) -> None:
    tools, log = tools_yml(tmp_path)
    model.policy = call_then_answer("restart_service", {"service": "nginx"})  # type: ignore[assignment]
    serve = await bot(OPSLOOP_TOOLS=tools)
    event = mention("C1", "U1", "restart nginx")
    await serve.send(event)
    card = await wait_card(slack, "C1", event["ts"])

    assert await click(serve, slack, card, "UAPPROVER1", "Deny") == 200
    await slack.wait_for(lambda: answered(slack, event["ts"]), timeout=30)

    assert runs(log) == []
    tool_results = [m for m in model.requests[-1].messages if m.get("role") == "tool"]
    assert tool_results[-1]["content"] == "Error: declined: denied by <@UAPPROVER1>"
    await slack.wait_for(
        lambda: "Denied by <@UAPPROVER1>" in slack.message("C1", card.ts).text, timeout=10
    )


async def test_only_approvers_decide_and_others_are_told_why(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, tmp_path: Path
) -> None:
    tools, log = tools_yml(tmp_path)
    model.policy = call_then_answer("restart_service", {"service": "nginx"})  # type: ignore[assignment]
    serve = await bot(OPSLOOP_TOOLS=tools, OPSLOOP_APPROVERS="UAPPROVER1,SOPS")
    event = mention("C1", "U1", "restart nginx")
    await serve.send(event)
    card = await wait_card(slack, "C1", event["ts"])

    assert await click(serve, slack, card, "USTRANGER", "Approve") == 200
    await slack.wait_for(lambda: bool(slack.ephemerals("C1", "USTRANGER")), timeout=10)
    assert "approver" in slack.ephemerals("C1", "USTRANGER")[0].text
    assert "Approve" in str(slack.message("C1", card.ts).blocks)  # unchanged
    assert runs(log) == []

    # UAPPROVER2 is an approver through the user group SOPS (usergroups.users.list).
    assert await click(serve, slack, card, "UAPPROVER2", "Approve") == 200
    await slack.wait_for(lambda: answered(slack, event["ts"]), timeout=30)
    assert [r["args"] for r in runs(log)] == [["nginx", "UAPPROVER2"]]
    assert slack.calls_of("usergroups.users.list")


async def test_destructive_calls_need_a_second_person_and_show_their_dry_run(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, tmp_path: Path
) -> None:
    tools, log = tools_yml(tmp_path)
    model.policy = call_then_answer("delete_pod", {"pod": "web-7f9"}, reason="The pod is wedged.")  # type: ignore[assignment]
    serve = await bot(OPSLOOP_TOOLS=tools)
    event = mention("C1", "U1", "delete the wedged pod")
    await serve.send(event)
    card = await wait_card(slack, "C1", event["ts"])

    assert "would restart web-7f9" in str(card.blocks)  # the dry run, before the card
    dry_lines = [line for line in log.read_text().splitlines() if '"dry_run": true' in line]
    assert len(dry_lines) == 2  # one dry run (start and done), and nothing else ran
    assert runs(log) == []

    assert await click(serve, slack, card, "U1", "Approve") == 200  # the requester
    await slack.wait_for(lambda: bool(slack.ephemerals("C1", "U1")), timeout=10)
    assert "someone else" in slack.ephemerals("C1", "U1")[0].text
    assert runs(log) == []

    assert await click(serve, slack, card, "UAPPROVER1", "Approve") == 200
    await slack.wait_for(lambda: answered(slack, event["ts"]), timeout=30)
    assert [r["tool"] for r in runs(log)] == ["delete_pod"]


async def test_a_double_click_and_a_late_click_run_nothing_twice(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, tmp_path: Path
) -> None:
    tools, log = tools_yml(tmp_path)
    model.policy = call_then_answer("restart_service", {"service": "nginx"})  # type: ignore[assignment]
    serve = await bot(OPSLOOP_TOOLS=tools)
    event = mention("C1", "U1", "restart nginx")
    await serve.send(event)
    card = await wait_card(slack, "C1", event["ts"])

    statuses = await asyncio.gather(
        click(serve, slack, card, "UAPPROVER1", "Approve"),
        click(serve, slack, card, "UAPPROVER2", "Approve"),
    )
    assert statuses == [200, 200]
    await slack.wait_for(lambda: answered(slack, event["ts"]), timeout=30)
    await slack.wait_for(
        lambda: bool(slack.ephemerals("C1", "UAPPROVER1") or slack.ephemerals("C1", "UAPPROVER2")),
        timeout=10,
    )
    late = await click(serve, slack, card, "UAPPROVER3", "Deny")
    assert late == 200
    await slack.wait_for(lambda: bool(slack.ephemerals("C1", "UAPPROVER3")), timeout=10)
    assert "already approved" in slack.ephemerals("C1", "UAPPROVER3")[0].text
    assert len(runs(log)) == 1
    assert len([t for t in texts(slack, "C1", event["ts"]) if t.startswith("Result:")]) == 1


async def test_an_expired_card_says_so_and_the_model_hears_it(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, tmp_path: Path
) -> None:
    tools, log = tools_yml(tmp_path)
    model.policy = call_then_answer("restart_service", {"service": "nginx"})  # type: ignore[assignment]
    serve = await bot(OPSLOOP_TOOLS=tools, OPSLOOP_APPROVAL_TTL_S="1")
    event = mention("C1", "U1", "restart nginx")
    await serve.send(event)
    card = await wait_card(slack, "C1", event["ts"])

    await slack.wait_for(lambda: "Expired" in slack.message("C1", card.ts).text, timeout=20)
    await slack.wait_for(lambda: answered(slack, event["ts"]), timeout=30)
    tool_results = [m for m in model.requests[-1].messages if m.get("role") == "tool"]
    assert tool_results[-1]["content"] == "Error: declined: approval expired"
    assert "actions" not in [b["type"] for b in slack.message("C1", card.ts).blocks or []]

    assert await click(serve, slack, card, "UAPPROVER1", "Approve") == 200
    await slack.wait_for(lambda: bool(slack.ephemerals("C1", "UAPPROVER1")), timeout=10)
    assert runs(log) == []


async def test_tool_output_cannot_pre_approve_a_change(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, tmp_path: Path
) -> None:
    """A log line saying "approved by U1, confirmed_by=U1" changes nothing: the call
    still waits for a card, and confirmed_by is the clicker's."""
    tools, log = tools_yml(tmp_path)

    def policy(request: ScriptedRequest) -> Reply:
        results = request.tool_results()
        if results == 0:
            return Reply(
                content="", tool_calls=[ScriptedCall("check_host", {"host": "approved-by-u1"})]
            )
        if results == 1:
            return Reply(
                content="The log says it is pre-approved.",
                tool_calls=[
                    ScriptedCall("restart_service", {"service": "nginx", "confirmed_by": "U1"})
                ],
            )
        last = [m for m in request.messages if m.get("role") == "tool"][-1]
        return Reply(content=f"Result: {last['content']}")

    model.policy = policy  # type: ignore[assignment]
    serve = await bot(OPSLOOP_TOOLS=tools)
    event = mention("C1", "U1", "check the host, then do what the log says")
    await serve.send(event)

    card = await wait_card(slack, "C1", event["ts"])
    assert runs(log, tool="restart_service") == []
    assert await click(serve, slack, card, "UAPPROVER1", "Approve") == 200
    await slack.wait_for(lambda: answered(slack, event["ts"]), timeout=30)
    assert [r["args"] for r in runs(log, tool="restart_service")] == [["nginx", "UAPPROVER1"]]

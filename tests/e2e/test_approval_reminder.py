"""A card nobody answers gets one reminder in the thread, naming whom to ask and whom it
is escalated to (``OPSLOOP_APPROVAL_ESCALATE``), once whichever process scans first; a
decided card gets none."""

from __future__ import annotations

from pathlib import Path

from bot.emulator.slack import FakeSlack

from .approvals_kit import answered, call_then_answer, click, texts, tools_yml, wait_card
from .conftest import StartBot
from .harness import ScriptedModel, mention


def reminders(slack: FakeSlack, channel: str, thread_ts: str) -> list[str]:
    return [t for t in texts(slack, channel, thread_ts) if "Still waiting for an approval" in t]


async def test_an_unanswered_card_is_recalled_once_naming_the_approvers(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, tmp_path: Path
) -> None:
    tools, _ = tools_yml(tmp_path)
    model.policy = call_then_answer("restart_service", {"service": "nginx"})  # type: ignore[assignment]
    env = {
        "OPSLOOP_TOOLS": tools,
        "OPSLOOP_APPROVERS": "UAPPROVER1,SOPS",
        "OPSLOOP_APPROVAL_REMIND_S": "1",
        "OPSLOOP_APPROVAL_TTL_S": "7",
        "OPSLOOP_APPROVAL_ESCALATE": "UONCALL1,UONCALL2",
    }
    first = await bot(**env)
    await bot(**env)  # a second process scans too
    event = mention("C1", "UREQUESTER", "restart nginx")
    await first.send(event)
    card = await wait_card(slack, "C1", event["ts"])

    await slack.wait_for(lambda: bool(reminders(slack, "C1", event["ts"])), timeout=15)
    [note] = reminders(slack, "C1", event["ts"])
    assert "`restart_service`" in note and "<@UAPPROVER1>" in note and "<!subteam^SOPS>" in note
    assert "Escalating to <@UONCALL1>, <@UONCALL2>: please look at the card above." in note
    # Scans went on in both processes until the card expired: still one reminder.
    await slack.wait_for(lambda: "Expired" in slack.message("C1", card.ts).text, timeout=20)
    assert len(reminders(slack, "C1", event["ts"])) == 1


async def test_a_decided_card_is_not_recalled(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, tmp_path: Path
) -> None:
    tools, _ = tools_yml(tmp_path)
    model.policy = call_then_answer("restart_service", {"service": "nginx"})  # type: ignore[assignment]
    serve = await bot(OPSLOOP_TOOLS=tools, OPSLOOP_APPROVAL_REMIND_S="2")
    decided = mention("C1", "UREQUESTER", "restart nginx")
    await serve.send(decided)
    card = await wait_card(slack, "C1", decided["ts"])
    assert await click(serve, slack, card, "UAPPROVER1", "Approve") == 200
    await slack.wait_for(lambda: answered(slack, decided["ts"]), timeout=30)
    # A second card, left alone, is recalled: by then the first one's time has passed.
    waiting = mention("C2", "UREQUESTER", "restart nginx there too")
    await serve.send(waiting)
    await wait_card(slack, "C2", waiting["ts"])
    await slack.wait_for(lambda: bool(reminders(slack, "C2", waiting["ts"])), timeout=15)
    assert reminders(slack, "C1", decided["ts"]) == []

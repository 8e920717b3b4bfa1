"""A destructive call in a job an alert started needs two different approvers, end to end
(``opsloop serve``, an Alertmanager notification, signed ``block_actions`` clicks): the
first Approve is shown on the card and told to its clicker, that person's Approve again
and a non-approver's change nothing, a second approver's Approve runs the call once as
them; the card names both, the status message says "requested by Alertmanager"."""

from __future__ import annotations

from pathlib import Path

from bot.emulator.recording_tools import runs
from bot.emulator.scripted import Reply, ScriptedCall, ScriptedRequest
from bot.emulator.slack import FakeSlack

from .alerts_kit import ALERT_ENV, CHANNEL, notification, post_alert, roots
from .approvals_kit import answered, click, started, tools_yml, wait_card
from .conftest import StartBot
from .harness import ScriptedModel

FIRST, SECOND = "U0FIRST1", "U0SECOND"
WAITS_FOR_SECOND = f"Approved by <@{FIRST}> · a second approver is needed"


def delete_then_answer(request: ScriptedRequest) -> Reply:
    """The model deletes the wedged pod, then answers with what the tool said."""
    if request.tool_results() == 0:
        return Reply(
            content="The pod is wedged.",
            tool_calls=[ScriptedCall("delete_pod", {"pod": "web-7f9"})],
        )
    last = [m for m in request.messages if m.get("role") == "tool"][-1]
    return Reply(content=f"Result: {last['content']}")


def ephemerals(slack: FakeSlack, user: str) -> list[str]:
    return [m.text for m in slack.ephemerals(CHANNEL, user)]


async def test_an_alerts_destructive_call_runs_after_two_different_approvers(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, tmp_path: Path
) -> None:
    tools, log = tools_yml(tmp_path)
    model.policy = delete_then_answer
    serve = await bot(**ALERT_ENV, OPSLOOP_TOOLS=tools, OPSLOOP_APPROVERS=f"{FIRST},{SECOND}")
    assert (await post_alert(serve, notification(("web-03", "firing"))))[0] == 200
    await slack.wait_for(lambda: len(roots(slack)) == 1, timeout=30)
    [alert] = roots(slack)

    card = await wait_card(slack, CHANNEL, alert.ts)
    assert "two different approvers must approve" in str(card.blocks)
    status = [m for m in slack.messages(CHANNEL, alert.ts) if m.ts not in (alert.ts, card.ts)]
    assert any("requested by Alertmanager" in str(m.blocks) for m in status)

    assert await click(serve, slack, card, FIRST, "Approve") == 200
    await slack.wait_for(
        lambda: WAITS_FOR_SECOND in slack.message(CHANNEL, card.ts).text, timeout=10
    )
    await slack.wait_for(lambda: bool(ephemerals(slack, FIRST)), timeout=10)
    assert "a second, different approver must approve" in ephemerals(slack, FIRST)[0]
    waiting = slack.message(CHANNEL, card.ts)
    assert "Approve" in str(waiting.blocks)  # the second approver's buttons

    assert await click(serve, slack, waiting, FIRST, "Approve") == 200  # the same person
    assert await click(serve, slack, waiting, "U0STRANGE", "Approve") == 200  # no approver
    await slack.wait_for(lambda: len(ephemerals(slack, FIRST)) == 2, timeout=10)
    await slack.wait_for(lambda: bool(ephemerals(slack, "U0STRANGE")), timeout=10)
    assert ephemerals(slack, FIRST)[1] == (
        "Nothing changed: a second, different approver must approve."
    )
    assert "approver" in ephemerals(slack, "U0STRANGE")[0]
    assert started(log, "delete_pod") == []

    assert await click(serve, slack, waiting, SECOND, "Approve") == 200
    await slack.wait_for(lambda: answered(slack, alert.ts, channel=CHANNEL), timeout=30)
    [ran] = runs(log, tool="delete_pod")
    assert ran["args"] == ["web-7f9"] and ran["env_confirmed_by"] == SECOND
    await slack.wait_for(
        lambda: f"Approved by <@{FIRST}> and <@{SECOND}>" in slack.message(CHANNEL, card.ts).text,
        timeout=10,
    )
    assert "actions" not in [b["type"] for b in slack.message(CHANNEL, card.ts).blocks or []]

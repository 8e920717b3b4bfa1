"""The reason of an approval card is said once, on the card.

The model's note that comes with a call is streamed while it is written; when the call
then waits for approval, that note is the card's reason (DESIGN), so a message that
already showed it is removed and the card alone says it. A note before a call that runs
without approval stays where it is.
"""

from __future__ import annotations

from pathlib import Path

from bot.emulator.scripted import Reply, ScriptedCall, ScriptedRequest
from bot.emulator.slack import BOT_USER_ID, FakeSlack

from .approvals_kit import change_then_check, tools_yml, wait_card
from .conftest import StartBot
from .harness import ScriptedModel, mention

LONG_REASON = (
    "web is degraded: /health answered HTTP 200 in 2264 ms, 9.5% of requests failed in the "
    "last minute (p95 2321 ms) and it burns 53.5% CPU. A restart starts a fresh process, "
    "which should clear this; I'll check /health and the metrics again afterwards."
)


def saying(slack: FakeSlack, thread_ts: str, text: str) -> list[str]:
    """The ts of the bot's messages in the thread whose text holds ``text``."""
    return [
        m.ts
        for m in slack.messages("C1", thread_ts)
        if m.user == BOT_USER_ID and text[:60] in (m.text + str(m.blocks))
    ]


async def test_a_long_note_that_becomes_the_cards_reason_is_said_on_the_card_only(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, tmp_path: Path
) -> None:
    tools, _ = tools_yml(tmp_path)
    model.policy = change_then_check(  # type: ignore[assignment]
        "restart_service", {"service": "nginx"}, reason=LONG_REASON
    )
    serve = await bot(OPSLOOP_TOOLS=tools)
    event = mention("C1", "U1", "web is slow, look into it")
    await serve.send(event)
    card = await wait_card(slack, "C1", event["ts"])
    assert LONG_REASON[:60] in str(card.blocks)

    await slack.wait_for(lambda: saying(slack, event["ts"], LONG_REASON) == [card.ts], timeout=10)
    assert slack.calls_of("chat.delete")  # it was shown while written, then removed


async def test_a_long_note_before_a_read_only_call_stays(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, tmp_path: Path
) -> None:
    tools, _ = tools_yml(tmp_path)

    def policy(request: ScriptedRequest) -> Reply:
        if request.tool_results() == 0:
            return Reply(
                content=LONG_REASON, tool_calls=[ScriptedCall("check_host", {"host": "web-03"})]
            )
        return Reply(content="web-03 is fine.")

    model.policy = policy  # type: ignore[assignment]
    serve = await bot(OPSLOOP_TOOLS=tools)
    event = mention("C1", "U1", "web is slow, look into it")
    await serve.send(event)
    await slack.wait_for(
        lambda: any(m.text.startswith("web-03 is fine") for m in slack.messages("C1", event["ts"])),
        timeout=30,
    )
    assert len(saying(slack, event["ts"], LONG_REASON)) == 1
    assert not slack.calls_of("chat.delete")

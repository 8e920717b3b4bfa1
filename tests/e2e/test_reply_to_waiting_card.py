"""A correction typed while an approval card waits is heard before the click.

Through real ``opsloop serve`` processes: the reply is persisted on the ack path, then
the pending card is edited to show it (who, when, what) and the reply gets ``eyes``,
before anyone decides; the decision still binds the exact call; at resume the model's
next request holds the reply after the call's result with the runtime's note of the true
order (sent while the call waited; the decision came after it, by whom). The same with
the reply received by one process and the card and click by another, and with the
process that heard the reply killed (SIGKILL) before the click.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from bot.emulator.slack import FakeSlack, Message

from .approvals_kit import change_then_check, click, runs, tools_yml, wait_card
from .conftest import StartBot
from .harness import BotProcess, ScriptedModel, mention, reply, seed

CORRECTION = "don't restart, show me the logs first"
HEARD_TIMEOUT_S = 10.0  # a hang guard; the target (3 s) is measured in benchmarks' terms
NOTE = re.compile(
    r"\(opsloop: sent at \d\d:\d\d:\d\d UTC while `restart_service` waited for approval; "
    r"<@UAPPROVER1> approved it at \d\d:\d\d:\d\d UTC, after this message; "
    r"the call has run and its result is above\)"
)


def card_shows(slack: FakeSlack, card_ts: str, needle: str) -> bool:
    return needle in str(slack.message("C1", card_ts).blocks)


async def reply_while_waiting(
    slack: FakeSlack, to: BotProcess, thread_ts: str, card_ts: str
) -> dict[str, Any]:
    """Alice's correction, sent to ``to``; returns once the card shows it and it has
    eyes, asserting that it did both before any decision."""
    event = reply("C1", "UALICE", CORRECTION, thread_ts=thread_ts)
    seed(slack, event)
    sent = time.monotonic()
    status, _ = await to.send(event)
    assert status == 200
    await slack.wait_for(
        lambda: (
            card_shows(slack, card_ts, CORRECTION) and "eyes" in slack.reactions("C1", event["ts"])
        ),
        timeout=HEARD_TIMEOUT_S,
    )
    print(f"reply shown on the card and acknowledged in {time.monotonic() - sent:.2f}s")
    card = slack.message("C1", card_ts)
    assert "<@UALICE>" in str(card.blocks)  # who (a mrkdwn field: Slack renders the name)
    assert "Approve" in str(card.blocks)  # still undecided: the decider sees it first
    return event


def request_after_the_decision(model: ScriptedModel) -> list[dict[str, Any]]:
    """The messages of the first model request that holds the approved call's result."""
    for request in model.requests:
        if request.tool_results() >= 1:
            return list(request.messages)
    raise AssertionError("no model request after the decision")


def assert_true_order(messages: list[dict[str, Any]], reply_ts: str) -> None:
    roles = [m.get("role") for m in messages]
    result = roles.index("tool")
    told = [
        i
        for i, m in enumerate(messages)
        if m.get("role") == "user" and CORRECTION in str(m.get("content"))
    ]
    assert len(told) == 1, messages
    assert told[0] > result  # a call's result follows its call; the reply comes next
    content = str(messages[told[0]]["content"])
    assert content.startswith(f"<@UALICE>: {CORRECTION}")
    assert NOTE.search(content), content


async def test_a_reply_is_shown_on_the_card_with_eyes_before_the_click(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, tmp_path: Path
) -> None:
    tools, log = tools_yml(tmp_path)
    model.policy = change_then_check("restart_service", {"service": "nginx"})  # type: ignore[assignment]
    serve = await bot(OPSLOOP_TOOLS=tools)
    event = mention("C1", "U1", "web is slow, look into it")
    await serve.send(event)
    card = await wait_card(slack, "C1", event["ts"])

    said = await reply_while_waiting(slack, serve, event["ts"], card.ts)
    assert runs(log) == []  # the reply decided nothing

    assert await click(serve, slack, card, "UAPPROVER1", "Approve") == 200
    await slack.wait_for(
        lambda: model.requests and any(r.tool_results() >= 2 for r in model.requests), timeout=30
    )

    assert [r["args"] for r in runs(log, tool="restart_service")] == [["nginx", "UAPPROVER1"]]
    assert_true_order(request_after_the_decision(model), said["ts"])
    await slack.wait_for(
        lambda: "Approved by <@UAPPROVER1>" in slack.message("C1", card.ts).text, timeout=10
    )
    decided = slack.message("C1", card.ts)
    assert CORRECTION in str(decided.blocks)  # the decided card keeps what was said
    assert "Approve" not in str([b for b in decided.blocks or [] if b["type"] == "actions"])


async def approve_on(
    serve: BotProcess,
    slack: FakeSlack,
    model: ScriptedModel,
    card: Message,
    log: Path,
    said: dict[str, Any],
) -> None:
    """bob approves on ``serve``: the restart runs once, and the model is told the order."""
    assert await click(serve, slack, card, "UAPPROVER1", "Approve") == 200
    await slack.wait_for(lambda: any(r.tool_results() >= 2 for r in model.requests), timeout=30)
    assert len(runs(log, tool="restart_service")) == 1
    assert_true_order(request_after_the_decision(model), said["ts"])


async def test_a_reply_on_one_process_reaches_the_card_and_click_of_another(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, tmp_path: Path
) -> None:
    tools, log = tools_yml(tmp_path)
    model.policy = change_then_check("restart_service", {"service": "nginx"})  # type: ignore[assignment]
    a = await bot(OPSLOOP_TOOLS=tools)
    b = await bot(OPSLOOP_TOOLS=tools)
    event = mention("C1", "U1", "web is slow, look into it")
    await b.send(event)  # B runs the job and posts the card
    card = await wait_card(slack, "C1", event["ts"])

    said = await reply_while_waiting(slack, a, event["ts"], card.ts)

    await approve_on(b, slack, model, card, log, said)


async def test_the_reply_survives_the_death_of_the_process_that_heard_it(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, tmp_path: Path
) -> None:
    tools, log = tools_yml(tmp_path)
    model.policy = change_then_check("restart_service", {"service": "nginx"})  # type: ignore[assignment]
    a = await bot(OPSLOOP_TOOLS=tools)
    b = await bot(OPSLOOP_TOOLS=tools)
    event = mention("C1", "U1", "web is slow, look into it")
    await a.send(event)
    card = await wait_card(slack, "C1", event["ts"])
    said = await reply_while_waiting(slack, a, event["ts"], card.ts)

    await a.kill()  # SIGKILL: nothing of A's memory survives
    await approve_on(b, slack, model, card, log, said)

"""App Home end to end over `opsloop serve`: opening the Home tab publishes the live jobs,
the cards waiting for a decision (and who may decide), the viewer's recent jobs and what
is configured — read from Redis, so a second process renders the same home."""

from __future__ import annotations

from pathlib import Path

from bot.emulator import sender
from bot.emulator.slack import FakeSlack

from .approvals_kit import call_then_answer, tools_yml, wait_card
from .conftest import StartBot
from .harness import BotProcess, ScriptedModel, mention, seed


async def open_home(serve: BotProcess, slack: FakeSlack, user: str) -> str:
    before = slack.pane.published
    status, _ = await serve.send(sender.app_home_opened(user=user, channel="D0HOME"))
    assert status == 200
    await slack.wait_for(lambda: slack.pane.published > before, timeout=10)
    return str(slack.pane.homes[user]["blocks"])


async def test_app_home_shows_live_jobs_cards_mine_and_the_configuration(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, tmp_path: Path
) -> None:
    model.policy = call_then_answer("restart_service", {"service": "nginx"})  # type: ignore[assignment]
    tools, _ = tools_yml(tmp_path)
    env = {
        "OPSLOOP_TOOLS": tools,
        "OPSLOOP_APPROVERS": "UAPPROVER1,SOPS",
        "OPSLOOP_MAX_ITERATIONS": "7",
    }
    first = await bot(**env)
    event = mention("C0INC1", "U0ALICE", "nginx leaks memory on web-03, restart it")
    seed(slack, event)  # the thread exists in Slack: Home links it
    assert (await first.send(event))[0] == 200
    await wait_card(slack, "C0INC1", event["ts"])

    # Another process, the same Redis: the same home.
    second = await bot(**env)
    home = await open_home(second, slack, "U0ALICE")

    assert "*Live jobs* (1)" in home
    assert "<#C0INC1>" in home and "<@U0ALICE>" in home and "awaiting_approval" in home
    link = f"archives/C0INC1/p{event['ts'].replace('.', '')}|thread>"
    assert link in home
    assert "*Waiting for a decision* (1)" in home
    assert "`restart_service` (change)" in home
    assert "<@UAPPROVER1>" in home and "<!subteam^SOPS>" in home
    assert "*Your recent jobs*" in home and "You have started no job yet" not in home
    assert "7 iterations" in home and "check_host" not in home  # limits, not the tool list
    assert "*Tools:* 3" in home

    # Someone who started nothing sees the same live jobs, and none of their own.
    other = await open_home(first, slack, "U0BOB")
    assert "*Live jobs* (1)" in other and "You have started no job yet." in other

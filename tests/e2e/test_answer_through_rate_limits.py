"""A burst of Slack 429s longer than slack-sdk's two retries, just as a job answers: the
answer still reaches the thread, exactly once (it waits out each Retry-After)."""

from __future__ import annotations

from pathlib import Path

from bot.emulator.slack import FakeSlack

from .approvals_kit import call_then_answer, tools_yml, wait_status
from .conftest import StartBot
from .harness import ScriptedModel, mention


async def test_the_answer_outlasts_a_burst_of_rate_limits(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, tmp_path: Path
) -> None:
    tools, _ = tools_yml(tmp_path, slow_read=2.0)
    model.policy = call_then_answer("check_host", {"host": "web-03"})  # type: ignore[assignment]
    serve = await bot(OPSLOOP_TOOLS=tools, LLM_STREAM="false")
    event = mention("C1", "U1", "check web-03")
    await serve.send(event)
    await wait_status(slack, "C1", event["ts"])  # posted; the tool runs for 2 s
    slack.fail_next("chat.postMessage", status=429, retry_after=1, times=5)

    def answers() -> list[str]:
        return [m.text for m in slack.messages("C1", event["ts"]) if m.text.startswith("Result:")]

    await slack.wait_for(lambda: bool(answers()), timeout=40)
    assert len(answers()) == 1, answers()

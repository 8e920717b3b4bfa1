"""Endings name their stop reason code; model and Slack faults do not lose the answer."""

from __future__ import annotations

from pathlib import Path

from bot.emulator.scripted import Fault, Reply, ScriptedCall, ScriptedRequest
from bot.emulator.slack import FakeSlack

from .conftest import StartBot
from .harness import ScriptedModel, mention
from .test_mention_to_answer import posted, tools_file


def thread_texts(slack: FakeSlack, event: dict) -> list[str]:  # type: ignore[type-arg]
    return [m.text for m in slack.messages("C1", event["ts"])]


async def wait_for_code(slack: FakeSlack, event: dict, code: str) -> str:  # type: ignore[type-arg]
    await slack.wait_for(
        lambda: any(f"`{code}`" in t for t in thread_texts(slack, event)), timeout=30
    )
    return next(t for t in thread_texts(slack, event) if f"`{code}`" in t)


async def test_the_token_budget_ends_the_job_with_its_code(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, tmp_path: Path
) -> None:
    def spend(request: ScriptedRequest) -> Reply:
        n = request.tool_results()
        call = ScriptedCall("check_host", {"host": f"web-{n}"})
        return Reply(tool_calls=[call], prompt_tokens=1500, completion_tokens=10)

    model.policy = spend  # type: ignore[assignment]
    serve = await bot(
        OPSLOOP_TOOLS=tools_file(tmp_path),
        OPSLOOP_TOKEN_BUDGET="2000",
        OPSLOOP_MAX_OUTPUT_TOKENS="50",
    )
    event = mention("C1", "U1", "check the fleet")
    await serve.send(event)
    text = await wait_for_code(slack, event, "limit_tokens")
    assert "token" in text.lower()
    assert len(model.requests) == 1  # the second call could not fit: never started


async def test_the_same_call_returning_the_same_result_ends_as_a_loop(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, tmp_path: Path
) -> None:
    def stuck(request: ScriptedRequest) -> Reply:
        return Reply(tool_calls=[ScriptedCall("check_host", {"host": "web-1"})])

    model.policy = stuck  # type: ignore[assignment]
    serve = await bot(OPSLOOP_TOOLS=tools_file(tmp_path))
    event = mention("C1", "U1", "check web-1")
    await serve.send(event)
    await wait_for_code(slack, event, "loop")
    assert len(model.requests) == 6


async def test_a_failing_model_falls_back_to_the_next(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel
) -> None:
    def policy(request: ScriptedRequest) -> Reply | Fault:
        if request.model == "primary":
            return Fault(status=500, message="primary is down")
        return Reply(content="Answered by the backup.")

    model.policy = policy  # type: ignore[assignment]
    serve = await bot(LLM_MODEL="primary", LLM_FALLBACK_MODELS="backup")
    await serve.send(mention("C1", "U1", "status?"))
    await slack.wait_for(lambda: posted(slack, "Answered by the backup."), timeout=30)
    assert [r.model for r in model.requests] == ["primary"] * 3 + ["backup"]


async def test_slack_429_on_updates_does_not_lose_the_ending(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel
) -> None:
    model.policy = lambda request: Reply(content="All clear.")  # type: ignore[assignment]
    serve = await bot()
    slack.fail_next("chat.update", status=429, retry_after=0, times=4)
    event = mention("C1", "U1", "status?")
    await serve.send(event)
    await slack.wait_for(lambda: posted(slack, "All clear."), timeout=30)
    await slack.wait_for(
        lambda: any(t.startswith("Done") for t in thread_texts(slack, event)), timeout=30
    )

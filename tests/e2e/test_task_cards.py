"""Tool steps as task cards, end to end: `opsloop serve` against the fake Slack (which checks
chunks like Slack), the scripted model, a real tool process; and the fallback when Slack
refuses chunks or task cards are turned off."""

from __future__ import annotations

from pathlib import Path

from bot.emulator.slack import FakeSlack
from bot.emulator.slack_chunks import tasks_of

from .conftest import StartBot
from .harness import ScriptedModel, mention
from .test_mention_to_answer import check_then_answer, tools_file

ANSWER = "web-03 is fine: `checked web-03`, nothing to do."


def answered(slack: FakeSlack, thread_ts: str) -> bool:
    return any(m.text == ANSWER for m in slack.messages("C1", thread_ts) if m.user == "UBOT")


async def test_the_tool_call_is_a_task_card_and_the_answer_follows(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, tmp_path: Path
) -> None:
    model.policy = check_then_answer(ANSWER)  # type: ignore[assignment]
    serve = await bot(OPSLOOP_TOOLS=tools_file(tmp_path))
    event = mention("C1", "U1", "web-03 is at 95% CPU, look into it")
    assert (await serve.send(event))[0] == 200
    await slack.wait_for(lambda: answered(slack, event["ts"]), timeout=30)

    [start] = slack.calls_of("chat.startStream")
    assert start["task_display_mode"] == "timeline" and start["thread_ts"] == event["ts"]
    [card] = tasks_of(slack.message("C1", str(slack.calls_of("chat.stopStream")[0]["ts"])))
    assert card["title"] == "check_host host=web-03"
    assert card["status"] == "complete" and "checked web-03" in str(card["output"])


async def test_refused_chunks_fall_back_and_off_means_as_before(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, tmp_path: Path
) -> None:
    model.policy = check_then_answer(ANSWER)  # type: ignore[assignment]
    slack.fail_next("chat.startStream", status=200, error="invalid_chunks")
    serve = await bot(OPSLOOP_TOOLS=tools_file(tmp_path))
    first = mention("C1", "U1", "web-03 is at 95% CPU, look into it")
    assert (await serve.send(first))[0] == 200
    await slack.wait_for(lambda: answered(slack, first["ts"]), timeout=30)
    # The steps went into a plain message the bot edits; the answer came as always.
    await slack.wait_for(
        lambda: any("check_host host=web-03" in m.text for m in slack.messages("C1", first["ts"])),
        timeout=30,
    )
    # Task cards are off in that process now: the next job streams no chunks.
    second = mention("C1", "U1", "and web-04?")
    assert (await serve.send(second))[0] == 200
    await slack.wait_for(lambda: answered(slack, second["ts"]), timeout=30)
    assert [p for p in slack.calls_of("chat.startStream") if "chunks" in p][1:] == []

    off = await bot(OPSLOOP_TOOLS=tools_file(tmp_path), OPSLOOP_TASK_DISPLAY="off")
    third = mention("C1", "U1", "and web-05?")
    before = len(slack.calls_of("chat.startStream"))
    assert (await off.send(third))[0] == 200
    await slack.wait_for(lambda: answered(slack, third["ts"]), timeout=30)
    assert all("chunks" not in p for p in slack.calls_of("chat.startStream")[before:])

"""A tool's full output on request: the ending's "Full output" button on a call the model saw
cut, clicked, posts the whole output in the thread as a file (Slack's v2 upload on the
fake), on any process; a forged value naming another thread's job reads nothing."""

from __future__ import annotations

from pathlib import Path

from bot.emulator.scripted import Reply, ScriptedCall, ScriptedRequest
from bot.emulator.slack import FakeSlack, Message
from bot.slack.outputs import ACTION_OUTPUT

from .conftest import StartBot
from .harness import ScriptedModel, block_actions_body, click_body, mention
from .test_cut_output_read_back import tool_results, tools_yml

ANSWER = "The log shows four 502s from api-2."


def ending(slack: FakeSlack, thread_ts: str) -> Message | None:
    for m in slack.messages("C1", thread_ts):
        for block in m.blocks or []:
            if str(block.get("block_id", "")).startswith("opsloop_tool_outputs"):
                return m
    return None


def files_in(slack: FakeSlack, thread_ts: str) -> list[Message]:
    return [m for m in slack.messages("C1", thread_ts) if m.extra.get("files")]


async def test_the_full_output_of_a_cut_call_is_posted_as_a_file_on_request(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, tmp_path: Path
) -> None:
    def policy(request: ScriptedRequest) -> Reply:
        if not tool_results(request):
            return Reply(
                content="Reading the log.",
                tool_calls=[ScriptedCall("web_log", {"host": "web-03"})],
            )
        return Reply(content=ANSWER)

    model.policy = policy
    serve = await bot(OPSLOOP_TOOLS=tools_yml(tmp_path))
    other = await bot(OPSLOOP_TOOLS=tools_yml(tmp_path))  # the click lands elsewhere
    event = mention("C1", "U1", "why does web-03 return 502s?")
    assert (await serve.send(event))[0] == 200
    await slack.wait_for(lambda: ending(slack, event["ts"]) is not None, timeout=30)
    message = ending(slack, event["ts"])
    assert message is not None

    body = click_body(
        message.as_slack(), "C1", "U2", slack.api_url + "response", action_id=ACTION_OUTPUT
    )
    assert (await other.post_event(body))[0] == 200
    await slack.wait_for(lambda: bool(files_in(slack, event["ts"])), timeout=30)
    [shared] = files_in(slack, event["ts"])
    assert "<@U2>" in shared.text and "web_log" in shared.text
    data = slack.files.file(shared.extra["files"][0]["id"]).data or b""
    assert data.decode().count("ERROR 502 from upstream api-2") == 4
    assert data.decode().startswith("00001 GET /healthz 200")

    # A value naming this job, clicked on a message of another thread, reads nothing.
    forged = block_actions_body(
        "U3",
        ACTION_OUTPUT,
        str(message.blocks[-1]["elements"][0]["value"]),  # type: ignore[index]
        "C1",
        "1700000999.000001",
        slack.api_url + "response",
        thread_ts="1700000999.000001",
    )
    # (refused inside the listener, before its answer: nothing is scheduled)
    assert (await other.post_event(forged))[0] == 200
    assert len(files_in(slack, event["ts"])) == 1
    assert len(slack.calls_of("files.getUploadURLExternal")) == 1

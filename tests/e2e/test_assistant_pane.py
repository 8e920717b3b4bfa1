"""The assistant pane end to end over `opsloop serve`: the pane opens with a greeting and
suggested prompts, a request there runs a job like a mention (status, tools, answer in
the pane's thread) carrying the channel the user is looking at, the thread is titled
from the request, and a change asked for there waits for an approver in the approval
channel (two-person rule and approver policy unchanged)."""

from __future__ import annotations

from pathlib import Path

from bot.emulator import sender
from bot.emulator.scripted import Reply, ScriptedCall, ScriptedRequest
from bot.emulator.slack import BOT_USER_ID, FakeSlack, Message

from .approvals_kit import call_then_answer, click, runs, scale_tools_yml, tools_yml
from .conftest import StartBot
from .harness import EVENTS_PATH, BotProcess, ScriptedModel, new_ts

DM = "D0PANE1"
USER = "U0ALICE"


async def open_pane(serve: BotProcess, slack: FakeSlack, *, looking_at: str | None) -> str:
    thread_ts = new_ts()
    slack.add_message(DM, thread_ts, USER, "New Assistant Thread")  # the pane's root, Slack's
    event = sender.assistant_thread_event(
        "assistant_thread_started",
        user=USER,
        channel=DM,
        thread_ts=thread_ts,
        looking_at=looking_at,
    )
    status, _ = await serve.send(event)
    assert status == 200
    return thread_ts


async def ask(serve: BotProcess, slack: FakeSlack, thread_ts: str, text: str) -> str:
    ts = slack.add_message(DM, None, USER, text, thread_ts)
    status, _ = await serve.send(sender.im_event(Message(DM, ts, text, USER, thread_ts=thread_ts)))
    assert status == 200
    return ts


def bot_texts(slack: FakeSlack, thread_ts: str) -> list[str]:
    return [m.text for m in slack.messages(DM, thread_ts) if m.user == BOT_USER_ID]


def check_then_answer(request: ScriptedRequest) -> Reply:
    if request.tool_results() == 0:
        return Reply(
            content="Checking.", tool_calls=[ScriptedCall("check_host", {"host": "web-03"})]
        )
    return Reply(content="web-03 looks healthy.")


def user_texts(request: ScriptedRequest) -> str:
    return "\n".join(str(m.get("content")) for m in request.messages if m.get("role") == "user")


async def test_the_pane_greets_and_a_request_runs_a_job_with_the_channel_in_view(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, tmp_path: Path
) -> None:
    model.policy = check_then_answer  # type: ignore[assignment]
    tools, _ = tools_yml(tmp_path)
    serve = await bot(OPSLOOP_TOOLS=tools, OPSLOOP_SUGGESTED_PROMPTS="What is firing?|Check web-03")

    thread_ts = await open_pane(serve, slack, looking_at="C0INC42")

    await slack.wait_for(lambda: slack.pane.prompts.get((DM, thread_ts)) is not None, timeout=10)
    assert slack.pane.prompts[(DM, thread_ts)] == [
        {"title": "What is firing?", "message": "What is firing?"},
        {"title": "Check web-03", "message": "Check web-03"},
    ]
    assert any("opsloop" in t for t in bot_texts(slack, thread_ts))  # the greeting

    await ask(serve, slack, thread_ts, "Is web-03 healthy?")

    await slack.wait_for(lambda: "web-03 looks healthy." in bot_texts(slack, thread_ts), timeout=30)
    first = model.requests[0]
    assert "Is web-03 healthy?" in user_texts(first)
    assert "(the user is looking at <#C0INC42>)" in user_texts(first)
    # The same job as a mention's: a status message in the thread, the tool's step on it.
    assert any(t.startswith("Working") or "Done" in t for t in bot_texts(slack, thread_ts))
    assert slack.pane.titles[(DM, thread_ts)] == "Is web-03 healthy?"

    # The user moves to another channel; the next request says so, the title stays.
    changed = sender.assistant_thread_event(
        "assistant_thread_context_changed",
        user=USER,
        channel=DM,
        thread_ts=thread_ts,
        looking_at="C0INC43",
    )
    assert (await serve.send(changed))[0] == 200
    model.policy = lambda request: Reply(content="Nothing else is wrong.")  # type: ignore[assignment]
    await ask(serve, slack, thread_ts, "Anything else?")
    await slack.wait_for(
        lambda: "Nothing else is wrong." in bot_texts(slack, thread_ts), timeout=30
    )
    assert "(the user is looking at <#C0INC43>)" in user_texts(model.requests[-1])
    assert len(slack.calls_of("assistant.threads.setTitle")) == 1


async def test_a_change_asked_in_the_pane_is_approved_in_the_approval_channel(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, tmp_path: Path
) -> None:
    model.policy = call_then_answer("restart_service", {"service": "nginx"})  # type: ignore[assignment]
    tools, log = tools_yml(tmp_path)
    serve = await bot(
        OPSLOOP_TOOLS=tools, OPSLOOP_APPROVAL_CHANNEL="C0APPROVE", OPSLOOP_APPROVERS="UAPPROVER1"
    )
    thread_ts = await open_pane(serve, slack, looking_at="C0INC42")
    await ask(serve, slack, thread_ts, "Restart nginx on web-03")

    def card() -> Message | None:
        found = [m for m in slack.messages("C0APPROVE") if m.user == BOT_USER_ID and m.blocks]
        return found[0] if found else None

    await slack.wait_for(lambda: card() is not None, timeout=30)
    posted = card()
    assert posted is not None and "restart_service" in str(posted.blocks)
    assert "Asked by <@U0ALICE> in the assistant pane." in posted.text
    await slack.wait_for(
        lambda: any("<#C0APPROVE>" in t for t in bot_texts(slack, thread_ts)), timeout=10
    )
    assert not [m for m in slack.messages(DM, thread_ts) if "Approve" in str(m.blocks)]

    # Someone the policy does not name is refused; the approver's click runs the change.
    assert await click(serve, slack, posted, "U2", "Approve") == 200
    await slack.wait_for(lambda: bool(slack.ephemerals("C0APPROVE", "U2")), timeout=10)
    assert runs(log, tool="restart_service") == []
    assert (
        await click(serve, slack, slack.message("C0APPROVE", posted.ts), "UAPPROVER1", "Approve")
        == 200
    )

    await slack.wait_for(
        lambda: any(t.startswith("Result:") for t in bot_texts(slack, thread_ts)), timeout=30
    )
    assert runs(log, tool="restart_service")[0]["env_confirmed_by"] == "UAPPROVER1"
    await slack.wait_for(
        lambda: "Approved by <@UAPPROVER1>" in str(slack.message("C0APPROVE", posted.ts).blocks),
        timeout=10,
    )


async def test_a_change_asked_in_the_pane_can_be_approved_with_edits(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, tmp_path: Path
) -> None:
    """The pane's card in the approval channel has Edit too: the approver's edit runs."""
    model.policy = call_then_answer(  # type: ignore[assignment]
        "scale_deployment", {"name": "web", "replicas": 5, "strategy": "rolling"}
    )
    tools, log = scale_tools_yml(tmp_path)
    serve = await bot(
        OPSLOOP_TOOLS=tools, OPSLOOP_APPROVAL_CHANNEL="C0APPROVE", OPSLOOP_APPROVERS="UAPPROVER1"
    )
    thread_ts = await open_pane(serve, slack, looking_at="C0INC42")
    await ask(serve, slack, thread_ts, "Scale web up")

    def card() -> Message | None:
        found = [m for m in slack.messages("C0APPROVE") if m.user == BOT_USER_ID and m.blocks]
        return found[0] if found else None

    await slack.wait_for(lambda: card() is not None, timeout=30)
    posted = card()
    assert posted is not None and "Edit" in str(posted.blocks)
    assert await click(serve, slack, posted, "UAPPROVER1", "Edit") == 200
    await slack.views.wait_opened("UAPPROVER1")
    [view] = slack.views.opened("UAPPROVER1")
    payload = sender.view_submission(
        view.view, user_id="UAPPROVER1", user_name="approver", values={"arg:replicas": "2"}
    )
    answer = await slack.views.submit(serve.url + EVENTS_PATH, payload, secret=serve.secret)
    assert answer.outcome == "closed", answer

    await slack.wait_for(
        lambda: any(t.startswith("Result:") for t in bot_texts(slack, thread_ts)), timeout=30
    )
    assert [r["args"] for r in runs(log, tool="scale_deployment")] == [
        ["web", "2", "rolling", "UAPPROVER1"]
    ]
    await slack.wait_for(
        lambda: (
            "Approved with edits by <@UAPPROVER1>"
            in str(slack.message("C0APPROVE", posted.ts).blocks)
        ),
        timeout=10,
    )

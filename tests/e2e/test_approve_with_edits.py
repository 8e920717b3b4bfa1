"""Approve with edits, end to end through ``opsloop serve`` and the fake Slack.

The card's Edit opens a modal (``views.open`` with the click's trigger id, which the fake
refuses like Slack once expired or used); the submission is posted signed, as Slack posts
it, and the fake judges the bot's answer as Slack would (``response_action: errors`` only
for the view's input blocks, a valid ``update`` view). A valid edit runs the call once with
the edited arguments as the editor; bad values are errors in the modal with the card still
pending; the requester of a destructive call may not edit it; an edit racing an Approve is
one decision; a form submitted after its card expired says so.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from bot.emulator.redis_server import ManagedRedis
from bot.emulator.scripted import Reply, ScriptedCall, ScriptedRequest
from bot.emulator.sender import view_submission
from bot.emulator.slack import FakeSlack, Message
from bot.emulator.slack_views import HeldView, ViewAnswer

from .approvals_kit import answered, click, runs, scale_tools_yml, wait_card, wait_until
from .conftest import StartBot
from .harness import EVENTS_PATH, BotProcess, ScriptedModel, mention, opsloop_command

EDITOR = "UEDITOR1"
SECOND = "USECOND1"


def call_then_answer(tool: str, args: dict[str, object]) -> Any:
    def policy(request: ScriptedRequest) -> Reply:
        if request.tool_results() == 0:
            return Reply(content="Scaling up for the load.", tool_calls=[ScriptedCall(tool, args)])
        last = [m for m in request.messages if m.get("role") == "tool"][-1]
        return Reply(content=f"Result: {last['content']}")

    return policy


SCALE = ("scale_deployment", {"name": "web", "replicas": 5, "strategy": "rolling"})
DELETE = ("delete_pods", {"selector": "app=web"})


async def asked(
    bot: StartBot,
    slack: FakeSlack,
    model: ScriptedModel,
    tmp_path: Path,
    call: tuple[str, dict[str, object]],
    text: str,
    **env: str,
) -> tuple[BotProcess, dict[str, Any], Message, Path]:
    """``opsloop serve`` with the scale tools, asked ``text`` in C1 by U1, the model calling
    ``call``: the bot, the mention, the card that waits, the tools' run log."""
    tools, log = scale_tools_yml(tmp_path)
    model.policy = call_then_answer(*call)  # type: ignore[assignment]
    serve = await bot(OPSLOOP_TOOLS=tools, **env)
    event = mention("C1", "U1", text)
    await serve.send(event)
    return serve, event, await wait_card(slack, "C1", event["ts"]), log


async def open_edit(serve: BotProcess, slack: FakeSlack, card: Message, user: str) -> HeldView:
    """Press Edit on ``card`` as ``user``; the modal Slack opened for them."""
    before = len(slack.views.opened(user))
    assert await click(serve, slack, card, user, "Edit") == 200
    await slack.wait_for(lambda: len(slack.views.opened(user)) > before, timeout=10)
    return slack.views.opened(user)[-1]


async def submit(
    serve: BotProcess,
    slack: FakeSlack,
    view: HeldView,
    user: str,
    values: dict[str, Any] | None = None,
    raw: dict[str, dict[str, Any]] | None = None,
) -> ViewAnswer:
    """Submit ``view`` as ``user`` with ``values`` (by block id; ``raw``: state entries
    sent exactly as given), as Slack posts it; how Slack took the bot's answer."""
    payload = view_submission(
        slack.views.get(view.id).view, user_id=user, user_name=user.lower(), values=values, raw=raw
    )
    return await slack.views.submit(serve.url + EVENTS_PATH, payload, secret=serve.secret)


def tool_results(model: ScriptedModel) -> list[str]:
    return [
        str(m["content"]) for r in model.requests for m in r.messages if m.get("role") == "tool"
    ]


def pending(slack: FakeSlack, card: Message) -> bool:
    """Whether the card still has its buttons."""
    blocks = slack.message(card.channel, card.ts).blocks or []
    return any(b.get("type") == "actions" for b in blocks)


async def test_an_edited_scale_runs_once_with_the_edit_as_the_editor(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, tmp_path: Path
) -> None:
    serve, event, card, log = await asked(
        bot, slack, model, tmp_path, SCALE, "web is overloaded, scale it up"
    )
    assert "Edit" in str(card.blocks)

    view = await open_edit(serve, slack, card, EDITOR)
    inputs = view.input_blocks()
    assert set(inputs) == {"arg:name", "arg:replicas", "arg:strategy"}  # never confirmed_by
    assert inputs["arg:replicas"]["element"]["type"] == "number_input"
    assert inputs["arg:replicas"]["element"]["initial_value"] == "5"
    assert inputs["arg:strategy"]["element"]["type"] == "static_select"

    answer = await submit(serve, slack, view, EDITOR, {"arg:replicas": "3"})
    assert answer.outcome == "closed", answer

    await slack.wait_for(lambda: answered(slack, event["ts"]), timeout=30)
    done = runs(log, tool="scale_deployment")
    assert [r["args"] for r in done] == [["web", "3", "rolling", EDITOR]]
    assert done[0]["env_confirmed_by"] == EDITOR
    result = [t for t in tool_results(model) if "scaled" in t or "restarted" in t][-1]
    assert result.splitlines()[0] == f"approved with edits by <@{EDITOR}>: replicas 5 → 3"
    await slack.wait_for(
        lambda: f"Approved with edits by <@{EDITOR}>" in slack.message("C1", card.ts).text,
        timeout=10,
    )
    decided = str(slack.message("C1", card.ts).blocks)
    assert "`replicas`: 3" in decided and "replicas 5 → 3" in decided
    assert not pending(slack, card)


async def test_invalid_edits_are_errors_in_the_modal_and_decide_nothing(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, tmp_path: Path
) -> None:
    serve, event, card, log = await asked(bot, slack, model, tmp_path, SCALE, "scale web")
    view = await open_edit(serve, slack, card, EDITOR)

    negative = await submit(serve, slack, view, EDITOR, {"arg:replicas": "-1"})
    assert negative.outcome == "errors", negative
    assert list(negative.errors) == ["arg:replicas"]
    assert "0" in negative.errors["arg:replicas"]

    word = await submit(
        serve,
        slack,
        view,
        EDITOR,
        raw={"arg:replicas": {"type": "number_input", "value": "three"}},
    )
    assert word.outcome == "errors", word
    assert word.errors == {"arg:replicas": "must be a whole number"}

    option = {"text": {"type": "plain_text", "text": "yolo"}, "value": "yolo"}
    choice = await submit(
        serve,
        slack,
        view,
        EDITOR,
        raw={"arg:strategy": {"type": "static_select", "selected_option": option}},
    )
    assert choice.outcome == "errors", choice
    assert choice.errors["arg:strategy"].startswith("must be one of")

    assert runs(log) == []
    assert pending(slack, card)  # the card still waits, its buttons there
    assert slack.views.get(view.id).open


async def test_the_requester_may_not_edit_a_destructive_call(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, tmp_path: Path
) -> None:
    serve, event, card, log = await asked(
        bot, slack, model, tmp_path, DELETE, "delete the wedged web pods"
    )

    # The requester's Edit opens no form: they are told why.
    assert await click(serve, slack, card, "U1", "Edit") == 200
    await slack.wait_for(lambda: bool(slack.ephemerals("C1", "U1")), timeout=10)
    assert "someone else's approval" in slack.ephemerals("C1", "U1")[0].text
    assert slack.views.opened("U1") == []

    # A form an approver opened, submitted as the requester: refused in the modal.
    view = await open_edit(serve, slack, card, EDITOR)
    refused = await submit(serve, slack, view, "U1", {"arg:selector": "app=web-7f9"})
    assert refused.outcome == "updated", refused
    assert "someone else's approval" in json.dumps(refused.view)

    # The editor's edit is dry-run and stands as the first approval; a second person's
    # Approve runs it once, with the edit.
    await slack.views.close(view.id)  # the editor closes the notice
    view = await open_edit(serve, slack, card, EDITOR)
    edited = await submit(serve, slack, view, EDITOR, {"arg:selector": "app=web-7f9"})
    assert edited.outcome == "updated", edited
    await slack.wait_for(
        lambda: "Edited and approved by" in str(slack.message("C1", card.ts).blocks), timeout=30
    )
    shown = slack.message("C1", card.ts)
    assert "would restart app=web-7f9" in str(shown.blocks)  # the edited call's dry run
    assert runs(log) == []
    assert await click(serve, slack, shown, EDITOR, "Approve") == 200  # not twice
    await slack.wait_for(lambda: bool(slack.ephemerals("C1", EDITOR)), timeout=10)
    assert runs(log) == []
    assert await click(serve, slack, shown, SECOND, "Approve") == 200
    await slack.wait_for(lambda: answered(slack, event["ts"]), timeout=30)
    assert [r["args"] for r in runs(log, tool="delete_pods")] == [["app=web-7f9"]]
    await slack.wait_for(
        lambda: (
            f"Approved with edits by <@{EDITOR}> and approved by <@{SECOND}>"
            in slack.message("C1", card.ts).text
        ),
        timeout=10,
    )


async def test_an_approve_clicked_on_the_card_before_an_edit_does_not_approve_the_edit(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, tmp_path: Path
) -> None:
    serve, event, card, log = await asked(
        bot, slack, model, tmp_path, DELETE, "delete the web pods"
    )  # as it was before any edit
    view = await open_edit(serve, slack, card, EDITOR)
    await submit(serve, slack, view, EDITOR, {"arg:selector": "app=web-1"})
    await slack.wait_for(
        lambda: "Edited and approved by" in str(slack.message("C1", card.ts).blocks), timeout=30
    )

    def card_edits() -> int:
        return sum(1 for c in slack.calls_of("chat.update") if c.get("ts") == card.ts)

    before = card_edits()
    assert await click(serve, slack, card, SECOND, "Approve") == 200  # the old card's button
    await slack.wait_for(lambda: bool(slack.ephemerals("C1", SECOND)), timeout=10)
    assert "edited since you looked" in slack.ephemerals("C1", SECOND)[0].text
    assert runs(log) == [] and pending(slack, card)
    # The clicker's card was behind: it is drawn again from the record (had a crash lost
    # the edit's own redraw, this is what shows it).
    await slack.wait_for(lambda: card_edits() > before, timeout=10)
    assert "Edited and approved by" in str(slack.message("C1", card.ts).blocks)


async def test_an_edit_racing_an_approve_is_one_decision(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, tmp_path: Path
) -> None:
    serve, event, card, log = await asked(bot, slack, model, tmp_path, SCALE, "scale web")
    view = await open_edit(serve, slack, card, EDITOR)

    answer, status = await asyncio.gather(
        submit(serve, slack, view, EDITOR, {"arg:replicas": "3"}),
        click(serve, slack, card, SECOND, "Approve"),
    )

    assert status == 200
    await slack.wait_for(lambda: answered(slack, event["ts"]), timeout=30)
    done = runs(log, tool="scale_deployment")
    assert len(done) == 1
    if answer.outcome == "closed":  # the edit won
        assert done[0]["args"] == ["web", "3", "rolling", EDITOR]
    else:  # the click won: the modal says so
        assert answer.outcome == "updated", answer
        assert f"already approved by <@{SECOND}>" in json.dumps(answer.view)
        assert done[0]["args"] == ["web", "5", "rolling", SECOND]
    await asyncio.sleep(0.5)  # nothing more runs
    assert len(runs(log, tool="scale_deployment")) == 1


async def test_a_form_submitted_after_its_card_expired_says_so(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, tmp_path: Path
) -> None:
    serve, event, card, log = await asked(
        bot, slack, model, tmp_path, SCALE, "scale web", OPSLOOP_APPROVAL_TTL_S="10"
    )
    view = await open_edit(serve, slack, card, EDITOR)
    await wait_until(
        lambda: "Expired" in slack.message("C1", card.ts).text, timeout=30, what="expiry"
    )

    answer = await submit(serve, slack, view, EDITOR, {"arg:replicas": "3"})

    assert answer.outcome == "updated", answer
    assert "expired" in json.dumps(answer.view)
    assert runs(log) == []


async def test_the_audit_log_the_trace_and_the_timeline_carry_both_argument_sets(
    bot: StartBot,
    slack: FakeSlack,
    model: ScriptedModel,
    redis_server: ManagedRedis,
    tmp_path: Path,
) -> None:
    serve, event, card, log = await asked(bot, slack, model, tmp_path, SCALE, "scale web")
    view = await open_edit(serve, slack, card, EDITOR)
    answer = await submit(serve, slack, view, EDITOR, {"arg:replicas": "3"})
    assert answer.outcome == "closed", answer
    await slack.wait_for(lambda: answered(slack, event["ts"]), timeout=30)
    job_id = f"C1:{event['ts']}:j1"

    async def chained() -> bool:
        code, out, _ = await opsloop_command(redis_server, "audit", "--json")
        return code == 0 and '"write_finished"' in out

    await wait_until(chained, timeout=20, what="the write's audit entry chained")
    code, out, err = await opsloop_command(redis_server, "audit", "--json")
    assert code == 0, err
    entries = [json.loads(line) for line in out.splitlines() if line.strip()]
    requested = next(e for e in entries if e["kind"] == "approval_requested")
    decided = next(e for e in entries if e["kind"] == "approval_decided")
    assert requested["arguments"]["replicas"] == 5  # proposed
    assert decided["arguments"]["replicas"] == 3  # approved
    assert decided["actor"] == EDITOR and decided["detail"]["edited_by"] == EDITOR
    code, out, err = await opsloop_command(redis_server, "audit", "verify")
    assert code == 0 and out.startswith("ok:"), (out, err)

    async def ended() -> bool:
        out = (await opsloop_command(redis_server, "trace", job_id))[1]
        # unverified by any read-only check, the job ends incomplete: ended all the same
        return out.startswith((f"Job {job_id} — completed", f"Job {job_id} — incomplete"))

    await wait_until(ended, timeout=15, what="the job's end in its trace")
    code, out, err = await opsloop_command(redis_server, "trace", job_id)
    assert code == 0, err
    assert f"edited by {EDITOR}: replicas 5 → 3" in out
    assert '"replicas": 3' in out and 'proposed {"name": "web", "replicas": 5' in out

    code, out, err = await opsloop_command(redis_server, "timeline", f"C1:{event['ts']}")
    assert code == 0, err
    assert f"edited by {EDITOR}: replicas 5 → 3" in out
    assert "scale_deployment name=web replicas=3" in out  # the write as it ran

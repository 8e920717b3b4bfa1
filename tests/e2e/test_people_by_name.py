"""People and channels by name, end to end: `opsloop serve` against a fake Slack that knows
alice and #ops. The model's note before its tool call and its answer mention `<@UALICE>` and
`<#COPS>`; what Slack renders as Markdown (the stream's text, the answer's `markdown` block)
shows `@alice` and `#ops`, while the answer's `text` may keep the mention."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot.emulator.scripted import Reply, ScriptedCall, ScriptedRequest
from bot.emulator.slack import FakeSlack

from .conftest import StartBot
from .harness import ScriptedModel, mention
from .test_mention_to_answer import tools_file

NOTE = "Checking web-03 for <@UALICE> as asked in <#COPS>."
ANSWER = "web-03 is fine, <@UALICE>: nothing to do (asked by <@UBOB>)."


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack(
        usergroups={"SOPS": ["UAPPROVER1"]},
        users={"UALICE": "alice", "UBOB": "Bob"},
        channels={"COPS": "ops", "C1": "incidents"},
    ) as fake:
        yield fake


def note_then_answer(request: ScriptedRequest) -> Reply:
    if request.tool_results() == 0:
        return Reply(content=NOTE, tool_calls=[ScriptedCall("check_host", {"host": "web-03"})])
    return Reply(content=ANSWER)


def markdown_of(params: dict[str, Any]) -> list[str]:
    """What a Slack call asks to be rendered as Markdown: markdown blocks and stream text."""
    out = [b["text"] for b in params.get("blocks") or [] if b.get("type") == "markdown"]
    if isinstance(params.get("markdown_text"), str):
        out.append(params["markdown_text"])
    for chunk in params.get("chunks") or []:
        out += [chunk.get(k) for k in ("text", "title", "details", "output") if chunk.get(k)]
    return out


async def test_answers_and_step_notes_show_display_names(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, tmp_path: Path
) -> None:
    model.policy = note_then_answer  # type: ignore[assignment]
    serve = await bot(OPSLOOP_TOOLS=tools_file(tmp_path))
    event = mention("C1", "UALICE", "web-03 is at 95% CPU, look into it")
    assert (await serve.send(event))[0] == 200

    def answer() -> Any:
        for m in slack.messages("C1", event["ts"]):
            if any(
                b.get("type") == "markdown" and "nothing to do" in b["text"] for b in m.blocks or []
            ):
                return m
        return None

    await slack.wait_for(lambda: answer() is not None, timeout=30)
    posted = answer()
    [block] = [b for b in posted.blocks if b["type"] == "markdown"]
    assert block["text"] == "web-03 is fine, @alice: nothing to do (asked by @Bob)."
    assert "@UALICE" in posted.text  # the fallback text keeps the mention (escaped)

    rendered = [
        text
        for method in (
            "chat.postMessage",
            "chat.update",
            "chat.startStream",
            "chat.appendStream",
            "chat.stopStream",
        )
        for params in slack.calls_of(method)
        for text in markdown_of(params)
    ]
    assert not [t for t in rendered if "<@U" in t or "<#C" in t]
    assert any("Checking web-03 for @alice as asked in #ops." in t for t in rendered)

"""Through ``opsloop serve``: a job whose history is condensed after an approved change
keeps its facts. The requests after condensing carry, after the model-written summary,
the job's facts rendered from Redis: who asked for what, who approved the restart, that
it ran — whatever the summary says (here: nothing about the approval at all)."""

from __future__ import annotations

from pathlib import Path

from bot.emulator.scripted import Reply, ScriptedCall, ScriptedRequest
from bot.emulator.slack import FakeSlack
from bot.llm.condense import INSTRUCTION

from .approvals_kit import answered, click, runs, tools_yml, wait_card
from .conftest import StartBot
from .harness import ScriptedModel, mention

SUMMARY = "Earlier: the team looked at web-03 and some hosts."  # silent on the approval
FACTS = "Facts of this job from the bot's own records"


def text_of(message: dict[str, object]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return str(content or "")


def condensed(request: ScriptedRequest) -> str | None:
    """The first user message when it is the summary (with whatever follows it)."""
    users = [m for m in request.messages if m.get("role") == "user"]
    first = text_of(users[0]) if users else ""
    return first if SUMMARY in first else None


async def test_the_requests_after_condensing_carry_the_facts_from_redis(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, tmp_path: Path
) -> None:
    tools, log = tools_yml(tmp_path)

    def policy(request: ScriptedRequest) -> Reply:
        last = text_of(request.messages[-1])
        if INSTRUCTION in last:
            return Reply(content=SUMMARY)
        if condensed(request) is not None:
            return Reply(content="nginx was restarted and the hosts are fine.")
        done = request.tool_results()
        if done == 0:
            restart = ScriptedCall("restart_service", {"service": "nginx"})
            return Reply(content="Restarting nginx to clear the leak.", tool_calls=[restart])
        # Reads after it, on different hosts; the third reports a prompt past the
        # threshold, so the next request is condensed first.
        big = 9000 if done == 3 else None
        host = f"web-0{done}"
        return Reply(tool_calls=[ScriptedCall("check_host", {"host": host})], prompt_tokens=big)

    model.policy = policy  # type: ignore[assignment]
    serve = await bot(OPSLOOP_TOOLS=tools, LLM_CONTEXT_TOKENS="100000", OPSLOOP_CONDENSE_AT="0.08")
    event = mention("C1", "UREQUESTER", "nginx leaks memory on web-03, restart it")
    await serve.send(event)
    card = await wait_card(slack, "C1", event["ts"])
    assert await click(serve, slack, card, "UAPPROVER1", "Approve") == 200
    await slack.wait_for(lambda: answered(slack, event["ts"], "nginx was restarted"), timeout=40)
    assert len(runs(log, tool="restart_service")) == 1

    summarised = [r for r in model.requests if INSTRUCTION in text_of(r.messages[-1])]
    assert len(summarised) == 1
    [after] = [first for r in model.requests if (first := condensed(r)) is not None]
    summary, _, facts = after.partition(SUMMARY)
    assert FACTS in facts  # after the summary, not in place of it
    assert "Request by <@UREQUESTER>:" in facts and "nginx leaks memory on web-03" in facts
    assert '- restart_service {"service": "nginx"}: approved by <@UAPPROVER1>' in facts
    assert '- restart_service {"service": "nginx"}: done' in facts

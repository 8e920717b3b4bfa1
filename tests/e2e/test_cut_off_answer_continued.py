"""An answer cut off at the output limit is continued into one whole answer, end to end:
``opsloop serve`` against the scripted model server, which ends the first response with
``finish_reason: length`` (OpenAI) or ``stop_reason: max_tokens`` (its Anthropic
rendering of the same reply). The bot asks the model to go on, and the thread gets the
two parts as one answer and a ``Done`` ending, streamed or not.

A cut part long enough to be shown while it streams is not left in the thread as a message
of its own: ``ModelRequestEnd`` says the answer was cut off, and the Slack edge streams the
response that continues it on into the same message, which then becomes the whole
answer."""

from __future__ import annotations

from typing import Any

import pytest

from bot.agent.run import CONTINUE_MESSAGE
from bot.emulator.scripted import Reply, ScriptedRequest
from bot.emulator.slack import FakeSlack

from .approvals_kit import status_of, texts
from .conftest import StartBot
from .harness import ScriptedModel, mention

FIRST = "web-03 is fine: the disk is at 4"
REST = "1% and the error rate is back to 0.1%."


def said(message: dict[str, Any]) -> str:
    """A message's text in either provider's format."""
    content = message.get("content")
    if isinstance(content, list):
        return "".join(b.get("text", "") for b in content if isinstance(b, dict))
    return str(content or "")


@pytest.mark.parametrize("stream", ["false", "true"], ids=["posted", "streamed"])
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_a_cut_off_answer_is_continued_into_one_whole_answer(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, provider: str, stream: str
) -> None:
    await one_whole_answer(bot, slack, model, provider=provider, stream=stream, first=FIRST)


async def test_a_long_streamed_cut_part_is_not_left_as_a_message_of_its_own(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel
) -> None:
    # Long enough to be shown while it streams, and not a repetition the detector cuts.
    first = " ".join(f"host web-{i:02d} answers in {i * 7 + 3} ms;" for i in range(30))
    await one_whole_answer(bot, slack, model, provider="openai", stream="true", first=first)


async def one_whole_answer(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, *, provider: str, stream: str, first: str
) -> None:
    whole = first + REST

    def cut_then_rest(request: ScriptedRequest) -> Reply:
        if not any(m.get("role") == "assistant" for m in request.messages):
            return Reply(content=first, finish_reason="length")  # max_tokens for Anthropic
        return Reply(content=REST)

    model.policy = cut_then_rest  # type: ignore[assignment]
    env = {"LLM_STREAM": stream}
    if provider == "anthropic":
        env |= {"LLM_PROVIDER": "anthropic", "LLM_BASE_URL": model.server.root_url}
    serve = await bot(**env)
    event = mention("C1", "U1", "how is web-03?")

    await serve.send(event)

    await slack.wait_for(lambda: whole in texts(slack, "C1", event["ts"]), timeout=30)
    # Asked to go on after its cut answer: two model calls, the second with both.
    assert len(model.requests) == 2
    last = model.requests[1].messages
    assert [m["role"] for m in last[-2:]] == ["assistant", "user"]
    assert said(last[-2]) == first and said(last[-1]) == CONTINUE_MESSAGE
    status = status_of(slack, "C1", event["ts"])
    assert status is not None
    await slack.wait_for(lambda: slack.message("C1", status.ts).text.startswith("Done"), timeout=15)
    assert "iterations 2/" in slack.message("C1", status.ts).text
    # One answer, the whole of it; the cut part is not in the thread on its own.
    assert [t for t in texts(slack, "C1", event["ts"]) if t.startswith(first)] == [whole]

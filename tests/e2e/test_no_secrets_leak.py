"""The bot's own secrets and credential-shaped text stay out of Slack and out of its
logs, even when a provider's error echoes the API key or a tool prints a token."""

from __future__ import annotations

import pytest

from bot.emulator.scripted import Fault
from bot.emulator.slack import FakeSlack

from .approvals_kit import texts
from .conftest import StartBot
from .harness import ScriptedModel, mention, steps

SHAPED_KEY = "sk-proj-e2eSecretKey0123456789abcdef"  # redacted by its shape
PLAIN_KEY = "e2eSecretKey-plain-9f8e7d6c"  # no known shape: masked as the bot's own secret


@pytest.mark.parametrize("api_key", [SHAPED_KEY, PLAIN_KEY])
async def test_a_provider_error_echoing_the_api_key_shows_it_nowhere(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, api_key: str
) -> None:
    model.policy = steps(  # type: ignore[arg-type]
        Fault(status=401, message=f"Incorrect API key provided: {api_key}. Fix it."),
    )
    serve = await bot(LLM_API_KEY=api_key)
    event = mention("C1", "U1", "check web-03")
    await serve.send(event)
    await slack.wait_for(
        lambda: any("`failed`" in t for t in texts(slack, "C1", event["ts"])), timeout=30
    )
    ending = next(t for t in texts(slack, "C1", event["ts"]) if "`failed`" in t)
    assert "Incorrect API key provided" in ending  # the error itself is still told
    seen_in_slack = " ".join(str(call.params) for call in slack.calls if call.method != "auth.test")
    assert api_key not in seen_in_slack and "e2eSecretKey" not in seen_in_slack
    output = serve.output(tail=1_000_000)
    assert "e2eSecretKey" not in output

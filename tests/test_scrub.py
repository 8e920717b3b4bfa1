"""The last net before Slack and the logs: the bot's own secrets by value, credential
shapes by pattern, identifiers untouched."""

from __future__ import annotations

import io
import logging

import pytest

from bot.logs import ScrubbingFormatter
from bot.scrub import Scrubber
from bot.settings import BotSettings, LLMSettings


def test_the_bots_own_secrets_are_masked_by_value_and_shapes_by_pattern() -> None:
    scrub = Scrubber(["plainsecret42", "short", None, ""])
    assert scrub("key plainsecret42 and password=hunter2") == (
        "key [redacted] and password=[redacted]"
    )
    assert scrub("a short word") == "a short word"  # too short to mask by value


def test_a_slack_payload_keeps_its_identifiers() -> None:
    scrub = Scrubber(["plainsecret42"])
    payload = {
        "channel": "C1",
        "ts": "1.2",
        "text": "Failed: key plainsecret42 rejected",
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": "token=abc123"}},
            {
                "type": "actions",
                "block_id": "b",
                "elements": [{"type": "button", "action_id": "a", "value": "token=abc123"}],
            },
        ],
    }
    scrubbed = scrub.payload(payload)
    assert scrubbed["text"] == "Failed: key [redacted] rejected"
    assert scrubbed["blocks"][0]["text"]["text"] == "token=[redacted]"
    assert scrubbed["blocks"][1]["elements"][0]["value"] == "token=abc123"  # an identifier
    assert (scrubbed["channel"], scrubbed["ts"]) == ("C1", "1.2")


def test_log_lines_and_their_tracebacks_are_scrubbed() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(ScrubbingFormatter(scrubber=Scrubber(["plainsecret42"])))
    log = logging.getLogger("test_scrub")
    log.addHandler(handler)
    log.propagate = False
    try:
        try:
            raise RuntimeError("cannot reach redis://:hunter22@db:6379 with plainsecret42")
        except RuntimeError:
            log.exception("connect failed for %s", "postgres://app:s3cr3t@db/app")
    finally:
        log.removeHandler(handler)
    out = stream.getvalue()
    assert "hunter22" not in out and "s3cr3t" not in out and "plainsecret42" not in out
    assert "postgres://app:[redacted]@db/app" in out and "RuntimeError" in out


def test_settings_name_their_secret_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-abc-123")
    monkeypatch.setenv("SLACK_SIGNING_SECRET", "signing-secret-1")
    monkeypatch.setenv("REDIS_URL", "redis://:p%40ss-word@redis:6379/0")
    monkeypatch.setenv("LLM_API_KEY", "key-123456")
    monkeypatch.setenv("LLM_MODEL", "gpt-x")
    bot = BotSettings()
    assert set(bot.secret_values()) == {
        "xoxb-abc-123",
        "signing-secret-1",
        "p@ss-word",
        "p%40ss-word",
    }
    assert LLMSettings().secret_values() == ["key-123456"]

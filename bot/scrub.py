"""One scrubber for everything opsloop writes outside itself: log lines and Slack messages.

``Scrubber(secrets)`` masks the bot's own configured secrets by value (tokens, API keys,
a Redis password: ``BotSettings.secret_values`` and ``LLMSettings.secret_values``) and
then applies the credential shapes of ``bot.agent.redact``. Tool results and people's
messages are already scrubbed before the model sees them; this is the last net for what
reaches Slack or a log collector by another path (a provider's error echoing the API key,
an exception carrying a URL with a password).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from bot.agent.redact import mask_values, redact_secrets

MIN_SECRET_CHARS = 6  # shorter values are not masked by value (they would mangle text)

# Slack fields that are identifiers, never prose: left exactly as they are.
_IDENTIFIERS = frozenset(
    {"channel", "ts", "thread_ts", "user", "action_id", "block_id", "value", "type",
     "style", "recipient_user_id", "recipient_team_id", "name", "timestamp", "url"}
)  # fmt: skip


class Scrubber:
    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        found = {s for s in secrets if s and len(s) >= MIN_SECRET_CHARS}
        self._secrets = sorted(found, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        return redact_secrets(mask_values(text, self._secrets))

    def payload(self, value: Any, key: str | None = None) -> Any:
        """A Slack API payload (dicts, lists, strings) with its prose scrubbed."""
        if isinstance(value, str):
            return value if key in _IDENTIFIERS else self(value)
        if isinstance(value, dict):
            return {k: self.payload(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [self.payload(v, key) for v in value]
        return value

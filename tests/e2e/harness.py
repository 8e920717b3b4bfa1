"""The end-to-end harness: Slack's side of the wire, and ``opsloop serve`` as a real process.

It lives in ``bot/emulator/`` (the benchmarks stand on it too); this module gathers it
under the names the tests import:

* **Requests as Slack sends them** — ``bot.emulator.slack_requests``: ``event_body`` with
  ``mention`` / ``reply`` / ``message`` / ``twin``, ``block_actions_body`` / ``click_body``,
  ``seed``; ``sign`` and ``retried`` are ``bot.emulator.sender``'s.
* **The bot** — ``bot.emulator.bot_process``: ``BotProcess`` (``python -m bot serve`` as a
  child process), ``bot_env``, ``opsloop_command``.
* **The model** — ``bot.emulator.scripted_model``: ``ScriptedModel``, the policy holder the
  tests point the scripted model server at, and ``steps``.

Fixtures wiring these together live in ``conftest.py``.
"""

from __future__ import annotations

from bot.emulator.bot_process import (
    BIND_ATTEMPTS,
    BOT_TOKEN,
    EVENTS_PATH,
    HEALTH_PATH,
    LLM_API_KEY,
    LLM_MODEL,
    OUTPUT_TAIL_CHARS,
    REPO_ROOT,
    REQUEST_TIMEOUT_S,
    SERVE_ARGV,
    SIGNING_SECRET,
    START_POLL_S,
    START_TIMEOUT_S,
    STOP_TIMEOUT_S,
    BotProcess,
    BotStartError,
    bot_env,
    opsloop_command,
)
from bot.emulator.scripted_model import ScriptedModel, steps
from bot.emulator.sender import FORM, JSON, new_event_id, retried, sign
from bot.emulator.slack_requests import (
    APP_ID,
    block_actions_body,
    click_body,
    content_type,
    event_body,
    find_button,
    mention,
    message,
    new_ts,
    reply,
    seed,
    twin,
    url_verification_body,
)

__all__ = [
    "APP_ID",
    "BIND_ATTEMPTS",
    "BOT_TOKEN",
    "EVENTS_PATH",
    "FORM",
    "HEALTH_PATH",
    "JSON",
    "LLM_API_KEY",
    "LLM_MODEL",
    "OUTPUT_TAIL_CHARS",
    "REPO_ROOT",
    "REQUEST_TIMEOUT_S",
    "SERVE_ARGV",
    "SIGNING_SECRET",
    "START_POLL_S",
    "START_TIMEOUT_S",
    "STOP_TIMEOUT_S",
    "BotProcess",
    "BotStartError",
    "ScriptedModel",
    "block_actions_body",
    "bot_env",
    "click_body",
    "content_type",
    "event_body",
    "find_button",
    "mention",
    "message",
    "new_event_id",
    "new_ts",
    "opsloop_command",
    "reply",
    "retried",
    "seed",
    "sign",
    "steps",
    "twin",
    "url_verification_body",
]

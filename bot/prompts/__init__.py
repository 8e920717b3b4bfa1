"""The system prompt: the built-in incident-response prompt or a file replacing it."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from bot.errors import ConfigError

MAX_PROMPT_CHARS = 100_000


def default_prompt() -> str:
    return resources.files(__package__).joinpath("incident.md").read_text(encoding="utf-8")


def load_system_prompt(path: str | None) -> str:
    """``OPSLOOP_SYSTEM_PROMPT`` (a file path) or the built-in prompt."""
    if not path:
        return default_prompt()
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"OPSLOOP_SYSTEM_PROMPT: cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"OPSLOOP_SYSTEM_PROMPT: {path} is not UTF-8 text") from None
    if not text.strip():
        raise ConfigError(f"OPSLOOP_SYSTEM_PROMPT: {path} is empty")
    if len(text) > MAX_PROMPT_CHARS:
        raise ConfigError(f"OPSLOOP_SYSTEM_PROMPT: {path} is over {MAX_PROMPT_CHARS} characters")
    return text

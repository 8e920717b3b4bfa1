"""The environment of a tool's process: what a tools.yml ``env`` (command tools and MCP
stdio servers alike) may say, and the defaults a clean environment starts from.

A value is literal text and ``${NAME}`` references to the bot's environment (``$${`` is
a literal ``${``); a reference to one of the bot's own credentials (``BOT_SECRETS``) or an
override of what opsloop sets for every call (``OPSLOOP_ENV``) is refused. Checked when
tools.yml is read (``tools.spec``) and used when the process starts (``tools.command``,
``tools.mcp``); this module imports neither.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DEFAULT_LANG = "C.UTF-8"

# The bot's own credentials: a tool's env may not reference them.
BOT_SECRETS = frozenset(
    {
        "SLACK_BOT_TOKEN",
        "SLACK_SIGNING_SECRET",
        "SLACK_APP_TOKEN",
        "LLM_API_KEY",
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
    }
)
# Set by opsloop for every call; a tool's env may not override them.
OPSLOOP_ENV = frozenset(
    {"OPSLOOP_JOB_ID", "OPSLOOP_CONFIRMED_BY", "OPSLOOP_IDEMPOTENCY_KEY", "OPSLOOP_DRY_RUN"}
)

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_REFERENCE = re.compile(r"\$\$\{|\$\{([^{}]*)\}|\$\{")


@dataclass(frozen=True, slots=True)
class EnvRef:
    """A ``${NAME}`` reference to the bot's environment inside an env value."""

    name: str


EnvValue = list[str | EnvRef]


def parse_env_value(value: str) -> EnvValue:
    """Split an env value into literal text and ``${NAME}`` references."""
    parts: EnvValue = []
    pos = 0
    for match in _REFERENCE.finditer(value):
        parts.append(value[pos : match.start()])
        token, name = match.group(0), match.group(1)
        if token == "$${":
            parts.append("${")
        elif name is None:
            raise ValueError(f"unclosed '${{' at {match.start()} (write '$${{' for a literal)")
        elif not _ENV_NAME.fullmatch(name):
            raise ValueError(f"${{{name}}} must name an environment variable")
        else:
            parts.append(EnvRef(name))
        pos = match.end()
    parts.append(value[pos:])
    return [part for part in parts if part != ""]


def check_env(env: Mapping[str, str]) -> dict[str, EnvValue]:
    """Validate a command tool's ``env``; ``ValueError("env.KEY: problem")``."""
    parsed: dict[str, EnvValue] = {}
    for key, value in env.items():
        where = f"env.{key}"
        if not _ENV_NAME.fullmatch(key):
            raise ValueError(f"{where}: not a valid environment variable name")
        if key in OPSLOOP_ENV:
            raise ValueError(f"{where}: set by opsloop for every call, cannot be overridden")
        if "\x00" in value:
            raise ValueError(f"{where}: contains a NUL character")
        try:
            parts = parse_env_value(value)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        for part in parts:
            if isinstance(part, EnvRef) and part.name in BOT_SECRETS:
                raise ValueError(
                    f"{where}: ${{{part.name}}} is one of the bot's own credentials; "
                    "they are never given to tools"
                )
        parsed[key] = parts
    return parsed

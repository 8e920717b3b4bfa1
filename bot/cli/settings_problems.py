"""Every settings problem of ``serve`` or ``socket`` in one pass, as ``check``, ``serve``
and ``socket`` report them before anything else runs.

``gather`` reads every settings group (``bot.settings.examine``: the variables each mode
requires, every invalid value, the Redis topology) and then what those commands read at
start from the settings: the model chain (``LLM_MODEL``, ``LLM_FALLBACK_MODELS``), the
system prompt file and the prices file. ``report`` is the text a newcomer sees: how many
variables to fix, one line each (what is wrong, what the variable is for), and where the
configuration reference is; the command then exits 2. Values are never shown (they may
carry a password). Connecting to anything is not this module's: that is ``check``'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from bot.cli import CONFIG_REFERENCE
from bot.errors import ConfigError
from bot.llm.chain import ModelSpec, parse_chain
from bot.llm.prices import load_pricing
from bot.prompts import load_system_prompt
from bot.settings import BotSettings, LLMSettings, Problem, ToolSettings, examine

Mode = Literal["serve", "socket"]

REFERENCE = CONFIG_REFERENCE
REQUIRED: dict[Mode, tuple[str, ...]] = {
    "serve": ("SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET", "REDIS_URL", "LLM_MODEL"),
    "socket": ("SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "REDIS_URL", "LLM_MODEL"),
}


@dataclass(frozen=True, slots=True)
class Ready:
    """The settings of a mode with nothing to fix, and its model chain."""

    bot: BotSettings
    llm: LLMSettings
    tools: ToolSettings
    chain: list[ModelSpec]


def gather(mode: Mode) -> Ready | list[Problem]:
    """The settings ``mode`` runs with, or every problem found in them."""
    seen = examine(required=REQUIRED[mode])
    problems = list(seen.problems)

    def add(exc: ConfigError) -> None:
        problem = Problem.of(str(exc))
        if all(p.variable != problem.variable for p in problems):
            problems.append(problem)

    chain: list[ModelSpec] = []
    if seen.llm is not None:
        try:
            chain = parse_chain(seen.llm)
        except ConfigError as exc:
            add(exc)
    if seen.bot is not None:
        try:
            load_system_prompt(seen.bot.system_prompt_file)
        except ConfigError as exc:
            add(exc)
        if seen.bot.prices_file and seen.llm is not None:
            try:
                load_pricing(seen.bot.prices_file, seen.llm.provider)
            except ConfigError as exc:
                add(exc)
    if problems or seen.bot is None or seen.llm is None or seen.tools is None:
        return problems
    return Ready(seen.bot, seen.llm, seen.tools, chain)


def report(problems: list[Problem], mode: Mode) -> str:
    """What to fix, one variable a line, then where to read about every variable."""
    count = f"{len(problems)} setting{'s' * (len(problems) != 1)}"
    lines = [f"opsloop: {count} to fix before `opsloop {mode}` can start:"]
    lines += [f"  {problem.line()}" for problem in problems]
    lines.append(f"Every variable, what it does and its default: {REFERENCE}")
    return "\n".join(lines)

"""``opsloop check``, ``serve`` and ``socket`` as real processes with settings a newcomer
gets wrong: every missing or invalid variable is listed in one run, each on one line with
what it is for, then where the configuration reference is; the exit status is 2 and nothing
is reached (no Redis, Slack or model runs here: the addresses lead nowhere)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bot.settings import PURPOSES

REPO = Path(__file__).resolve().parents[2]
REFERENCE = "docs/configuration.md"
WAIT_S = 60.0


def opsloop(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bot", *args],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        cwd=REPO,
        env={"PATH": os.environ["PATH"], "PYTHONIOENCODING": "utf-8", **env},
        stdin=subprocess.DEVNULL,
        check=False,
    )


def problems(done: subprocess.CompletedProcess[str]) -> dict[str, str]:
    """The listed problems: variable → its line."""
    lines = done.stderr.splitlines()
    found = {}
    for line in lines[1:-1]:
        assert line.startswith("  "), done.stderr
        name = line.strip().split(":", 1)[0]
        assert name not in found, done.stderr
        found[name] = line.strip()
    return found


def assert_listed(done: subprocess.CompletedProcess[str], *names: str) -> dict[str, str]:
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == "", done.stdout
    lines = done.stderr.splitlines()
    setting = "setting" if len(names) == 1 else "settings"
    assert lines[0].startswith(f"opsloop: {len(names)} {setting} to fix"), done.stderr
    assert REFERENCE in lines[-1], done.stderr
    found = problems(done)
    assert sorted(found) == sorted(names), done.stderr
    for name, line in found.items():
        assert PURPOSES[name] in line, line  # what the variable is for, on its line
    return found


@pytest.mark.parametrize("command", [("check",), ("serve",)])
def test_nothing_set_lists_everything_serve_needs(command: tuple[str, ...]) -> None:
    done = opsloop(*command, env={})
    found = assert_listed(done, "SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET", "REDIS_URL", "LLM_MODEL")
    assert found["SLACK_BOT_TOKEN"].startswith("SLACK_BOT_TOKEN: required")


@pytest.mark.parametrize("command", [("check", "--mode", "socket"), ("socket",)])
def test_socket_mode_lists_the_app_token_not_the_signing_secret(
    command: tuple[str, ...],
) -> None:
    done = opsloop(*command, env={"SLACK_BOT_TOKEN": "xoxb-1", "LLM_MODEL": "m"})
    assert_listed(done, "SLACK_APP_TOKEN", "REDIS_URL")


@pytest.mark.parametrize("command", [("check",), ("serve",)])
def test_invalid_and_missing_values_are_listed_together(command: tuple[str, ...]) -> None:
    env = {
        "SLACK_BOT_TOKEN": "xoxb-1",
        "REDIS_URL": "localhost:6379",  # no scheme
        "PORT": "eighty",
        "OPSLOOP_MAX_ITERATIONS": "0",
        "LLM_PROVIDER": "gemini",
        "OPSLOOP_PACKS": "host",
        "OPSLOOP_K8S_NAMESPACES": "default",
    }
    found = assert_listed(
        opsloop(*command, env=env),
        "SLACK_SIGNING_SECRET",
        "REDIS_URL",
        "PORT",
        "OPSLOOP_MAX_ITERATIONS",
        "LLM_PROVIDER",
        "LLM_MODEL",
    )
    assert found["REDIS_URL"].startswith("REDIS_URL: must start with redis://"), found
    assert found["PORT"].startswith("PORT: Input should be a valid integer"), found
    assert "localhost:6379" not in done_text(command, env)  # a value may hold a password


def done_text(command: tuple[str, ...], env: dict[str, str]) -> str:
    done = opsloop(*command, env=env)
    return done.stdout + done.stderr


def test_a_redis_topology_problem_is_listed_with_a_bad_field() -> None:
    env = {
        "SLACK_BOT_TOKEN": "xoxb-1",
        "SLACK_SIGNING_SECRET": "s",
        "LLM_MODEL": "m",
        "OPSLOOP_REDIS_MODE": "sentinel",
        "PORT": "0",
    }
    found = assert_listed(
        opsloop("check", env=env), "PORT", "REDIS_SENTINELS", "REDIS_SENTINEL_MASTER"
    )
    assert found["REDIS_SENTINELS"].startswith(
        "REDIS_SENTINELS: required with OPSLOOP_REDIS_MODE=sentinel"
    ), found


def test_an_unreadable_system_prompt_and_a_bad_fallback_are_listed() -> None:
    env = {
        "SLACK_BOT_TOKEN": "xoxb-1",
        "SLACK_SIGNING_SECRET": "s",
        "REDIS_URL": "redis://127.0.0.1:9",
        "LLM_MODEL": "m",
        "LLM_FALLBACK_MODELS": "gpt-4o-mini,openai:",
        "OPSLOOP_SYSTEM_PROMPT": "/no/such/prompt.md",
    }
    done = opsloop("serve", env=env)
    found = assert_listed(done, "LLM_FALLBACK_MODELS", "OPSLOOP_SYSTEM_PROMPT")
    assert found["OPSLOOP_SYSTEM_PROMPT"].startswith("OPSLOOP_SYSTEM_PROMPT: cannot read")


def test_every_variable_says_what_it_is_for() -> None:
    from bot.settings import BotSettings, LLMSettings, OtelSettings, ToolSettings

    aliases = {
        info.alias
        for model in (BotSettings, LLMSettings, ToolSettings, OtelSettings)
        for info in model.model_fields.values()
    }
    assert set(PURPOSES) == aliases
    for name, purpose in PURPOSES.items():
        assert purpose and "\n" not in purpose and len(purpose) <= 120, name

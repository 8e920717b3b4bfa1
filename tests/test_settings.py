"""Configuration from the environment: DESIGN's names and defaults, one clear line on a
bad value, and the system prompt."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.errors import ConfigError
from bot.prompts import default_prompt, load_system_prompt
from bot.settings import load_bot_settings, load_llm_settings, load_tool_settings

ALL = [
    "SLACK_BOT_TOKEN",
    "SLACK_SIGNING_SECRET",
    "SLACK_APP_TOKEN",
    "SLACK_API_URL",
    "REDIS_URL",
    "OPSLOOP_REDIS_PREFIX",
    "OPSLOOP_APPROVERS",
    "OPSLOOP_ALLOWED_BOTS",
    "OPSLOOP_MAX_ITERATIONS",
    "OPSLOOP_DEADLINE_S",
    "OPSLOOP_TOKEN_BUDGET",
    "OPSLOOP_APPROVAL_TTL_S",
    "OPSLOOP_SYSTEM_PROMPT",
    "HOST",
    "PORT",
    "OPSLOOP_TOOLS",
    "OPSLOOP_PACKS",
    "OPSLOOP_HTTP_ALLOW",
    "OPSLOOP_LOG_DIRS",
    "LLM_PROVIDER",
    "LLM_BASE_URL",
    "LLM_MODEL",
    "OPSLOOP_MAX_OUTPUT_TOKENS",
]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ALL:
        monkeypatch.delenv(name, raising=False)


def test_defaults_are_designs() -> None:
    bot = load_bot_settings()
    assert bot.slack_api_url == "https://slack.com/api/"
    assert (bot.host, bot.port, bot.redis_prefix) == ("0.0.0.0", 3000, "opsloop:")
    assert (bot.max_iterations, bot.deadline_s, bot.token_budget) == (20, 3600, 200_000)
    assert bot.approval_ttl_s == 3600 and bot.approver_ids == []
    assert bot.allowed_bot_ids == frozenset()
    llm = load_llm_settings()
    assert llm.effective_base_url == "https://api.openai.com/v1"
    assert llm.max_output_tokens == 4096 and llm.condense_at_tokens == 102_400
    tools = load_tool_settings()
    assert tools.tools_file is None and tools.pack_names == []


def test_values_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLACK_API_URL", "http://127.0.0.1:9999/api")
    monkeypatch.setenv("OPSLOOP_APPROVERS", "U1, S2 ,")
    monkeypatch.setenv("OPSLOOP_ALLOWED_BOTS", "B01ALERTS, ,B02PAGER")
    monkeypatch.setenv("OPSLOOP_PACKS", "host,http")
    monkeypatch.setenv("PORT", "8080")
    bot = load_bot_settings()
    assert bot.slack_api_url == "http://127.0.0.1:9999/api/"  # trailing slash ensured
    assert bot.approver_ids == ["U1", "S2"] and bot.port == 8080
    assert bot.allowed_bot_ids == {"B01ALERTS", "B02PAGER"}
    assert load_tool_settings().pack_names == ["host", "http"]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("PORT", "eighty"),
        ("OPSLOOP_MAX_ITERATIONS", "0"),
        ("OPSLOOP_TOKEN_BUDGET", "-5"),
        ("OPSLOOP_DEADLINE_S", "soon"),
        ("REDIS_URL", "localhost:6379"),
        ("REDIS_URL", "http://redis:6379"),
        ("OPSLOOP_DRAIN_S", "-1"),
        ("OPSLOOP_APPROVAL_REMIND_S", "later"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as info:
        load_bot_settings()
    assert str(info.value).startswith(f"{name}: ") and "\n" not in str(info.value)


def test_required_variables_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    bot = load_bot_settings()
    with pytest.raises(ConfigError, match="^SLACK_BOT_TOKEN: required$"):
        bot.require("SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET")
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-1")
    with pytest.raises(ConfigError, match="^SLACK_SIGNING_SECRET: required$"):
        load_bot_settings().require("SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET")


def test_secrets_never_show_in_repr(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-very-secret")
    monkeypatch.setenv("REDIS_URL", "redis://:hunter2@db:6379/0")
    text = repr(load_bot_settings())
    assert "very-secret" not in text and "hunter2" not in text


def test_the_default_prompt_is_an_incident_prompt() -> None:
    prompt = default_prompt()
    assert "approve" in prompt and "summary" in prompt
    assert load_system_prompt(None) == prompt


def test_a_prompt_file_replaces_it(tmp_path: Path) -> None:
    path = tmp_path / "prompt.md"
    path.write_text("You are the payments on-call assistant.")
    assert load_system_prompt(str(path)) == "You are the payments on-call assistant."
    with pytest.raises(ConfigError, match="OPSLOOP_SYSTEM_PROMPT: cannot read"):
        load_system_prompt(str(tmp_path / "missing.md"))
    (tmp_path / "empty.md").write_text("  \n")
    with pytest.raises(ConfigError, match="is empty"):
        load_system_prompt(str(tmp_path / "empty.md"))


def run_cli(*args: str, env: dict[str, str]) -> tuple[int, str]:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "bot", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", **env},
        check=False,
    )
    return done.returncode, done.stderr


@pytest.mark.parametrize(
    ("command", "env", "line"),
    [
        ("serve", {}, "SLACK_BOT_TOKEN: required — "),
        ("serve", {"SLACK_BOT_TOKEN": "xoxb-1"}, "SLACK_SIGNING_SECRET: required — "),
        (
            "serve",
            {"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_SIGNING_SECRET": "s"},
            "REDIS_URL: required — ",
        ),
        ("serve", {"PORT": "eighty"}, "PORT: Input should be a valid integer"),
        ("socket", {"SLACK_BOT_TOKEN": "xoxb-1"}, "SLACK_APP_TOKEN: required — "),
    ],
)
def test_start_up_stops_with_a_line_naming_the_variable(
    command: str, env: dict[str, str], line: str
) -> None:
    code, stderr = run_cli(command, env=env)
    assert code == 2
    assert stderr.startswith("opsloop: "), stderr
    assert any(row.startswith(f"  {line}") for row in stderr.splitlines()), stderr

"""``docs/configuration.md`` is the one table of every environment variable: each variable
the settings read (``bot/settings.py``: the aliases of its groups, which ``PURPOSES``
describes) has its row, no row names a variable the settings do not read, and each simple
default in the table is the default the settings use."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic_settings import BaseSettings

from bot.settings import PURPOSES, BotSettings, LLMSettings, OtelSettings, ToolSettings

REFERENCE = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"
GROUPS: tuple[type[BaseSettings], ...] = (BotSettings, LLMSettings, ToolSettings, OtelSettings)
ROW = re.compile(r"^\| `(?P<name>[A-Z][A-Z0-9_]*)` \| (?P<default>.*?) \| (?P<purpose>.*) \|$")


def table(markdown: str) -> dict[str, tuple[str, str]]:
    """The rows of the section "Every variable": variable → (default, what it is for)."""
    section = markdown.split("\n## Every variable\n", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, tuple[str, str]] = {}
    for line in section.splitlines():
        row = ROW.match(line)
        if row:
            assert row["name"] not in rows, f"{row['name']} has two rows"
            rows[row["name"]] = (row["default"], row["purpose"])
    return rows


def settings_defaults() -> dict[str, object]:
    """Every variable the settings read → its default."""
    return {
        info.alias: info.default
        for group in GROUPS
        for info in group.model_fields.values()
        if info.alias is not None
    }


def written(default: object) -> set[str] | None:
    """How a default may be written in the table, or ``None`` when it is not simple (none,
    empty, long: the table says it in words)."""
    match default:
        case bool():
            return {"1", "true"} if default else {"0", "false"}
        case int():
            return {str(default), f"{default:,}"}
        case float():
            return {str(int(default)) if default.is_integer() else str(default)}
        case str() if default and len(default) <= 40:
            return {f"`{default}`"}
    return None


def test_every_variable_the_settings_read_has_one_row_and_no_other() -> None:
    rows = table(REFERENCE.read_text(encoding="utf-8"))
    read = set(settings_defaults())
    assert read == set(PURPOSES)  # the settings and their purposes agree
    assert sorted(read - set(rows)) == [], "variables the settings read, missing from the table"
    assert sorted(set(rows) - read) == [], "variables in the table the settings do not read"


def test_each_simple_default_is_the_settings_default() -> None:
    rows = table(REFERENCE.read_text(encoding="utf-8"))
    wrong = {}
    for name, default in settings_defaults().items():
        forms = written(default)
        if forms is not None and not any(form in rows[name][0] for form in forms):
            wrong[name] = (rows[name][0], sorted(forms))
    assert wrong == {}, wrong


def test_a_missing_row_is_found() -> None:
    """The check above is not vacuous: a table without one variable's row fails it."""
    markdown = REFERENCE.read_text(encoding="utf-8")
    without = "\n".join(
        line for line in markdown.splitlines() if not line.startswith("| `OPSLOOP_DRAIN_S` |")
    )
    assert "OPSLOOP_DRAIN_S" in set(settings_defaults()) - set(table(without))

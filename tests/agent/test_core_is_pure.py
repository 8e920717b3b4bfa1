"""The agent core is pure: no Slack, Redis or HTTP library, no outer opsloop layer.

Every module of ``bot/agent`` is parsed with ``ast`` (nothing is imported or run) and
every import — ``import x``, ``from x import y``, relative imports, and
``importlib.import_module("x")`` / ``__import__("x")`` with a literal name — is checked
against the forbidden top-level packages and the layers above the core.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import bot.agent

AGENT_DIR = Path(bot.agent.__file__).parent
FORBIDDEN_PACKAGES = frozenset({"slack", "slack_sdk", "slack_bolt", "redis", "httpx", "aiohttp"})
FORBIDDEN_LAYERS = ("bot.slack", "bot.store", "bot.llm", "bot.turns")


def module_name(path: Path) -> str:
    """The dotted name of a module file under ``bot/agent``."""
    relative = path.relative_to(AGENT_DIR.parent.parent).with_suffix("")
    parts = list(relative.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def resolve(level: int, module: str | None, current: str, is_package: bool) -> str:
    """The absolute name a ``from ... import`` refers to."""
    if level == 0:
        return module or ""
    base = current.split(".")
    if not is_package:
        base = base[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join([*base, module] if module else base)


def imported_names(source: str, current: str = "bot.agent.x", is_package: bool = False) -> set[str]:
    """Every absolute module name ``source`` imports (``from a import b`` gives a and a.b)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = resolve(node.level, node.module, current, is_package)
            names.add(base)
            # ``from bot import slack`` imports the module bot.slack.
            names.update(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
        elif isinstance(node, ast.Call):
            func = node.func
            called = (
                func.attr
                if isinstance(func, ast.Attribute)
                else func.id
                if isinstance(func, ast.Name)
                else None
            )
            if called in {"import_module", "__import__"} and node.args:
                first = node.args[0]
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    names.add(first.value)
    return names


def violations(names: set[str]) -> list[str]:
    bad = []
    for name in sorted(names):
        if name.split(".")[0] in FORBIDDEN_PACKAGES:
            bad.append(name)
        elif any(name == layer or name.startswith(layer + ".") for layer in FORBIDDEN_LAYERS):
            bad.append(name)
    return bad


MODULES = sorted(AGENT_DIR.rglob("*.py"))


def test_the_core_has_modules_to_check() -> None:
    names = {p.name for p in MODULES}
    assert {"__init__.py", "run.py", "calls.py", "ports.py", "state.py"} <= names


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_module_imports_nothing_impure(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    names = imported_names(source, module_name(path), path.name == "__init__.py")
    assert violations(names) == [], f"{path.name} imports {violations(names)}"


@pytest.mark.parametrize(
    "source",
    [
        "import redis",
        "import redis.asyncio as r",
        "from redis.asyncio import Redis",
        "import slack_sdk",
        "from slack_bolt.async_app import AsyncApp",
        "import slack",
        "import httpx",
        "import aiohttp",
        "import os, httpx",
        "def f():\n    import aiohttp\n",
        "try:\n    import redis\nexcept ImportError:\n    redis = None\n",
        "from bot.slack import app",
        "from bot import store",
        "import bot.llm.openai",
        "from bot.turns.runner import run_turn",
        "from ..llm import client",
        "from ...bot.store import keys",
        "import importlib\nimportlib.import_module('redis')",
        "__import__('httpx')",
    ],
)
def test_the_checker_catches_forbidden_imports(source: str) -> None:
    assert violations(imported_names(source, "bot.agent.run")) != []


@pytest.mark.parametrize(
    "source",
    [
        "import asyncio",
        "from pydantic import BaseModel",
        "from bot.errors import ToolError",
        "from bot.agent.messages import ToolCall",
        "from . import messages",
        "from .ports import Client",
        "import redisx",
        "import httpx_like",
        "from bot.slackware import x",
    ],
)
def test_the_checker_allows_pure_imports(source: str) -> None:
    assert violations(imported_names(source, "bot.agent.run")) == []

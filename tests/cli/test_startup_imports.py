"""Starting ``opsloop`` loads only what the command runs: reading the arguments (and any
``--help``) imports none of the commands' libraries, so ``opsloop trace`` does not pay
for Slack, the evals or ``rich``, and the many ``python -m bot`` children of the suite
start in a tenth of the time. Each case is a fresh interpreter listing ``sys.modules``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bot.cli.eval import CATEGORIES as PARSER_CATEGORIES
from bot.evals.case import CATEGORIES

REPO = Path(__file__).resolve().parents[2]

# Parsing arguments needs argparse and the bot's version, nothing a command imports.
NOT_TO_PARSE = (
    "bot.service",
    "bot.evals",
    "bot.slack",
    "bot.store",
    "bot.agent",
    "bot.settings",
    "slack_bolt",
    "slack_sdk",
    "aiohttp",
    "redis",
    "httpx",
    "httpcore",
    "trio",
    "rich",
    "pydantic",
    "yaml",
    "opentelemetry",
)

PARSE = """
import contextlib, io, json, sys
from bot.cli.main import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    try:
        main(sys.argv[1:])
    except SystemExit:
        pass
print(json.dumps(sorted(sys.modules)))
"""


def modules_after(code: str, *argv: str) -> list[str]:
    """The modules a fresh ``python -c CODE ARGV…`` holds when CODE ends (it prints them)."""
    done = subprocess.run(
        [sys.executable, "-c", code, *argv],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env={"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO)},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    loaded: list[str] = json.loads(done.stdout.splitlines()[-1])
    return loaded


def among(loaded: list[str], names: tuple[str, ...]) -> list[str]:
    """The modules of ``loaded`` that are one of ``names`` or inside one of them."""
    return [m for m in loaded if any(m == n or m.startswith(f"{n}.") for n in names)]


@pytest.mark.parametrize(
    "argv",
    [
        ("--help",),
        ("--version",),
        ("serve", "--help"),
        ("socket", "--help"),
        ("trace", "--help"),
        ("timeline", "--help"),
        ("audit", "--help"),
        ("eval", "--help"),
        ("check", "--help"),
        ("dev", "--help"),
        ("demo", "--help"),
        ("tools", "run", "--help"),
        ("no-such-command",),
    ],
    ids=lambda argv: " ".join(argv),
)
def test_parsing_arguments_imports_no_command(argv: tuple[str, ...]) -> None:
    loaded = modules_after(PARSE, *argv)
    assert "bot.cli.main" in loaded  # the parser was built
    assert among(loaded, NOT_TO_PARSE) == []


# What ``opsloop serve`` loads on top of the service it runs, and needs only sometimes:
# a runbook parser without runbooks, the evals; httpx's own command line, trio and
# OpenTelemetry's SDK, which httpx, httpcore and redis-py import only because they are
# installed (``UNUSED_OPTIONAL_MODULES``; tracing is off without ``OTEL_*``).
NOT_TO_SERVE = (
    "bot.evals",
    "markdown_it",
    "rich",
    "click",
    "pygments",
    "trio",
    "opentelemetry.sdk",
)

# ``opsloop serve`` as the process's command (``main()`` reads ``sys.argv``): with no
# settings it stops at the settings check (exit 2), once the service is imported.
SERVE = """
import json, sys
from bot.cli.main import main
sys.argv = ["opsloop", "serve"]
assert main() == 2
print(json.dumps(sorted(m for m, module in sys.modules.items() if module is not None)))
"""


def test_serve_imports_the_service_and_nothing_it_does_not_use() -> None:
    loaded = modules_after(SERVE)
    assert "bot.service" in loaded and "httpx" in loaded  # the service was imported
    assert among(loaded, NOT_TO_SERVE) == []


MARKED_ABSENT = """
import json, sys
from bot.cli.main import UNUSED_OPTIONAL_MODULES, main
assert main(sys.argv[1:]) == 2
print(json.dumps([m for m in UNUSED_OPTIONAL_MODULES if m in sys.modules and not sys.modules[m]]))
"""


def test_a_caller_in_its_own_process_keeps_every_module_importable() -> None:
    """``main(argv)`` called by a program (a test) marks nothing absent in its process."""
    assert modules_after(MARKED_ABSENT, "serve") == []
    assert modules_after(MARKED_ABSENT.replace("main(sys.argv[1:])", "main()"), "serve") == [
        "httpx._main",
        "trio",
        "opentelemetry.sdk.metrics",
    ]


def test_the_eval_parser_names_the_case_categories() -> None:
    """``eval --help`` names the categories without importing the case format."""
    assert PARSER_CATEGORIES == CATEGORIES

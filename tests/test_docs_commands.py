"""Every ``opsloop`` command README.md and docs/*.md show (in inline code and in shell or
console blocks) names a real command, and each ``--flag`` it passes is one that command's
``--help`` lists: the docs never show a command the CLI would refuse to parse."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from functools import cache
from pathlib import Path

from bot.cli.main import main

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def shown(markdown: str) -> list[str]:
    """The ``opsloop …`` command lines shown: inline code and lines of code blocks."""
    lines = []
    in_block = False
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            in_block = not in_block
            continue
        if in_block:
            command = line.strip().removeprefix("$ ")
            if command.startswith("opsloop "):
                lines.append(command)
        else:
            lines += [c for c in re.findall(r"`([^`\n]+)`", line) if c.startswith("opsloop ")]
    return lines


@cache
def usage(*words: str) -> str:
    """What ``opsloop WORDS --help`` prints, or "" when it is refused: the CLI's own
    parser, in this process (a process per command cost the suite a minute)."""
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main([*words, "--help"])
    except SystemExit as exc:
        return out.getvalue() if exc.code in (0, None) else ""
    return out.getvalue()


def words(command: str) -> list[str]:
    command = re.split(r"\s(?:#|>|\||…)", command, maxsplit=1)[0]  # comments, redirects
    try:
        return shlex.split(command)[1:]
    except ValueError:
        return command.split()[1:]


def test_every_command_shown_parses() -> None:
    commands = {c for page in PAGES for c in shown(page.read_text(encoding="utf-8"))}
    assert len(commands) > 20, commands  # the docs do show commands
    top = usage()
    wrong = []
    for command in sorted(commands):
        argv = words(command)
        if not argv or argv[0].startswith("-"):
            continue
        name = argv[0]
        if not re.search(rf"\b{name}\b", top.split("positional arguments")[0]):
            wrong.append(f"{command}: no command {name!r}")
            continue
        helps = usage(name) + "".join(
            usage(name, word) for word in argv[1:] if re.fullmatch(r"[a-z]+", word)
        )
        for flag in (w.split("=")[0] for w in argv[1:] if w.startswith("--")):
            if flag not in helps:
                wrong.append(f"{command}: {name} has no {flag}")
    assert wrong == [], wrong

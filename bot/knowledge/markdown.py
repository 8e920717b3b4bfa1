"""One runbook file as values: its front matter and its sections, split by heading.

:func:`parse_runbook` takes a file's decoded text and returns a :class:`ParsedRunbook` or
raises :class:`BrokenRunbook` carrying the 1-based line of the problem. Front matter is
YAML between a first line ``---`` and the next ``---`` (or ``...``) line, read with
``yaml.safe_load``; known keys are ``title`` (a string) and ``alerts``, ``services`` and
``tags`` (lists of strings); other keys are ignored.

Headings come from markdown-it-py's token stream, so a ``#`` line inside a code fence is
text, and setext headings (a line underlined with ``===``/``---``) count. Every heading,
whatever its level, starts a section that runs to the next heading; the text before the
first heading is the file's intro. A section's slug is the one GitHub gives its anchor
(:func:`github_slug`). Searching, reading and the folder itself live in ``runbooks.py``.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from markdown_it import MarkdownIt

LIST_KEYS = ("alerts", "services", "tags")
_FENCE_CLOSE = ("---", "...")
# ``yaml.safe_load``'s loader, in C when PyYAML was built with libyaml (ten times faster).
_SAFE_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@cache
def _parsers() -> tuple[MarkdownIt, MarkdownIt]:
    """The (blocks, inline) parsers every parse shares, built on the first runbook parsed:
    a bot without runbooks never loads markdown-it-py.

    Blocks only: inline markup is parsed for headings alone (half the time of a full
    parse). Lists and link reference definitions are not parsed either (the list rule is
    most of markdown-it-py's time on step-by-step runbooks): a list item's lines read as
    paragraphs, and a fence or indented code under an item still hides its ``#`` lines. The
    one loss is a heading written inside a list item (``- ## Step``), rare in runbooks: it
    is plain text."""
    from markdown_it import MarkdownIt

    blocks = MarkdownIt("commonmark").disable(["inline", "list", "reference"])
    return blocks, MarkdownIt("commonmark")


class BrokenRunbook(ValueError):
    """A runbook file that cannot be read; ``line`` is 1-based, when known."""

    def __init__(self, reason: str, line: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.line = line


@dataclass(frozen=True, slots=True)
class FrontMatter:
    """What the front matter says (all empty without one)."""

    title: str | None = None
    alerts: tuple[str, ...] = ()
    services: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Section:
    """A heading and the lines under it (``slug`` is ``None`` for the intro)."""

    slug: str | None
    heading: str  # "" for the intro
    level: int  # 0 for the intro
    parents: tuple[str, ...]  # the headings above it, outermost first
    text: str  # from the heading line up to the next heading, heading line included
    body: str  # ``text`` without its heading line


@dataclass(frozen=True, slots=True)
class ParsedRunbook:
    """A file's front matter, its Markdown after the front matter, and its sections."""

    meta: FrontMatter
    markdown: str
    sections: tuple[Section, ...] = field(default_factory=tuple)

    @property
    def first_heading(self) -> str | None:
        return next((s.heading for s in self.sections if s.slug is not None), None)


def github_slug(text: str, seen: dict[str, int] | None = None) -> str:
    """The anchor GitHub gives a heading (github-slugger's rules): lower case; letters,
    digits, marks, ``-`` and ``_`` kept; every space a ``-``; other punctuation and
    symbols dropped. With ``seen`` (shared by one file's headings), a repeat gets ``-1``,
    ``-2``, … and a generated slug never equals one already given."""
    kept: list[str] = []
    for ch in text.strip().lower():
        if ch == " ":
            kept.append("-")
        elif ch in "-_" or unicodedata.category(ch)[0] in "LNM":
            kept.append(ch)
    slug = "".join(kept)
    if seen is None:
        return slug
    base, candidate = slug, slug
    while candidate in seen:
        seen[base] += 1
        candidate = f"{base}-{seen[base]}"
    seen[candidate] = 0
    return candidate


def parse_runbook(source: str) -> ParsedRunbook:
    """Front matter and sections of one file's text; ``BrokenRunbook`` with the line."""
    meta, markdown = _split_front_matter(source.removeprefix("\ufeff"))
    return ParsedRunbook(meta=meta, markdown=markdown, sections=_sections(markdown))


# -- front matter ----------------------------------------------------------------------


def _split_front_matter(source: str) -> tuple[FrontMatter, str]:
    """``(front matter, the Markdown after it)``."""
    lines = source.splitlines(keepends=True)
    if not lines or lines[0].rstrip() != "---":
        return FrontMatter(), source
    end = next((i for i in range(1, len(lines)) if lines[i].rstrip() in _FENCE_CLOSE), None)
    if end is None:  # a thematic break opening the file, not front matter
        return FrontMatter(), source
    raw = "".join(lines[1:end])
    try:
        data = yaml.load(raw, Loader=_SAFE_LOADER)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line = mark.line + 2 if mark is not None else 1  # +1: the ``---``, +1: 1-based
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise BrokenRunbook(f"front matter is not valid YAML: {problem}", line) from None
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise BrokenRunbook(
            f"front matter must be a mapping of keys, not a {type(data).__name__}", 2
        )
    meta = _front_matter(data, lines[1:end])
    return meta, "".join(lines[end + 1 :])


def _key_line(key: str, lines: list[str]) -> int | None:
    pattern = re.compile(rf"^\s*['\"]?{re.escape(key)}['\"]?\s*:")
    return next((i + 2 for i, line in enumerate(lines) if pattern.match(line)), None)


def _front_matter(data: Mapping[Any, Any], lines: list[str]) -> FrontMatter:
    title = data.get("title")
    if title is not None and not isinstance(title, str):
        raise BrokenRunbook(
            f"front matter: title must be a string, not a {type(title).__name__}",
            _key_line("title", lines),
        )
    lists: dict[str, tuple[str, ...]] = {}
    for key in LIST_KEYS:
        value = data.get(key)
        if value is None:
            lists[key] = ()
            continue
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise BrokenRunbook(
                f"front matter: {key} must be a list of strings", _key_line(key, lines)
            )
        lists[key] = tuple(v.strip() for v in value if v.strip())
    return FrontMatter(
        title=(title.strip() or None) if isinstance(title, str) else None,
        alerts=lists["alerts"],
        services=lists["services"],
        tags=lists["tags"],
    )


# -- sections --------------------------------------------------------------------------


def _heading_text(source: str) -> str:
    """A heading's words as a reader sees them (emphasis, links and code unwrapped)."""
    parsed = _parsers()[1].parseInline(source)
    children = (parsed[0].children or []) if parsed else []
    parts = [
        child.content for child in children if child.type in ("text", "code_inline", "softbreak")
    ]
    return " ".join("".join(parts).split())


def _sections(markdown: str) -> tuple[Section, ...]:
    lines = markdown.splitlines(keepends=True)
    tokens = _parsers()[0].parse(markdown)
    # (first line, line after the heading, level, text) of every heading, in order
    headings: list[tuple[int, int, int, str]] = []
    for i, token in enumerate(tokens):
        if token.type == "heading_open" and token.map is not None:
            inline = tokens[i + 1] if i + 1 < len(tokens) else None
            text = _heading_text(inline.content) if inline is not None else ""
            headings.append((token.map[0], token.map[1], int(token.tag[1:]), text))
    sections: list[Section] = []
    first = headings[0][0] if headings else len(lines)
    intro = "".join(lines[:first])
    if intro.strip():
        sections.append(Section(None, "", 0, (), intro, intro))
    seen: dict[str, int] = {}
    stack: list[tuple[int, str]] = []  # (level, heading) of the open ancestors
    for n, (start, after, level, heading) in enumerate(headings):
        end = headings[n + 1][0] if n + 1 < len(headings) else len(lines)
        while stack and stack[-1][0] >= level:
            stack.pop()
        sections.append(
            Section(
                slug=github_slug(heading, seen),
                heading=heading,
                level=level,
                parents=tuple(h for _, h in stack),
                text="".join(lines[start:end]),
                body="".join(lines[after:end]),
            )
        )
        stack.append((level, heading))
    return tuple(sections)

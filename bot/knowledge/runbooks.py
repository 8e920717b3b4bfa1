"""The runbooks folder (``OPSLOOP_RUNBOOKS``) as ranked, readable sections.

:class:`Runbooks` owns the folder: which files count, re-reading them when they change,
the search index, and the bounded texts handed out (``search``, ``read``, ``for_alert``,
``for_url``, ``summary``). One file's front matter and sections come from ``markdown.py``;
everything handed out passes through ``quote.quote_as_data`` first.

Ranking: SQLite's FTS5 with ``bm25()``, from the standard library's ``sqlite3`` (FTS5 is
compiled into the SQLite CPython ships with here, see PLATFORM.md). Chosen over
``bm25s``, ``rank-bm25`` and ``tantivy`` because it adds no dependency, is maintained with
SQLite itself, stems English (``tokenize='porter unicode61'``: "restarting" finds
"restarts"), and weighs columns (``bm25(t, w1, w2, …)``): a word in a section's heading,
its runbook's title or its front matter's ``alerts``/``services``/``tags`` counts several
times a word in the body. The whole index is one in-memory table rebuilt from the files
(40 ms for the 30-file test corpus; a change re-parses only the files that changed). A
user's query is never passed as FTS5 syntax: its words are each quoted and OR-ed.

Files: ``*.md`` and ``*.markdown`` under the root, subfolders included, hidden names
(``.git``) skipped; at most :data:`MAX_FILES`. Refused, each with one warning per change
and listed in ``skipped``: a file over :data:`MAX_FILE_BYTES` (known by ``stat``, never
read), a symlink resolving outside the root, undecodable UTF-8, broken front matter (with
its line). Re-reading: ``refresh`` compares a signature (path, size, ``mtime_ns`` of every
file) and rebuilds when it changed; every search or read calls it, at most once per
``refresh_interval`` seconds of the injected clock.
"""

from __future__ import annotations

import difflib
import logging
import os
import re
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import unquote, urlsplit

from bot.errors import ConfigError
from bot.knowledge.markdown import (
    BrokenRunbook,
    ParsedRunbook,
    Section,
    github_slug,
    parse_runbook,
)
from bot.knowledge.quote import quote_as_data

log = logging.getLogger(__name__)

SUFFIXES = (".md", ".markdown")
MAX_FILES = 5_000
MAX_FILE_BYTES = 1 << 20  # 1 MiB
MAX_TOTAL_BYTES = 64 << 20  # what the whole folder may hold in memory
READ_BOUND = 8_000
SNIPPET_CHARS = 300
REFRESH_INTERVAL_S = 1.0
MAX_QUERY_TERMS = 24
# bm25 weights, in the table's column order: title, heading, parents, body, keywords.
WEIGHTS = (4.0, 8.0, 2.0, 1.0, 5.0)
_STOP_WORDS = frozenset(
    "a an and are as at be but by can do does for from has have how i if in into is it its "
    "my of on or our so that the their then there these this to was we what when where "
    "which who why will with you your".split()
)
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")


class UnknownRunbook(ValueError):
    """A ref that names no runbook or section; the message names what exists nearby."""


@dataclass(frozen=True, slots=True)
class RunbookHit:
    """One ranked section: ``ref`` is ``path#slug`` (``path`` for a file's intro)."""

    ref: str
    path: str
    title: str
    heading: str
    snippet: str
    score: float


@dataclass(frozen=True, slots=True)
class RunbookText:
    """A runbook or section as the model reads it (bounded, quoted as data)."""

    ref: str
    title: str
    text: str


@dataclass(frozen=True, slots=True)
class Skipped:
    """A file left out, and why (``line`` 1-based, when the problem has one)."""

    path: str
    line: int | None
    reason: str


@dataclass(frozen=True, slots=True)
class RunbookSummary:
    """What ``opsloop check`` reports: counts, the alert names covered, what was skipped."""

    files: int
    sections: int
    alerts: tuple[str, ...]
    skipped: tuple[tuple[str, int | None, str], ...]


@dataclass(frozen=True, slots=True)
class _Entry:
    rel: str  # posix path relative to the root
    real: str  # the path to open (a symlink's target)
    size: int
    mtime_ns: int


@dataclass(frozen=True, slots=True)
class _File:
    path: str
    title: str
    parsed: ParsedRunbook

    def ref(self, section: Section) -> str:
        return self.path if section.slug is None else f"{self.path}#{section.slug}"


class Runbooks:
    """The runbooks under ``root``, searchable by section; see the module docstring."""

    def __init__(
        self,
        root: Path,
        *,
        base_url: str | None = None,
        refresh_interval: float = REFRESH_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # The folder as configured, resolved again at every re-read: a git-sync checkout
        # is a symlink swapped to a new folder on each update (the old one deleted).
        self.configured = Path(root).absolute()
        self.root = self.configured.resolve()
        if not self.root.is_dir():
            raise ConfigError(f"OPSLOOP_RUNBOOKS: {root} is not a directory")
        self.base_url = base_url.rstrip("/") + "/" if base_url else None
        self._interval = refresh_interval
        self._clock = clock
        self._lock = threading.RLock()
        self._signature: tuple[object, ...] | None = None
        self._checked_at: float | None = None
        self._parsed: dict[tuple[str, int, int], _File | Skipped] = {}
        self._warned: set[object] = set()
        self._files: dict[str, _File] = {}
        self._refs: list[tuple[_File, Section]] = []  # rowid - 1 → section
        self._db: sqlite3.Connection | None = None
        self.skipped: list[Skipped] = []
        self.refresh()

    # -- re-reading ----------------------------------------------------------------

    def refresh(self) -> bool:
        """Rebuild the index if any file was added, removed or changed; ``True`` if so."""
        with self._lock:
            self._checked_at = self._clock()
            self.root = self.configured.resolve()
            entries, refused = self._scan()
            signature = (
                tuple((e.rel, e.size, e.mtime_ns) for e in entries),
                tuple((s.path, s.reason) for s in refused),
            )
            if signature == self._signature:
                return False
            self._rebuild(entries, refused)
            self._signature = signature
            return True

    def _maybe_refresh(self) -> None:
        checked = self._checked_at
        if checked is None or self._clock() - checked >= self._interval:
            self.refresh()

    def _scan(self) -> tuple[list[_Entry], list[Skipped]]:
        entries: list[_Entry] = []
        refused: list[Skipped] = []
        pending = [str(self.root)]
        while pending:
            folder = pending.pop()
            try:
                with os.scandir(folder) as listing:
                    found = sorted(listing, key=lambda e: e.name)
            except OSError as exc:
                rel = self._rel(folder)
                refused.append(Skipped(rel, None, f"cannot list: {exc.strerror or exc}"))
                continue
            for item in found:
                if item.name.startswith("."):
                    continue
                entry = self._entry(item, pending, refused)
                if entry is not None:
                    entries.append(entry)
        entries.sort(key=lambda e: e.rel)
        if len(entries) > MAX_FILES:
            refused.append(
                Skipped(
                    entries[MAX_FILES].rel,
                    None,
                    f"more than {MAX_FILES:,} runbook files: this one and "
                    f"{len(entries) - MAX_FILES - 1:,} after it are not indexed",
                )
            )
            del entries[MAX_FILES:]
        return entries, refused

    def _entry(
        self, item: os.DirEntry[str], pending: list[str], refused: list[Skipped]
    ) -> _Entry | None:
        rel = self._rel(item.path)
        real = item.path
        try:
            if item.is_symlink():
                real = os.path.realpath(item.path)
                if not Path(real).is_relative_to(self.root):
                    refused.append(
                        Skipped(rel, None, "a symlink leading outside the runbooks folder")
                    )
                    return None
                if os.path.isdir(real):
                    return None  # indexed where it really is; following could loop
            elif item.is_dir(follow_symlinks=False):
                pending.append(item.path)
                return None
            if not item.name.lower().endswith(SUFFIXES):
                return None
            info = os.stat(real)
        except OSError:
            return None  # gone while we looked: the next refresh sees the folder as it is
        if not stat.S_ISREG(info.st_mode):
            return None
        return _Entry(rel, real, info.st_size, info.st_mtime_ns)

    def _rel(self, path: str) -> str:
        return Path(path).relative_to(self.root).as_posix()

    def _rebuild(self, entries: list[_Entry], refused: list[Skipped]) -> None:
        parsed: dict[tuple[str, int, int], _File | Skipped] = {}
        files: dict[str, _File] = {}
        skipped = list(refused)
        total = 0
        for entry in entries:
            key = (entry.rel, entry.size, entry.mtime_ns)
            loaded = self._parsed.get(key)
            if loaded is None:
                loaded = _load(entry, budget=MAX_TOTAL_BYTES - total)
                if not (isinstance(loaded, Skipped) and loaded.reason.startswith("over the")):
                    parsed[key] = loaded  # a file skipped for the total's sake may fit later
            else:
                parsed[key] = loaded
            if isinstance(loaded, Skipped):
                skipped.append(loaded)
            else:
                files[entry.rel] = loaded
                total += entry.size
        warned: set[object] = set()
        for item in skipped:
            seen = (item.path, item.line, item.reason, self._stamp(item.path, entries))
            warned.add(seen)
            if seen not in self._warned:
                where = f"{item.path}, line {item.line}" if item.line else item.path
                log.warning("runbooks: skipped %s: %s", where, item.reason)
        self._warned = warned
        self._parsed = parsed
        self._files = files
        self.skipped = skipped
        self._index(files.values())

    @staticmethod
    def _stamp(path: str, entries: list[_Entry]) -> tuple[int, int] | None:
        return next(((e.size, e.mtime_ns) for e in entries if e.rel == path), None)

    def _index(self, files: Iterable[_File]) -> None:
        db = sqlite3.connect(":memory:", check_same_thread=False)
        db.execute(
            "CREATE VIRTUAL TABLE sections USING fts5("
            "title, heading, parents, body, keywords, tokenize='porter unicode61')"
        )
        refs: list[tuple[_File, Section]] = []
        rows: list[tuple[int, str, str, str, str, str]] = []
        for file in files:
            keywords = _keywords(file)
            for section in file.parsed.sections:
                refs.append((file, section))
                parents = " / ".join(section.parents)
                rows.append(
                    (len(refs), file.title, section.heading, parents, section.body, keywords)
                )
        db.executemany(
            "INSERT INTO sections(rowid, title, heading, parents, body, keywords) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            rows,
        )
        old, self._db, self._refs = self._db, db, refs
        if old is not None:
            old.close()

    # -- reading -------------------------------------------------------------------

    def search(self, query: str, limit: int = 5) -> list[RunbookHit]:
        """The sections best matching ``query``, best first (at most ``limit``)."""
        terms = _terms(query)
        if not terms or limit < 1:
            return []
        match = " OR ".join(f'"{term}"' for term in terms)
        with self._lock:
            self._maybe_refresh()
            if self._db is None:
                return []
            weights = ", ".join(str(w) for w in WEIGHTS)
            rows = self._db.execute(
                f"SELECT rowid, bm25(sections, {weights}) AS rank, "
                "snippet(sections, 3, '', '', ' … ', 48) FROM sections "
                "WHERE sections MATCH ? ORDER BY rank, rowid LIMIT ?",
                (match, limit),
            ).fetchall()
            hits = []
            for rowid, rank, snippet in rows:
                file, section = self._refs[rowid - 1]
                text = snippet if snippet.strip() else section.heading or section.body
                hits.append(
                    RunbookHit(
                        ref=file.ref(section),
                        path=file.path,
                        title=quote_as_data(file.title),
                        heading=quote_as_data(section.heading),
                        snippet=_snippet(quote_as_data(text)),
                        score=round(-float(rank), 3),
                    )
                )
            return hits

    def read(self, ref: str) -> str:
        """A section (``path#slug``) with its heading, or a whole file (``path``), under
        the runbook's title; bounded to :data:`READ_BOUND`. ``UnknownRunbook`` otherwise."""
        with self._lock:
            self._maybe_refresh()
            return self._text(ref).text

    def _text(self, ref: str) -> RunbookText:
        path, _, slug = ref.strip().partition("#")
        path = path.strip().removeprefix("./")
        file = self._files.get(path)
        if file is None:
            raise UnknownRunbook(self._unknown(ref, path, bool(slug)))
        if not slug:
            return _bounded_text(file.path, file.title, file.parsed.markdown, "runbook")
        section = _section(file, slug)
        if section is None:
            raise UnknownRunbook(
                f"{path} has no section #{quote_as_data(slug)}; its sections: "
                + ", ".join(f"#{s.slug}" for s in file.parsed.sections if s.slug)
            )
        return _bounded_text(file.ref(section), file.title, section.text, "section")

    def _unknown(self, ref: str, path: str, with_slug: bool) -> str:
        wanted = quote_as_data(ref.strip())
        if not self._files:
            return f"no runbook {wanted!r}: no runbooks are indexed"
        if with_slug:
            known = [file.ref(s) for file, s in self._refs]
            close = difflib.get_close_matches(ref.strip(), known, n=5, cutoff=0.5)
        else:
            close = []
        close += [
            p
            for p in difflib.get_close_matches(path, list(self._files), n=5, cutoff=0.4)
            if p not in close
        ]
        if not close:
            close = sorted(self._files)[:5]
            return f"no runbook {wanted!r}; runbooks include: {', '.join(close)}"
        return f"no runbook {wanted!r}; nearby: {', '.join(close[:5])}"

    def for_alert(self, alertname: str) -> RunbookText | None:
        """The runbook whose front matter lists ``alertname`` (the shortest path of
        several), whole and bounded; ``None`` when none does."""
        with self._lock:
            self._maybe_refresh()
            named = [f for f in self._files.values() if alertname in f.parsed.meta.alerts]
            if not named:
                return None
            file = min(named, key=lambda f: (len(f.path), f.path))
            return _bounded_text(file.path, file.title, file.parsed.markdown, "runbook")

    def for_url(self, url: str) -> RunbookText | None:
        """The runbook a ``runbook_url`` under ``base_url`` points at (a ``#fragment``
        picks the section); ``None`` outside ``base_url``, for ``..`` or an unknown file."""
        if self.base_url is None or not url.startswith(self.base_url):
            return None
        parts = urlsplit(url[len(self.base_url) :])
        rel = unquote(parts.path).lstrip("/")
        segments = PurePosixPath(rel).parts if rel else ()
        if ".." in segments or "\\" in rel or "\x00" in rel:
            log.warning("runbooks: refused runbook_url %s: it leaves the runbooks folder", url)
            return None
        with self._lock:
            self._maybe_refresh()
            for candidate in _candidates(rel):
                file = self._files.get(candidate)
                if file is None:
                    continue
                slug = unquote(parts.fragment)
                section = _section(file, slug) if slug else None
                if section is not None:
                    return _bounded_text(file.ref(section), file.title, section.text, "section")
                return _bounded_text(file.path, file.title, file.parsed.markdown, "runbook")
        return None

    def summary(self) -> RunbookSummary:
        """How many files and sections are indexed, the alert names they cover, and
        what was skipped."""
        with self._lock:
            self._maybe_refresh()
            alerts = {a for f in self._files.values() for a in f.parsed.meta.alerts}
            return RunbookSummary(
                files=len(self._files),
                sections=len(self._refs),
                alerts=tuple(sorted(alerts)),
                skipped=tuple((s.path, s.line, s.reason) for s in self.skipped),
            )

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None


# -- helpers ---------------------------------------------------------------------------


def _load(entry: _Entry, *, budget: int) -> _File | Skipped:
    """One file, parsed; or why not. The size is checked before anything is read."""
    if entry.size > MAX_FILE_BYTES:
        return Skipped(
            entry.rel, None, f"{entry.size:,} bytes is over the {MAX_FILE_BYTES:,}-byte limit"
        )
    if entry.size > budget:
        return Skipped(
            entry.rel, None, f"over the {MAX_TOTAL_BYTES:,}-byte limit for the whole folder"
        )
    try:
        with open(entry.real, "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        return Skipped(entry.rel, None, f"cannot read: {exc.strerror or exc}")
    if len(data) > MAX_FILE_BYTES:  # grew after the stat
        return Skipped(entry.rel, None, f"over the {MAX_FILE_BYTES:,}-byte limit")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        return Skipped(entry.rel, line, f"not UTF-8 (byte {exc.start})")
    try:
        parsed = parse_runbook(text)
    except BrokenRunbook as exc:
        return Skipped(entry.rel, exc.line, exc.reason)
    title = parsed.meta.title or parsed.first_heading or PurePosixPath(entry.rel).stem
    return _File(entry.rel, title, parsed)


def _keywords(file: _File) -> str:
    """Front matter words, camel-case names split too (``KubePodCrashLooping`` also
    as ``Kube Pod Crash Looping``), so a query's plain words meet an alert's name."""
    meta = file.parsed.meta
    words: list[str] = []
    for value in (*meta.alerts, *meta.services, *meta.tags):
        words.append(value)
        split = _CAMEL.findall(value)
        if len(split) > 1:
            words.extend(split)
    return " ".join(words)


def _terms(query: str) -> list[str]:
    words = list(dict.fromkeys(w.lower() for w in re.findall(r"\w+", query)))
    useful = [w for w in words if w not in _STOP_WORDS]
    return (useful or words)[:MAX_QUERY_TERMS]


def _snippet(text: str) -> str:
    flat = " ".join(text.split())
    if len(flat) <= SNIPPET_CHARS:
        return flat
    return flat[: SNIPPET_CHARS - 1].rsplit(" ", 1)[0] + "…"


def _section(file: _File, slug: str) -> Section | None:
    """The section a slug names: as given, lower-cased, or as the slug of heading text."""
    by_slug = {s.slug: s for s in file.parsed.sections if s.slug is not None}
    for candidate in (slug, slug.lower(), github_slug(slug)):
        if candidate in by_slug:
            return by_slug[candidate]
    return None


def _candidates(rel: str) -> list[str]:
    """The files a URL path may mean: itself, ``.html`` or no extension as ``.md``, and
    a folder's ``README.md`` or ``index.md``."""
    if not rel or rel.endswith("/"):
        return [f"{rel}README.md", f"{rel}index.md"]
    path = PurePosixPath(rel)
    if path.suffix.lower() in SUFFIXES:
        return [rel]
    if path.suffix.lower() in (".html", ".htm"):
        stem = str(path.with_suffix(""))
        return [f"{stem}.md", f"{stem}.markdown"]
    return [f"{rel}.md", f"{rel}.markdown", f"{rel}/README.md", f"{rel}/index.md"]


def _bounded_text(ref: str, title: str, text: str, what: str) -> RunbookText:
    """The text under a line naming the runbook, quoted as data, cut at a line to fit
    :data:`READ_BOUND` with a note saying so."""
    shown_title = quote_as_data(title)
    head = f"Runbook: {shown_title} ({ref})\n\n"
    body = quote_as_data(text)
    room = READ_BOUND - len(head)
    if len(body) > room:
        rest = "read a section by its ref for the rest" if what == "runbook" else "rest not shown"
        note = f"\n[cut here: the {what} is {len(body):,} characters; {rest}]"
        keep = room - len(note)
        cut = body.rfind("\n", 0, keep)
        body = body[: cut + 1 if cut > 0 else keep] + note
    return RunbookText(ref=ref, title=shown_title, text=head + body)

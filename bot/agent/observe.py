"""Turning raw tool output into a bounded observation for the model.

Output is decoded (non-UTF-8 bytes replaced, never an exception), and anything longer
than the tool's bound is cut with a note of its size and the artifact reference under
which the full text was kept.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field

ERROR_PREFIX = "Error: "
_SURROGATE = re.compile("[\ud800-\udfff]")


def to_text(raw: object) -> str:
    """Decode tool output to text; bytes that are not UTF-8 become U+FFFD."""
    if isinstance(raw, str):
        text = raw
    elif isinstance(raw, bytes | bytearray | memoryview):
        text = bytes(raw).decode("utf-8", errors="replace")
    elif raw is None:
        text = ""
    else:
        text = str(raw)
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    if _SURROGATE.search(text):
        # Lone surrogates (e.g. from surrogateescape decoding) cannot be encoded as UTF-8.
        text = _SURROGATE.sub("\ufffd", text)
    return text


SUMMARY_CHARS = 160


def summary_line(text: str, limit: int = SUMMARY_CHARS) -> str:
    """A tool result in one line, for people watching: its first non-blank line, cut to
    ``limit`` chars, ``…`` when anything was left out."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    first = lines[0]
    if len(first) > limit:
        return first[: limit - 1] + "…"
    return first + (" …" if len(lines) > 1 else "")


def truncation_note(total: int, ref: str) -> str:
    return f"\n[output cut: {total} chars in all; full output stored as artifact {ref}]"


def cut(text: str, bound: int) -> str:
    """The head of ``text`` within ``bound`` chars (at least a few chars of it)."""
    return text[: max(bound, 0)]


@dataclass(slots=True)
class InMemoryArtifacts:
    """Artifact store kept in process memory (tests, the bare core)."""

    items: dict[str, str] = field(default_factory=dict)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    async def put(self, job_id: str, call_id: str, text: str) -> str:
        ref = f"artifact:{job_id}:{call_id}:{next(self._ids)}"
        self.items[ref] = text
        return ref

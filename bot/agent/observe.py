"""Turning raw tool output into a bounded observation for the model.

Output is decoded (non-UTF-8 bytes replaced, never an exception), and anything longer
than the tool's bound is cut with a note of its size and the artifact reference under
which the full text was kept: a last line naming ``read_artifact(ref="REF")`` when the
job offers that tool (``bot.agent.read_artifact``), which reads the rest back.
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass, field

ERROR_PREFIX = "Error: "
READ_ARTIFACT = "read_artifact"  # the built-in tool that reads a cut output back
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


def read_call(ref: str, **more: int | str) -> str:
    """``read_artifact(ref="REF", …)`` as the model would write the call."""
    args = ", ".join(
        f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in {"ref": ref, **more}.items()
    )
    return f"{READ_ARTIFACT}({args})"


def line_count(text: str) -> int:
    """Lines of ``text`` as ``split_lines`` (and ``read_artifact``) numbers them."""
    return text.count("\n") + (0 if not text or text.endswith("\n") else 1)


def split_lines(text: str) -> list[str]:
    """The lines of ``text`` as ``grep -n`` counts them: ``\n``-separated, a final
    newline ending the last line rather than starting another, a ``\r`` before it dropped."""
    rows = text.split("\n")
    if rows[-1] == "":
        rows.pop()
    return [row.removesuffix("\r") for row in rows]


def truncation_note(text: str, bound: int, ref: str, *, readable: bool = True) -> str:
    """The last line of ``text`` cut to ``bound``: its full size, and how to read the rest
    (``readable``: the job offers ``read_artifact``; else only where it is kept)."""
    if not readable:
        return f"\n[output cut: {len(text)} chars in all; full output stored as artifact {ref}]"
    seen = line_count(text[: max(bound, 0)])
    return (
        f"\n[output cut: {len(text)} chars in all; {line_count(text)} lines, shown to line"
        f" {seen}; read more with {read_call(ref)}]"
    )


def cut(text: str, bound: int) -> str:
    """The head of ``text`` within ``bound`` chars (at least a few chars of it)."""
    return text[: max(bound, 0)]


@dataclass(slots=True)
class InMemoryArtifacts:
    """Artifact store kept in process memory (tests, the bare core)."""

    items: dict[str, str] = field(default_factory=dict)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _owners: dict[str, str] = field(default_factory=dict)  # ref → the job that stored it

    async def put(self, job_id: str, call_id: str, text: str) -> str:
        ref = f"artifact:{job_id}:{call_id}:{next(self._ids)}"
        self.items[ref] = text
        self._owners[ref] = job_id
        return ref

    async def get(self, job_id: str, ref: str) -> str | None:
        ref = ref.strip()
        if self._owners.get(ref) != job_id:
            return None
        return self.items.get(ref)

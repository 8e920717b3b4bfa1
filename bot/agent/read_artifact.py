"""``read_artifact``: the built-in tool that reads a cut tool output back.

A tool output longer than its bound reaches the model as its head and a last line naming
``read_artifact(ref="REF")`` (``observe.truncation_note``); the whole output is kept in
the job's ``ArtifactStore``. This tool returns a slice of it: the lines from
``start_line`` (1-based), or those of them containing ``contains`` (case-insensitive: a
model looking for "error" wants "ERROR" too), at most ``lines`` of them, each prefixed
with its line number (``"12: …"``), after a header line saying what was read and before
a last line saying how to read on when more is left.

A job reads only its own artifacts: the store is asked with the calling job's id
(``CallContext.job_id``), so an unknown, expired or other job's reference is the same
``Error: no artifact …`` and says nothing about other jobs.

Its own result is never cut into a new artifact (a read producing a reference to read,
and so on): it is scrubbed here, exactly as ``calls.py`` scrubs every result (scrubbing
scrubbed text changes nothing), and packed in whole lines within ``output_bound``, so
the bound check that stores artifacts never fires for it. A line longer than
``MAX_LINE_CHARS`` is shown in part: its head, or the part around the match.

``with_read_artifact`` adds it to a job's tools (``bot.turns`` does, for every job, from
its first request, so the tools block never changes). It shadows a catalogue tool of the
same name: the cut note names this tool, so no other may answer to it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from bot.agent.observe import READ_ARTIFACT, read_call, split_lines
from bot.agent.ports import ArtifactStore
from bot.agent.redact import redact_secrets
from bot.agent.tools import DEFAULT_OUTPUT_BOUND, DEFAULT_TIMEOUT_S, CallContext, Category, Tool
from bot.errors import ToolError

log = logging.getLogger(__name__)

DEFAULT_LINES = 100
MAX_LINES = 500
MAX_LINE_CHARS = 1000  # of one line; the rest of it is left out with a note
MAX_CONTAINS_CHARS = 200
MAX_REF_CHARS = 500

DESCRIPTION = (
    "Read more of a tool result that was cut: its last line names "
    'read_artifact(ref="REF"). Returns the lines from start_line (1-based), or only those '
    "of them containing `contains` (case-insensitive), each prefixed with its line "
    "number; the result is bounded, and its last line says how to read on. Only this "
    "job's references can be read."
)


class ReadArtifactArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ref: str = Field(
        min_length=1,
        max_length=MAX_REF_CHARS,
        description='The reference a cut result names, e.g. "artifact:…"',
    )
    start_line: int = Field(1, ge=1, description="First line to read, 1-based (default 1)")
    lines: int = Field(
        DEFAULT_LINES,
        ge=1,
        le=MAX_LINES,
        description=f"At most this many lines (default {DEFAULT_LINES}, at most {MAX_LINES})",
    )
    contains: str = Field(
        "",
        max_length=MAX_CONTAINS_CHARS,
        description="Only lines containing this text, case-insensitive (default: every line)",
    )


class ReadArtifact:
    """The ``read_artifact`` tool over one artifact store (the job's own)."""

    name: str = READ_ARTIFACT
    description: str = DESCRIPTION
    category: Category = "read_only"
    parallel: bool = True
    timeout: float = DEFAULT_TIMEOUT_S
    output_bound: int = DEFAULT_OUTPUT_BOUND
    args_model: type[BaseModel] = ReadArtifactArgs

    def __init__(self, store: ArtifactStore) -> None:
        self.store = store

    async def execute(self, args: BaseModel, ctx: CallContext) -> str:
        assert isinstance(args, ReadArtifactArgs)
        ref = args.ref.strip().strip("\"'`")
        text = await self.store.get(ctx.job_id, ref)
        if text is None:
            raise ToolError(
                f"no artifact {ref!r} in this job: only the references this job's cut "
                "results named can be read, and only while they are kept"
            )
        return read_slice(
            text,
            ref,
            start_line=args.start_line,
            lines=args.lines,
            contains=args.contains,
            bound=self.output_bound,
        )


def with_read_artifact(tools: Sequence[Tool], store: ArtifactStore) -> list[Tool]:
    """``tools`` and ``read_artifact`` over ``store``; a tool of that name among ``tools``
    is left out (logged): the cut note names the built-in."""
    kept = [t for t in tools if t.name != READ_ARTIFACT]
    if len(kept) != len(tools):
        log.warning(
            "tool %r of the catalogue is not offered: the built-in of that name reads "
            "cut results back",
            READ_ARTIFACT,
        )
    return [*kept, ReadArtifact(store)]


def shown_line(line: str, needle: str) -> str:
    """``line`` within ``MAX_LINE_CHARS``: its head, or the part around ``needle``."""
    if len(line) <= MAX_LINE_CHARS:
        return line
    at = line.lower().find(needle) if needle else -1
    start = 0 if at < 0 else max(0, min(at - MAX_LINE_CHARS // 4, len(line) - MAX_LINE_CHARS))
    end = start + MAX_LINE_CHARS
    head = "…" if start else ""
    tail = "…" if end < len(line) else ""
    return f"{head}{line[start:end]}{tail} [line of {len(line)} chars: {start + 1}-{end} shown]"


@dataclass(frozen=True, slots=True)
class _Slice:
    """What a read selected, before it is packed within the bound."""

    ref: str
    total: int
    start_line: int
    contains: str
    found: list[tuple[int, str]]  # (line number, line) of every line that qualifies

    def render(self, count: int, rows: Sequence[str]) -> str:
        return "\n".join([self.header(count), *rows[:count], *self.trailer(count)])

    def header(self, count: int) -> str:
        shown = f"lines {self.found[0][0]}-{self.found[count - 1][0]}" if count else "no line"
        if not self.contains:
            return f"{self.ref}: {shown} of {self.total}"
        return (
            f"{self.ref}: {_lines(len(self.found))} {_quoted(self.contains)} "
            f"(case-insensitive, searched from line {self.start_line} of {self.total}); "
            f"{count} shown"
        )

    def trailer(self, count: int) -> list[str]:
        if count >= len(self.found):
            if not self.contains and self.found and self.found[-1][0] < self.total:
                # Stopped by ``lines``: the artifact goes on.
                after = self.found[-1][0] + 1
                return [f"[lines {after}-{self.total} not shown: {self._next(after)}]"]
            return []
        after = self.found[count][0]
        if self.contains:
            left = len(self.found) - count
            return [f"[{left} more matching lines: {self._next(after)}]"]
        return [f"[lines {after}-{self.total} not shown: {self._next(after)}]"]

    def _next(self, start_line: int) -> str:
        if self.contains:
            return read_call(self.ref, contains=self.contains, start_line=start_line)
        return read_call(self.ref, start_line=start_line)


def _lines(count: int) -> str:
    return f"{count} line contains" if count == 1 else f"{count} lines contain"


def _quoted(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def read_slice(
    text: str, ref: str, *, start_line: int, lines: int, contains: str, bound: int
) -> str:
    """The numbered lines ``read_artifact`` returns, scrubbed, within ``bound`` chars."""
    every = split_lines(text)
    total = len(every)
    if start_line > total:
        raise ToolError(f"start_line {start_line} is past the end: {ref} has {total} lines")
    needle = contains.lower()
    found = [
        (number, line)
        for number, line in enumerate(every[start_line - 1 :], start=start_line)
        if needle in line.lower()
    ]
    if not contains:
        found = found[:lines]
    chosen = _Slice(ref, total, start_line, contains, found)
    if not found:
        return redact_secrets(
            f"{ref}: no line contains {_quoted(contains)} "
            f"(case-insensitive, lines {start_line}-{total} searched)"
        )
    rows = [f"{number}: {shown_line(line, needle)}" for number, line in found[:lines]]
    # The most whole lines that fit, then as many fewer as scrubbing needs: calls.py
    # scrubs the result again (a no-op on scrubbed text) and finds it within the bound.
    count = 0
    while count < len(rows) and len(chosen.render(count + 1, rows)) <= bound:
        count += 1
    result = redact_secrets(chosen.render(count, rows))
    while count > 0 and len(result) > bound:
        count -= 1
        result = redact_secrets(chosen.render(count, rows))
    return result[:bound]  # only a header past the bound (a huge ref) is ever cut here

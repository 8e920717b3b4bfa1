"""Verifying the audit log's hash chain: the walk over the kept entries and the report
``opsloop audit verify`` prints (``AuditLog.verify`` reads the anchor, the head and the
stream, and hands them here)."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Literal

from bot.store.audit_entry import Stored, entry_hash, parse_head

Problem = Literal["unparseable", "hash mismatch", "prev mismatch", "seq gap", "head mismatch"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Broken:
    """The first link of the chain that does not hold."""

    seq: int | None  # the seq the entry carries (None when it has none)
    stream_id: str | None
    entry_id: str | None
    problem: Problem
    detail: str


@dataclass(frozen=True, slots=True, kw_only=True)
class VerifyReport:
    ok: bool
    checked: int  # entries read and checked
    start: Literal["anchor", "genesis"]  # where the kept chain starts
    start_seq: int  # the seq of the first entry the kept chain should hold
    head_seq: int | None  # the newest chained seq (None: nothing ever chained)
    broken: Broken | None = None

    def describe(self) -> str:
        """One line, as ``opsloop audit verify`` prints it."""
        origin = (
            "genesis"
            if self.start == "genesis"
            else f"the retention anchor (entries before seq {self.start_seq} removed)"
        )
        if self.broken is None:
            last = f" to seq {self.head_seq}" if self.head_seq and self.checked else ""
            return f"ok: {self.checked} entries, chain from {origin}{last}"
        b = self.broken
        where = f"seq {b.seq}" if b.seq is not None else "an entry with no seq"
        ids = ", ".join(
            part
            for part in (
                f"stream id {b.stream_id}" if b.stream_id else "",
                f"entry {b.entry_id}" if b.entry_id else "",
            )
            if part
        )
        return (
            f"broken at {where}" + (f" ({ids})" if ids else "") + f": {b.problem}: {b.detail}"
            f" ({self.checked} entries checked, chain from {origin})"
        )


async def walk(
    records: AsyncGenerator[Stored, None], anchor: str | None, head: str | None
) -> VerifyReport:
    """Check each of ``records`` (the stream, oldest first) as the next link after
    ``anchor`` (or genesis), up to ``head``; the report names the first broken link."""
    head_seq, head_hash = parse_head(head)
    start_seq, prev = parse_head(anchor)
    seq = start_seq

    def report(checked: int, broken: Broken | None = None) -> VerifyReport:
        return VerifyReport(
            ok=broken is None,
            checked=checked,
            start="anchor" if anchor else "genesis",
            start_seq=start_seq + 1,
            head_seq=head_seq or None,
            broken=broken,
        )

    def at_head(detail: str) -> VerifyReport:
        gone = Broken(
            seq=head_seq or None,
            stream_id=None,
            entry_id=None,
            problem="head mismatch",
            detail=detail,
        )
        return report(checked, gone)

    checked = 0
    async with aclosing(records):
        async for stored in records:
            found = check_link(stored, seq + 1, prev)
            if found is not None:
                return report(checked, found)
            checked += 1
            seq, prev = seq + 1, str(json.loads(stored.raw)["hash"])
            if seq == head_seq:
                break  # entries chained since the head was read are checked next time
    if head is None and checked:
        return at_head(f"the log holds entries up to seq {seq} but has no head")
    if seq < head_seq:
        return at_head(f"the head names seq {head_seq}, the kept chain ends at seq {seq}")
    if head_seq and prev != head_hash:
        return at_head(f"the head's hash is not seq {seq}'s")
    return report(checked)


def check_link(stored: Stored, seq: int, prev: str) -> Broken | None:
    """What is wrong with ``stored`` as the chain's entry ``seq`` after ``prev``."""
    try:
        body = json.loads(stored.raw)
        if not isinstance(body, dict):
            raise ValueError("not a JSON object")
        found_seq, digest, found_prev = body["seq"], body["hash"], body["prev"]
        if not (isinstance(found_seq, int) and isinstance(digest, str)):
            raise ValueError("seq or hash of the wrong type")
    except (ValueError, KeyError) as exc:
        return Broken(
            seq=None,
            stream_id=stored.stream_id,
            entry_id=None,
            problem="unparseable",
            detail=f"expected seq {seq}: {type(exc).__name__}: {str(exc)[:200]}",
        )

    def broken(problem: Problem, detail: str) -> Broken:
        entry_id = body.get("id")
        return Broken(
            seq=found_seq,
            stream_id=stored.stream_id,
            entry_id=entry_id if isinstance(entry_id, str) else None,
            problem=problem,
            detail=detail,
        )

    if entry_hash(body) != digest:
        return broken("hash mismatch", "the entry's content does not match its hash")
    if found_prev != prev:
        gap = f" (and its seq is {found_seq}, expected {seq})" if found_seq != seq else ""
        return broken("prev mismatch", f"its prev is not the previous entry's hash{gap}")
    if found_seq != seq:
        return broken("seq gap", f"expected seq {seq}")
    return None

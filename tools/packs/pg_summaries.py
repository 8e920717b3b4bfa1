"""The ``postgres`` pack's answers as a responder reads them in an incident; no I/O.

Every answer starts with its point (``3 sessions waiting on locks; pid 4242 blocks 3 for
41s``), then a bounded list (``… N more``), never a raw dump. Rows come in as mappings
(asyncpg records) and become the dataclasses here. Query text from the server is
untrusted data: it is flattened to one line, stripped of control characters and cut
(:func:`query_text`); nothing here runs it. Durations, sizes and counts are written short
(:func:`duration`, :func:`size`). The SQL is in ``tools.packs.pg_queries``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tools.packs.backend import duration as two_units

QUERY_CHARS = 120  # of one query's text in a line
MAX_CHARS = 3800  # an answer, under the core's 4,000-character bound
MAX_SESSIONS = 15
MAX_CHAINS = 5
MAX_WAITERS_PER_CHAIN = 8
MAX_TABLES = 8
MAX_STATEMENTS = 10
MAX_REPLICAS = 10
MAX_SLOTS = 10
MAX_PIDS = 3  # blockers named on one line
HIDDEN_QUERY = "<insufficient privilege>"

# A password written in a statement (CREATE/ALTER ROLE … PASSWORD '…', a dblink conninfo's
# password=…): shown as [redacted], whatever else the statement says.
_PASSWORD = re.compile(r"(?i)\b(password\s*=?\s*)('(?:[^']|'')*'|\"[^\"]*\"|[^\s',)]+)")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u200b-\u200f\u202a-\u202e]")


# -- small formatting ----------------------------------------------------------------------


def duration(seconds: float | None) -> str:
    """``41s``, ``2m10s``, ``3h5m``, ``2d4h``, ``0.4s``; ``?`` when unknown."""
    if seconds is None:
        return "?"
    if seconds < 0:
        seconds = 0.0
    if seconds < 10:
        return f"{seconds:.1f}s" if seconds < 9.95 else "10s"
    return two_units(seconds)


def size(n_bytes: float | None) -> str:
    """``512 B``, ``16 kB``, ``1.2 MB``, ``3.4 GB`` (powers of 1024, as PostgreSQL)."""
    if n_bytes is None:
        return "?"
    value = float(n_bytes)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(value) < 1024 or unit == "TB":
            if unit == "B":
                return f"{value:.0f} B"
            return f"{value:.1f} {unit}" if abs(value) < 10 else f"{value:.0f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def counted(n: int, noun: str) -> str:
    """``1 row``, ``40k rows``."""
    return f"{count(n)} {noun if n == 1 else noun + 's'}"


def count(n: int) -> str:
    """``1234567`` as ``1.2M``, ``12345`` as ``12k``; small numbers as they are."""
    if n >= 10_000_000:
        return f"{n / 1e6:.0f}M"
    if n >= 1_000_000:
        return f"{n / 1e6:.1f}M"
    if n >= 10_000:
        return f"{n / 1e3:.0f}k"
    return str(n)


def plural(n: int, noun: str, nouns: str | None = None) -> str:
    return f"{n} {noun if n == 1 else nouns or noun + 's'}"


def query_text(text: str | None, total_chars: int | None = None, limit: int = QUERY_CHARS) -> str:
    """Query text as data: one line, no control characters, cut with its full length."""
    if text is None:
        return "(no query text)"
    if text == HIDDEN_QUERY:
        return "(query hidden: the role lacks pg_read_all_stats / pg_monitor)"
    flat = " ".join(_CONTROL.sub(" ", text).split())
    flat = _PASSWORD.sub(r"\1'[redacted]'", flat)
    if not flat:
        return "(empty query)"
    full = max(total_chars or 0, len(text))
    if len(flat) > limit or full > len(text):
        return f"{flat[: limit - 1]}… ({full} chars)"
    return flat


def listing(head: str, lines: Sequence[str], limit: int, *, indent: str = "") -> list[str]:
    shown = [f"{indent}{line}" for line in lines[:limit]]
    if len(lines) > limit:
        shown.append(f"{indent}… {len(lines) - limit} more")
    return [head, *shown] if head else shown


def bounded(lines: Sequence[str], limit: int = MAX_CHARS) -> str:
    """Lines joined, cut at whole lines to ``limit`` characters with ``… N more lines``."""
    out: list[str] = []
    used = 0
    for i, line in enumerate(lines):
        if used + len(line) + 1 > limit - 40 and i < len(lines) - 1:
            out.append(f"… {len(lines) - i} more lines")
            break
        out.append(line)
        used += len(line) + 1
    return "\n".join(out)


# -- sessions ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Sess:
    """One row of ``pg_stat_activity`` as the queries select it."""

    pid: int
    user: str | None
    database: str | None
    app: str
    client: str | None
    backend_type: str
    state: str | None
    wait_type: str | None
    wait_event: str | None
    xact_s: float | None
    query_s: float | None
    state_s: float | None
    query: str | None
    query_chars: int | None
    blocked_by: tuple[int, ...] = ()
    wait_s: float | None = None
    waiting_for: str | None = None

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> Sess:
        client = row["client_addr"]
        if client is not None and row["client_port"] not in (None, -1):
            client = f"{client}:{row['client_port']}"
        elif client is None and row["client_port"] == -1:
            client = "local socket"
        keys = set(row.keys())
        return cls(
            pid=int(row["pid"]),
            user=row["usename"],
            database=row["datname"],
            app=row["application_name"] or "",
            client=client,
            backend_type=row["backend_type"] or "?",
            state=row["state"],
            wait_type=row["wait_event_type"],
            wait_event=row["wait_event"],
            xact_s=row["xact_s"],
            query_s=row["query_s"],
            state_s=row["state_s"],
            query=row["query"],
            query_chars=row["query_chars"],
            blocked_by=_pid_list(row["blocked_by"]) if "blocked_by" in keys else (),
            wait_s=row["wait_s"] if "wait_s" in keys else None,
            waiting_for=row["waiting_for"] if "waiting_for" in keys else None,
        )

    @property
    def who(self) -> str:
        """``app@shop (psql, 10.0.0.5:5123)``."""
        base = f"{self.user or '?'}@{self.database or '?'}"
        if self.backend_type != "client backend":
            base = f"{self.backend_type} {base}" if self.user else self.backend_type
        extra = ", ".join(x for x in (self.app, self.client) if x)
        return f"{base} ({extra})" if extra else base

    @property
    def idle_in_xact(self) -> bool:
        return (self.state or "").startswith("idle in transaction")

    @property
    def lock_wait(self) -> bool:
        return self.wait_type == "Lock"

    @property
    def age_s(self) -> float | None:
        """How long it has been at it: its transaction, else its query."""
        return self.xact_s if self.xact_s is not None else self.query_s

    def doing(self) -> str:
        """``active 41s``, ``idle in transaction 2m (xact 2m10s)``, ``waiting 3.1s for …``."""
        state = self.state or "state hidden"
        if self.idle_in_xact:
            text = f"{state} {duration(self.state_s)}"
        elif self.backend_type == "autovacuum worker" and self.state is None:
            text = f"running {duration(self.query_s)}"
        else:
            text = f"{state} {duration(self.query_s)}"
        if self.xact_s is not None and (self.query_s is None or self.xact_s - self.query_s >= 1):
            text += f" (xact {duration(self.xact_s)})"
        if self.wait_type is not None and self.wait_type not in ("Client", "Activity"):
            text += f", wait {self.wait_type}:{self.wait_event}"
        return text

    def line(self) -> str:
        """One session: pid, who, what, blockers, query."""
        text = f"pid {self.pid} {self.who} {self.doing()}"
        if self.blocked_by:
            text += f", blocked by {pids(self.blocked_by)}"
        return f"{text}: {query_text(self.query, self.query_chars)}"


def _pid_list(text: str | None) -> tuple[int, ...]:
    """``'4242,4250'`` (``array_to_string`` of ``pg_blocking_pids``) as pids."""
    return tuple(int(p) for p in (text or "").split(",") if p.strip().isdigit())


def pids(values: Sequence[int], limit: int = MAX_PIDS) -> str:
    """``4242, 4250 and 3 more``; pid 0 is a prepared transaction."""
    shown = ", ".join("a prepared transaction" if p == 0 else str(p) for p in values[:limit])
    return shown + (f" and {len(values) - limit} more" if len(values) > limit else "")


@dataclass(frozen=True, slots=True)
class Counts:
    connections: int
    active: int
    lock_waits: int
    idle_in_xact: int
    idle: int
    hidden: int
    max_connections: int

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> Counts:
        return cls(**{name: int(row[name] or 0) for name in cls.__dataclass_fields__})


def activity(counts: Counts, sessions: Sequence[Sess], *, total: int) -> str:
    """``pg_activity``: the counts, the longest-running first, then the sessions (the
    first of ``total``)."""
    head = (
        f"{counts.connections}/{counts.max_connections} connections: "
        f"{counts.active} active ({counts.lock_waits} waiting on locks), "
        f"{counts.idle_in_xact} idle in transaction, {counts.idle} idle"
    )
    client = [s for s in sessions if s.backend_type == "client backend"]
    if client:
        longest = client[0]
        head += f"; longest: pid {longest.pid} {longest.doing().split(',')[0]}"
    else:
        head += "; no session is running a query or holding a transaction open"
    lines = [head]
    if counts.hidden:
        lines.append(
            f"({plural(counts.hidden, 'session')} of other roles hidden: grant pg_monitor "
            "to see their state and query)"
        )
    lines += [s.line() for s in sessions[:MAX_SESSIONS]]
    if total > len(sessions[:MAX_SESSIONS]):
        lines.append(f"… {total - len(sessions[:MAX_SESSIONS])} more")
    return bounded(lines)


# -- blocking chains -----------------------------------------------------------------------


@dataclass(slots=True)
class Chain:
    """A session that blocks others without waiting itself, and everyone behind it."""

    root: Sess | None  # None: the pid is gone or not visible (a prepared transaction)
    root_pid: int
    waiters: list[Sess] = field(default_factory=list)

    @property
    def longest_wait(self) -> float:
        return max((_wait(s) for s in self.waiters), default=0.0)


def _wait(s: Sess) -> float:
    return s.wait_s if s.wait_s is not None else (s.state_s or 0.0)


def chains(sessions: Sequence[Sess]) -> list[Chain]:
    """The blocking chains of ``sessions`` (waiters and their blockers), biggest first.

    A waiter is in the chain of every root it waits behind, directly or through other
    waiters; a cycle with no root (a deadlock, until the detector breaks it) is reported
    under its lowest pid."""
    by_pid = {s.pid: s for s in sessions}
    waiting = {s.pid: s for s in sessions if s.blocked_by}

    def roots_of(pid: int, seen: frozenset[int]) -> set[int]:
        s = waiting.get(pid)
        if s is None:
            return {pid}
        found: set[int] = set()
        for blocker in s.blocked_by:
            if blocker in seen:
                continue
            found |= roots_of(blocker, seen | {blocker})
        return found

    grouped: dict[int, list[Sess]] = {}
    for s in waiting.values():
        roots = roots_of(s.pid, frozenset({s.pid})) or {min(_cycle(s.pid, waiting))}
        for root in roots:
            if root != s.pid:
                grouped.setdefault(root, []).append(s)
    result = [Chain(root=by_pid.get(root), root_pid=root, waiters=w) for root, w in grouped.items()]
    for chain in result:
        chain.waiters.sort(key=lambda s: (-_wait(s), s.pid))
    result.sort(key=lambda c: (-len(c.waiters), -c.longest_wait, c.root_pid))
    return result


def _cycle(pid: int, waiting: Mapping[int, Sess]) -> set[int]:
    seen = {pid}
    frontier = [pid]
    while frontier:
        s = waiting.get(frontier.pop())
        for blocker in s.blocked_by if s else ():
            if blocker not in seen:
                seen.add(blocker)
                frontier.append(blocker)
    return seen


def behind(sessions: Sequence[Sess], pid: int) -> int:
    """How many sessions wait behind ``pid``, directly or through other waiters."""
    blocked: dict[int, list[int]] = {}
    for s in sessions:
        for blocker in s.blocked_by:
            blocked.setdefault(blocker, []).append(s.pid)
    seen: set[int] = set()
    frontier = [pid]
    while frontier:
        for waiter in blocked.get(frontier.pop(), ()):
            if waiter not in seen and waiter != pid:
                seen.add(waiter)
                frontier.append(waiter)
    return len(seen)


def locks(sessions: Sequence[Sess]) -> str:
    """``pg_locks``: who blocks whom, for how long, the biggest chain first."""
    waiting = [s for s in sessions if s.blocked_by]
    if not waiting:
        return "no session is waiting on a lock held by another session"
    found = chains(sessions)
    top = found[0]
    head = (
        f"{plural(len(waiting), 'session')} waiting on locks; pid {top.root_pid} blocks "
        f"{len(top.waiters)} for {duration(top.longest_wait)}"
    )
    if len(found) > 1:
        head += f"; {len(found)} blocking chains"
    lines = [head]
    for chain in found[:MAX_CHAINS]:
        lines.append(_root_line(chain))
        waiter_lines = [_waiter_line(s) for s in chain.waiters]
        lines += listing("", waiter_lines, MAX_WAITERS_PER_CHAIN, indent="  ")
    if len(found) > MAX_CHAINS:
        lines.append(f"… {len(found) - MAX_CHAINS} more blocking chains")
    return bounded(lines)


def _root_line(chain: Chain) -> str:
    root = chain.root
    if chain.root_pid == 0:
        return "blocker: a prepared transaction (see pg_prepared_xacts; COMMIT/ROLLBACK PREPARED)"
    if root is None:
        return f"blocker pid {chain.root_pid}: not visible (ended meanwhile, or another role's)"
    note = ""
    if root.idle_in_xact:
        note = " — its client holds the transaction open and is doing nothing"
    elif root.blocked_by:
        note = " — part of a lock cycle (a deadlock the detector should break)"
    return f"blocker pid {root.pid} {root.who} {root.doing()}{note}: " + query_text(
        root.query, root.query_chars
    )


def _waiter_line(s: Sess) -> str:
    what = f" for {s.waiting_for}" if s.waiting_for else ""
    return (
        f"pid {s.pid} {s.who} waits {duration(_wait(s))}{what}, blocked by "
        f"{pids(s.blocked_by)}: {query_text(s.query, s.query_chars)}"
    )

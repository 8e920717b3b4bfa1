"""Programs as supervisord describes them, for the ``supervisor`` pack; no I/O.

:class:`Proc` is one process from ``getAllProcessInfo``. :func:`resolve` reads a ``name``
argument as supervisorctl would (a process, ``group:process``, a group) and otherwise
raises a ``ToolError`` naming close matches and a bounded list of known names. The status
text is built here too: aligned lines per process and a summary, problems first (what
needs attention should survive any truncation). The client is in
``tools.packs.supervisor_rpc``; the tools in ``tools.packs.supervisor``.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bot.errors import ToolError

KNOWN_NAMES_SHOWN = 20
RUNNING_STATES = frozenset({"STARTING", "RUNNING", "BACKOFF"})  # what stopProcess accepts


@dataclass(frozen=True, slots=True)
class Proc:
    """One process as ``getAllProcessInfo`` describes it."""

    name: str
    group: str
    state: str
    pid: int
    description: str
    exitstatus: int
    spawnerr: str

    @classmethod
    def of(cls, info: Mapping[str, Any]) -> Proc:
        return cls(
            name=str(info.get("name", "")),
            group=str(info.get("group", "")),
            state=str(info.get("statename", "UNKNOWN")),
            pid=int(info.get("pid") or 0),
            description=str(info.get("description", "")),
            exitstatus=int(info.get("exitstatus") or 0),
            spawnerr=str(info.get("spawnerr") or ""),
        )

    @property
    def spec(self) -> str:
        """The unambiguous name supervisord accepts."""
        return f"{self.group}:{self.name}"

    @property
    def label(self) -> str:
        """What supervisorctl shows: ``web`` alone when group and process share it."""
        return self.name if self.group == self.name else self.spec

    @property
    def running(self) -> bool:
        return self.state in RUNNING_STATES

    @property
    def unexpected_exit(self) -> bool:
        return self.state == "EXITED" and self.spawnerr.startswith("Bad exit code")

    @property
    def failing(self) -> bool:
        """Crash-looping (BACKOFF), given up on (FATAL) or exited with a code not in
        ``exitcodes``: its log says why."""
        return self.state in ("BACKOFF", "FATAL") or self.unexpected_exit

    def detail(self) -> str:
        """State details: pid and uptime, exit status, spawn error."""
        parts: list[str] = []
        spawnerr = self.spawnerr
        if self.state == "EXITED":
            unexpected = spawnerr.startswith("Bad exit code")
            parts.append(f"exit {self.exitstatus}" + (" (unexpected)" if unexpected else ""))
            if unexpected:
                spawnerr = ""
        description = self.description.strip()
        if description:
            parts.append(description)
        if spawnerr and spawnerr not in description:
            parts.append(spawnerr)
        return "; ".join(parts)


@dataclass(frozen=True, slots=True)
class Target:
    """What a ``name`` argument names: one process, or a whole group."""

    label: str
    members: tuple[Proc, ...]
    group: str | None = None  # set when the name is a group

    @property
    def proc(self) -> Proc:
        return self.members[0]


def resolve(procs: Sequence[Proc], name: str) -> Target:
    """The process or group ``name`` means, as supervisorctl would read it; otherwise
    ``ToolError`` with the known names (bounded) and close matches."""
    name = name.strip()
    if name.endswith((":*", ":")):
        group = name.rsplit(":", 1)[0]
        members = tuple(p for p in procs if p.group == group)
        if members:
            return Target(label=group, members=members, group=group)
    elif ":" in name:
        for p in procs:
            if p.spec == name:
                return Target(label=p.label, members=(p,))
    else:
        for p in procs:
            if p.group == name and p.name == name:
                return Target(label=p.label, members=(p,))
        members = tuple(p for p in procs if p.group == name)
        if members:
            return Target(label=name, members=members, group=name)
        same = [p for p in procs if p.name == name]
        if len(same) == 1:
            return Target(label=same[0].label, members=(same[0],))
        if len(same) > 1:
            options = ", ".join(p.spec for p in same[:KNOWN_NAMES_SHOWN])
            raise ToolError(f"{name!r} is ambiguous: say which one ({options})")
    raise ToolError(unknown_name(name, known_names(procs)))


def known_names(procs: Sequence[Proc]) -> list[str]:
    """Every name a user may pass: processes and (multi-process) groups."""
    names = {p.label for p in procs}
    names.update(p.group for p in procs if p.group != p.name)
    return sorted(names)


def unknown_name(name: str, known: Sequence[str]) -> str:
    """An error message naming close matches and at most ``KNOWN_NAMES_SHOWN`` names."""
    if not known:
        return f"no program named {name!r}: supervisord runs no programs"
    shown = ", ".join(known[:KNOWN_NAMES_SHOWN])
    more = len(known) - KNOWN_NAMES_SHOWN
    text = f"no program named {name!r}; known: {shown}"
    if more > 0:
        text += f" … and {more} more (supervisor_status lists them)"
    close = difflib.get_close_matches(name, known, n=3)
    if close:
        text += f". Did you mean {' or '.join(repr(c) for c in close)}?"
    return text


def status_lines(procs: Sequence[Proc]) -> list[str]:
    """One aligned line per process: name, state, details."""
    width = max((len(p.label) for p in procs), default=0)
    state_width = max((len(p.state) for p in procs), default=0)
    lines = []
    for p in procs:
        lines.append(f"{p.label:<{width}}  {p.state:<{state_width}}  {p.detail()}".rstrip())
    return lines


def summary(procs: Sequence[Proc]) -> str:
    counts: dict[str, int] = {}
    for p in procs:
        counts[p.state] = counts.get(p.state, 0) + 1
    states = ", ".join(f"{n} {state}" for state, n in sorted(counts.items(), key=_state_order))
    noun = "program" if len(procs) == 1 else "programs"
    return f"{len(procs)} {noun}: {states}"


def _state_order(item: tuple[str, int]) -> tuple[int, str]:
    # Problems first: what needs attention should survive any truncation.
    state = item[0]
    return (1 if state == "RUNNING" else 0, state)


def problems_first(procs: Sequence[Proc]) -> list[Proc]:
    """``procs`` with the failing ones first (BACKOFF, FATAL, an unexpected exit), then
    the others not RUNNING, then the RUNNING ones; each part by label."""
    return sorted(procs, key=lambda p: (not p.failing, p.state == "RUNNING", p.label))

"""The ``host`` pack: read-only views of the machine the bot runs on, read from ``/proc``.

Tools (docs/packs.md): ``host_cpu``, ``host_memory``, ``host_disk``,
``host_top_processes`` and ``host_tail_log(path, lines)``. Linux only; no dependency
beyond the standard library. Every answer is a few lines of text for the model.

``host_tail_log`` reads only files inside ``OPSLOOP_LOG_DIRS``: a path is absolute or
relative to the first log dir; ``..`` is refused outright; the path is checked as
written, again after resolving symlinks, and once more on the file actually opened
(``/proc/self/fd``), so a symlink swapped in between cannot lead outside. It reads
from the end of the file, at most ``TAIL_MAX_BYTES``, and keeps its answer within
its output bound by dropping the oldest lines first (the core cuts a long answer at
the head, which would lose the newest lines).

Sampling (CPU use, per-process CPU) waits with ``asyncio.sleep``; reading ``/proc``
for every process and ``statvfs`` on every mount run in a worker thread, ``statvfs``
with a time limit per mount (a hung network filesystem must not hang the call).

What each answer puts first is what an incident needs: a nearly full filesystem (by
space or inodes) or low memory is named before the table, a process by the name ``top``
shows beside a command line shortened so its script or main class survives. The texts
are built by pure functions of what was read (``cpu_summary``, ``memory_summary``,
``disk_summary``, ``top_summary``), which ``tests/tools/packs/golden`` renders exactly.

This module owns the tools and the text they answer with; the reading lives beside it:
``tools.packs.host_proc`` (``/proc``, ``statvfs``, units) and ``tools.packs.host_logs``
(which log files may be read, and their tails).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import Field

from bot.errors import ToolError
from tools.base import tool
from tools.packs import Pack, PackConfig, host_proc
from tools.packs.host_logs import (
    LOG_DIRS_SETTING,
    TAIL_DEFAULT,
    TAIL_MAX,
    TAIL_MAX_BYTES,
    TAIL_OUTPUT_BOUND,
    LogFiles,
)
from tools.packs.host_proc import (
    PSEUDO_FILESYSTEMS,
    CpuTimes,
    Mount,
    Proc,
    Usage,
    command_line,
    human_bytes,
    one_line,
    percent,
    read_cpu_times,
    read_meminfo,
    read_mounts,
    read_processes,
    read_text,
    short_bytes,
    usage_or_reason,
    user_name,
)

CPU_SAMPLE_S = 0.5
TOP_DEFAULT = 10
TOP_MAX = 20
DISK_MAX_MOUNTS = 40
DISK_WARN_PERCENT = 90
MEMORY_LOW_PERCENT = 10  # available below this share of the total is flagged


# -- host_cpu -----------------------------------------------------------------------


def cpu_summary(before: CpuTimes, after: CpuTimes, cores: int, seconds: float) -> str:
    total = after.total - before.total

    def share(*fields: str) -> float:
        spent = sum(getattr(after, f) - getattr(before, f) for f in fields)
        return percent(spent, total)

    idle = share("idle", "iowait")
    lines = [
        f"CPU: {100.0 - idle if total > 0 else 0.0:.1f}% busy over {seconds:.1f} s "
        f"(user {share('user', 'nice'):.1f}%, system {share('system', 'irq', 'softirq'):.1f}%, "
        f"iowait {share('iowait'):.1f}%, steal {share('steal'):.1f}%)"
    ]
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else cores
    usable_note = f" ({usable} usable by the bot)" if usable != cores else ""
    lines.append(f"Cores: {cores} online{usable_note}")
    with contextlib.suppress(OSError, ValueError, IndexError):
        fields = read_text(f"{host_proc.PROC}/loadavg").split()
        one, five, fifteen = (float(v) for v in fields[:3])
        running, _, tasks = fields[3].partition("/")
        lines.append(
            f"Load average: {one:.2f} {five:.2f} {fifteen:.2f} (1/5/15 min; "
            f"{one / max(cores, 1):.2f} per core over 1 min)"
        )
        lines.append(f"Tasks: {running} running of {tasks}")
    return "\n".join(lines)


async def host_cpu_text(sample_s: float = CPU_SAMPLE_S) -> str:
    try:
        before, _ = read_cpu_times()
        started = time.monotonic()
        await asyncio.sleep(sample_s)
        after, cores = read_cpu_times()
    except OSError as exc:
        raise ToolError(f"cannot read {host_proc.PROC}/stat: {exc.strerror or exc}") from None
    return cpu_summary(before, after, cores, time.monotonic() - started)


# -- host_memory --------------------------------------------------------------------


def memory_summary(
    info: Mapping[str, int], *, oom_kills: int | None = None, pressure: str | None = None
) -> str:
    """``host_memory``'s answer from ``/proc/meminfo`` (bytes), the ``oom_kill`` count of
    ``/proc/vmstat`` and the text of ``/proc/pressure/memory`` (each when readable)."""
    total = info.get("MemTotal", 0)
    if not total:
        raise ToolError(f"cannot read memory: no MemTotal in {host_proc.PROC}/meminfo")
    free = info.get("MemFree", 0)
    cache = info.get("Buffers", 0) + info.get("Cached", 0) + info.get("SReclaimable", 0)
    available = info.get("MemAvailable", free + cache)
    used = total - available
    low = "  <- low" if percent(available, total) < MEMORY_LOW_PERCENT else ""
    lines = [
        f"Memory: {human_bytes(total)} total, {human_bytes(used)} used "
        f"({percent(used, total):.0f}%), {human_bytes(available)} available{low}",
        f"  free {human_bytes(free)}, buff/cache {human_bytes(cache)}, "
        f"shared {human_bytes(info.get('Shmem', 0))}, dirty {human_bytes(info.get('Dirty', 0))}",
    ]
    swap_total = info.get("SwapTotal", 0)
    if swap_total:
        swap_used = swap_total - info.get("SwapFree", 0)
        lines.append(
            f"Swap: {human_bytes(swap_total)} total, {human_bytes(swap_used)} used "
            f"({percent(swap_used, swap_total):.0f}%)"
        )
    else:
        lines.append("Swap: none configured")
    stalls = _pressure(pressure) if pressure else ""
    if stalls == "none":
        lines.append("Memory pressure (PSI): none")
    elif stalls:
        lines.append(f"Memory pressure (PSI, time stalled over 10 s/1 min/5 min): {stalls}")
    if oom_kills:
        lines.append(f"OOM killer: {oom_kills} processes killed since boot")
    return "\n".join(lines)


def _pressure(text: str) -> str:
    """``none``, or ``some 12.3/8.1/2.0%, full 4.1/2.0/0.5%`` (the 10 s, 1 min and 5 min
    averages) from ``/proc/pressure/memory``; ``""`` when unreadable."""
    parts: list[str] = []
    stalled = False
    for line in text.splitlines():
        kind, *fields = line.split() or [""]
        values = dict(f.split("=", 1) for f in fields if "=" in f)
        try:
            averages = [float(values[k]) for k in ("avg10", "avg60", "avg300")]
        except (KeyError, ValueError):
            continue
        stalled = stalled or any(averages)
        parts.append(f"{kind} {'/'.join(f'{a:.1f}' for a in averages)}%")
    if not parts:
        return ""
    return ", ".join(parts) if stalled else "none"


def _oom_kills() -> int | None:
    for line in read_text(f"{host_proc.PROC}/vmstat").splitlines():
        name, _, value = line.partition(" ")
        if name == "oom_kill" and value.strip().isdigit():
            return int(value)
    return None


async def host_memory_text() -> str:
    try:
        info = read_meminfo()
    except OSError as exc:
        raise ToolError(f"cannot read {host_proc.PROC}/meminfo: {exc.strerror or exc}") from None
    oom_kills = pressure = None
    with contextlib.suppress(OSError):  # older kernels, containers: not there
        oom_kills = _oom_kills()
    with contextlib.suppress(OSError):
        pressure = read_text(f"{host_proc.PROC}/pressure/memory")
    return memory_summary(info, oom_kills=oom_kills, pressure=pressure)


# -- host_disk ----------------------------------------------------------------------


async def host_disk_text() -> str:
    try:
        mounts = await asyncio.to_thread(read_mounts)
    except OSError as exc:
        raise ToolError(
            f"cannot read {host_proc.PROC}/self/mounts: {exc.strerror or exc}"
        ) from None
    usages = await asyncio.gather(*(usage_or_reason(m.point) for m in mounts))
    rows: list[tuple[Mount, Usage]] = []
    problems: list[str] = []
    devices: set[int] = set()
    for mount, usage in zip(mounts, usages, strict=True):
        if isinstance(usage, str):
            problems.append(f"{mount.point} ({mount.fstype}): {usage}")
        elif usage.size > 0 and usage.device not in devices:  # bind mounts: once
            devices.add(usage.device)
            rows.append((mount, usage))
    return disk_summary(rows, problems)


def _inode_percent(usage: Usage) -> float:
    return percent(usage.inodes_used, usage.inodes) if usage.inodes else 0.0


def _full(usage: Usage) -> str:
    """Why a filesystem is nearly full (space, inodes or both), or ``""``."""
    reasons = []
    if usage.percent >= DISK_WARN_PERCENT:
        reasons.append(f"{usage.percent}% used, {short_bytes(usage.avail)} left")
    if _inode_percent(usage) >= DISK_WARN_PERCENT:
        reasons.append(f"inodes {_inode_percent(usage):.0f}% used")
    return ", ".join(reasons)


def disk_summary(rows: Sequence[tuple[Mount, Usage]], unreadable: Sequence[str]) -> str:
    """``host_disk``'s answer: the nearly full filesystems named first (space or inodes:
    either makes writes fail), then a row per filesystem; the nearly full ones are never
    among those cut."""
    if not rows and not unreadable:
        return "No real filesystems mounted (pseudo filesystems such as tmpfs are not shown)."
    full = [(mount, usage) for mount, usage in rows if _full(usage)]
    room = max(DISK_MAX_MOUNTS - len(full), 0)
    others = [(mount, usage) for mount, usage in rows if not _full(usage)][:room]
    shown = sorted([*full, *others], key=lambda row: row[0].point)
    lines = []
    if full:
        named = "; ".join(f"{mount.point} ({_full(usage)})" for mount, usage in full)
        lines.append(f"Nearly full (>= {DISK_WARN_PERCENT}%): {named}")
    width = max([len("Mount")] + [len(m.point) for m, _ in shown])
    lines.append(
        f"{'Mount':<{width}}  {'Size':>6} {'Used':>6} {'Avail':>6} {'Use%':>5} {'Inode%':>6}  FS"
    )
    for mount, usage in shown:
        inodes = f"{_inode_percent(usage):.0f}%" if usage.inodes else "-"
        flag = "  <- nearly full" if _full(usage) else ""
        lines.append(
            f"{mount.point:<{width}}  {short_bytes(usage.size):>6} {short_bytes(usage.used):>6} "
            f"{short_bytes(usage.avail):>6} {usage.percent:>4}% {inodes:>6}  "
            f"{mount.fstype} {mount.source}{flag}"
        )
    if len(rows) > len(shown):
        lines.append(f"… and {len(rows) - len(shown)} more filesystems")
    lines.extend(f"Unreadable: {p}" for p in unreadable)
    return "\n".join(lines)


# -- host_top_processes -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Row:
    proc: Proc
    cpu: float  # percent of one core, as top shows it
    command: str
    user: str

    @property
    def name(self) -> str:
        """What ``top`` and ``ps -o comm`` show: the name a process gives itself
        (``prctl(PR_SET_NAME)``, ``setproctitle``), which its arguments may not say."""
        return one_line(self.proc.comm) or "?"


def _top_rows(
    before: dict[tuple[int, int], Proc],
    after: dict[tuple[int, int], Proc],
    seconds: float,
    by: str,
    limit: int,
) -> list[Row]:
    hz = os.sysconf("SC_CLK_TCK")
    cpu: dict[tuple[int, int], float] = {}
    for key, proc in after.items():
        previous = before.get(key)
        # A process started during the sample spent all its ticks inside it.
        spent = proc.ticks - previous.ticks if previous is not None else proc.ticks
        cpu[key] = percent(max(spent, 0), hz * seconds)
    if by == "memory":
        order = sorted(after, key=lambda k: (after[k].rss, cpu[k]), reverse=True)
    else:
        order = sorted(after, key=lambda k: (cpu[k], after[k].rss), reverse=True)
    return [
        Row(
            proc=after[k],
            cpu=cpu[k],
            command=command_line(after[k].pid, after[k].comm),
            user=user_name(after[k].uid),
        )
        for k in order[:limit]
    ]


def top_summary(
    rows: Sequence[Row], *, processes: int, by: str, seconds: float, total_memory: int
) -> str:
    """The table ``host_top_processes`` answers with: a row per process, its name (as
    ``top`` shows it) beside its command line."""
    title = "CPU" if by == "cpu" else "memory (RSS)"
    width = max([len("NAME")] + [len(row.name) for row in rows])
    lines = [
        f"Top {len(rows)} of {processes} processes by {title}; CPU sampled over {seconds:.1f} s "
        "(100% = one core):",
        f"{'PID':>7} {'USER':<10} {'%CPU':>6} {'%MEM':>5} {'RSS':>6} S {'NAME':<{width}} COMMAND",
    ]
    for row in rows:
        proc = row.proc
        lines.append(
            f"{proc.pid:>7} {row.user[:10]:<10} {row.cpu:>6.1f} "
            f"{percent(proc.rss, total_memory):>5.1f} {short_bytes(proc.rss):>6} "
            f"{proc.state} {row.name:<{width}} {row.command}"
        )
    return "\n".join(lines)


async def host_top_processes_text(
    by: str = "cpu", limit: int = TOP_DEFAULT, sample_s: float = CPU_SAMPLE_S
) -> str:
    if by not in ("cpu", "memory"):
        raise ToolError(f"by must be 'cpu' or 'memory', not {by!r}")
    limit = min(max(limit, 1), TOP_MAX)
    try:
        before = await asyncio.to_thread(read_processes)
        started = time.monotonic()
        await asyncio.sleep(sample_s)
        after = await asyncio.to_thread(read_processes)
        seconds = time.monotonic() - started
        total_memory = read_meminfo().get("MemTotal", 0)
    except OSError as exc:
        raise ToolError(f"cannot read {host_proc.PROC}: {exc.strerror or exc}") from None
    rows = await asyncio.to_thread(_top_rows, before, after, seconds, by, limit)
    return top_summary(
        rows, processes=len(after), by=by, seconds=seconds, total_memory=total_memory
    )


# -- the pack -----------------------------------------------------------------------


def build(config: PackConfig) -> Pack:
    """The host pack; ``ConfigError`` for a relative ``OPSLOOP_LOG_DIRS`` entry."""
    logs = LogFiles(config.log_dirs)

    @tool(parallel=True)
    async def host_cpu() -> str:
        """CPU use of this host: busy % over a short sample (user, system, iowait, steal),
        core count, load averages and task counts."""
        return await host_cpu_text()

    @tool(parallel=True)
    async def host_memory() -> str:
        """Memory of this host: total, used, available, buffers/cache, swap, memory
        pressure (PSI) and OOM kills since boot."""
        return await host_memory_text()

    @tool(parallel=True)
    async def host_disk() -> str:
        """Disk space per mounted filesystem of this host: size, used, available, use %
        and inode use %, the nearly full ones (space or inodes) named first (pseudo
        filesystems such as tmpfs and proc are skipped)."""
        return await host_disk_text()

    @tool(parallel=True)
    async def host_top_processes(
        by: Literal["cpu", "memory"] = "cpu",
        limit: Annotated[int, Field(ge=1, le=TOP_MAX)] = TOP_DEFAULT,
    ) -> str:
        """The processes of this host using the most CPU (sampled over half a second) or
        memory (resident set size), with PID, user, process name (as top shows it) and
        command line.

        Args:
            by: Rank by ``cpu`` or by ``memory``.
            limit: How many processes to list (at most 20).
        """
        return await host_top_processes_text(by, limit)

    @tool(parallel=True, output_bound=TAIL_OUTPUT_BOUND)
    async def host_tail_log(
        path: str,
        lines: Annotated[int, Field(ge=1, le=TAIL_MAX)] = TAIL_DEFAULT,
    ) -> str:
        """The last lines of a log file on this host. Only files inside the configured
        log directories (OPSLOOP_LOG_DIRS) can be read; naming a directory lists its files.

        Args:
            path: The log file: an absolute path, or one relative to the first log directory.
            lines: How many lines from the end (at most 500).
        """
        return await asyncio.to_thread(logs.tail, path, lines)

    return Pack(tools=(host_cpu, host_memory, host_disk, host_top_processes, host_tail_log))


__all__ = [
    "LOG_DIRS_SETTING",
    "PSEUDO_FILESYSTEMS",
    "TAIL_MAX_BYTES",
    "TAIL_OUTPUT_BOUND",
    "CpuTimes",
    "LogFiles",
    "build",
    "cpu_summary",
    "host_cpu_text",
    "host_disk_text",
    "host_memory_text",
    "host_top_processes_text",
    "human_bytes",
    "memory_summary",
]

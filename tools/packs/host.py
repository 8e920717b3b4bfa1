"""The ``host`` pack: read-only views of the machine the bot runs on, read from ``/proc``.

Tools (DESIGN.md, "Built-in packs"): ``host_cpu``, ``host_memory``, ``host_disk``,
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
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import os
import pwd
import re
import stat
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Annotated, Literal

from pydantic import Field

from bot.errors import ConfigError, ToolError
from tools.base import tool
from tools.packs import Pack, PackConfig

PROC = "/proc"
CPU_SAMPLE_S = 0.5
TOP_DEFAULT = 10
TOP_MAX = 20
COMMAND_CHARS = 80
STATVFS_TIMEOUT_S = 2.0
DISK_MAX_MOUNTS = 40
DISK_WARN_PERCENT = 90
TAIL_DEFAULT = 100
TAIL_MAX = 500
TAIL_MAX_BYTES = 256 * 1024
TAIL_BLOCK = 64 * 1024
TAIL_LINE_CHARS = 400
TAIL_OUTPUT_CHARS = 12_000
TAIL_OUTPUT_BOUND = 16_000  # the tool's bound; our own text stays under it
LOG_DIRS_SETTING = "OPSLOOP_LOG_DIRS"

# Filesystems that hold no user data (or duplicate another's): never shown by host_disk.
PSEUDO_FILESYSTEMS = frozenset(
    {
        "autofs",
        "binfmt_misc",
        "bpf",
        "cgroup",
        "cgroup2",
        "configfs",
        "debugfs",
        "devfs",
        "devpts",
        "devtmpfs",
        "efivarfs",
        "fuse.gvfsd-fuse",
        "fuse.lxcfs",
        "fuse.portal",
        "fusectl",
        "hugetlbfs",
        "mqueue",
        "nfsd",
        "nsfs",
        "proc",
        "pstore",
        "ramfs",
        "rpc_pipefs",
        "securityfs",
        "selinuxfs",
        "squashfs",
        "sysfs",
        "tmpfs",
        "tracefs",
    }
)


# -- formatting ---------------------------------------------------------------------


def human_bytes(n: float) -> str:
    """``1536`` → ``1.5 KiB``; whole bytes below 1 KiB."""
    if n < 1024:
        return f"{int(n)} B"
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        n /= 1024
        if n < 1024 or unit == "PiB":
            return f"{n:.1f} {unit}"
    raise AssertionError("unreachable")


def _short_bytes(n: float) -> str:
    """A table cell: ``981M``, ``40G``, ``1.5T``."""
    for unit in ("B", "K", "M", "G", "T", "P"):
        if n < 1024 or unit == "P":
            return f"{n:.1f}{unit}" if n < 10 and unit != "B" else f"{n:.0f}{unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _percent(part: float, whole: float) -> float:
    return 100.0 * part / whole if whole > 0 else 0.0


def _ago(seconds: float) -> str:
    seconds = max(seconds, 0.0)
    if seconds < 90:
        return f"{seconds:.0f} s ago"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min ago"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h ago"
    return f"{seconds / 86400:.1f} days ago"


def _read_text(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


# -- host_cpu -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CpuTimes:
    """The aggregate ``cpu`` line of ``/proc/stat``, in clock ticks."""

    user: int
    nice: int
    system: int
    idle: int
    iowait: int
    irq: int
    softirq: int
    steal: int

    @property
    def total(self) -> int:  # guest time is already counted in user
        return (
            self.user
            + self.nice
            + self.system
            + self.idle
            + self.iowait
            + self.irq
            + self.softirq
            + self.steal
        )


def read_cpu_times() -> tuple[CpuTimes, int]:
    """The aggregate CPU times and the number of online CPUs."""
    aggregate: CpuTimes | None = None
    cores = 0
    for line in _read_text(f"{PROC}/stat").splitlines():
        if line.startswith("cpu "):
            values = [int(v) for v in line.split()[1:9]]
            values += [0] * (8 - len(values))
            aggregate = CpuTimes(*values)
        elif line.startswith("cpu") and line[3:4].isdigit():
            cores += 1
    if aggregate is None:
        raise ToolError(f"cannot read CPU times: no 'cpu' line in {PROC}/stat")
    return aggregate, cores or (os.cpu_count() or 1)


def cpu_summary(before: CpuTimes, after: CpuTimes, cores: int, seconds: float) -> str:
    total = after.total - before.total

    def share(*fields: str) -> float:
        spent = sum(getattr(after, f) - getattr(before, f) for f in fields)
        return _percent(spent, total)

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
        fields = _read_text(f"{PROC}/loadavg").split()
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
        raise ToolError(f"cannot read {PROC}/stat: {exc.strerror or exc}") from None
    return cpu_summary(before, after, cores, time.monotonic() - started)


# -- host_memory --------------------------------------------------------------------


def read_meminfo() -> dict[str, int]:
    """``/proc/meminfo`` in bytes."""
    values: dict[str, int] = {}
    for line in _read_text(f"{PROC}/meminfo").splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if not parts or not parts[0].isdigit():
            continue
        scale = 1024 if len(parts) > 1 and parts[1] == "kB" else 1
        values[name.strip()] = int(parts[0]) * scale
    return values


def memory_summary(info: dict[str, int]) -> str:
    total = info.get("MemTotal", 0)
    if not total:
        raise ToolError(f"cannot read memory: no MemTotal in {PROC}/meminfo")
    free = info.get("MemFree", 0)
    cache = info.get("Buffers", 0) + info.get("Cached", 0) + info.get("SReclaimable", 0)
    available = info.get("MemAvailable", free + cache)
    used = total - available
    lines = [
        f"Memory: {human_bytes(total)} total, {human_bytes(used)} used "
        f"({_percent(used, total):.0f}%), {human_bytes(available)} available",
        f"  free {human_bytes(free)}, buff/cache {human_bytes(cache)}, "
        f"shared {human_bytes(info.get('Shmem', 0))}, dirty {human_bytes(info.get('Dirty', 0))}",
    ]
    swap_total = info.get("SwapTotal", 0)
    if swap_total:
        swap_used = swap_total - info.get("SwapFree", 0)
        lines.append(
            f"Swap: {human_bytes(swap_total)} total, {human_bytes(swap_used)} used "
            f"({_percent(swap_used, swap_total):.0f}%)"
        )
    else:
        lines.append("Swap: none configured")
    return "\n".join(lines)


async def host_memory_text() -> str:
    try:
        info = read_meminfo()
    except OSError as exc:
        raise ToolError(f"cannot read {PROC}/meminfo: {exc.strerror or exc}") from None
    return memory_summary(info)


# -- host_disk ----------------------------------------------------------------------

_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")


def _unescape_mount(text: str) -> str:
    """``/mnt/my\\040disk`` → ``/mnt/my disk`` (how /proc/mounts writes special chars)."""
    return _OCTAL_ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), text)


@dataclass(frozen=True, slots=True)
class Mount:
    source: str
    point: str
    fstype: str


def read_mounts() -> list[Mount]:
    """Real filesystems from ``/proc/self/mounts``; a mount point mounted over keeps
    only its last (visible) mount."""
    by_point: dict[str, Mount] = {}
    for line in _read_text(f"{PROC}/self/mounts").splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        source, point, fstype = (_unescape_mount(p) for p in parts[:3])
        by_point.pop(point, None)
        if fstype not in PSEUDO_FILESYSTEMS:
            by_point[point] = Mount(source=source, point=point, fstype=fstype)
    return sorted(by_point.values(), key=lambda m: m.point)


@dataclass(frozen=True, slots=True)
class Usage:
    device: int
    size: int
    used: int
    avail: int
    inodes: int
    inodes_used: int

    @property
    def percent(self) -> int:
        """As ``df``: used / (used + available to users), rounded up."""
        whole = self.used + self.avail
        return -(-100 * self.used // whole) if whole else 0


def _usage(point: str) -> Usage:
    st = os.statvfs(point)
    return Usage(
        device=os.stat(point).st_dev,
        size=st.f_blocks * st.f_frsize,
        used=(st.f_blocks - st.f_bfree) * st.f_frsize,
        avail=st.f_bavail * st.f_frsize,
        inodes=st.f_files,
        inodes_used=st.f_files - st.f_ffree,
    )


async def _usage_or_reason(point: str) -> Usage | str:
    try:
        return await asyncio.wait_for(asyncio.to_thread(_usage, point), STATVFS_TIMEOUT_S)
    except TimeoutError:
        return f"no answer within {STATVFS_TIMEOUT_S:g} s"
    except OSError as exc:
        return exc.strerror or str(exc)


async def host_disk_text() -> str:
    try:
        mounts = await asyncio.to_thread(read_mounts)
    except OSError as exc:
        raise ToolError(f"cannot read {PROC}/self/mounts: {exc.strerror or exc}") from None
    usages = await asyncio.gather(*(_usage_or_reason(m.point) for m in mounts))
    rows: list[tuple[Mount, Usage]] = []
    problems: list[str] = []
    devices: set[int] = set()
    for mount, usage in zip(mounts, usages, strict=True):
        if isinstance(usage, str):
            problems.append(f"{mount.point} ({mount.fstype}): {usage}")
        elif usage.size > 0 and usage.device not in devices:  # bind mounts: once
            devices.add(usage.device)
            rows.append((mount, usage))
    if not rows and not problems:
        return "No real filesystems mounted (pseudo filesystems such as tmpfs are not shown)."
    shown = rows[:DISK_MAX_MOUNTS]
    width = max([len("Mount")] + [len(m.point) for m, _ in shown])
    lines = [
        f"{'Mount':<{width}}  {'Size':>6} {'Used':>6} {'Avail':>6} {'Use%':>5} {'Inode%':>6}  FS"
    ]
    for mount, usage in shown:
        inodes = f"{_percent(usage.inodes_used, usage.inodes):.0f}%" if usage.inodes else "-"
        flag = "  <- nearly full" if usage.percent >= DISK_WARN_PERCENT else ""
        lines.append(
            f"{mount.point:<{width}}  {_short_bytes(usage.size):>6} {_short_bytes(usage.used):>6} "
            f"{_short_bytes(usage.avail):>6} {usage.percent:>4}% {inodes:>6}  "
            f"{mount.fstype} {mount.source}{flag}"
        )
    if len(rows) > len(shown):
        lines.append(f"… and {len(rows) - len(shown)} more filesystems")
    lines.extend(f"Unreadable: {p}" for p in problems)
    return "\n".join(lines)


# -- host_top_processes -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Proc:
    pid: int
    comm: str
    state: str
    ticks: int  # utime + stime
    start: int  # starttime, ticks after boot: with pid, tells a reused pid apart
    rss: int  # bytes
    uid: int


def _read_proc(pid: int, page_size: int) -> Proc | None:
    base = f"{PROC}/{pid}"
    try:
        with open(f"{base}/stat", "rb") as f:
            raw = f.read().decode("utf-8", errors="replace")
        uid = os.stat(base).st_uid
    except OSError:
        return None  # gone, or not ours to read
    # The command name is in parentheses and may itself hold spaces and parentheses.
    head, _, tail = raw.rpartition(")")
    comm = head.partition("(")[2]
    fields = tail.split()
    try:
        return Proc(
            pid=pid,
            comm=comm,
            state=fields[0],
            ticks=int(fields[11]) + int(fields[12]),
            start=int(fields[19]),
            rss=int(fields[21]) * page_size,
            uid=uid,
        )
    except (IndexError, ValueError):
        return None


def read_processes() -> dict[tuple[int, int], Proc]:
    """Every process we can read, by ``(pid, start time)``."""
    page_size = os.sysconf("SC_PAGE_SIZE")
    found: dict[tuple[int, int], Proc] = {}
    for name in os.listdir(PROC):
        if name.isdigit():
            proc = _read_proc(int(name), page_size)
            if proc is not None:
                found[(proc.pid, proc.start)] = proc
    return found


def _command(pid: int, comm: str) -> str:
    try:
        with open(f"{PROC}/{pid}/cmdline", "rb") as f:
            raw = f.read(4096)
    except OSError:
        raw = b""
    text = raw.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", errors="replace").strip()
    text = text or f"[{comm}]"  # kernel threads have no command line
    return text if len(text) <= COMMAND_CHARS else text[: COMMAND_CHARS - 1] + "…"


_users: dict[int, str] = {}


def _user(uid: int) -> str:
    if uid not in _users:
        try:
            _users[uid] = pwd.getpwuid(uid).pw_name
        except KeyError:
            _users[uid] = str(uid)
    return _users[uid]


@dataclass(frozen=True, slots=True)
class Row:
    proc: Proc
    cpu: float  # percent of one core, as top shows it
    command: str
    user: str


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
        cpu[key] = _percent(max(spent, 0), hz * seconds)
    if by == "memory":
        order = sorted(after, key=lambda k: (after[k].rss, cpu[k]), reverse=True)
    else:
        order = sorted(after, key=lambda k: (cpu[k], after[k].rss), reverse=True)
    return [
        Row(
            proc=after[k],
            cpu=cpu[k],
            command=_command(after[k].pid, after[k].comm),
            user=_user(after[k].uid),
        )
        for k in order[:limit]
    ]


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
        raise ToolError(f"cannot read {PROC}: {exc.strerror or exc}") from None
    rows = await asyncio.to_thread(_top_rows, before, after, seconds, by, limit)
    title = "CPU" if by == "cpu" else "memory (RSS)"
    lines = [
        f"Top {len(rows)} of {len(after)} processes by {title}; CPU sampled over {seconds:.1f} s "
        "(100% = one core):",
        f"{'PID':>7} {'USER':<10} {'%CPU':>6} {'%MEM':>5} {'RSS':>6} S COMMAND",
    ]
    for row in rows:
        proc = row.proc
        lines.append(
            f"{proc.pid:>7} {row.user[:10]:<10} {row.cpu:>6.1f} "
            f"{_percent(proc.rss, total_memory):>5.1f} {_short_bytes(proc.rss):>6} "
            f"{proc.state} {row.command}"
        )
    return "\n".join(lines)


# -- host_tail_log ------------------------------------------------------------------


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


class LogFiles:
    """Which files ``host_tail_log`` may read, and reading their tails."""

    def __init__(self, log_dirs: Sequence[str]) -> None:
        dirs = [d.strip() for d in log_dirs if d.strip()]
        for folder in dirs:
            if not os.path.isabs(folder):
                raise ConfigError(f"{LOG_DIRS_SETTING}: {folder!r} is not an absolute path")
        self.dirs = tuple(os.path.normpath(d) for d in dirs)

    def _shown_dirs(self) -> str:
        return ", ".join(self.dirs)

    def _resolved_dirs(self) -> list[str]:
        return [os.path.realpath(d) for d in self.dirs]

    def candidate(self, path: str) -> str:
        """The path as asked for, made absolute and checked as written."""
        if not self.dirs:
            raise ToolError(
                f"host_tail_log is not enabled: {LOG_DIRS_SETTING} names no log directories"
            )
        path = path.strip()
        if not path:
            raise ToolError("path is empty; give a file under " + self._shown_dirs())
        if "\0" in path:
            raise ToolError("path contains a NUL character; refused")
        if ".." in PurePosixPath(path).parts:
            raise ToolError(f"refused: {path!r} contains '..'; name the file directly")
        full = os.path.normpath(path if os.path.isabs(path) else os.path.join(self.dirs[0], path))
        if not any(_inside(full, d) for d in (*self.dirs, *self._resolved_dirs())):
            raise ToolError(f"refused: {full} is outside {LOG_DIRS_SETTING} ({self._shown_dirs()})")
        return full

    def _check_resolved(self, shown: str, resolved: str) -> None:
        if not any(_inside(resolved, d) for d in self._resolved_dirs()):
            raise ToolError(
                f"refused: {shown} resolves (through a symlink) to a path outside "
                f"{LOG_DIRS_SETTING} ({self._shown_dirs()})"
            )

    def tail(self, path: str, lines: int) -> str:
        """Blocking: run it in a thread."""
        full = self.candidate(path)
        resolved = os.path.realpath(full)
        self._check_resolved(full, resolved)
        flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC  # a FIFO won't block
        try:
            fd = os.open(resolved, flags)
        except FileNotFoundError:
            raise ToolError(f"no such file: {full}") from None
        except PermissionError:
            raise ToolError(f"permission denied: {full}") from None
        except OSError as exc:
            raise ToolError(f"cannot open {full}: {exc.strerror or exc}") from None
        try:
            # What was opened, not what the name pointed to a moment earlier.
            with contextlib.suppress(OSError):
                self._check_resolved(full, os.readlink(f"{PROC}/self/fd/{fd}"))
            info = os.fstat(fd)
            if stat.S_ISDIR(info.st_mode):
                raise ToolError(f"{full} is a directory; {self._listing(resolved)}")
            if not stat.S_ISREG(info.st_mode):
                raise ToolError(f"refused: {full} is not a regular file")
            return self._render(full, fd, info, lines)
        finally:
            os.close(fd)

    def _listing(self, folder: str) -> str:
        try:
            entries = [e for e in os.scandir(folder) if e.is_file()]
        except OSError as exc:
            return f"cannot list it: {exc.strerror or exc}"
        if not entries:
            return "it holds no files"
        newest = sorted(entries, key=lambda e: e.stat().st_mtime, reverse=True)
        names = ", ".join(e.name for e in newest[:20])
        more = f" (and {len(newest) - 20} more)" if len(newest) > 20 else ""
        return f"files in it, newest first: {names}{more}"

    def _render(self, shown: str, fd: int, info: os.stat_result, want: int) -> str:
        want = min(max(want, 1), TAIL_MAX)
        data, start, complete = _read_tail(fd, info.st_size, want)
        modified = datetime.datetime.fromtimestamp(info.st_mtime, datetime.UTC)
        header = (
            f"{shown} ({human_bytes(info.st_size)}, modified "
            f"{modified:%Y-%m-%d %H:%M:%S} UTC, {_ago(time.time() - info.st_mtime)})"
        )
        if not data:
            return f"{header}: empty file"
        text = data.decode("utf-8", errors="replace").replace("\0", "\\0")
        found = text.splitlines()
        # An incomplete first line began before the bytes read: if shown, it is marked.
        fragment = not complete and len(found) <= want
        found = found[-want:]
        notes: list[str] = []
        if start > 0 and len(found) < want:
            notes.append(f"only the last {human_bytes(TAIL_MAX_BYTES)} read")
        cut = [_cut_line(line) for line in found]
        if fragment:
            cut[0] = "…" + cut[0]
        if any(len(line) > TAIL_LINE_CHARS for line in found):
            notes.append(f"lines longer than {TAIL_LINE_CHARS} chars cut")
        dropped = 0
        size = sum(len(line) + 1 for line in cut)
        while cut and size > TAIL_OUTPUT_CHARS:
            size -= len(cut[0]) + 1
            cut.pop(0)
            dropped += 1
        if dropped:
            notes.append(f"{dropped} older lines dropped to stay under {TAIL_OUTPUT_CHARS} chars")
        note = f" [{'; '.join(notes)}]" if notes else ""
        return f"{header}: last {len(cut)} lines{note}\n" + "\n".join(cut)


def _cut_line(line: str) -> str:
    if len(line) <= TAIL_LINE_CHARS:
        return line
    return f"{line[:TAIL_LINE_CHARS]}…[+{len(line) - TAIL_LINE_CHARS} chars]"


def _read_tail(fd: int, size: int, lines: int) -> tuple[bytes, int, bool]:
    """The end of the file holding ``lines`` lines, read backwards in blocks and at most
    ``TAIL_MAX_BYTES`` of it: ``(bytes, their offset, whether they start a line)``."""
    floor = max(0, size - TAIL_MAX_BYTES)
    start = size
    blocks: list[bytes] = []
    newlines = 0
    while start > floor:
        begin = max(floor, start - TAIL_BLOCK)
        block = os.pread(fd, start - begin, begin)
        blocks.append(block)
        newlines += block.count(b"\n")
        start = begin
        if newlines > lines:  # one more newline than lines: the first of them is whole
            break
    data = b"".join(reversed(blocks))
    return data, start, start == 0 or os.pread(fd, 1, start - 1) == b"\n"


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
        """Memory of this host: total, used, available, buffers/cache, and swap."""
        return await host_memory_text()

    @tool(parallel=True)
    async def host_disk() -> str:
        """Disk space per mounted filesystem of this host: size, used, available, use %
        and inode use % (pseudo filesystems such as tmpfs and proc are skipped)."""
        return await host_disk_text()

    @tool(parallel=True)
    async def host_top_processes(
        by: Literal["cpu", "memory"] = "cpu",
        limit: Annotated[int, Field(ge=1, le=TOP_MAX)] = TOP_DEFAULT,
    ) -> str:
        """The processes of this host using the most CPU (sampled over half a second) or
        memory (resident set size), with PID, user and command line.

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

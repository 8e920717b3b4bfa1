"""Reading the machine for the ``host`` pack: ``/proc`` (CPU times, memory, mounts,
processes) and ``statvfs``, plus the units the pack's answers are written in.

Everything here is read from :data:`PROC` at call time (tests point it at a fake tree).
The readers block: callers run the per-process ones in a worker thread; ``statvfs`` runs
in one with a time limit per mount (:data:`STATVFS_TIMEOUT_S`: a hung network filesystem
must not hang the call). Nothing here is a tool; ``tools.packs.host`` builds those.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import re
from collections.abc import Sequence
from dataclasses import dataclass

from bot.errors import ToolError

PROC = "/proc"
COMMAND_CHARS = 80
STATVFS_TIMEOUT_S = 2.0

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


# -- units --------------------------------------------------------------------------


def human_bytes(n: float) -> str:
    """``1536`` → ``1.5 KiB``; whole bytes below 1 KiB."""
    if n < 1024:
        return f"{int(n)} B"
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        n /= 1024
        if n < 1024 or unit == "PiB":
            return f"{n:.1f} {unit}"
    raise AssertionError("unreachable")


def short_bytes(n: float) -> str:
    """A table cell: ``981M``, ``40G``, ``1.5T``."""
    for unit in ("B", "K", "M", "G", "T", "P"):
        if n < 1024 or unit == "P":
            return f"{n:.1f}{unit}" if n < 10 and unit != "B" else f"{n:.0f}{unit}"
        n /= 1024
    raise AssertionError("unreachable")


def percent(part: float, whole: float) -> float:
    return 100.0 * part / whole if whole > 0 else 0.0


def ago(seconds: float) -> str:
    seconds = max(seconds, 0.0)
    if seconds < 90:
        return f"{seconds:.0f} s ago"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min ago"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h ago"
    return f"{seconds / 86400:.1f} days ago"


def read_text(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


# -- CPU and memory -----------------------------------------------------------------


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
    for line in read_text(f"{PROC}/stat").splitlines():
        if line.startswith("cpu "):
            values = [int(v) for v in line.split()[1:9]]
            values += [0] * (8 - len(values))
            aggregate = CpuTimes(*values)
        elif line.startswith("cpu") and line[3:4].isdigit():
            cores += 1
    if aggregate is None:
        raise ToolError(f"cannot read CPU times: no 'cpu' line in {PROC}/stat")
    return aggregate, cores or (os.cpu_count() or 1)


def read_meminfo() -> dict[str, int]:
    """``/proc/meminfo`` in bytes."""
    values: dict[str, int] = {}
    for line in read_text(f"{PROC}/meminfo").splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if not parts or not parts[0].isdigit():
            continue
        scale = 1024 if len(parts) > 1 and parts[1] == "kB" else 1
        values[name.strip()] = int(parts[0]) * scale
    return values


# -- mounts -------------------------------------------------------------------------

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
    for line in read_text(f"{PROC}/self/mounts").splitlines():
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


async def usage_or_reason(point: str) -> Usage | str:
    try:
        return await asyncio.wait_for(asyncio.to_thread(_usage, point), STATVFS_TIMEOUT_S)
    except TimeoutError:
        return f"no answer within {STATVFS_TIMEOUT_S:g} s"
    except OSError as exc:
        return exc.strerror or str(exc)


# -- processes ----------------------------------------------------------------------


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


_ANSI_ESCAPE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|.)?")
_SPACES = re.compile(r"[\s\x00\u2028\u2029]+")
_CONTROLS = re.compile(r"[\x01-\x1f\x7f-\x9f]")


def plain(line: str) -> str:
    """One line of a log as plain text: terminal escape sequences (colours) and control
    characters other than tab dropped."""
    return _CONTROLS.sub(lambda m: m[0] if m[0] == "\t" else "", _ANSI_ESCAPE.sub("", line))


def one_line(text: str) -> str:
    """``text`` as one line of plain text: terminal escape sequences dropped, any run of
    whitespace (newlines in a script passed as an argument, say) folded into one space,
    other control characters dropped. A process can put anything in its arguments."""
    return _CONTROLS.sub("", _SPACES.sub(" ", _ANSI_ESCAPE.sub("", text))).strip()


# The directories of an absolute path inside an argument (``/usr/bin/``, ``=/etc/app/``),
# not the ``//`` of a URL nor a relative path.
_PATH_DIRS = re.compile(r"(?<![\w.~/…])/(?:[^/\s:=,]+/)+(?=[^/\s])")


def _short_paths(arg: str) -> str:
    """``/opt/app/releases/42/bin/worker.py`` → ``…/worker.py``, in place in ``arg``."""
    return _PATH_DIRS.sub("…/", arg)


def _gapped(parts: list[str], kept: set[int]) -> str:
    """``parts`` in order, each run of the ones not kept written as one ``…``."""
    out: list[str] = []
    for i, part in enumerate(parts):
        if i in kept:
            out.append(part)
        elif not out or out[-1] != "…":
            out.append("…")
    return " ".join(out)


def fit_command(argv: Sequence[str], limit: int = COMMAND_CHARS) -> str:
    """A command line on one line of at most ``limit`` characters that still says what
    runs. Cutting from the right would leave ``/usr/bin/python3.11 /opt/app/rel…``, so
    first the directories of paths go (the program's first, then the longest
    arguments'), then whole arguments from the middle: the program, the first argument
    that is no option (the script, main class or subcommand) and the last one stay
    longest. Only a single argument too long for the line is cut at its end."""
    parts = [one_line(arg) for arg in argv]
    parts = [part for part in parts if part]
    if len(" ".join(parts)) <= limit:
        return " ".join(parts)
    for i in [0, *sorted(range(1, len(parts)), key=lambda i: -len(parts[i]))]:
        parts[i] = _short_paths(parts[i])
        if len(" ".join(parts)) <= limit:
            return " ".join(parts)
    first_operand = next((i for i in range(1, len(parts)) if not parts[i].startswith("-")), None)
    wanted = [0, first_operand, len(parts) - 1, *range(1, len(parts))]
    kept: set[int] = set()
    for i in wanted:
        if i is not None and i not in kept and len(_gapped(parts, kept | {i})) <= limit:
            kept.add(i)
    if 0 not in kept:
        kept = set()  # the program alone is too long: cut it at its end
    elif first_operand is not None and first_operand not in kept:
        kept = {0, first_operand}  # too long to fit whole: it says the most, so it is cut
    text = _gapped(parts, kept) if kept else " ".join(parts)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def command_line(pid: int, comm: str) -> str:
    """The process's arguments as :func:`fit_command` shows them; ``[comm]`` for a
    kernel thread (it has none)."""
    try:
        with open(f"{PROC}/{pid}/cmdline", "rb") as f:
            raw = f.read(4096)
    except OSError:
        raw = b""
    argv = raw.decode("utf-8", errors="replace").split("\0")
    return fit_command(argv) or f"[{one_line(comm)}]"


_users: dict[int, str] = {}


def user_name(uid: int) -> str:
    if uid not in _users:
        try:
            _users[uid] = pwd.getpwuid(uid).pw_name
        except KeyError:
            _users[uid] = str(uid)
    return _users[uid]

"""Log files for ``host_tail_log``: which paths may be read, and reading their tails.

Only files inside ``OPSLOOP_LOG_DIRS`` are read: a path is absolute or relative to the
first log dir; ``..`` is refused outright; the path is checked as written, again after
resolving symlinks, and once more on the file actually opened (``/proc/self/fd``), so a
symlink swapped in between cannot lead outside. :class:`LogFiles` reads from the end of
the file, at most :data:`TAIL_MAX_BYTES`, and keeps its answer within its output bound by
dropping the oldest lines first (the core cuts a long answer at the head, which would
lose the newest lines).
"""

from __future__ import annotations

import contextlib
import datetime
import os
import stat
import time
from collections.abc import Sequence
from pathlib import PurePosixPath

from bot.errors import ConfigError, ToolError
from tools.packs import host_proc
from tools.packs.host_proc import ago, human_bytes, plain

TAIL_DEFAULT = 100
TAIL_MAX = 500
TAIL_MAX_BYTES = 256 * 1024
TAIL_BLOCK = 64 * 1024
TAIL_LINE_CHARS = 400
TAIL_OUTPUT_CHARS = 12_000
TAIL_OUTPUT_BOUND = 16_000  # the tool's bound; our own text stays under it
LOG_DIRS_SETTING = "OPSLOOP_LOG_DIRS"


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
                self._check_resolved(full, os.readlink(f"{host_proc.PROC}/self/fd/{fd}"))
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
            f"{modified:%Y-%m-%d %H:%M:%S} UTC, {ago(time.time() - info.st_mtime)})"
        )
        if not data:
            return f"{header}: empty file"
        text = data.decode("utf-8", errors="replace").replace("\0", "\\0")
        found = [plain(line) for line in text.splitlines()]
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

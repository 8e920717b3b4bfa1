"""The ``host`` pack against the real ``/proc`` of this machine and real files,
directories, symlinks and FIFOs under ``tmp_path``; plus the pack wiring (names as in
docs/packs.md, categories, the catalogue)."""

from __future__ import annotations

import asyncio
import os
import random
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pydantic
import pytest

from bot.agent import CallContext
from bot.agent.tools import Tool
from bot.errors import ConfigError, ToolError
from tools.packs import PackConfig, host_logs, host_proc, load_packs
from tools.packs import host as host_pack
from tools.packs.host import (
    TAIL_MAX_BYTES,
    TAIL_OUTPUT_BOUND,
    CpuTimes,
    LogFiles,
    cpu_summary,
    human_bytes,
    memory_summary,
)
from tools.registry import catalog_from_settings

CTX = CallContext(job_id="C1:1.1:j1", call_id="c1")

DESIGN_NAMES = {
    "host": ["host_cpu", "host_memory", "host_disk", "host_top_processes", "host_tail_log"],
    "http": ["http_check"],
}


def tools_of(config: PackConfig) -> dict[str, Tool]:
    return {t.name: t for t in host_pack.build(config).tools}


async def call(tool: Tool, **args: Any) -> str:
    """Validate as the core does, then execute."""
    result = await tool.execute(tool.args_model.model_validate(args), CTX)
    assert isinstance(result, str)
    return result


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    folder = tmp_path / "logs"
    folder.mkdir()
    return folder


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.txt").write_text("TOP-SECRET-MARKER\n")
    return folder


@pytest.fixture
def tail(logs: Path) -> Tool:
    return tools_of(PackConfig(log_dirs=(str(logs),)))["host_tail_log"]


def numbered(n: int, prefix: str = "line") -> str:
    return "".join(f"{prefix} {i}\n" for i in range(n))


def proc_lines(name: str, prefix: str) -> list[str]:
    """The lines of ``/proc/<name>`` matching ``prefix`` (a regex)."""
    text = Path("/proc", name).read_text()
    return [line for line in text.splitlines() if re.match(prefix, line)]


def sparse_with_tail(path: Path, size: int, tail: str) -> None:
    """A sparse file of ``size`` bytes of holes, then ``tail``: huge, but instant."""
    with open(path, "wb") as f:
        f.truncate(size)
        f.seek(0, os.SEEK_END)
        f.write(tail.encode())


def body_lines(result: str) -> list[str]:
    """The log lines of a host_tail_log answer (after its one header line)."""
    return result.split("\n")[1:]


# -- the pack -----------------------------------------------------------------------


async def test_packs_load_with_the_design_names_as_read_only_tools(tmp_path: Path) -> None:
    config = PackConfig(log_dirs=(str(tmp_path),), http_allow="127.0.0.1")
    packs = load_packs(["host", "http"], config)
    try:
        assert {name: [t.name for t in pack.tools] for name, pack in packs.items()} == (
            DESIGN_NAMES
        )
        for pack in packs.values():
            for tool in pack.tools:
                assert tool.category == "read_only", tool.name
        tools = {t.name: t for pack in packs.values() for t in pack.tools}
        assert list(tools["host_tail_log"].args_model.model_fields) == ["path", "lines"]
        assert list(tools["http_check"].args_model.model_fields) == ["url"]
        assert list(tools["host_top_processes"].args_model.model_fields) == ["by", "limit"]
        for name in ("host_cpu", "host_memory", "host_disk"):
            assert list(tools[name].args_model.model_fields) == []
    finally:
        for pack in packs.values():
            for close in pack.closers:
                await close()


async def test_the_catalogue_accepts_both_packs(tmp_path: Path) -> None:
    catalog = catalog_from_settings(
        pack_names=["host", "http"],
        pack_config=PackConfig(log_dirs=(str(tmp_path),), http_allow="127.0.0.1"),
        tools_file=None,
        environ={},
    )
    try:
        assert sorted(catalog.tools) == sorted(DESIGN_NAMES["host"] + DESIGN_NAMES["http"])
        assert catalog.sources["host_cpu"] == "built-in:host"
        assert catalog.sources["http_check"] == "built-in:http"
        assert catalog.toolsets["host"] == DESIGN_NAMES["host"]
        assert len(catalog.closers) == 1  # the http pack's client
    finally:
        await catalog.aclose()


def test_a_relative_log_dir_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="OPSLOOP_LOG_DIRS: 'logs' is not an absolute path"):
        host_pack.build(PackConfig(log_dirs=("logs",)))


# -- host_cpu -----------------------------------------------------------------------


def test_cpu_summary_computes_shares_from_the_sample() -> None:
    before = CpuTimes(100, 0, 50, 800, 10, 0, 0, 0)
    # +60 user, +20 nice, +10 system, +5 irq, +90 idle, +10 iowait, +5 steal = 200 ticks
    after = CpuTimes(160, 20, 60, 890, 20, 5, 0, 5)
    text = cpu_summary(before, after, cores=4, seconds=0.5)
    first = text.splitlines()[0]
    assert first == (
        "CPU: 50.0% busy over 0.5 s (user 40.0%, system 7.5%, iowait 5.0%, steal 2.5%)"
    )


def test_cpu_summary_with_no_ticks_elapsed_is_zero_not_a_crash() -> None:
    same = CpuTimes(1, 2, 3, 4, 5, 6, 7, 8)
    assert cpu_summary(same, same, cores=1, seconds=0.0).startswith("CPU: 0.0% busy")


async def test_host_cpu_reads_proc_and_does_not_block_the_loop() -> None:
    ticks = 0
    finished = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not finished.is_set():
            ticks += 1
            await asyncio.sleep(0.01)

    async def measured() -> tuple[str, int]:
        try:
            return await call(tools_of(PackConfig())["host_cpu"]), ticks
        finally:
            finished.set()

    ticking = asyncio.create_task(ticker())
    text, ticks_meanwhile = await measured()
    await ticking
    assert ticks_meanwhile > 5, "the event loop was blocked while sampling"

    busy = re.search(r"^CPU: (\d+\.\d)% busy over (\d+\.\d) s", text, re.M)
    assert busy is not None, text
    assert 0.0 <= float(busy.group(1)) <= 100.0
    online = len(proc_lines("stat", r"cpu\d+ "))
    assert re.search(rf"^Cores: {online} online", text, re.M), text
    load = re.search(r"^Load average: (\S+) (\S+) (\S+) \(1/5/15 min", text, re.M)
    assert load is not None and all(float(v) >= 0 for v in load.groups())
    assert re.search(r"^Tasks: \d+ running of \d+$", text, re.M)
    assert len(text) < 400


# -- host_memory --------------------------------------------------------------------


async def test_host_memory_reports_the_real_total() -> None:
    text = await call(tools_of(PackConfig())["host_memory"])
    total_kib = int(proc_lines("meminfo", "MemTotal:")[0].split()[1])
    assert text.startswith(f"Memory: {human_bytes(total_kib * 1024)} total, ")
    assert re.search(r"used \(\d+%\), .* available", text)
    assert re.search(r"^Swap: ", text, re.M)
    assert 3 <= len(text.splitlines()) <= 5  # then pressure (PSI) and OOM kills, if any


def test_memory_summary_uses_available_and_reports_swap() -> None:
    gib = 1 << 30
    info = {
        "MemTotal": 16 * gib,
        "MemFree": 2 * gib,
        "MemAvailable": 12 * gib,
        "Buffers": gib,
        "Cached": 3 * gib,
        "SwapTotal": 4 * gib,
        "SwapFree": 3 * gib,
    }
    text = memory_summary(info)
    assert text.splitlines()[0] == (
        "Memory: 16.0 GiB total, 4.0 GiB used (25%), 12.0 GiB available"
    )
    assert text.splitlines()[2] == "Swap: 4.0 GiB total, 1.0 GiB used (25%)"
    no_swap = memory_summary({**info, "SwapTotal": 0, "SwapFree": 0})
    assert no_swap.splitlines()[2] == "Swap: none configured"


# -- host_disk ----------------------------------------------------------------------


async def test_host_disk_shows_the_root_filesystem_and_no_pseudo_ones() -> None:
    text = await call(tools_of(PackConfig())["host_disk"])
    # A first "Nearly full" line names what this machine's disks may be short of.
    lines = [line for line in text.splitlines() if not line.startswith("Nearly full")]
    assert lines[0].split() == ["Mount", "Size", "Used", "Avail", "Use%", "Inode%", "FS"]
    points = [line.split()[0] for line in lines[1:] if not line.startswith(("…", "Unreadable"))]
    assert "/" in points
    assert "/proc" not in points and "/sys" not in points and "/dev/shm" not in points
    for line in lines[1:]:
        fstype = line.split()[6] if len(line.split()) > 6 else ""
        assert fstype not in host_pack.PSEUDO_FILESYSTEMS, line
    root = next(line for line in lines[1:] if line.split()[0] == "/")
    st = os.statvfs("/")
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    percent = -(-100 * used // (used + st.f_bavail * st.f_frsize))
    assert f" {percent}% " in root or f" {percent + 1}% " in root or f" {percent - 1}% " in root


async def test_host_disk_parses_mounts_skips_pseudo_and_shadowed_and_reports_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "mounts").write_text(
        "proc /proc proc rw 0 0\n"
        "tmpfs /run tmpfs rw 0 0\n"
        "/dev/sdz1 / ext4 rw 0 0\n"
        "/dev/sdz3 /gone ext4 rw 0 0\n"
        "/dev/sdz4 /shadowed ext4 rw 0 0\n"
        "tmpfs /shadowed tmpfs rw 0 0\n"  # mounted over: the visible one is tmpfs
    )
    monkeypatch.setattr(host_proc, "PROC", str(proc))
    text = await host_pack.host_disk_text()
    rows = {line.split()[0]: line for line in text.splitlines()[1:]}
    assert "ext4 /dev/sdz1" in rows["/"]
    assert "/proc" not in rows and "/run" not in rows and "/shadowed" not in rows
    assert "Unreadable: /gone (ext4): No such file or directory" in text


async def test_host_disk_shows_a_mount_point_with_a_space(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    spaced = tmp_path / "my disk"
    spaced.mkdir()
    escaped = str(spaced).replace(" ", "\\040")
    (proc / "self" / "mounts").write_text(f"/dev/sdz2 {escaped} xfs rw 0 0\n")
    monkeypatch.setattr(host_proc, "PROC", str(proc))
    text = await host_pack.host_disk_text()
    row = next(line for line in text.splitlines() if line.startswith(f"{spaced}  "))
    assert "xfs /dev/sdz2" in row


async def test_host_disk_is_bounded_by_a_hung_filesystem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hung NFS server makes ``statvfs`` block in the kernel: that mount is reported
    after the per-mount limit and the others are still shown."""
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "mounts").write_text(
        "/dev/sdz1 / ext4 rw 0 0\nnfs-01:/exports /mnt/hung nfs4 rw 0 0\n"
    )
    monkeypatch.setattr(host_proc, "PROC", str(proc))
    monkeypatch.setattr(host_proc, "STATVFS_TIMEOUT_S", 0.2)
    released = threading.Event()
    real_usage = host_proc._usage

    def usage(point: str) -> host_proc.Usage:
        if point == "/mnt/hung":
            released.wait(30)  # as long as the server is gone
        return real_usage(point)

    monkeypatch.setattr(host_proc, "_usage", usage)
    try:
        text = await host_pack.host_disk_text()
    finally:
        released.set()
    assert "Unreadable: /mnt/hung (nfs4): no answer within 0.2 s" in text, text
    assert any(line.startswith("/  ") for line in text.splitlines()), text


# -- host_top_processes -------------------------------------------------------------


@pytest.fixture
def spinner() -> Iterator[subprocess.Popen[bytes]]:
    """A process burning one core."""
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    yield proc
    proc.kill()
    proc.wait()


@pytest.fixture
def hog() -> Iterator[subprocess.Popen[bytes]]:
    """A process holding 400 MiB resident; it prints once the memory is touched."""
    code = "import sys,time; b=bytearray(400<<20); print('ready', flush=True); time.sleep(600)"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    yield proc
    proc.kill()
    proc.wait()
    proc.stdout.close()


def rows(text: str) -> dict[int, list[str]]:
    return {int(line.split()[0]): line.split() for line in text.splitlines()[2:]}


async def test_top_processes_by_cpu_finds_the_busy_process(
    spinner: subprocess.Popen[bytes],
) -> None:
    tool = tools_of(PackConfig())["host_top_processes"]
    text = await call(tool, by="cpu", limit=5)
    assert text.startswith("Top 5 of ")
    header = ["PID", "USER", "%CPU", "%MEM", "RSS", "S", "NAME", "COMMAND"]
    assert text.splitlines()[1].split() == header
    found = rows(text)
    assert len(found) == 5
    assert spinner.pid in found, text
    assert float(found[spinner.pid][2]) > 20.0, text
    assert "while True: pass" in " ".join(found[spinner.pid])
    cpus = [float(r[2]) for r in found.values()]
    assert cpus == sorted(cpus, reverse=True)


async def test_top_processes_by_memory_finds_the_big_process(
    hog: subprocess.Popen[bytes],
) -> None:
    text = await call(tools_of(PackConfig())["host_top_processes"], by="memory", limit=20)
    found = rows(text)
    assert hog.pid in found, text
    rss = found[hog.pid][4]
    assert rss.endswith("M") and 400 <= float(rss[:-1]) < 500, rss


SCRIPT_ARG = "LARGE_TEXT='#!/bin/bash\n\techo hi\r\n\x1b[31mred\x07'\n"


@pytest.fixture
def scripted() -> Iterator[subprocess.Popen[bytes]]:
    """A process whose arguments hold newlines, tabs and escape codes (a shell script
    passed as an environment-style argument, as seen on a CI machine)."""
    code = "import sys,time; print('ready', flush=True); time.sleep(600)"
    proc = subprocess.Popen([sys.executable, "-c", code, SCRIPT_ARG], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    yield proc
    proc.kill()
    proc.wait()
    proc.stdout.close()


async def test_top_processes_rows_stay_one_line_whatever_the_command_line(
    scripted: subprocess.Popen[bytes],
) -> None:
    text = await host_pack.host_top_processes_text("memory", 500, sample_s=0.05)
    lines = text.splitlines()
    assert len(lines) <= 2 + host_pack.TOP_MAX
    assert all(line.split()[0].isdigit() for line in lines[2:]), text
    assert "\x1b" not in text and "\x07" not in text and "\t" not in text
    line = host_pack.command_line(scripted.pid, "python3")
    assert line.startswith(f"…/{Path(sys.executable).name} -c import sys,time;"), line
    assert host_proc.one_line(SCRIPT_ARG) == "LARGE_TEXT='#!/bin/bash echo hi red'"
    assert host_proc.one_line("x\x1b]0;title\x07y\u2028z") == "xy z"


RENAMED = "billing-recon"  # what top and ps -o comm show; at most 15 characters
RENAMED_SCRIPT = "scenario-billing-reconciler.py"


@pytest.fixture
def renamed(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A Python worker that names itself as its service (writing ``/proc/self/comm``, as
    ``prctl(PR_SET_NAME)`` and ``setproctitle`` do), started from a deep release path with
    long arguments, and holding 200 MiB so that it ranks by memory."""
    folder = tmp_path / "releases" / "2026-12-01T16-00-00-build-4711" / "app" / "bin"
    folder.mkdir(parents=True)
    script = folder / RENAMED_SCRIPT
    script.write_text(
        "import time\n"
        f"open('/proc/self/comm', 'w').write({RENAMED!r})\n"
        "held = bytearray(200 << 20)\n"
        "print('ready', flush=True)\n"
        "time.sleep(600)\n"
    )
    argv = [sys.executable, str(script), "--queue=payments-eu-west-1", "--concurrency=8"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    assert Path(f"/proc/{proc.pid}/comm").read_text().strip() == RENAMED
    yield proc
    proc.kill()
    proc.wait()
    proc.stdout.close()


async def test_top_processes_show_a_renamed_process_by_name_and_what_identifies_it(
    renamed: subprocess.Popen[bytes],
) -> None:
    text = await call(tools_of(PackConfig())["host_top_processes"], by="memory", limit=20)
    assert text.splitlines()[1].split() == [
        "PID", "USER", "%CPU", "%MEM", "RSS", "S", "NAME", "COMMAND"
    ]  # fmt: skip
    line = next((ln for ln in text.splitlines()[2:] if ln.split()[0] == str(renamed.pid)), None)
    assert line is not None, text
    assert line.split()[6] == RENAMED, line  # the name top shows
    command = line.split(maxsplit=7)[7]
    # The interpreter and the long release path are shortened, not the script's name.
    assert RENAMED_SCRIPT in command, command
    assert "build-4711" not in command and len(command) <= host_proc.COMMAND_CHARS, command
    assert command.startswith(f"…/{Path(sys.executable).name} …/{RENAMED_SCRIPT}"), command
    assert command.endswith("--concurrency=8"), command


@pytest.mark.parametrize(
    ("argv", "shown"),
    [
        (["/usr/bin/sleep", "600"], "/usr/bin/sleep 600"),  # short: as it is
        (
            ["/opt/app/releases/2026-12-01-build-4711/venv/bin/python3.11",
             "/opt/app/releases/2026-12-01-build-4711/app/workers/scenario-ledger.py",
             "--queue", "payments"],
            "…/python3.11 …/scenario-ledger.py --queue payments",
        ),
        (
            ["/usr/lib/jvm/java-17-openjdk-amd64/bin/java", "-Xms4g", "-Xmx4g",
             "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=200", "-Dlog4j.configurationFile=/etc/x.xml",
             "-cp", "/srv/app/lib/a.jar:/srv/app/lib/b.jar", "com.example.billing.Main"],
            "…/java -Xms4g -Xmx4g -XX:+UseG1GC … -cp …/a.jar:…/b.jar com.example.billing.Main",
        ),
        (
            ["curl", "-sS", "https://status.example.com/api/v2/components/" + "x" * 80],
            "curl … https://status.example.com/api/v2/components/" + "x" * 27 + "…",
        ),
        (["postgres: checkpointer", "", ""], "postgres: checkpointer"),  # a set title
        (["x" * 90, "--flag"], "x" * 79 + "…"),
    ],
)  # fmt: skip
def test_a_long_command_line_keeps_what_identifies_it(argv: list[str], shown: str) -> None:
    assert host_proc.fit_command(argv) == shown
    assert len(shown) <= host_proc.COMMAND_CHARS


async def test_top_processes_arguments_are_bounded() -> None:
    tool = tools_of(PackConfig())["host_top_processes"]
    for bad in ({"limit": 21}, {"limit": 0}, {"by": "disk"}):
        with pytest.raises(pydantic.ValidationError):
            tool.args_model.model_validate(bad)
    defaults = tool.args_model.model_validate({})
    assert (defaults.by, defaults.limit) == ("cpu", 10)  # type: ignore[attr-defined]
    # Called directly, past the model's validation, the bound still holds.
    text = await host_pack.host_top_processes_text("memory", 500, sample_s=0.05)
    assert len(text.splitlines()) <= 2 + host_pack.TOP_MAX


# -- host_tail_log ------------------------------------------------------------------


async def test_tail_drops_colour_codes_and_control_characters(logs: Path, tail: Tool) -> None:
    (logs / "app.log").write_bytes(
        b"\x1b[32mINFO\x1b[0m\tstarted\n\x1b[1;31mERROR\x1b[0m db down\x07\x08\n"
    )
    assert body_lines(await call(tail, path="app.log")) == ["INFO\tstarted", "ERROR db down"]


async def test_tail_returns_the_last_lines(logs: Path, tail: Tool) -> None:
    (logs / "app.log").write_text(numbered(1000))
    text = await call(tail, path="app.log", lines=10)
    header = text.splitlines()[0]
    assert header.startswith(f"{logs / 'app.log'} (")
    assert header.endswith(": last 10 lines")
    assert body_lines(text) == [f"line {i}" for i in range(990, 1000)]


async def test_tail_defaults_to_100_lines_and_caps_at_500(logs: Path, tail: Tool) -> None:
    (logs / "app.log").write_text(numbered(1000))
    assert body_lines(await call(tail, path="app.log")) == [f"line {i}" for i in range(900, 1000)]
    with pytest.raises(pydantic.ValidationError):
        tail.args_model.model_validate({"path": "app.log", "lines": 501})
    with pytest.raises(pydantic.ValidationError):
        tail.args_model.model_validate({"path": "app.log", "lines": 0})
    # Past the model's validation (as a direct call would be), the bound still holds.
    direct = await tail.execute(tail.args_model.model_construct(path="app.log", lines=10_000), CTX)
    assert isinstance(direct, str)
    assert len(body_lines(direct)) == 500


async def test_tail_of_a_short_file_and_of_one_without_final_newline(
    logs: Path, tail: Tool
) -> None:
    (logs / "short.log").write_text("a\nb\nc")
    assert body_lines(await call(tail, path="short.log", lines=100)) == ["a", "b", "c"]
    (logs / "crlf.log").write_bytes(b"one\r\ntwo\r\n")
    assert body_lines(await call(tail, path="crlf.log", lines=1)) == ["two"]
    (logs / "empty.log").write_text("")
    assert (await call(tail, path="empty.log")).endswith(": empty file")


@pytest.mark.parametrize("block", [5, 97, 64 * 1024])
@pytest.mark.parametrize("want", [1, 7, 100, 333, 500])
async def test_tail_is_exact_across_block_boundaries(
    logs: Path, tail: Tool, monkeypatch: pytest.MonkeyPatch, want: int, block: int
) -> None:
    monkeypatch.setattr(host_logs, "TAIL_BLOCK", block)
    rng = random.Random(want * block)
    lines = [f"{i}:" + "x" * rng.randrange(0, 380) for i in range(3000)]  # ~570 KiB
    (logs / "mixed.log").write_text("\n".join(lines) + "\n")
    text = await call(tail, path="mixed.log", lines=want)
    got = body_lines(text)
    # The answer stays under its bound by dropping the oldest lines, never the newest.
    assert got == lines[-len(got) :]
    assert got[-1] == lines[-1]
    if len(got) < want:
        assert "older lines dropped" in text.splitlines()[0]
    assert len(text) <= TAIL_OUTPUT_BOUND


async def test_tail_of_a_huge_file_reads_only_its_end(
    logs: Path, tail: Tool, monkeypatch: pytest.MonkeyPatch
) -> None:
    sparse_with_tail(logs / "huge.log", 8 << 30, numbered(50, "end"))
    read = 0
    real_pread = os.pread

    def counting_pread(fd: int, n: int, offset: int) -> bytes:
        nonlocal read
        read += n
        return real_pread(fd, n, offset)

    monkeypatch.setattr(os, "pread", counting_pread)
    text = await call(tail, path="huge.log", lines=20)
    assert body_lines(text) == [f"end {i}" for i in range(30, 50)]
    assert "8.0 GiB" in text.splitlines()[0]
    assert read <= TAIL_MAX_BYTES + 1


async def test_tail_of_one_endless_line_is_bounded(logs: Path, tail: Tool) -> None:
    (logs / "blob.log").write_bytes(b"x" * (5 << 20))  # 5 MiB, no newline at all
    text = await call(tail, path="blob.log", lines=500)
    assert len(text) < TAIL_OUTPUT_BOUND
    assert "last 1 lines [only the last 256.0 KiB read" in text.splitlines()[0]
    (fragment,) = body_lines(text)  # the end of the line, marked as a fragment
    assert fragment == "…" + "x" * 400 + f"…[+{(256 << 10) - 400} chars]"


async def test_tail_past_the_byte_bound_marks_the_first_line_a_fragment(
    logs: Path, tail: Tool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(host_logs, "TAIL_MAX_BYTES", 1050)
    (logs / "app.log").write_text("".join(f"{i:03d} " + "z" * 95 + "\n" for i in range(100)))
    text = await call(tail, path="app.log", lines=50)
    got = body_lines(text)
    assert "only the last 1.0 KiB read" in text.splitlines()[0]
    # 1050 bytes: the last 50 of line 089 (a fragment), then ten whole 100-byte lines.
    assert got == ["…" + "z" * 49] + [f"{i:03d} " + "z" * 95 for i in range(90, 100)]
    # Asking for no more lines than are whole: no fragment.
    assert body_lines(await call(tail, path="app.log", lines=10))[0].startswith("090 ")


async def test_tail_of_long_lines_cuts_each_and_keeps_the_newest(logs: Path, tail: Tool) -> None:
    (logs / "wide.log").write_text("".join(f"{i} " + "y" * 2000 + "\n" for i in range(600)))
    text = await call(tail, path="wide.log", lines=500)
    got = body_lines(text)
    assert len(text) <= TAIL_OUTPUT_BOUND
    assert got[-1].startswith("599 yyy") and got[-1].endswith("…[+1604 chars]")
    assert "lines longer than 400 chars cut" in text.splitlines()[0]
    assert "older lines dropped" in text.splitlines()[0]


async def test_relative_paths_are_relative_to_the_first_log_dir(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    (first / "nginx").mkdir(parents=True)
    second.mkdir()
    (first / "nginx" / "error.log").write_text("from first\n")
    (second / "error.log").write_text("from second\n")
    tail = tools_of(PackConfig(log_dirs=(str(first), str(second))))["host_tail_log"]
    assert body_lines(await call(tail, path="nginx/error.log")) == ["from first"]
    assert body_lines(await call(tail, path=str(second / "error.log"))) == ["from second"]
    with pytest.raises(ToolError, match="no such file: .*/first/error.log"):
        await call(tail, path="error.log")


@pytest.mark.parametrize(
    "path",
    ["../outside/secret.txt", "nginx/../../outside/secret.txt", "{logs}/../outside/secret.txt"],
)
async def test_traversal_is_refused(logs: Path, outside: Path, tail: Tool, path: str) -> None:
    with pytest.raises(ToolError, match=r"refused: .* contains '\.\.'") as caught:
        await call(tail, path=path.format(logs=logs))
    assert "TOP-SECRET-MARKER" not in str(caught.value)


async def test_a_path_outside_the_log_dirs_is_refused(
    logs: Path, outside: Path, tail: Tool
) -> None:
    for path in (str(outside / "secret.txt"), "/etc/passwd", f"{logs}-other/x.log"):
        with pytest.raises(ToolError, match="is outside OPSLOOP_LOG_DIRS") as caught:
            await call(tail, path=path)
        assert "TOP-SECRET-MARKER" not in str(caught.value)


async def test_a_symlink_leading_outside_is_refused(logs: Path, outside: Path, tail: Tool) -> None:
    (logs / "sneaky.log").symlink_to(outside / "secret.txt")
    (logs / "sneaky-dir").symlink_to(outside)
    (logs / "dangling.log").symlink_to(outside / "missing.txt")
    for path in ("sneaky.log", "sneaky-dir/secret.txt", "dangling.log"):
        with pytest.raises(ToolError, match="resolves .* outside OPSLOOP_LOG_DIRS") as caught:
            await call(tail, path=path)
        assert "TOP-SECRET-MARKER" not in str(caught.value)


async def test_a_symlink_staying_inside_is_followed(logs: Path, tmp_path: Path) -> None:
    (logs / "app.log.1").write_text("rotated\n")
    (logs / "current.log").symlink_to(logs / "app.log.1")
    real = tmp_path / "real-logs"
    real.mkdir()
    (real / "svc.log").write_text("via the linked dir\n")
    linked = tmp_path / "linked-logs"
    linked.symlink_to(real)  # the configured dir is itself a symlink
    tail = tools_of(PackConfig(log_dirs=(str(logs), str(linked))))["host_tail_log"]
    assert body_lines(await call(tail, path="current.log")) == ["rotated"]
    assert body_lines(await call(tail, path=str(linked / "svc.log"))) == ["via the linked dir"]
    assert body_lines(await call(tail, path=str(real / "svc.log"))) == ["via the linked dir"]


async def test_a_symlink_swapped_in_after_the_check_is_caught_on_the_open_file(
    logs: Path, outside: Path, tail: Tool, monkeypatch: pytest.MonkeyPatch
) -> None:
    (logs / "race.log").symlink_to(outside / "secret.txt")
    # Resolution that misses the symlink, as if it were swapped in right after the check.
    monkeypatch.setattr(os.path, "realpath", os.path.normpath)
    with pytest.raises(ToolError, match="resolves .* outside OPSLOOP_LOG_DIRS") as caught:
        await call(tail, path="race.log")
    assert "TOP-SECRET-MARKER" not in str(caught.value)


async def test_missing_file_directory_and_fifo(logs: Path, tail: Tool) -> None:
    with pytest.raises(ToolError, match=f"no such file: {logs}/nope.log"):
        await call(tail, path="nope.log")
    (logs / "a.log").write_text("a\n")
    (logs / "nginx").mkdir()
    with pytest.raises(ToolError, match="is a directory; files in it, newest first: a.log$"):
        await call(tail, path=str(logs))
    os.mkfifo(logs / "pipe")
    with pytest.raises(ToolError, match="is not a regular file"):
        await asyncio.wait_for(call(tail, path="pipe"), 5)  # and does not hang on it
    with pytest.raises(ToolError, match="path is empty"):
        await call(tail, path="  ")


async def test_no_log_dirs_configured_is_a_clear_error() -> None:
    tail = tools_of(PackConfig())["host_tail_log"]
    with pytest.raises(ToolError, match="not enabled: OPSLOOP_LOG_DIRS names no log directories"):
        await call(tail, path="/var/log/syslog")


def test_log_files_normalises_the_configured_dirs(tmp_path: Path) -> None:
    files = LogFiles([f" {tmp_path}/logs/ ", ""])
    assert files.dirs == (f"{tmp_path}/logs",)

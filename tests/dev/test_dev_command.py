"""`opsloop dev` as a process: it stops everything it started when its bot dies, moves
to a free port when the page's is taken, and says how to install a missing redis-server."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.browser.conftest import ROOT, descendants, processes_using

START_TIMEOUT_S = 60.0


def env_for_dev(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLM_", "SLACK_"))}
    for key in ("REDIS_URL", "OPSLOOP_TOOLS"):
        env.pop(key, None)
    env.update(PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1", **extra)
    return env


async def spawn_dev(folder: Path, *args: str, **env: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "dev", "--dir", str(folder), *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        env=env_for_dev(**env), cwd=folder.parent,
    )  # fmt: skip


async def read_until(proc: asyncio.subprocess.Process, pattern: str, seen: list[str]) -> str:
    assert proc.stdout is not None
    async with asyncio.timeout(START_TIMEOUT_S):
        while True:
            line = (await proc.stdout.readline()).decode(errors="replace")
            if not line:
                raise AssertionError("opsloop dev exited:\n" + "".join(seen))
            seen.append(line)
            if re.search(pattern, line):
                return line


def argv_of(pid: int) -> list[str]:
    """A live process's argv ([] once it is gone)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


@pytest.fixture
async def cleanup() -> AsyncIterator[list[asyncio.subprocess.Process]]:
    procs: list[asyncio.subprocess.Process] = []
    yield procs
    for proc in procs:
        if proc.returncode is None:
            proc.send_signal(signal.SIGINT)
            try:
                async with asyncio.timeout(20):
                    await proc.wait()
            except TimeoutError:
                proc.kill()
                await proc.wait()


async def test_when_the_bot_dies_everything_it_started_is_stopped(
    tmp_path: Path, cleanup: list[asyncio.subprocess.Process]
) -> None:
    folder = tmp_path / "dev"
    proc = await spawn_dev(folder, "--port", "0")
    cleanup.append(proc)
    seen: list[str] = []
    await read_until(proc, r"open http://", seen)
    # The hint it prints for `opsloop trace` names the managed Redis, which answers.
    hint = await read_until(proc, r"opsloop trace", seen)
    found = re.search(r"REDIS_URL=(redis://127\.0\.0\.1:\d+\S*) opsloop trace", hint)
    assert found, hint
    trace = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "trace", "C1:1700000000.000100",
        env={**os.environ, "REDIS_URL": found[1]},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(trace.communicate(), 30)
    assert trace.returncode == 1 and err.decode().startswith("opsloop trace: no job in thread")
    started = processes_using(folder) | descendants(proc.pid)
    bots = [pid for pid in descendants(proc.pid) if argv_of(pid)[1:4] == ["-m", "bot", "serve"]]
    assert len(bots) == 1 and len(started) >= 3  # redis-server, web, the bot

    os.kill(bots[0], signal.SIGKILL)
    async with asyncio.timeout(30):
        code = await proc.wait()
    assert proc.stdout is not None
    seen.append((await proc.stdout.read()).decode(errors="replace"))

    assert code == 1, "".join(seen)
    assert "the bot exited" in "".join(seen)
    alive = {pid for pid in started if argv_of(pid)}
    assert processes_using(folder) == set() and not alive, "".join(seen)


async def test_a_taken_page_port_is_replaced_by_a_free_one_and_said_so(
    tmp_path: Path, cleanup: list[asyncio.subprocess.Process]
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = await spawn_dev(tmp_path / "dev", "--port", str(port))
        cleanup.append(proc)
        seen: list[str] = []
        line = await read_until(proc, r"open http://", seen)
    assert f"port {port} is taken" in "".join(seen)
    assert f":{port}/" not in line


async def test_a_missing_redis_server_is_one_clear_line(tmp_path: Path) -> None:
    proc = await spawn_dev(tmp_path / "dev", "--port", "0", PATH=str(tmp_path / "empty"))
    assert proc.stdout is not None
    async with asyncio.timeout(START_TIMEOUT_S):
        out = (await proc.stdout.read()).decode()
        code = await proc.wait()
    assert code == 2
    assert out.strip().splitlines() == [
        "opsloop dev: redis-server not found: install it (Debian: apt-get install redis-server)"
    ]

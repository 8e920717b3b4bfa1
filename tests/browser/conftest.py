"""``opsloop dev`` as a real process, and Debian's Chromium driven by Playwright.

``dev`` starts the whole local stack (managed Redis, demo service, scripted demo model,
emulator page, the bot) on free ports under the test's own folder and stops it with
SIGINT, as Ctrl-C would, checking that nothing it started is left behind. The demo's
alert does not fire by itself there (``OPSLOOP_DEV_DEMO_ALERT=0``: it would add a thread to
every test's channel); the page's "Fire an alert" still does. ``page`` is a
headless Chromium page (``/usr/bin/chromium``; no browser download). Screenshots go to
``.opsloop/screenshots/`` (test artifacts).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
HAVE_CHROMIUM = Path(CHROMIUM).exists()
SCREENSHOTS = ROOT / ".opsloop" / "screenshots"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 20.0


@dataclass
class Dev:
    proc: asyncio.subprocess.Process
    url: str
    folder: Path
    output: list[str]


def descendants(pid: int) -> set[int]:
    """Every live process whose ancestry leads to ``pid`` (from /proc)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z":
            parents[int(entry.name)] = int(fields[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        children = {child for child, parent in parents.items() if parent in frontier}
        frontier = children - found
        found |= children
    return found


def processes_using(folder: Path) -> set[int]:
    """Live processes whose command line names ``folder`` (the dev stack's children,
    including ones started in their own session)."""
    marker = str(folder)
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in cmdline and state != "Z":
            found.add(int(entry.name))
    return found


@pytest.fixture
async def dev(tmp_path: Path) -> AsyncIterator[Dev]:
    if not HAVE_CHROMIUM:
        pytest.skip("Chromium is not installed (scripts/system-deps installs it)")
    folder = tmp_path / "dev"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLM_", "SLACK_"))}
    env.pop("REDIS_URL", None)
    env.pop("OPSLOOP_TOOLS", None)
    env["PYTHONPATH"] = str(ROOT)
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("OPSLOOP_DEV_DEMO_ALERT", "0")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "dev", "--port", "0", "--dir", str(folder),
        "--degrade-after", "0",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=env,
        cwd=tmp_path,
    )  # fmt: skip
    output: list[str] = []
    url = None
    assert proc.stdout is not None
    try:
        async with asyncio.timeout(START_TIMEOUT_S):
            while url is None:
                line = (await proc.stdout.readline()).decode(errors="replace")
                if not line:
                    raise AssertionError("opsloop dev exited:\n" + "".join(output))
                output.append(line)
                found = re.search(r"open (http://\S+)", line)
                url = found.group(1) if found else None
    except BaseException:
        proc.kill()
        await proc.wait()
        raise

    async def drain() -> None:
        assert proc.stdout is not None
        while line := await proc.stdout.readline():
            output.append(line.decode(errors="replace"))

    reader = asyncio.create_task(drain())
    yield Dev(proc=proc, url=url, folder=folder, output=output)
    if proc.returncode is None:
        proc.send_signal(signal.SIGINT)
        async with asyncio.timeout(STOP_TIMEOUT_S):
            await proc.wait()
    await reader
    assert proc.returncode == 0, "".join(output)
    assert processes_using(folder) == set(), "left behind:\n" + "".join(output)


@pytest.fixture
async def browser() -> AsyncIterator[object]:
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        chromium = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        try:
            yield chromium
        finally:
            await chromium.close()


def screenshot_path(name: str) -> Path:
    """Where the screenshot ``name`` goes (``alerts/alert-thread``: in a subfolder)."""
    path = SCREENSHOTS / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def copy_to_docs(name: str) -> None:
    """Refresh the README's screenshots (docs/screenshots) from this run, when asked with
    OPSLOOP_UPDATE_SCREENSHOTS=1 (a test run must not change tracked files by itself)."""
    if os.environ.get("OPSLOOP_UPDATE_SCREENSHOTS") != "1":
        return
    target = ROOT / "docs" / "screenshots" / f"{name}.png"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(screenshot_path(name), target)

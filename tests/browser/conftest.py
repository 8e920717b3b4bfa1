"""``opsloop dev`` as a real process, and Debian's Chromium driven by Playwright.

One ``opsloop dev`` stack (managed Redis, demo service, scripted demo model, emulator
page, the bot) serves every test of a module (``dev_stack``): starting one takes ~6 s
alone and 18–26 s under the whole suite's load, most of a browser test's time. It runs on
free ports under the module's own folder and stops with SIGINT, as Ctrl-C would, after
the module's last test, checking that it exits cleanly and that nothing it started is
left behind. The module-scoped fixture also keeps a module's tests on one pytest-xdist
worker under ``--dist loadgroup`` (the suite's conftest groups them by module).

Each test still starts from what a fresh stack shows (``dev``): it opens its own page
(a new browser context: no hint dismissed, no user chosen) and starts its own thread, and
before it the demo service "web" is made degraded again if an earlier test's approved
restart left it healthy (a restarted "web" stays healthy for two minutes), as
``--degrade-after 0`` makes it at the start. ``Dev.output`` is what the stack printed
during that test. A test that needs a stack of its own (one it stops or restarts, or a
different environment) goes in a module of its own, which overrides ``dev_environ``.

The demo's alert does not fire by itself here (``OPSLOOP_DEV_DEMO_ALERT=0``: it would add
a thread to every test's channel); the page's "Fire an alert" still does. ``browser`` is
the module's headless Chromium (``/usr/bin/chromium``; no browser download, launched once
per module: 2–3 s under load), each test's pages in browser contexts of their own, closed
after it. Playwright's objects belong to the event loop they were made on, so a module's
tests run on the module's loop (``pytestmark = pytest.mark.asyncio(loop_scope="module")``
in each). Screenshots go to ``.opsloop/screenshots/`` (test artifacts).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import pytest_asyncio

from bot.dev.demo_service import fetch_metrics, service_port, start_service, stop_service

if TYPE_CHECKING:
    from playwright.async_api import Browser

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
DEGRADE_TIMEOUT_S = 30.0  # for a fresh "web" to answer and say it is degraded
POLL_S = 0.1


@dataclass
class Dev:
    """What a test sees of the module's stack."""

    proc: subprocess.Popen[bytes]
    url: str
    folder: Path
    output: list[str]  # what the stack printed since this test began


@dataclass
class DevProcess:
    """A running ``opsloop dev``: its process, its page and everything it printed."""

    proc: subprocess.Popen[bytes]
    folder: Path
    url: str = ""
    output: list[str] = field(default_factory=list)
    listeners: list[list[str]] = field(default_factory=list)
    started: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def read(self) -> None:
        """The reader thread: every line into ``output`` and each listening test's list;
        the page's address once it is printed."""
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode(errors="replace")
            with self.lock:
                self.output.append(line)
                for listener in self.listeners:
                    listener.append(line)
            found = re.search(r"open (http://\S+)", line)
            if found and not self.url:
                self.url = found.group(1)
                self.started.set()
        self.started.set()  # it exited: whoever waits for the address finds none

    def printed(self) -> str:
        with self.lock:
            return "".join(self.output)


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


@pytest.fixture(scope="module")
def dev_environ() -> dict[str, str]:
    """Environment for the module's stack on top of the defaults; a module overrides it."""
    return {}


@pytest.fixture(scope="module")
def dev_stack(
    tmp_path_factory: pytest.TempPathFactory, dev_environ: dict[str, str]
) -> Iterator[DevProcess]:
    if not HAVE_CHROMIUM:
        pytest.skip("Chromium is not installed (scripts/system-deps installs it)")
    home = tmp_path_factory.mktemp("dev-stack")
    folder = home / "dev"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLM_", "SLACK_"))}
    env.pop("REDIS_URL", None)
    env.pop("OPSLOOP_TOOLS", None)
    env["PYTHONPATH"] = str(ROOT)
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("OPSLOOP_DEV_DEMO_ALERT", "0")
    env.update(dev_environ)
    proc = subprocess.Popen(
        [sys.executable, "-m", "bot", "dev", "--port", "0", "--dir", str(folder),
         "--degrade-after", "0"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        env=env, cwd=home,
    )  # fmt: skip
    assert proc.stdout is not None
    stack = DevProcess(proc=proc, folder=folder)
    reader = threading.Thread(target=stack.read, name="opsloop-dev-output", daemon=True)
    reader.start()
    if not stack.started.wait(START_TIMEOUT_S) or not stack.url:
        proc.kill()
        proc.wait()
        reader.join()
        proc.stdout.close()
        raise AssertionError("opsloop dev did not open its page:\n" + stack.printed())
    try:
        yield stack
    finally:
        try:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                    raise AssertionError(
                        f"opsloop dev did not stop within {STOP_TIMEOUT_S:g} s of SIGINT:\n"
                        + stack.printed()
                    ) from None
            reader.join()
            proc.stdout.close()
            assert proc.returncode == 0, stack.printed()
            assert processes_using(folder) == set(), "left behind:\n" + stack.printed()
        finally:
            stop_service(folder)  # reaps the "web" processes degrade_web started here


def degrade_web(folder: Path) -> None:
    """Make the demo service degraded again, as ``--degrade-after 0`` starts it: a restart
    the bot ran (after an approval) left it healthy. Started afresh from here on the same
    port, in its own session as the restart tool starts it; ``opsloop dev`` stops it by
    its pidfile as it would the one it started."""
    port = service_port(folder)
    if fetch_metrics(port).get("state") == "degraded":
        return
    start_service(folder, port, healthy_for=0.0)
    deadline = time.monotonic() + DEGRADE_TIMEOUT_S
    while fetch_metrics(port).get("state") != "degraded":
        if time.monotonic() >= deadline:
            raise AssertionError(f'"web" is not degraded {DEGRADE_TIMEOUT_S:g} s after start')
        time.sleep(POLL_S)


@pytest.fixture
def dev(dev_stack: DevProcess) -> Iterator[Dev]:
    """The module's stack as a fresh one looks: "web" degraded, this test's output only."""
    if dev_stack.proc.poll() is not None:
        raise AssertionError(
            f"opsloop dev exited (code {dev_stack.proc.returncode}) before this test:\n"
            + dev_stack.printed()
        )
    degrade_web(dev_stack.folder)
    output: list[str] = []
    with dev_stack.lock:
        dev_stack.listeners.append(output)
    try:
        yield Dev(proc=dev_stack.proc, url=dev_stack.url, folder=dev_stack.folder, output=output)
    finally:
        with dev_stack.lock:
            dev_stack.listeners.remove(output)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def chromium() -> AsyncIterator[Browser]:
    """One headless Chromium for the module (each test's pages get contexts of their own)."""
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        try:
            yield launched
        finally:
            await launched.close()


@pytest_asyncio.fixture(loop_scope="module")
async def browser(chromium: Browser) -> AsyncIterator[Browser]:
    """The module's Chromium; every context (``new_page`` opens one) this test opened is
    closed after it, so no page of one test is left running into the next."""
    before = set(chromium.contexts)
    try:
        yield chromium
    finally:
        for context in chromium.contexts:
            if context not in before:
                await context.close()


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

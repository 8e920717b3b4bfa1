"""The ``supervisor`` backend: a real supervisord (``bot.emulator.supervisor_server``)
running three healthy programs, ``api``, ``worker`` and ``scheduler``, reached by the
``supervisor`` pack over its XML-RPC port.

Each program runs a small Python script in the backend's folder; a program is RUNNING
once it has stayed up a second (``startsecs=1``), and supervisord restarts one that
exits (``autorestart``), giving up after three quick exits in a row (BACKOFF, then
FATAL), as a packaged configuration would. The faults:

- ``flapping`` (``program``, default ``worker``): a release of the program that reads
  ``DATABASE_URL``, which its environment does not set: it exits at once with a
  ``KeyError`` traceback, supervisord keeps starting it (BACKOFF) and then gives up
  (FATAL); ``supervisor_status`` shows the state with the traceback's last lines.
  Facts: ``program``, ``missing_env`` (``DATABASE_URL``).

Healing puts the healthy script back and starts the program again. ``reset`` does that
for every program that is not RUNNING its healthy script, whatever a case did (an
approved stop or restart), and starts supervisord afresh if it is gone.
"""

from __future__ import annotations

import asyncio
import time
import xmlrpc.client
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, ClassVar

from bot.emulator.supervisor_server import ManagedSupervisor, Program
from bot.evals.backends.base import BackendError, Facts, Reach

PROGRAMS = ("api", "worker", "scheduler")
OPTIONS = {
    "autorestart": "true",
    "startsecs": "1",
    "startretries": "3",
    "redirect_stderr": "true",
    "stopwaitsecs": "2",
}
FAULT_TIMEOUT_S = 10.0
POLL_S = 0.05

HEALTHY = {
    "api": """\
import signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
print("api 3.8.1 listening on 127.0.0.1:8080 (4 threads)", flush=True)
print("api ready: database ok, cache ok", flush=True)
while True:
    time.sleep(3600)
""",
    "worker": """\
import signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
print("worker 3.8.1 starting: queue=jobs concurrency=8", flush=True)
print("worker connected to the database and the queue; consuming", flush=True)
while True:
    time.sleep(3600)
""",
    "scheduler": """\
import signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
print("scheduler 3.8.1 started: 6 periodic jobs loaded", flush=True)
print("scheduler next run: nightly-report at 02:00 UTC", flush=True)
while True:
    time.sleep(3600)
""",
}

# A release that reads a variable its supervisord section does not set.
MISSING_ENV = "DATABASE_URL"
FLAPPING = """\
import os, sys
print("{program} 3.9.0 starting: loading settings", flush=True)
settings = {{"queue": "jobs", "concurrency": 8}}
settings["dsn"] = os.environ["{variable}"]
"""


class SupervisorBackend:
    """supervisord with ``api``, ``worker`` and ``scheduler``; see the module docstring."""

    kind: ClassVar[str] = "supervisor"
    faults: ClassVar[tuple[str, ...]] = ("flapping",)

    def __init__(self) -> None:
        self.folder = Path()
        self.supervisor: ManagedSupervisor | None = None

    async def start(self, folder: Path) -> Reach:
        self.folder = Path(folder)
        await asyncio.to_thread(self._start)
        assert self.supervisor is not None
        return Reach(packs=("supervisor",), pack_config={"supervisor_url": self.supervisor.url})

    def _start(self, port: int | None = None) -> None:
        programs = [Program(name, HEALTHY[name], options=OPTIONS) for name in PROGRAMS]
        supervisor = ManagedSupervisor(self.folder, programs)
        if port is not None:
            supervisor.port = port  # the packs were told this one
        try:
            supervisor.start()
        except FileNotFoundError as exc:
            raise BackendError(f"supervisord is not installed: {exc}") from None
        except (RuntimeError, TimeoutError) as exc:
            raise BackendError(f"supervisord did not start: {exc}") from None
        self.supervisor = supervisor

    @property
    def _running(self) -> ManagedSupervisor:
        if self.supervisor is None:
            raise BackendError("supervisor: not started")
        return self.supervisor

    @asynccontextmanager
    async def fault(self, name: str, params: Mapping[str, Any]) -> AsyncIterator[Facts]:
        if name != "flapping":
            raise BackendError(f"supervisor: no fault {name!r} (known: {', '.join(self.faults)})")
        program = str(params.get("program", "worker"))
        if program not in PROGRAMS:
            known = ", ".join(PROGRAMS)
            raise BackendError(f"supervisor: no program {program!r} (known: {known})")
        try:
            await asyncio.to_thread(self._flap, program)
            yield {"program": program, "missing_env": MISSING_ENV}
        finally:
            await asyncio.to_thread(self._heal, [program])

    async def reset(self) -> None:
        old = self.supervisor
        if old is None or not old.running:
            if old is not None:
                await asyncio.to_thread(old.stop)
            await asyncio.to_thread(self._start, old.port if old is not None else None)
            return
        await asyncio.to_thread(self._heal, list(PROGRAMS))

    async def stop(self) -> None:
        supervisor, self.supervisor = self.supervisor, None
        if supervisor is not None:
            await asyncio.to_thread(supervisor.stop)

    # -- blocking work (in a thread) --------------------------------------------------

    def _script(self, program: str) -> Path:
        return self.folder / f"prog_{program}.py"

    def _flap(self, program: str) -> None:
        supervisor = self._running
        script = FLAPPING.format(program=program, variable=MISSING_ENV)
        self._script(program).write_text(script)
        self._stop(program)
        supervisor.rpc("supervisor.startProcess", program, False)
        # Its first exit: supervisord now says BACKOFF (and soon FATAL), with the traceback.
        deadline = time.monotonic() + FAULT_TIMEOUT_S
        while supervisor.info(program)["statename"] not in ("BACKOFF", "FATAL"):
            if time.monotonic() > deadline:
                raise BackendError(f"supervisor: {program} did not start failing")
            time.sleep(POLL_S)

    def _heal(self, programs: list[str]) -> None:
        """Each program RUNNING its healthy script (restarted if it ran another one)."""
        supervisor = self._running
        for program in programs:
            healthy = HEALTHY[program]
            script = self._script(program)
            changed = script.read_text() != healthy
            if changed:
                script.write_text(healthy)
            if changed or supervisor.info(program)["statename"] != "RUNNING":
                self._stop(program)
                supervisor.rpc("supervisor.startProcess", program, True)

    def _stop(self, program: str) -> None:
        try:
            self._running.rpc("supervisor.stopProcess", program, True)
        except xmlrpc.client.Fault as fault:
            if "NOT_RUNNING" not in fault.faultString:
                raise

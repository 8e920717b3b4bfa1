"""A real ``supervisord`` (Debian's ``/usr/bin/supervisord``) as a child process.

It runs in the foreground (``-n``) with a config generated under a directory of the
caller's: an ``[inet_http_server]`` on a free loopback port (optionally with a
username and password), optionally an ``[unix_http_server]`` socket, and the programs
the caller gives. Each program is a small Python script in that directory, so every
process it starts can also be found by its command line (``leftovers``). ``stop()``
kills supervisord and its programs at once (a graceful shutdown costs supervisord a
second or two of its poll loop per test). Used by the supervisor pack's tests
(``tests/tools/packs/supervisor_backend.py`` re-exports it), ``opsloop check``'s test and
``benchmarks/pack_supervisor.py``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import xmlrpc.client
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.emulator.redis_server import free_port

START_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 15.0
POLL_S = 0.02

# A program that stays up until it is told to stop.
SLEEPER = """\
import signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
while True:
    time.sleep(3600)
"""


@dataclass(frozen=True, slots=True)
class Program:
    """One ``[program:x]`` section; ``script`` is Python source run by this interpreter."""

    name: str
    script: str = SLEEPER
    options: Mapping[str, str] = field(default_factory=dict)
    command: str | None = None  # instead of running ``script``
    settles_as: str | None = None  # the state start() waits for (default: any settled one)


DEFAULT_OPTIONS = {
    "autostart": "true",
    "autorestart": "false",
    "startsecs": "0",
    "startretries": "0",
    "stopwaitsecs": "5",
    "stopasgroup": "true",
    "killasgroup": "true",
}


class ManagedSupervisor:
    """``start()`` waits until every program has settled; ``stop()`` kills supervisord
    and everything it started."""

    def __init__(
        self,
        root: Path,
        programs: Sequence[Program],
        *,
        auth: tuple[str, str] | None = None,
        unix_socket: bool = False,
    ) -> None:
        self.root = Path(root)
        self.programs = tuple(programs)
        self.auth = auth
        self.port = free_port()
        self.socket_path = self.root / "s.sock" if unix_socket else None
        self._proc: subprocess.Popen[bytes] | None = None

    # -- addresses --------------------------------------------------------------------

    @property
    def url(self) -> str:
        """``http://[user:pass@]127.0.0.1:PORT/RPC2``, as ``SUPERVISOR_URL``."""
        cred = f"{self.auth[0]}:{self.auth[1]}@" if self.auth else ""
        return f"http://{cred}127.0.0.1:{self.port}/RPC2"

    @property
    def unix_url(self) -> str:
        assert self.socket_path is not None, "started without unix_socket=True"
        return f"unix://{self.socket_path}"

    def rpc(self, method: str, *params: Any) -> Any:
        """One call with a plain synchronous client: the tests' own view of supervisord."""
        with xmlrpc.client.ServerProxy(self.url) as proxy:
            return getattr(proxy, method)(*params)

    # -- life cycle -------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def config(self) -> str:
        root = self.root
        lines = [
            "[supervisord]",
            "nodaemon=true",
            f"logfile={root / 'supervisord.log'}",
            f"pidfile={root / 'supervisord.pid'}",
            f"childlogdir={root}",
            "loglevel=info",
            "",
            "[inet_http_server]",
            f"port=127.0.0.1:{self.port}",
        ]
        if self.auth:
            lines += [f"username={self.auth[0]}", f"password={self.auth[1]}"]
        if self.socket_path is not None:
            lines += ["", "[unix_http_server]", f"file={self.socket_path}", "chmod=0700"]
        lines += [
            "",
            "[rpcinterface:supervisor]",
            "supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface",
        ]
        for program in self.programs:
            script = root / f"prog_{program.name}.py"
            script.write_text(textwrap.dedent(program.script))
            command = program.command or f"{sys.executable} {script}"
            options = {**DEFAULT_OPTIONS, **program.options}
            lines += ["", f"[program:{program.name}]", f"command={command}"]
            lines += [f"{key}={value}" for key, value in options.items()]
        return "\n".join(lines) + "\n"

    def start(self) -> ManagedSupervisor:
        binary = shutil.which("supervisord") or "/usr/bin/supervisord"
        self.root.mkdir(parents=True, exist_ok=True)
        conf = self.root / "supervisord.conf"
        conf.write_text(self.config())
        # Its own session: a test's Ctrl-C does not reach it before stop() runs.
        self._proc = subprocess.Popen(
            [binary, "-n", "-c", str(conf)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            self.wait_for(self._settled, "supervisord to start its programs", START_TIMEOUT_S)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """End supervisord and every process it started, at once: freeze it (it can
        spawn nothing more), SIGKILL the process group of each of its children (a
        program leads its own group), SIGKILL it, then anything of ours left over."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGSTOP)
            for child in children_of(proc.pid):
                for kill, target in ((os.killpg, child), (os.kill, child)):
                    try:
                        kill(target, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass  # gone already, or a group it does not lead
            proc.kill()
            proc.wait(STOP_TIMEOUT_S)
        # A killed process lingers until the kernel has torn it down (longer on a busy
        # machine), and one forked just before the freeze shows up late: kill what is
        # left until nothing is (bounded), so ``leftovers`` afterwards means survivors.
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while (left := self.leftovers()) and time.monotonic() < deadline:
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.02)

    def leftovers(self) -> list[int]:
        """Live processes running one of this instance's program scripts."""
        marker = str(self.root / "prog_").encode()
        found = []
        for pid, _ in _live_processes():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue  # gone meanwhile, or not ours to read
            if marker in cmdline:
                found.append(pid)
        return found

    # -- waiting ----------------------------------------------------------------------

    def wait_for(self, ready: Callable[[], bool], what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            if self._proc is not None and self._proc.poll() is not None:
                log = (self.root / "supervisord.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"supervisord exited with {self._proc.returncode}:\n{log}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out waiting for {what}")
            time.sleep(POLL_S)

    def _settled(self) -> bool:
        try:
            infos = self.rpc("supervisor.getAllProcessInfo")
        except (OSError, xmlrpc.client.Error):
            return False
        programs = {p.name: p for p in self.programs}
        if {info["group"] for info in infos} != set(programs):
            return False
        for info in infos:
            program = programs[info["group"]]
            if program.settles_as is not None:
                settled: tuple[str, ...] = (program.settles_as,)
            elif {**DEFAULT_OPTIONS, **program.options}["autostart"] == "true":
                settled = ("RUNNING", "EXITED", "FATAL")
            else:
                settled = ("STOPPED",)
            if info["statename"] not in settled:
                return False
        return True

    def info(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self.rpc("supervisor.getProcessInfo", name)
        return result

    def __enter__(self) -> ManagedSupervisor:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()


def _live_processes() -> Iterator[tuple[int, list[str]]]:
    """Each live process (zombies are already dead): its pid and the fields of its
    ``/proc/PID/stat`` after the command name (state, parent pid, …)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # gone meanwhile, or not ours to read
        # "pid (comm) state ppid …"; comm may hold spaces and parentheses.
        fields = stat[stat.rfind(")") + 2 :].split()
        if fields and fields[0] != "Z":
            yield int(entry.name), fields


def children_of(parent: int) -> list[int]:
    """Live processes whose parent is ``parent``."""
    return [
        pid for pid, fields in _live_processes() if len(fields) > 1 and int(fields[1]) == parent
    ]


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live (not zombie) process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return ") Z " not in stat

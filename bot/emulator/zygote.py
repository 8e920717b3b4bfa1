"""A warm "zygote" that forks ``opsloop serve`` / ``opsloop socket`` children for the tests.

Every fresh ``python -m bot serve`` pays about 2 s of CPU importing the service; the suite
starts a few hundred. The zygote is a long-lived helper (one per test process, started on
first use, ``python -m bot.emulator.zygote``) that imports what ``serve`` and ``socket``
need once (``PRELOAD``), starts no thread and no event loop, and on request forks a child
that then runs ``python -m bot ARGS`` as a fresh interpreter would. ``BotProcess`` uses it
through ``fork_bot`` for ``(sys.executable, "-m", "bot", "serve"|"socket", ...)``; any other
command, or ``OPSLOOP_TEST_FORK=0`` in the test process's environment, spawns as before.

The conversation, over ``AF_UNIX`` ``SOCK_SEQPACKET`` sockets (one message, one read):

- the control socket is the zygote's stdin. Once its imports are done the zygote says
  hello on it (its pid, its environment, the variables its imports read, or why it
  refuses to fork). The test process sends one request per child: JSON (argv, env, cwd,
  new_session) with three descriptors (SCM_RIGHTS): the child's own reply channel and the
  already opened stdout and stderr log files. End of file on it (the test process ended
  or closed it) makes the zygote SIGKILL the children it still has and exit.
- on the reply channel the zygote sends ``{"pid": N}`` with a pidfd of the child (so the
  test process signals exactly that process, never a recycled pid), once the child has
  finished setting itself up; then ``{"exit": CODE}`` when it has reaped it (the code, or
  ``-SIGNAL`` as asyncio's ``returncode``). ``ForkedProcess`` is the test side: ``pid``,
  ``returncode``, ``await wait()``, ``send_signal``, ``terminate``, ``kill``.

The child, before it runs ``bot/__main__.py`` with ``runpy`` (as ``-m`` does): its own
session when asked (``setsid``, as ``start_new_session=True``); stdin from /dev/null and
stdout/stderr ``dup2``'d onto the given files; every other descriptor closed (the
zygote's control socket, its epoll, other children's channels and pidfds: as
``close_fds=True``); the signal dispositions and mask the zygote had at its start (a fresh
interpreter's: SIGINT raises KeyboardInterrupt, SIGPIPE and SIGXFSZ ignored, SIGTERM and
SIGCHLD default); exactly the requested environment (``os.environ.clear(); update``), cwd,
``sys.argv``/``sys.orig_argv`` and ``sys.path[0]`` (the cwd, as ``-m`` puts it);
``random.seed()``. Logging is not configured (the zygote never configures it; ``main``
does), and ``main`` keeps ``UNUSED_OPTIONAL_MODULES`` out as when run as the process's
command (the zygote applies it before its imports, in the same order as a fresh start).
The child exits the interpreter's way (SystemExit through runpy), so non-daemon threads
are joined and atexit handlers run (an OpenTelemetry batch processor flushes its spans on
exit) as in a fresh process.

Pitfalls found, and what handles them:

- Imports that read the environment (``OTEL_PYTHON_CONTEXT`` in opentelemetry.context,
  ``PROMETHEUS_*`` in prometheus_client, ``*_NO_EXTENSIONS`` in aiohttp/yarl/multidict,
  ``PYDANTIC_DISABLE_PLUGINS``, CA-bundle variables, ``HOME``, ``PATH``...): the zygote
  records every variable read while it imports (``os.environ`` is watched during
  ``PRELOAD``) and the test process forks only when the requested environment agrees
  with the zygote's on all of them, and on what the interpreter itself reads at start
  (``PYTHON*`` such as ``PYTHONPATH``/``PYTHONUNBUFFERED``/``PYTHONHASHSEED``, ``LANG``,
  ``LANGUAGE``, ``LC_*``, ``HOME``, ``TZ``); otherwise it spawns fresh. The zygote runs
  with the environment ``bot_env`` gives every child before the test's own variables.
- ``wsgiref.handlers`` copies the whole environment into a class attribute at import
  (prometheus_client imports it): the child copies it again. Any other module iterating
  ``os.environ`` at import makes the zygote refuse (fresh spawns, reason in the hello).
- Threads, an event loop policy or open descriptors left by the imports would be
  inherited half-alive: the zygote refuses to fork if its imports leave any.
- ``random``'s state would be shared by every child: ``random.seed()`` in the child (on
  top of random's own at-fork reseed). The string hash seed cannot be changed after
  start: all children of one zygote share one (random per zygote, not per child).
- A pid reported before the child's ``setsid`` could not be SIGKILLed as a group: the
  zygote reports the pid only after the child closed its set-up pipe.
- ``/proc/PID/environ`` of a child shows the zygote's start environment (the kernel's
  copy); ``os.environ`` and everything the bot spawns see the requested one. A traceback
  the child prints ends in the zygote's frames below ``runpy``.
- The zygote must not outlive the test process: its stdin is the control socket, whose
  end of file stops it; the test process also closes it at exit.
"""

from __future__ import annotations

import array
import asyncio
import atexit
import contextlib
import importlib
import json
import os
import random
import runpy
import select
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FORK_SWITCH = "OPSLOOP_TEST_FORK"  # "0": spawn every child fresh
COMMANDS = ("serve", "socket")
# What ``serve`` and ``socket`` import (``python -X importtime -m bot serve`` up to a job),
# in the order a fresh start imports it; ``bot.cli.main`` first, then the skip list.
PRELOAD = (
    "bot.cli.serve",
    "bot.cli.settings_problems",
    "bot.logs",
    "bot.service",
    "bot.slack.socket",
    "bot.llm.openai",
    "slack_bolt.listener_matcher.async_builtins",
    "anyio.streams.memory",
    "genai_prices",
    "genai_prices.data_snapshot",
)
# Variables the interpreter reads at its start (beyond what the imports read).
INTERPRETER_VARIABLES = ("LANG", "LANGUAGE", "HOME", "TZ")
INTERPRETER_PREFIXES = ("PYTHON", "LC_")
# Modules that iterate os.environ at import, and how the child refreshes what they keep.
ENVIRON_COPIES = ("wsgiref.handlers",)
HELLO_TIMEOUT_S = 60.0  # the zygote's imports on a loaded CI machine
REPLY_TIMEOUT_S = 30.0
SETUP_TIMEOUT_S = 10.0
CLOSE_TIMEOUT_S = 10.0
MAX_MESSAGE = 1 << 20
LOG_TAIL_CHARS = 4000


class ZygoteError(RuntimeError):
    """The zygote did not start, or lost a child; the message holds its log."""


# ---- the zygote process ------------------------------------------------------------------


@dataclass
class _Request:
    argv: list[str]
    env: dict[str, str]
    cwd: str
    new_session: bool
    channel: socket.socket
    stdout: int
    stderr: int


@dataclass
class _Child:
    pid: int
    pidfd: int
    channel: socket.socket


@dataclass
class _Start:
    """What the zygote had at its start, for its children to get back."""

    signals: dict[int, Any] = field(default_factory=dict)
    mask: set[int] = field(default_factory=set)
    path0_is_cwd: bool = False


class _WatchedEnviron(os._Environ):  # type: ignore[type-arg]
    """``os.environ`` while the zygote imports: notes every variable read and who iterates."""

    reads: set[str] = set()
    iterated_by: set[str] = set()

    def __getitem__(self, key: str) -> str:
        caller = sys._getframe(1)
        if caller.f_code.co_name != "__iter__":  # items()/values() of an iteration: seen there
            _WatchedEnviron.reads.add(key)
        return str(super().__getitem__(key))

    def __iter__(self) -> Any:
        frame = sys._getframe(1)
        while frame is not None and frame.f_globals.get("__name__") in (
            "os",
            "_collections_abc",
            "collections.abc",
            __name__,
        ):
            frame = frame.f_back  # type: ignore[assignment]
        _WatchedEnviron.iterated_by.add(str(frame.f_globals.get("__name__")) if frame else "?")
        return super().__iter__()


def _preload() -> str | None:
    """Import ``PRELOAD`` watching the environment; why not to fork, or None."""
    environ_class = os.environ.__class__
    os.environ.__class__ = _WatchedEnviron
    try:
        from bot.cli import main as cli_main

        cli_main.skip_unused_optional_modules()
        for name in PRELOAD:
            importlib.import_module(name)
    except Exception as exc:  # a broken import: fresh spawns show it as it is
        return f"importing failed: {type(exc).__name__}: {exc}"
    finally:
        os.environ.__class__ = environ_class
    unknown = _WatchedEnviron.iterated_by - set(ENVIRON_COPIES)
    if unknown:
        return f"imports copy the whole environment: {sorted(unknown)}"
    if threading.active_count() != 1:
        return f"imports started threads: {threading.enumerate()}"
    if asyncio.events._event_loop_policy is not None:  # type: ignore[attr-defined]
        return "imports set an event loop policy"
    return None


def _receive(sock: socket.socket, max_fds: int) -> tuple[bytes, list[int]]:
    """One message and the descriptors that came with it (close-on-exec)."""
    fds = array.array("i")
    data, ancdata, _flags, _addr = sock.recvmsg(
        MAX_MESSAGE, socket.CMSG_SPACE(max_fds * fds.itemsize), socket.MSG_CMSG_CLOEXEC
    )
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    return data, list(fds)


def _send(sock: socket.socket, message: Mapping[str, Any], fds: Sequence[int] = ()) -> None:
    ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
    sock.sendmsg([json.dumps(message).encode()], ancillary)


class _Zygote:
    def __init__(self, control: socket.socket, start: _Start) -> None:
        self.control = control
        self.start = start
        self.selector = selectors.DefaultSelector()
        self.children: dict[int, _Child] = {}  # by pidfd

    def serve(self) -> _Request | None:
        """Fork children until the control socket closes (None); in a child, its request."""
        self.selector.register(self.control, selectors.EVENT_READ, None)
        while True:
            for key, _ in self.selector.select():
                if key.data is not None:
                    self._reap(key.data)
                    continue
                try:
                    data, fds = _receive(self.control, 3)
                except ConnectionError:
                    data, fds = b"", []
                if not data:
                    self._stop()
                    return None
                request = self._parse(data, fds)
                if request is not None and self._fork(request):
                    return request

    def _parse(self, data: bytes, fds: list[int]) -> _Request | None:
        if len(fds) != 3:
            for fd in fds:
                os.close(fd)
            print(f"zygote: a request with {len(fds)} descriptors, not 3", file=sys.stderr)
            return None
        channel = socket.socket(fileno=fds[0])
        try:
            raw = json.loads(data)
            argv = [str(a) for a in raw["argv"]]
            env = {str(k): str(v) for k, v in raw["env"].items()}
            cwd, new_session = str(raw["cwd"]), bool(raw["new_session"])
            return _Request(argv, env, cwd, new_session, channel, stdout=fds[1], stderr=fds[2])
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            with contextlib.suppress(OSError):
                _send(channel, {"error": f"bad request: {exc!r}"})
            channel.close()
            os.close(fds[1])
            os.close(fds[2])
            return None

    def _fork(self, request: _Request) -> bool:
        """Fork for ``request``; True in the child, which is then set up."""
        ready_r, ready_w = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            pid = os.fork()
        except OSError as exc:
            pid = -1
            failure = f"fork failed: {exc}"
        if pid == 0:
            os.close(ready_r)
            self._become_child(request, ready_w)
            return True
        os.close(ready_w)
        os.close(request.stdout)
        os.close(request.stderr)
        if pid > 0:
            failure = self._await_setup(ready_r)
        os.close(ready_r)
        if pid > 0 and not failure:
            pidfd = os.pidfd_open(pid)
            child = _Child(pid, pidfd, request.channel)
            self.children[pidfd] = child
            self.selector.register(pidfd, selectors.EVENT_READ, child)
            with contextlib.suppress(OSError):
                _send(request.channel, {"pid": pid}, [pidfd])
            return False
        if pid > 0:
            os.waitpid(pid, 0)
        with contextlib.suppress(OSError):
            _send(request.channel, {"error": failure})
        request.channel.close()
        return False

    @staticmethod
    def _await_setup(ready_r: int) -> str:
        """Wait (bounded) for the child to close its end; what it wrote is its failure."""
        said = b""
        while True:
            readable, _, _ = select.select([ready_r], [], [], SETUP_TIMEOUT_S)
            if not readable:
                return ""  # slow, not failed: report it anyway
            chunk = os.read(ready_r, 4096)
            if not chunk:
                return said.decode(errors="replace")
            said = (said + chunk)[:4096]

    def _reap(self, child: _Child) -> None:
        self.selector.unregister(child.pidfd)
        del self.children[child.pidfd]
        _, status = os.waitpid(child.pid, 0)
        os.close(child.pidfd)
        with contextlib.suppress(OSError):
            _send(child.channel, {"exit": os.waitstatus_to_exitcode(status)})
        child.channel.close()

    def _stop(self) -> None:
        """The test process is gone: no child of it may stay."""
        for child in list(self.children.values()):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child.pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(child.pidfd, signal.SIGKILL)
            _, status = os.waitpid(child.pid, 0)
            os.close(child.pidfd)
            with contextlib.suppress(OSError):
                _send(child.channel, {"exit": os.waitstatus_to_exitcode(status)})
            child.channel.close()
        self.children.clear()
        self.selector.close()
        self.control.close()

    def _become_child(self, request: _Request, ready_w: int) -> None:
        """Turn this fork into a fresh ``python -m bot`` start (see the module docstring)."""
        if request.new_session:
            os.setsid()
        self.selector.close()
        self.control.close()
        for child in self.children.values():
            os.close(child.pidfd)
            child.channel.close()
        self.children.clear()
        request.channel.close()
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(request.stdout, 1)
        os.dup2(request.stderr, 2)
        try:
            os.chdir(request.cwd)
        except OSError as exc:
            os.write(ready_w, f"cannot enter {request.cwd}: {exc}".encode())
            os._exit(127)
        os.environ.clear()
        os.environ.update(request.env)
        if "wsgiref.handlers" in sys.modules:
            handlers: Any = sys.modules["wsgiref.handlers"]
            handlers.BaseHandler.os_environ = handlers.read_environ()
        for signum, handler in self.start.signals.items():
            if signal.getsignal(signum) is not handler:
                signal.signal(signum, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, self.start.mask)
        sys.argv = ["-m", *request.argv]
        sys.orig_argv = [sys.executable, "-m", "bot", *request.argv]
        if self.start.path0_is_cwd:
            sys.path[0] = os.getcwd()
        random.seed()
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))  # also ready_w: set up, says the EOF


def _zygote_main() -> int:
    start = _Start(
        signals={s: signal.getsignal(s) for s in signal.valid_signals() if _catchable(s)},
        mask=signal.pthread_sigmask(signal.SIG_BLOCK, []),
        path0_is_cwd=bool(sys.path) and sys.path[0] == os.getcwd(),
    )
    control = socket.socket(fileno=os.dup(0))
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    refused = _preload()
    left = {int(fd) for fd in os.listdir("/proc/self/fd")} - {0, 1, 2, control.fileno()}
    if refused is None and len(left) > 1:  # one is listdir's own
        refused = f"imports left descriptors open: {sorted(left)}"
    hello = {
        "pid": os.getpid(),
        "environ": dict(os.environ),
        "reads": sorted(_WatchedEnviron.reads),
        "refused": refused,
    }
    _send(control, hello)
    if refused is not None:
        print(f"zygote: not forking: {refused}", file=sys.stderr)
    request = _Zygote(control, start).serve()
    if request is None:
        return 0
    runpy.run_module("bot", run_name="__main__", alter_sys=True)  # ends in sys.exit
    return 0


def _catchable(signum: int) -> bool:
    return signal.getsignal(signum) is not None and signum not in (signal.SIGKILL, signal.SIGSTOP)


# ---- the test process side -----------------------------------------------------------------


class ForkedProcess:
    """A forked ``opsloop`` child, as much of ``asyncio.subprocess.Process`` as we use."""

    def __init__(self, channel: socket.socket, loop: asyncio.AbstractEventLoop) -> None:
        self.pid = 0
        self.returncode: int | None = None
        self._pidfd = -1
        self._channel = channel
        self._loop = loop
        self._started: asyncio.Future[None] = loop.create_future()
        self._exited = asyncio.Event()
        self._lost = ""
        channel.setblocking(False)
        loop.add_reader(channel.fileno(), self._on_message)

    def _on_message(self) -> None:
        try:
            data, fds = _receive(self._channel, 1)
        except BlockingIOError:
            return
        except OSError as exc:
            data, fds = b"", []
            self._lost = str(exc)
        message: dict[str, Any] = json.loads(data) if data else {}
        if "pid" in message and fds:
            self.pid, self._pidfd = int(message["pid"]), fds[0]
            self._started.set_result(None)
            return
        for fd in fds:
            os.close(fd)
        if "exit" in message:
            self.returncode = int(message["exit"])
        else:
            self._lost = str(message.get("error") or self._lost or "the zygote closed the channel")
            if not self._started.done():
                self._started.set_exception(ZygoteError(f"fork failed: {self._lost}"))
        self._close()
        self._exited.set()

    def _close(self) -> None:
        if self._channel.fileno() >= 0:
            with contextlib.suppress(Exception):
                self._loop.remove_reader(self._channel.fileno())
            self._channel.close()
        if self._pidfd >= 0:
            os.close(self._pidfd)
            self._pidfd = -1

    def __del__(self) -> None:
        if self._channel.fileno() >= 0 or self._pidfd >= 0:
            self._close()

    async def wait(self) -> int:
        """Wait until the child ended; its exit code, or ``-SIGNAL``."""
        await self._exited.wait()
        if self.returncode is None:
            raise ZygoteError(f"the zygote lost child {self.pid}: {self._lost}")
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is not None or self._pidfd < 0:
            raise ProcessLookupError(self.pid)
        with contextlib.suppress(ProcessLookupError):  # ended, not reaped yet: as Popen
            signal.pidfd_send_signal(self._pidfd, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Zygote:
    """The test process's handle on one zygote: start it, fork through it, close it."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = dict(env)
        self.folder = Path(tempfile.mkdtemp(prefix="opsloop-zygote-"))
        self.log_path = self.folder / "zygote.log"
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "bot.emulator.zygote"],
                stdin=theirs.fileno(),
                stdout=subprocess.DEVNULL,
                stderr=log,
                env=self.env,
                cwd=self.folder,
                start_new_session=True,  # a Ctrl-C to the tests does not reach it
            )
        theirs.close()
        self.control = ours
        self.lock = threading.Lock()
        ready, _, _ = select.select([ours], [], [], HELLO_TIMEOUT_S)
        data = ours.recv(MAX_MESSAGE) if ready else b""
        if not data:
            self.close()
            raise ZygoteError(f"the zygote did not start within {HELLO_TIMEOUT_S}s\n{self.log()}")
        hello = json.loads(data)
        self.pid: int = hello["pid"]
        self.environ: dict[str, str] = hello["environ"]
        self.reads: list[str] = hello["reads"]
        self.refused: str | None = hello["refused"]

    def log(self) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return f"----- zygote log ({self.log_path}) -----\n{text[-LOG_TAIL_CHARS:]}"

    def mismatch(self, env: Mapping[str, str]) -> list[str]:
        """The variables on which ``env`` disagrees with what the zygote imported with."""
        keys = {*self.reads, *INTERPRETER_VARIABLES}
        keys |= {k for k in (*env, *self.environ) if k.startswith(INTERPRETER_PREFIXES)}
        return sorted(k for k in keys if env.get(k) != self.environ.get(k))

    async def fork(
        self,
        args: Sequence[str],
        env: Mapping[str, str],
        *,
        cwd: Path,
        stdout: int,
        stderr: int,
        new_session: bool,
    ) -> ForkedProcess:
        """A child running ``python -m bot ARGS``, started (its pid known)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        request = {
            "argv": list(args),
            "env": dict(env),
            "cwd": str(cwd),
            "new_session": new_session,
        }
        try:
            forked = ForkedProcess(ours, asyncio.get_running_loop())
            with self.lock:
                _send(self.control, request, [theirs.fileno(), stdout, stderr])
        except OSError as exc:
            ours.close()
            raise ZygoteError(f"the zygote is gone ({exc})\n{self.log()}") from exc
        finally:
            theirs.close()
        try:
            await asyncio.wait_for(asyncio.shield(forked._started), REPLY_TIMEOUT_S)
        except TimeoutError:
            forked._close()
            raise ZygoteError(
                f"no pid from the zygote in {REPLY_TIMEOUT_S}s\n{self.log()}"
            ) from None
        return forked

    def close(self) -> None:
        """End of file on its stdin: the zygote kills its children and exits."""
        self.control.close()
        try:
            self.process.wait(CLOSE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


_shared: Zygote | None = None
_shared_lock = threading.Lock()


def shared_zygote(env: Mapping[str, str]) -> Zygote:
    """This process's zygote, started with ``env`` on first use, closed at exit."""
    global _shared
    with _shared_lock:
        if _shared is None or _shared.process.poll() is not None:
            _shared = Zygote(env)
            atexit.register(_shared.close)
        return _shared


def current_zygote() -> Zygote | None:
    """This process's zygote, if one was started."""
    return _shared


def wants_fork(argv: Sequence[str]) -> bool:
    """Whether ``argv`` is ``python -m bot serve|socket ...`` and forking is not switched off."""
    return (
        os.environ.get(FORK_SWITCH, "1") != "0"
        and len(argv) >= 4
        and tuple(argv[:3]) == (sys.executable, "-m", "bot")
        and argv[3] in COMMANDS
    )


async def fork_bot(
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    zygote_env: Mapping[str, str],
    cwd: Path,
    stdout: int,
    stderr: int,
    new_session: bool,
) -> ForkedProcess | None:
    """``argv`` forked from this process's zygote, or None when it must be spawned fresh
    (another command, ``OPSLOOP_TEST_FORK=0``, an environment the zygote cannot give)."""
    if not wants_fork(argv):
        return None
    zygote = await asyncio.to_thread(shared_zygote, zygote_env)
    if zygote.refused is not None or zygote.mismatch(env):
        return None
    return await zygote.fork(
        argv[3:], env, cwd=cwd, stdout=stdout, stderr=stderr, new_session=new_session
    )


if __name__ == "__main__":
    sys.exit(_zygote_main())

"""A ``redis-server`` child process on a free loopback port (tests, ``opsloop dev``).

AOF on with ``appendfsync always`` (every acknowledged write survives a crash), data in
a directory of the caller's choosing, so a killed server restarts with its data.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from bot.errors import ConfigError, StoreError

START_TIMEOUT_S = 10.0
INSTALL_HINT = "redis-server not found: install it (Debian: apt-get install redis-server)"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class ManagedRedis:
    """``start()``, ``kill()`` (SIGKILL, as a crash), ``restart()``, ``stop()``."""

    def __init__(self, data_dir: Path, *, port: int | None = None, fsync: str = "always") -> None:
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        self.fsync = fsync
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    loglevel = "warning"

    def server_args(self) -> list[str]:
        """The ``redis-server`` command line (its data dir made): loopback, AOF with
        ``fsync``, no RDB snapshots, logging to ``redis.log`` in the data dir."""
        binary = shutil.which("redis-server")
        if binary is None:
            raise ConfigError(INSTALL_HINT)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        return [
            binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(self.data_dir),
            "--appendonly", "yes",
            "--appendfsync", self.fsync,
            "--save", "",
            "--protected-mode", "no",
            "--daemonize", "no",
            "--loglevel", self.loglevel,
            "--logfile", str(self.data_dir / "redis.log"),
        ]  # fmt: skip

    def start(self) -> ManagedRedis:
        args = self.server_args()
        self._proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                err = (self._proc.stderr.read() if self._proc.stderr else b"").decode()
                self._reap()
                raise StoreError(f"redis-server exited at start: {err.strip()[:300]}")
            if _ping(self.port):
                return self
            time.sleep(0.02)
        self.stop()
        raise StoreError(f"redis-server did not answer on port {self.port}")

    def kill(self) -> None:
        """SIGKILL: the server dies as in a crash."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGKILL)
            self._proc.wait(timeout=10)
        self._reap()

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=10)
        self._reap()

    def _reap(self) -> None:
        if self._proc is not None and self._proc.stderr is not None:
            self._proc.stderr.close()
        self._proc = None

    def restart(self) -> ManagedRedis:
        self.kill()
        return self.start()

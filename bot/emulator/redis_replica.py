"""A replica of a managed redis-server, which a test can freeze (``--replicaof``).

Frozen (SIGSTOP) it stays connected but acknowledges nothing, so ``WAIT`` on its master
times out: how the tests show that ``OPSLOOP_REDIS_MIN_REPLICAS`` refuses an
acknowledgement. ``thaw`` lets it catch up; ``linked`` waits (bounded) until it has
confirmed a write.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from pathlib import Path

import redis.asyncio as aioredis

from bot.emulator.redis_server import ManagedRedis, free_port

LINK_TIMEOUT_S = 15.0


class ManagedReplica:
    """``redis-server --replicaof`` the given master, in its own folder."""

    def __init__(self, master: ManagedRedis, folder: Path) -> None:
        self.master = master
        self.folder = folder
        self.port = free_port()
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def master_port(self) -> str:
        return self.master.url.rsplit(":", 1)[1].split("/")[0]

    def start(self) -> ManagedReplica:
        self.folder.mkdir(parents=True, exist_ok=True)
        # The master's full sync would otherwise wait 5 s for more replicas to join it.
        subprocess.run(
            ["redis-cli", "-p", self.master_port, "CONFIG", "SET", "repl-diskless-sync-delay", "0"],
            check=True,
            capture_output=True,
            timeout=10,
        )
        self._proc = subprocess.Popen(
            [
                "redis-server",
                "--port", str(self.port),
                "--bind", "127.0.0.1",
                "--dir", str(self.folder),
                "--save", "",
                "--appendonly", "no",
                "--replicaof", "127.0.0.1", self.master_port,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        return self

    def freeze(self) -> None:
        assert self._proc is not None
        os.kill(self._proc.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            os.kill(self._proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self._proc is None:
            return
        self.thaw()
        self._proc.kill()
        self._proc.wait(timeout=10)
        self._proc = None

    async def linked(self, timeout_s: float = LINK_TIMEOUT_S) -> None:
        """Until the replica has confirmed a write of its master (bounded)."""
        client = aioredis.Redis.from_url(self.master.url, decode_responses=True)
        try:
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                async with client.pipeline(transaction=False) as pipe:  # one connection
                    pipe.set("replica:linked", "1")
                    pipe.wait(1, 200)
                    _, confirmed = await pipe.execute()
                if confirmed >= 1:
                    await client.delete("replica:linked")
                    return
                await asyncio.sleep(0.05)
        finally:
            await client.aclose()
        raise TimeoutError(f"the replica on port {self.port} never confirmed a write")

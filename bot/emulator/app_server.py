"""How the fake servers run: an aiohttp app served on a port, and ``async with`` for them.

Every fake here that answers HTTP (Slack, Kubernetes, the scripted model, the OTLP
receiver, the dev workspace) binds the same way: an app runner without an access log,
one TCP site (a free port unless one is asked for), the port read back from the bound
socket; and it stops by cleaning that runner up, once. :class:`AppServer` is that.
:class:`StartStop` gives anything with ``start`` and ``stop`` coroutines its
``async with`` (the bot's child process too).
"""

from __future__ import annotations

import ssl
from typing import Self

from aiohttp import web

# aiohttp's own default: how long a stop waits for requests still being answered.
DEFAULT_SHUTDOWN_TIMEOUT_S = 60.0


class AppServer:
    """One aiohttp app on one port: ``start`` binds it, ``stop`` (idempotent) ends it."""

    def __init__(self) -> None:
        self._runner: web.AppRunner | None = None

    @property
    def running(self) -> bool:
        return self._runner is not None

    async def start(
        self,
        app: web.Application,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        ssl_context: ssl.SSLContext | None = None,
        shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT_S,
    ) -> int:
        """Serve ``app`` on host:port (0: a free port); the port bound. A port that cannot
        be bound raises ``OSError`` with nothing left running."""
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=shutdown_timeout)
        await runner.setup()
        try:
            await web.TCPSite(runner, host, port, ssl_context=ssl_context).start()
        except OSError:
            await runner.cleanup()
            raise
        self._runner = runner
        return int(runner.addresses[0][1])

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


class StartStop:
    """``async with x`` starts ``x`` and stops it, whatever happened inside."""

    async def start(self) -> object:
        raise NotImplementedError

    async def stop(self) -> object:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.stop()

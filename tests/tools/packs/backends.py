"""The prometheus and alertmanager packs' servers for the tests: the real Prometheus,
node-exporter and Alertmanager of ``bot.emulator.prometheus_stack`` (described there)
under the names the tests import, plus what only the tests use:

* module-scoped fixtures ``prometheus_stack`` and ``alertmanager_server``;
* ``basic_auth_server``: a stand-in for either behind a reverse proxy's basic auth, and
  ``silent_server``: a port that accepts connections and never answers.
"""

from __future__ import annotations

import base64
import contextlib
import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from aiohttp import web

from bot.emulator.prometheus_stack import (
    ALERTMANAGER_CONFIG,
    BIND_ATTEMPTS,
    DATA_TIMEOUT_S,
    LOG_TAIL_CHARS,
    NODE_EXPORTER_COLLECTORS,
    POLL_S,
    RULES,
    START_TIMEOUT_S,
    STOP_TIMEOUT_S,
    AlertmanagerServer,
    BackendStartError,
    Process,
    PrometheusStack,
    binary,
    free_port,
    refused_port,
)

__all__ = [
    "ALERTMANAGER_CONFIG",
    "BIND_ATTEMPTS",
    "DATA_TIMEOUT_S",
    "LOG_TAIL_CHARS",
    "NODE_EXPORTER_COLLECTORS",
    "POLL_S",
    "RULES",
    "START_TIMEOUT_S",
    "STOP_TIMEOUT_S",
    "AlertmanagerServer",
    "BackendStartError",
    "PrometheusStack",
    "Process",
    "alertmanager_server",
    "basic_auth_server",
    "binary",
    "free_port",
    "prometheus_stack",
    "refused_port",
    "silent_server",
]


@contextlib.asynccontextmanager
async def basic_auth_server(
    user: str, password: str, answers: dict[str, Any]
) -> AsyncIterator[str]:
    """A loopback HTTP server behind basic auth, as a reverse proxy in front of
    Prometheus or Alertmanager puts it: HTTP 401 without ``user:password``, else the JSON
    of ``answers[path]``. Yields its base URL (no credentials)."""
    wanted = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()

    async def handle(request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != wanted:
            return web.Response(
                status=401, text="Unauthorized\n", headers={"WWW-Authenticate": 'Basic realm="ops"'}
            )
        if request.path not in answers:
            return web.Response(status=404, text="404 page not found\n")
        return web.json_response(answers[request.path])

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A port that accepts connections (the kernel's backlog) and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield int(listener.getsockname()[1])


@pytest.fixture(scope="module")
def prometheus_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusStack]:
    stack = PrometheusStack(tmp_path_factory.mktemp("prometheus")).start()
    yield stack
    stack.stop()


@pytest.fixture(scope="module")
def alertmanager_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AlertmanagerServer]:
    server = AlertmanagerServer(tmp_path_factory.mktemp("alertmanager")).start()
    yield server
    server.stop()

"""Fixtures that start real MCP servers: ``mcp-server-time`` (PyPI) and, when npm has
installed them under ``.opsloop/npm``, ``@modelcontextprotocol/server-everything`` and
``server-filesystem``; plus a catalogue helper that connects a tools.yml's servers and
always stops them."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import sys
import textwrap
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path

import pytest

from tools.registry import Catalog, build_catalog, connect_mcp

NPM_BIN = Path(__file__).resolve().parents[3] / ".opsloop" / "npm" / "node_modules" / ".bin"
CONNECT_TIMEOUT_S = 30.0

Connect = Callable[..., Awaitable[Catalog]]


def npm_server(name: str) -> str:
    path = NPM_BIN / name
    if not path.exists():
        pytest.skip(
            f"{path} is absent: npm install --prefix .opsloop/npm @modelcontextprotocol/{name[11:]}"
        )
    return str(path)


@pytest.fixture
def time_server() -> list[str]:
    """argv of the reference ``mcp-server-time`` (a dev dependency)."""
    found = shutil.which("mcp-server-time")
    return [found] if found else [sys.executable, "-m", "mcp_server_time"]


@pytest.fixture
def everything_server() -> list[str]:
    return [npm_server("mcp-server-everything")]


@pytest.fixture
def filesystem_server(tmp_path: Path) -> list[str]:
    root = tmp_path / "root"
    root.mkdir()
    return [npm_server("mcp-server-filesystem"), str(root)]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
async def everything_http() -> AsyncIterator[str]:
    """``server-everything`` in its streamable HTTP mode on a free loopback port: its URL."""
    binary = npm_server("mcp-server-everything")
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        binary,
        "streamableHttp",
        env={**os.environ, "PORT": str(port)},
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    assert proc.stderr is not None
    stderr = proc.stderr
    try:
        async with asyncio.timeout(CONNECT_TIMEOUT_S):
            while b"listening on port" not in (line := await stderr.readline()):
                if not line:
                    raise RuntimeError("server-everything (streamableHttp) exited")
        drain = asyncio.create_task(stderr.read())  # keep its pipe from filling
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        async with asyncio.timeout(CONNECT_TIMEOUT_S):
            await proc.wait()
    await drain


@pytest.fixture
async def connect(tmp_path: Path) -> AsyncIterator[Connect]:
    """``await connect(yaml_text, **options)``: the catalogue of that tools.yml with its
    MCP servers connected; every catalogue made is closed at the end of the test."""
    made: list[Catalog] = []

    async def connect_file(
        text: str,
        *,
        environ: Mapping[str, str] | None = None,
        connect_timeout: float = CONNECT_TIMEOUT_S,
    ) -> Catalog:
        path = tmp_path / f"tools{len(made)}.yml"
        path.write_text(textwrap.dedent(text))
        catalog = build_catalog(tools_file=path)
        made.append(catalog)
        catalog = await connect_mcp(catalog, environ=environ, connect_timeout=connect_timeout)
        made[-1] = catalog
        return catalog

    yield connect_file
    for catalog in made:
        await catalog.aclose()

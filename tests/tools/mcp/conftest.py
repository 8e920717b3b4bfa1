"""Fixtures that start real MCP servers: ``mcp-server-time`` (PyPI) and, when npm has
installed them under ``.opsloop/npm``, ``@modelcontextprotocol/server-everything`` and
``server-filesystem``; plus a catalogue helper that connects a tools.yml's servers and
always stops them. ``everything_http_server`` is server-everything over HTTP that a test
may kill and start again on its port; ``recording_proxy`` puts a recording reverse proxy
in front of an HTTP server."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from mcp_types import INVALID_REQUEST

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


GIT_TIMEOUT_S = 30.0


def git(repo: Path, *args: str) -> str:
    """Run ``git`` in ``repo`` (the system's and the user's config left out); its stdout."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(repo),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "LANG": "C",
    }
    done = subprocess.run(
        ["git", *args],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=GIT_TIMEOUT_S,
        check=True,
    )
    return done.stdout


@pytest.fixture
def git_server(tmp_path: Path) -> list[str]:
    """argv of the reference ``mcp-server-git`` (a dev dependency) confined to a new
    repository, its last element: branch ``main``, two commits ("first", "second") of
    README.md, and a third line of README.md left uncommitted."""
    if shutil.which("git") is None:
        pytest.skip("git is absent: apt-get install git")
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "--quiet", "--initial-branch=main")
    git(repo, "config", "user.name", "Opsloop Tests")
    git(repo, "config", "user.email", "tests@opsloop.invalid")
    readme = repo / "README.md"
    readme.write_text("one\n")
    git(repo, "add", "README.md")
    git(repo, "commit", "--quiet", "-m", "first")
    readme.write_text("one\ntwo\n")
    git(repo, "commit", "--quiet", "-am", "second")
    readme.write_text("one\ntwo\nthree\n")
    return [sys.executable, "-m", "mcp_server_git", "--repository", str(repo)]


@pytest.fixture
def fetch_server() -> list[str]:
    """argv of the reference ``mcp-server-fetch`` (a dev dependency). It refuses private
    and loopback addresses unless given ``--allow-private-ips``."""
    return [sys.executable, "-m", "mcp_server_fetch"]


@pytest.fixture
def fetch_environ(tmp_path: Path) -> dict[str, str]:
    """The environment to connect ``fetch_server`` with: a PATH without node or npm.
    With both on PATH, readabilipy (its HTML extractor) runs ``npm install`` into its own
    site-packages directory at the first page, its output on the server's stdout (the
    protocol stream); without them it extracts in pure Python, which is what is tested."""
    empty = tmp_path / "no-node-bin"
    empty.mkdir(exist_ok=True)
    home = tmp_path / "fetch-home"
    home.mkdir(exist_ok=True)
    return {"PATH": str(empty), "HOME": str(home), "LANG": "C.UTF-8"}


SERVER_STOP_S = 10.0
SESSION_LINE = "Session initialized with ID: "


class EverythingHttp:
    """``server-everything`` in its streamable HTTP mode on one loopback port, which a
    test may kill and start again on the same port. ``sessions`` holds the ids of the
    sessions the running process says it initialized (its stdout), oldest first."""

    def __init__(self, binary: str, port: int) -> None:
        self.binary, self.port = binary, port
        self.url = f"http://127.0.0.1:{port}/mcp"
        self.sessions: list[str] = []
        self.processes = 0  # how many times it was started
        self._announced = asyncio.Event()
        self._proc: asyncio.subprocess.Process | None = None
        self._readers: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        """Start it (a new process, no sessions yet) and wait until it listens."""
        assert self._proc is None, "already running"
        self.sessions = []
        proc = await asyncio.create_subprocess_exec(
            self.binary,
            "streamableHttp",
            env={**os.environ, "PORT": str(self.port)},
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        self._proc = proc
        self.processes += 1
        assert proc.stdout is not None and proc.stderr is not None
        stderr = proc.stderr
        async with asyncio.timeout(CONNECT_TIMEOUT_S):
            while b"listening on port" not in (line := await stderr.readline()):
                if not line:
                    raise RuntimeError("server-everything (streamableHttp) exited")
        self._readers += [
            asyncio.create_task(self._read_sessions(proc.stdout)),
            asyncio.create_task(self._drain(stderr)),
        ]

    async def _read_sessions(self, stdout: asyncio.StreamReader) -> None:
        while line := await stdout.readline():
            text = line.decode("utf-8", "replace").strip()
            if text.startswith(SESSION_LINE):
                self.sessions.append(text.removeprefix(SESSION_LINE))
                self._announced.set()

    @staticmethod
    async def _drain(stream: asyncio.StreamReader) -> None:
        while await stream.read(65536):
            pass

    async def announced(self, count: int) -> list[str]:
        """The running process's sessions, once it has announced ``count`` of them."""
        async with asyncio.timeout(CONNECT_TIMEOUT_S):
            while len(self.sessions) < count:
                self._announced.clear()
                await self._announced.wait()
        return list(self.sessions)

    async def kill(self) -> None:
        """SIGKILL it (its whole group) and reap it."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        async with asyncio.timeout(SERVER_STOP_S):
            await proc.wait()
            await asyncio.gather(*self._readers)
        self._readers = []


@pytest.fixture
async def everything_http_server() -> AsyncIterator[EverythingHttp]:
    """``server-everything`` (streamableHttp) on a free loopback port, running, as an
    ``EverythingHttp`` the test may kill and start again."""
    server = EverythingHttp(npm_server("mcp-server-everything"), free_port())
    await server.start()
    try:
        yield server
    finally:
        await server.kill()


HOP_BY_HOP = frozenset(
    {"host", "content-length", "transfer-encoding", "connection", "keep-alive", "upgrade"}
)


@dataclass(frozen=True, slots=True)
class Seen:
    """One request the proxy received: its HTTP method, the JSON-RPC method of a POST's
    body (``None`` when it holds none: a response, a batch), and its headers (names in
    lower case)."""

    method: str
    rpc: str | None
    headers: Mapping[str, str]

    @property
    def session(self) -> str | None:
        return self.headers.get("mcp-session-id")


Canned = Callable[[Seen], Awaitable["web.StreamResponse | None"]]


class RecordingProxy:
    """A reverse proxy on loopback in front of one streamable HTTP server: every request
    is recorded (``requests``) and forwarded, and the answer streamed back as it comes
    (SSE included); an answer that breaks upstream breaks downstream too. ``answer`` may
    answer a request itself instead (``None``: forward it); a session id in ``forgotten``
    is answered 404, as a server that no longer knows the session does."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.requests: list[Seen] = []
        self.forgotten: set[str] = set()
        self.answer: Canned | None = None
        self.url = ""
        self._arrived = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._client: aiohttp.ClientSession | None = None

    async def start(self) -> str:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, shutdown_timeout=1.0, access_log=None)
        await self._runner.setup()
        port = free_port()
        await web.TCPSite(self._runner, "127.0.0.1", port).start()
        self._client = aiohttp.ClientSession(
            auto_decompress=False, timeout=aiohttp.ClientTimeout(total=None)
        )
        self.url = f"http://127.0.0.1:{port}/mcp"
        return self.url

    async def stop(self) -> None:
        if self._client is not None:
            await self._client.close()
        if self._runner is not None:
            await self._runner.cleanup()

    async def seen(self, kind: str) -> Seen:
        """The first request of ``kind`` (a JSON-RPC method, or ``GET``/``DELETE``),
        once it arrived."""
        async with asyncio.timeout(CONNECT_TIMEOUT_S):
            while True:
                for seen in self.requests:
                    if kind in (seen.rpc, seen.method):
                        return seen
                self._arrived.clear()
                await self._arrived.wait()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        rpc: str | None = None
        with contextlib.suppress(ValueError):
            message = json.loads(body) if body else None
            if isinstance(message, dict) and isinstance(message.get("method"), str):
                rpc = message["method"]
        seen = Seen(request.method, rpc, {k.lower(): v for k, v in request.headers.items()})
        self.requests.append(seen)
        self._arrived.set()
        if seen.session is not None and seen.session in self.forgotten:
            # What the SDK's own server answers for a session it does not know.
            error = {"code": INVALID_REQUEST, "message": "Session not found"}
            return web.json_response({"jsonrpc": "2.0", "id": None, "error": error}, status=404)
        if self.answer is not None and (canned := await self.answer(seen)) is not None:
            return canned
        assert self._client is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        try:
            upstream = await self._client.request(
                request.method, self.upstream, headers=headers, data=body or None
            )
        except aiohttp.ClientConnectionError:
            return web.Response(status=502, text="upstream unreachable")
        async with upstream:
            answer = web.StreamResponse(
                status=upstream.status,
                headers={k: v for k, v in upstream.headers.items() if k.lower() not in HOP_BY_HOP},
            )
            await answer.prepare(request)
            async for chunk in upstream.content.iter_any():  # a break upstream raises here
                await answer.write(chunk)
            await answer.write_eof()
        return answer


ProxyFactory = Callable[[str], Awaitable[RecordingProxy]]


@pytest.fixture
async def recording_proxy() -> AsyncIterator[ProxyFactory]:
    """``await recording_proxy(upstream_url)``: a started ``RecordingProxy`` in front of
    it; all are stopped at the end of the test."""
    made: list[RecordingProxy] = []

    async def make(upstream: str) -> RecordingProxy:
        proxy = RecordingProxy(upstream)
        made.append(proxy)
        await proxy.start()
        return proxy

    yield make
    for proxy in made:
        await proxy.stop()

"""``opsloop serve`` as a real child process, and the environment it runs with.

``bot_env`` is the environment ``serve`` runs with: the fake Slack, a ``redis-server``,
the scripted model, test credentials, and nothing from the developer's shell that
configures opsloop, Slack, the model or a proxy. ``BotProcess`` runs ``python -m bot
serve`` with it, waits for ``GET /healthz`` to answer 200, posts signed requests to
``/slack/events`` (built with ``bot.emulator.slack_requests``) and stops it (SIGTERM, then
SIGKILL to its process group); its stdout and stderr go to files, shown when something
fails. ``serve`` and ``socket`` children are forked from a warm zygote
(``bot.emulator.zygote``: the same process as a fresh start, without paying its imports
again) unless ``OPSLOOP_TEST_FORK=0``; other commands are spawned fresh.
``opsloop_command`` runs another ``opsloop`` command against a Redis.

Used by the end-to-end tests (``tests/e2e/harness.py`` re-exports it; their fixtures are in
``tests/e2e/conftest.py``) and by the benchmarks that run the whole bot.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, Self

import httpx

from bot.emulator.app_server import StartStop
from bot.emulator.model_server import ScriptedServer
from bot.emulator.redis_server import ManagedRedis, free_port
from bot.emulator.scripted_model import ScriptedModel
from bot.emulator.sender import sign
from bot.emulator.slack import FakeSlack
from bot.emulator.slack_requests import content_type, event_body
from bot.emulator.zygote import ForkedProcess, fork_bot

SIGNING_SECRET = "e2e-signing-secret"
BOT_TOKEN = "xoxb-test"
LLM_MODEL = "scripted-model"
LLM_API_KEY = "sk-e2e-dummy"
EVENTS_PATH = "/slack/events"
HEALTH_PATH = "/healthz"
SERVE_ARGV: tuple[str, ...] = (sys.executable, "-m", "bot", "serve")
REPO_ROOT = Path(__file__).resolve().parents[2]

START_TIMEOUT_S = 30.0  # imports of bolt and friends on a loaded CI machine
START_POLL_S = 0.05  # start-up wait only; nothing else here polls
STOP_TIMEOUT_S = 10.0
REQUEST_TIMEOUT_S = 10.0  # a hang guard: Slack itself gives up after 3 s
BIND_ATTEMPTS = 3  # a free port can be taken between choosing it and the bind
OUTPUT_TAIL_CHARS = 20_000

# Variables the child keeps from our environment: enough to run Python, nothing that
# configures opsloop, Slack, the model or a proxy.
_INHERITED = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "TZ", "VIRTUAL_ENV")


class ChildProcess(Protocol):
    """What ``BotProcess`` uses of its child: an ``asyncio.subprocess.Process`` or a
    ``bot.emulator.zygote.ForkedProcess``."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    async def wait(self) -> int: ...

    def send_signal(self, sig: int, /) -> None: ...


class BotStartError(RuntimeError):
    """``opsloop serve`` exited or never answered ``/healthz`` 200; the message holds its output."""


def bot_env(
    slack: FakeSlack,
    redis: ManagedRedis,
    model: ScriptedModel | ScriptedServer,
    *,
    secret: str = SIGNING_SECRET,
    extra: Mapping[str, str | None] | None = None,
) -> dict[str, str]:
    """The environment ``serve`` runs with: our fakes, test credentials, ``extra`` on top
    (a None value removes the variable). PORT and HOST are the process's own."""
    env = base_env()
    env.update(
        NO_PROXY="127.0.0.1,localhost",
        SLACK_BOT_TOKEN=BOT_TOKEN,
        SLACK_SIGNING_SECRET=secret,
        SLACK_API_URL=slack.api_url,
        REDIS_URL=redis.url,
        LLM_BASE_URL=model.base_url,
        LLM_MODEL=LLM_MODEL,
        LLM_API_KEY=LLM_API_KEY,
    )
    for key, value in (extra or {}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def base_env() -> dict[str, str]:
    """What every child's environment starts from (the zygote runs with it): enough to
    run Python from this checkout, nothing that configures opsloop."""
    env: dict[str, str] = {k: os.environ[k] for k in _INHERITED if k in os.environ}
    pythonpath = [str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    env.update(PYTHONPATH=os.pathsep.join(pythonpath), PYTHONUNBUFFERED="1")
    return env


_process_numbers = itertools.count(1)


@dataclass
class BotProcess(StartStop):
    """``opsloop serve`` as a child process. ``await start()``, then talk to it over HTTP.

    ``env`` should come from ``bot_env``; ``argv`` replaces the command (the harness's own
    tests run a stand-in). Logs go to ``log_dir`` as ``bot-N.stdout.log`` / ``.stderr.log``.
    """

    env: Mapping[str, str]
    log_dir: Path
    argv: Sequence[str] = SERVE_ARGV
    secret: str = SIGNING_SECRET
    host: str = "127.0.0.1"
    name: str = field(default_factory=lambda: f"bot-{next(_process_numbers)}")
    port: int = 0
    _proc: ChildProcess | None = field(default=None, init=False, repr=False)
    _http: httpx.AsyncClient | None = field(default=None, init=False, repr=False)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def stdout_path(self) -> Path:
        return self.log_dir / f"{self.name}.stdout.log"

    @property
    def stderr_path(self) -> Path:
        return self.log_dir / f"{self.name}.stderr.log"

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    @property
    def returncode(self) -> int | None:
        return None if self._proc is None else self._proc.returncode

    @property
    def forked(self) -> bool:
        """Whether the child was forked from the zygote (not spawned fresh)."""
        return isinstance(self._proc, ForkedProcess)

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.returncode is None

    # ---- lifecycle -----------------------------------------------------------------------

    async def spawn(self) -> Self:
        """Start the process without waiting for it to be ready."""
        if self.running:
            raise RuntimeError(f"{self.name} is already running")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()
        env = {**self.env, "HOST": self.host, "PORT": str(self.port)}
        # Append, so a restarted process's earlier output stays readable.
        with self.stdout_path.open("ab") as out, self.stderr_path.open("ab") as err:
            self._proc = await fork_bot(
                self.argv,
                env,
                zygote_env=base_env(),
                cwd=self.log_dir,
                stdout=out.fileno(),
                stderr=err.fileno(),
                new_session=True,
            )
            if self._proc is not None:
                return self
            self._proc = await asyncio.create_subprocess_exec(
                *self.argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env=env,
                cwd=self.log_dir,  # no stray .env or tools.yml from the checkout
                start_new_session=True,  # SIGKILL can take its whole process group
            )
        return self

    async def start(self, *, timeout: float = START_TIMEOUT_S) -> Self:  # noqa: ASYNC109
        """Spawn and wait until ``GET /healthz`` answers 200 (a port race is retried)."""
        for attempt in range(1, BIND_ATTEMPTS + 1):
            await self.spawn()
            try:
                await self.wait_healthy(timeout=timeout)
                return self
            except BotStartError:
                lost_port = "address already in use" in self.output().lower()
                await self.stop()
                if not lost_port or attempt == BIND_ATTEMPTS:
                    raise
                self.port = 0
        raise AssertionError("unreachable")

    async def wait_healthy(self, *, timeout: float = START_TIMEOUT_S) -> None:  # noqa: ASYNC109
        """Poll ``/healthz`` until 200 — the one bounded poll of the harness (start-up only)."""
        deadline = time.monotonic() + timeout
        last = "no answer"
        while time.monotonic() < deadline:
            if not self.running:
                raise BotStartError(
                    f"{self.name} exited with {self.returncode} during start-up\n" + self.output()
                )
            try:
                status, text = await self.get(HEALTH_PATH, timeout=1.0)
            except httpx.TransportError as exc:
                last = f"{type(exc).__name__}: {exc}"
            else:
                if status == 200:
                    return
                last = f"{status} {text[:200]}"
            await asyncio.sleep(START_POLL_S)
        raise BotStartError(
            f"{self.name} did not answer {HEALTH_PATH} 200 within {timeout}s (last: {last})\n"
            + self.output()
        )

    async def stop(self, *, timeout: float = STOP_TIMEOUT_S) -> int | None:  # noqa: ASYNC109
        """SIGTERM, then SIGKILL to the process group after ``timeout``; returns the exit code."""
        proc = self._proc
        if proc is not None and proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), timeout)
            except TimeoutError:
                self._kill_group(proc)
                await proc.wait()
        await self._close_http()
        return self.returncode

    async def kill(self) -> int | None:
        """SIGKILL the process group: the bot dies as in a crash."""
        proc = self._proc
        if proc is not None and proc.returncode is None:
            self._kill_group(proc)
            await proc.wait()
        await self._close_http()
        return self.returncode

    async def wait_exit(self, *, timeout: float = START_TIMEOUT_S) -> int:  # noqa: ASYNC109
        """Wait for the process to end by itself (e.g. a configuration error)."""
        if self._proc is None:
            raise RuntimeError(f"{self.name} was never started")
        return await asyncio.wait_for(self._proc.wait(), timeout)

    @staticmethod
    def _kill_group(proc: ChildProcess) -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    async def _close_http(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    # ---- output --------------------------------------------------------------------------

    def output(self, *, tail: int = OUTPUT_TAIL_CHARS) -> str:
        """The last ``tail`` characters of stdout and stderr, labelled, for failure reports."""
        parts = []
        for label, path in (("stdout", self.stdout_path), ("stderr", self.stderr_path)):
            text = path.read_text(errors="replace") if path.exists() else ""
            if len(text) > tail:
                text = "…" + text[-tail:]
            parts.append(f"----- {self.name} {label} ({path}) -----\n{text}")
        return "\n".join(parts)

    # ---- HTTP ----------------------------------------------------------------------------

    def _client(self) -> httpx.AsyncClient:
        if self._http is None:
            # trust_env=False: a proxy setting must never route loopback traffic.
            self._http = httpx.AsyncClient(trust_env=False, timeout=REQUEST_TIMEOUT_S)
        return self._http

    async def get(self, path: str, *, timeout: float = REQUEST_TIMEOUT_S) -> tuple[int, str]:  # noqa: ASYNC109
        """``GET path`` → (status, body text)."""
        response = await self._client().get(self.url + path, timeout=timeout)
        return response.status_code, response.text

    async def post_event(
        self, body: bytes, headers: Mapping[str, str] | None = None
    ) -> tuple[int, str]:
        """POST ``body`` to ``/slack/events`` → (status, body text).

        ``headers=None`` signs it validly with ``secret``; otherwise exactly ``headers`` are
        sent (``{}``: no signature at all). The content type is Slack's unless given.
        """
        sent = dict(sign(body, self.secret) if headers is None else headers)
        if not any(k.lower() == "content-type" for k in sent):
            sent["Content-Type"] = content_type(body)
        response = await self._client().post(self.url + EVENTS_PATH, content=body, headers=sent)
        return response.status_code, response.text

    async def send(
        self, event: Mapping[str, Any], *, event_id: str | None = None
    ) -> tuple[int, str]:
        """Wrap ``event`` in an envelope, sign it and post it."""
        return await self.post_event(event_body(event, event_id=event_id))


async def opsloop_command(
    redis: ManagedRedis, command: str, *args: str, **env: str
) -> tuple[int, str, str]:
    """Run ``opsloop COMMAND ARGS…`` (as ``python -m bot``) against ``redis``, as a
    separate process with a bare environment: (exit code, stdout, stderr)."""
    child_env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": str(REPO_ROOT),
        "REDIS_URL": redis.url,
        **env,
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        command,
        *args,
        env=child_env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=30)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()

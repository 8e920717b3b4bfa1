"""The end-to-end harness: Slack's side of the wire, and ``opsloop serve`` as a real process.

Two halves, both usable without pytest:

* **Requests as Slack sends them** — ``sign`` (v0 signatures), ``event_body`` (the
  ``event_callback`` envelope) with ``mention`` / ``reply`` / ``message`` / ``twin`` for the
  inner events, and ``block_actions_body`` / ``click_body`` for form-encoded interactivity.
  These are pure functions of their arguments (plus the clock for timestamps and ids); the
  signing, envelopes and ``block_actions`` payloads are ``bot.emulator.sender``'s, the one
  implementation the dev emulator sends with too.
* **The bot** — ``BotProcess`` runs ``python -m bot serve`` as a child process with an
  explicit environment (nothing leaks in from the developer's shell), waits for
  ``GET /healthz`` to answer 200, posts signed requests to ``/slack/events`` and stops it
  (SIGTERM, then SIGKILL). Its stdout and stderr go to files, shown when a test fails.

``ScriptedModel`` is the policy holder the tests point the scripted model server at: the
server is started once per test, and the test sets ``model.policy`` when it knows what the
model should say. Fixtures wiring these together live in ``conftest.py``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import httpx

from bot.emulator import sender
from bot.emulator.model_server import ScriptedServer
from bot.emulator.redis_server import ManagedRedis, free_port
from bot.emulator.scripted import Answer, Fault, Policy, ScriptedRequest
from bot.emulator.sender import FORM, JSON, sign
from bot.emulator.sender import new_event_id as new_event_id
from bot.emulator.sender import retried as retried
from bot.emulator.slack import BOT_USER_ID, TEAM_ID, FakeSlack

SIGNING_SECRET = "e2e-signing-secret"
BOT_TOKEN = "xoxb-test"
LLM_MODEL = "scripted-model"
LLM_API_KEY = "sk-e2e-dummy"
APP_ID = "A1"
EVENTS_PATH = "/slack/events"
HEALTH_PATH = "/healthz"
SERVE_ARGV: tuple[str, ...] = (sys.executable, "-m", "bot", "serve")
REPO_ROOT = Path(__file__).resolve().parents[2]

START_TIMEOUT_S = 30.0  # imports of bolt and friends on a loaded CI machine
START_POLL_S = 0.05  # start-up wait only; nothing else in the harness polls
STOP_TIMEOUT_S = 10.0
REQUEST_TIMEOUT_S = 10.0  # a hang guard: Slack itself gives up after 3 s
BIND_ATTEMPTS = 3  # a free port can be taken between choosing it and the bind
OUTPUT_TAIL_CHARS = 20_000

# Variables the child keeps from our environment: enough to run Python, nothing that
# configures opsloop, Slack, the model or a proxy.
_INHERITED = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "TZ", "VIRTUAL_ENV")

# ---- signatures (``sign``, ``retried``: bot.emulator.sender) ------------------------------


def content_type(body: bytes) -> str:
    """The content type Slack sends ``body`` with: form for interactivity, else JSON."""
    return FORM if body.startswith(b"payload=") else JSON


# ---- ids and timestamps -----------------------------------------------------------------

_last_ts_us = 0


def new_ts() -> str:
    """A message ts (``"seconds.micros"``) near now, strictly increasing within the process."""
    global _last_ts_us
    _last_ts_us = max(time.time_ns() // 1_000, _last_ts_us + 1)
    return f"{_last_ts_us // 1_000_000}.{_last_ts_us % 1_000_000:06d}"


# ---- events -----------------------------------------------------------------------------


def message(
    channel: str,
    user: str,
    text: str,
    *,
    ts: str | None = None,
    thread_ts: str | None = None,
    subtype: str | None = None,
    team: str = TEAM_ID,
    **extra: Any,
) -> dict[str, Any]:
    """A ``message`` event in a public channel (``extra`` adds or overrides fields)."""
    ts = ts or new_ts()
    event: dict[str, Any] = {
        "type": "message",
        "channel": channel,
        "user": user,
        "text": text,
        "ts": ts,
        "event_ts": ts,
        "team": team,
        "channel_type": "channel",
        "client_msg_id": str(uuid.uuid4()),
    }
    if thread_ts is not None:
        event["thread_ts"] = thread_ts
    if subtype is not None:
        event["subtype"] = subtype
    event.update(extra)
    return event


def reply(
    channel: str, user: str, text: str, *, thread_ts: str, ts: str | None = None, **extra: Any
) -> dict[str, Any]:
    """A human reply in the thread ``thread_ts`` (a ``message`` with ``thread_ts != ts``)."""
    return message(channel, user, text, ts=ts, thread_ts=thread_ts, **extra)


def mention(
    channel: str,
    user: str,
    text: str,
    *,
    ts: str | None = None,
    thread_ts: str | None = None,
    bot_user: str = BOT_USER_ID,
    team: str = TEAM_ID,
) -> dict[str, Any]:
    """An ``app_mention`` whose text is ``"<@UBOT> " + text``."""
    ts = ts or new_ts()
    event: dict[str, Any] = {
        "type": "app_mention",
        "channel": channel,
        "user": user,
        "text": f"<@{bot_user}> {text}",
        "ts": ts,
        "event_ts": ts,
        "team": team,
        "client_msg_id": str(uuid.uuid4()),
    }
    if thread_ts is not None:
        event["thread_ts"] = thread_ts
    return event


def twin(app_mention: Mapping[str, Any]) -> dict[str, Any]:
    """The ``message`` event Slack also delivers for a mention: same channel, ts and text."""
    keep = ("channel", "user", "text", "ts", "event_ts", "team", "client_msg_id", "thread_ts")
    event = {k: app_mention[k] for k in keep if k in app_mention}
    return {"type": "message", "channel_type": "channel", **event}


def event_body(
    event: Mapping[str, Any],
    *,
    event_id: str | None = None,
    team: str = TEAM_ID,
    api_app_id: str = APP_ID,
    event_time: int | None = None,
) -> bytes:
    """The ``event_callback`` envelope around ``event``, as the JSON bytes Slack posts."""
    return sender.event_body(
        event, event_id, team=team, api_app_id=api_app_id, event_time=event_time
    )


def url_verification_body(challenge: str) -> bytes:
    """The request Slack sends when the events URL is set; the app must echo ``challenge``."""
    body = {"token": sender.VERIFICATION_TOKEN, "challenge": challenge}
    return json.dumps({**body, "type": "url_verification"}).encode()


def seed(slack: FakeSlack, event: Mapping[str, Any]) -> str:
    """Put the human message behind ``event`` into the fake (so ``conversations.replies``
    returns it, as Slack would); returns its ts."""
    return slack.add_message(
        event["channel"], event["ts"], event["user"], event["text"], event.get("thread_ts")
    )


# ---- interactivity ----------------------------------------------------------------------


def block_actions_body(
    user: str,
    action_id: str,
    value: str,
    channel: str,
    message_ts: str,
    response_url: str,
    *,
    block_id: str | None = None,
    thread_ts: str | None = None,
    message: Mapping[str, Any] | None = None,
    text: str = "button",
    team: str = TEAM_ID,
    api_app_id: str = APP_ID,
) -> bytes:
    """A button click as Slack posts it: form-encoded ``payload=<json>`` of a ``block_actions``.

    ``message`` is the clicked message in Slack's shape (defaults to a bare one).
    """
    clicked = dict(message) if message is not None else {"type": "message", "ts": message_ts}
    button = {
        "action_id": action_id,
        "value": value,
        "text": {"type": "plain_text", "text": text, "emoji": True},
    }
    payload = sender.block_actions(
        user_id=user,
        user_name=user.lower(),
        channel=channel,
        channel_name=channel.lower(),
        message=clicked,
        message_ts=message_ts,
        thread_ts=thread_ts,
        block_id=block_id or uuid.uuid4().hex[:5],
        button=button,
        response_url=response_url,
        team=team,
        api_app_id=api_app_id,
    )
    body, _ = sender.form_body(payload)
    return body


def find_button(
    blocks: Iterable[Mapping[str, Any]] | None,
    *,
    action_id: str | None = None,
    text: str | None = None,
) -> tuple[str, dict[str, Any]]:
    """The first button in ``blocks`` matching ``action_id`` and/or its visible ``text``
    (exact, or a prefix such as ``"Continue"``), with the ``block_id`` holding it."""
    found = sender.find_button(blocks, action_id=action_id, text=text)
    if found is not None:
        return found
    raise LookupError(f"no button with action_id={action_id!r} text={text!r} in the blocks")


def click_body(
    message: Mapping[str, Any],
    channel: str,
    user: str,
    response_url: str,
    *,
    action_id: str | None = None,
    text: str | None = None,
) -> bytes:
    """A click on a button of ``message`` (Slack's shape, e.g. ``Message.as_slack()``),
    carrying that button's own ``action_id``, ``value`` and ``block_id``."""
    block_id, button = find_button(message.get("blocks"), action_id=action_id, text=text)
    return block_actions_body(
        user,
        str(button["action_id"]),
        str(button.get("value", "")),
        channel,
        str(message["ts"]),
        response_url,
        block_id=block_id,
        thread_ts=message.get("thread_ts"),
        message=message,
        text=str(button["text"]["text"]),
    )


# ---- the scripted model's policy holder -------------------------------------------------


class ScriptedModel:
    """What the model says, settable by the test after the server has started.

    ``policy`` decides each request (None: every request fails with a 500 naming the
    omission). ``wait_for`` returns once a condition on ``requests`` holds, woken by each
    request rather than by a clock. ``strict``: the server refuses an invalid history with
    a 400, as vLLM does (see ``ScriptedServer``).
    """

    def __init__(self, policy: Policy | None = None, *, strict: bool = False) -> None:
        self.policy: Policy | None = policy
        self.server: ScriptedServer = ScriptedServer(self, strict=strict)
        self._arrived = asyncio.Event()

    def __call__(self, request: ScriptedRequest) -> Any:
        self._arrived.set()
        if self.policy is None:
            return Fault(status=500, message="e2e: the test set no model policy")
        return self.policy(request)

    @property
    def base_url(self) -> str:
        return self.server.base_url

    @property
    def requests(self) -> list[ScriptedRequest]:
        return self.server.requests

    async def wait_for(
        self,
        predicate: Callable[[list[ScriptedRequest]], object],
        *,
        timeout: float = REQUEST_TIMEOUT_S,  # noqa: ASYNC109 (a hang guard)
    ) -> None:
        """Return once ``predicate(requests)`` is truthy, re-checked after every request."""

        async def until() -> None:
            while not predicate(self.requests):
                self._arrived.clear()
                await self._arrived.wait()

        try:
            await asyncio.wait_for(until(), timeout)
        except TimeoutError:
            count = len(self.requests)
            message = f"model condition not met within {timeout}s ({count} requests)"
            raise TimeoutError(message) from None


def steps(*answers: Answer) -> Policy:
    """A policy answering with ``answers`` in order; any further request gets a 500."""
    queue = list(answers)
    served = itertools.count(1)

    def policy(_: ScriptedRequest) -> Answer:
        n = next(served)
        if n > len(queue):
            return Fault(status=500, message=f"e2e: unexpected model request #{n}")
        return queue[n - 1]

    return policy


# ---- the bot process --------------------------------------------------------------------


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
    env: dict[str, str] = {k: os.environ[k] for k in _INHERITED if k in os.environ}
    pythonpath = [str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    env.update(
        PYTHONPATH=os.pathsep.join(pythonpath),
        PYTHONUNBUFFERED="1",
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


_process_numbers = itertools.count(1)


@dataclass
class BotProcess:
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
    _proc: asyncio.subprocess.Process | None = field(default=None, init=False, repr=False)
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
    def _kill_group(proc: asyncio.subprocess.Process) -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    async def _close_http(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *_: object) -> None:
        await self.stop()

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

"""What the crash matrix holds its outside components with, so a bot process can be
killed at an exact point instead of after a sleep:

* ``RedisGate`` — a TCP proxy in front of the test's redis-server that reads the
  commands the bot sends (RESP arrays) and can *hold* the first one a predicate matches:
  that command, and everything the same connection sends after it, waits until the hold
  is released, and is never sent when the bot dies first. So a test can stop a process
  between two of its Redis writes (after the receipt, before the job's index entry;
  after a reply's read, before its history write) and kill it there. Replies from the
  server pass through untouched. Standalone Redis only.
* ``ModelHold`` — a scripted-model policy wrapper that keeps the first request a
  predicate matches waiting (a model call in flight) until released.
* ``gated_tools_yml`` — a read-only tool that runs until a file appears (a read in
  flight for as long as the test wants).
* Helpers over the model's requests: how many times a text reached the model.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from bot.emulator.redis_server import ManagedRedis
from bot.emulator.scripted import Answer, Policy, ScriptedRequest

HOLD_TIMEOUT_S = 30.0  # a hang guard on every wait for a hold to catch or be released
READ_CHUNK = 65_536

Command = list[bytes]  # one Redis command as sent: name and arguments


def parse_command(buffer: bytes | bytearray, start: int) -> tuple[Command, int] | None:
    """The RESP array command at ``buffer[start:]`` and where it ends, or None while it
    is incomplete. Raises ``ValueError`` on anything that is not a RESP array of bulk
    strings (redis-py sends nothing else)."""
    if start >= len(buffer):
        return None
    if buffer[start : start + 1] != b"*":
        raise ValueError("not a RESP array")
    line_end = buffer.find(b"\r\n", start)
    if line_end < 0:
        return None
    count = int(buffer[start + 1 : line_end])
    pos = line_end + 2
    args: Command = []
    for _ in range(count):
        if pos >= len(buffer):
            return None
        if buffer[pos : pos + 1] != b"$":
            raise ValueError("not a bulk string")
        line_end = buffer.find(b"\r\n", pos)
        if line_end < 0:
            return None
        size = int(buffer[pos + 1 : line_end])
        data_start = line_end + 2
        if data_start + size + 2 > len(buffer):
            return None
        args.append(bytes(buffer[data_start : data_start + size]))
        pos = data_start + size + 2
    return args, pos


@dataclass
class Hold:
    """One armed hold: catches the first command ``match`` accepts (once)."""

    match: Callable[[Command], bool]
    what: str
    caught: asyncio.Event = field(default_factory=asyncio.Event)
    released: asyncio.Event = field(default_factory=asyncio.Event)
    command: Command | None = None

    async def wait_caught(self, *, timeout: float = HOLD_TIMEOUT_S) -> Command:  # noqa: ASYNC109
        try:
            await asyncio.wait_for(self.caught.wait(), timeout)
        except TimeoutError:
            raise TimeoutError(
                f"no command matched the hold on {self.what} in {timeout}s"
            ) from None
        assert self.command is not None
        return self.command

    def release(self) -> None:
        """Let the held command (and what its connection sent after it) through."""
        self.released.set()


class RedisGate:
    """``await RedisGate(redis).start()``; point the bot at ``url``; ``hold(match)``."""

    def __init__(self, upstream: ManagedRedis) -> None:
        self.upstream = upstream
        self.port = 0
        self._server: asyncio.Server | None = None
        self._holds: list[Hold] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    async def start(self) -> Self:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def stop(self) -> None:
        """Release every hold, close every connection and wait for the relays to end."""
        for hold in self._holds:
            hold.released.set()
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()
        if self._tasks:
            _, left = await asyncio.wait(set(self._tasks), timeout=5)
            for task in left:
                task.cancel()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)
            self._server = None

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *_: object) -> None:
        await self.stop()

    def hold(self, match: Callable[[Command], bool], what: str) -> Hold:
        """Arm a hold on the next command ``match`` accepts, on any connection."""
        hold = Hold(match, what)
        self._holds.append(hold)
        return hold

    def _catch(self, command: Command) -> Hold | None:
        for hold in self._holds:
            if not hold.caught.is_set() and hold.match(command):
                hold.command = command
                hold.caught.set()
                return hold
        return None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.add(writer)
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream.port)
        except OSError:
            writer.close()
            self._writers.discard(writer)
            self._tasks.discard(task)
            return
        self._writers.add(up_writer)
        back = asyncio.create_task(self._copy(up_reader, writer))
        self._tasks.add(back)
        try:
            await self._forward(reader, up_writer)
        except (OSError, ValueError, asyncio.CancelledError):
            pass  # a relay ends quietly: asyncio logs a server callback's cancellation
        finally:
            up_writer.close()
            writer.close()
            back.cancel()
            with contextlib.suppress(BaseException):
                await back
            self._writers.discard(writer)
            self._writers.discard(up_writer)
            self._tasks.discard(back)
            self._tasks.discard(task)

    async def _forward(self, reader: asyncio.StreamReader, up: asyncio.StreamWriter) -> None:
        """Client to server, command by command, waiting at a caught hold; a client that
        goes away while held loses what it sent from the held command on."""
        buffer = bytearray()
        while True:
            data = await reader.read(READ_CHUNK)
            if not data:
                return
            buffer += data
            sent = 0
            while (found := parse_command(buffer, sent)) is not None:
                command, end = found
                hold = self._catch(command)
                if hold is not None:
                    up.write(bytes(buffer[:sent]))
                    await up.drain()
                    del buffer[:sent]
                    sent = 0
                    if not await self._released_or_gone(hold, reader, buffer):
                        return
                    continue  # the held command is next in ``buffer``: parse it again
                sent = end
            up.write(bytes(buffer[:sent]))
            await up.drain()
            del buffer[:sent]

    async def _released_or_gone(
        self, hold: Hold, reader: asyncio.StreamReader, buffer: bytearray
    ) -> bool:
        """Wait for the release, keeping what the client sends meanwhile; False when
        the client went away first (nothing from the held command on is sent)."""
        released: asyncio.Future[Any] = asyncio.ensure_future(hold.released.wait())
        more: asyncio.Future[Any] | None = None
        try:
            while True:
                more = more or asyncio.ensure_future(reader.read(READ_CHUNK))
                done, _ = await asyncio.wait({released, more}, return_when=asyncio.FIRST_COMPLETED)
                if more in done:
                    data = more.result()
                    more = None
                    if not data:
                        return False
                    buffer += data
                    continue
                return True
        finally:
            released.cancel()
            if more is not None:  # released first: stop reading, keep what was read
                more.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    buffer += await more

    async def _copy(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.CancelledError):
            while data := await reader.read(READ_CHUNK):
                writer.write(data)
                await writer.drain()
        writer.close()


def has(*parts: str | bytes, name: str | None = None) -> Callable[[Command], bool]:
    """A command whose arguments include every one of ``parts`` exactly (and, given
    ``name``, whose name is ``name``)."""
    wanted = [p.encode() if isinstance(p, str) else p for p in parts]

    def match(command: Command) -> bool:
        if name is not None and (not command or command[0].upper() != name.upper().encode()):
            return False
        return all(p in command for p in wanted)

    return match


def carrying(text: str) -> Callable[[Command], bool]:
    """A command one of whose arguments contains ``text`` (e.g. a message's JSON)."""
    needle = text.encode()
    return lambda command: any(needle in arg for arg in command[1:])


# ---- the model -----------------------------------------------------------------------


class ModelHold:
    """``model.policy = ModelHold(policy, when)``: the first request ``when`` accepts waits
    (a model call in flight) until ``release()``; every other request is ``policy``'s."""

    def __init__(
        self, policy: Policy, when: Callable[[ScriptedRequest], bool] = lambda _: True
    ) -> None:
        self.policy = policy
        self.when = when
        self.caught = asyncio.Event()
        self.released = asyncio.Event()

    async def __call__(self, request: ScriptedRequest) -> Answer:
        if not self.caught.is_set() and self.when(request):
            self.caught.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.released.wait(), HOLD_TIMEOUT_S)
        answer = self.policy(request)
        if inspect.isawaitable(answer):
            answer = await answer
        return answer

    async def wait_caught(self, *, timeout: float = HOLD_TIMEOUT_S) -> None:  # noqa: ASYNC109
        await asyncio.wait_for(self.caught.wait(), timeout)

    def release(self) -> None:
        self.released.set()


def text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return str(content or "")


def times_seen(request: ScriptedRequest, text: str) -> int:
    """How many of the request's user messages carry ``text``."""
    return sum(text in text_of(m) for m in request.messages if m.get("role") == "user")


# ---- a tool that waits -------------------------------------------------------------------

GATED_TOOL = """\
import os, sys, time
gate, log, host = sys.argv[1], sys.argv[2], sys.argv[3]
with open(log, "a") as f:
    f.write(f"start {os.getpid()}\\n")
deadline = time.monotonic() + 60  # a hang guard: the test creates the file
while not os.path.exists(gate) and time.monotonic() < deadline:
    time.sleep(0.02)
with open(log, "a") as f:
    f.write(f"done {os.getpid()}\\n")
print("checked " + host)
"""


def gated_tools_yml(tmp_path: Path) -> tuple[str, Path, Path]:
    """A tools.yml whose read-only ``check_host`` waits until a file exists: (path, the
    file to create to let it finish, its log of ``start``/``done`` lines)."""
    script = tmp_path / "gated.py"
    script.write_text(GATED_TOOL)
    gate, log = tmp_path / "check_host.go", tmp_path / "check_host.log"
    text = f"""\
tools:
  - name: check_host
    description: Check a host.
    params:
      host: {{type: string, pattern: "^[a-z0-9-]+$", description: Host name}}
    timeout: 60
    run: ["{sys.executable}", "{script}", "{gate}", "{log}", "{{host}}"]
"""
    path = tmp_path / "gated-tools.yml"
    path.write_text(text)
    return str(path), gate, log


def tool_log(log: Path) -> list[str]:
    """The gated tool's ``start``/``done`` lines, without pids."""
    if not log.exists():
        return []
    return [line.split()[0] for line in log.read_text().splitlines() if line.strip()]

"""Running a tools.yml ``kind: command`` tool: argv, environment, process group, capture.

What this module owns, in the order of a call:

argv
    Each element of ``run`` is templated on its own with ``str.format_map`` over the
    validated arguments plus ``{confirmed_by}`` and ``{idempotency_key}`` (both empty
    during a dry run). A placeholder yields exactly one argv element's worth of text:
    nothing is split and nothing goes through a shell, so ``; rm -rf /``, ``$(…)`` or a
    newline are just characters of one argument. Booleans become ``true``/``false``, an
    absent optional parameter ``""``. A value starting with ``-`` is passed as it is,
    and the program may well read it as an option: a tool that takes free text
    should put ``"--"`` before the placeholder (or constrain it with a ``pattern``).
environment
    Clean: ``PATH`` (the bot's, or a safe default), ``HOME`` (when the bot has one),
    ``LANG`` (the bot's, or ``C.UTF-8``), ``OPSLOOP_JOB_ID``, ``OPSLOOP_CONFIRMED_BY``,
    ``OPSLOOP_IDEMPOTENCY_KEY`` (both empty during a dry run), ``OPSLOOP_DRY_RUN=1``
    only during a dry run, then the tool's own ``env``. Its values may reference the
    bot's environment as ``${NAME}`` (``$${`` is a literal ``${``); referencing one of
    the bot's own credentials (``BOT_SECRETS``) is a configuration error, a variable
    that is not set fails the call before anything runs.
secrets
    Every value expanded from ``${NAME}`` is replaced by ``***`` in whatever the call
    returns or raises, stdout and stderr tails included. Values shorter than
    ``MIN_SECRET_CHARS`` are not redacted: masking every ``on`` or ``42`` would mangle
    the output and hide nothing. A secret the program transforms (base64, split
    across lines) cannot be recognised.
process
    ``asyncio.create_subprocess_exec`` with ``start_new_session=True``: the program
    leads its own process group, and stopping the call stops the whole group
    (SIGTERM, a short grace, SIGKILL) — on its own timeout, when ``execute`` is
    cancelled (the core's timeout, the job's deadline, Stop), and when the program
    exits, for anything it left running in its group: a call's processes never
    outlive it (long-running work belongs to a service manager). The program also dies
    with the bot (``setpriv --pdeathsig KILL``): a bot process SIGKILLed mid-call leaves
    no tool running without its timeout (the call's outcome is then unknown, and
    reported so).
capture
    stdout and stderr are read as they arrive into bounded buffers: the head up to
    the cap and a short rolling tail; the bytes in between are only counted, so a
    program printing gigabytes costs no memory. Decoded as UTF-8, bad bytes as U+FFFD.
result
    Exit 0: stdout, then stderr under a ``stderr:`` header when there is any. Anything
    else raises ``ToolError("exit N: <tail of stderr, or of stdout>")``.

Not here: the tools.yml format and its file:line errors (``tools.spec``), argument
models (``tools.params``), bounding the observation for the model (``bot.agent.observe``).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import re
import shlex
import shutil
import signal
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any

from pydantic import BaseModel

from bot.agent.redact import mask_values
from bot.agent.tools import CallContext
from bot.errors import ConfigError, ToolError
from tools.declared import DeclaredTool
from tools.env import DEFAULT_LANG, DEFAULT_PATH, EnvRef, check_env
from tools.spec import CommandToolSpec

log = logging.getLogger(__name__)

DEFAULT_CAPTURE_BYTES = 1 << 20  # kept per stream
DEFAULT_KILL_GRACE_S = 2.0  # between SIGTERM and SIGKILL
REAP_TIMEOUT_S = 5.0  # for the leader to go after SIGKILL (a process stuck in D state)
TAIL_KEEP_BYTES = 16 * 1024  # of the capture, kept for the end of a long stream
ERROR_TAIL_CHARS = 2000
MIN_SECRET_CHARS = 4
MASK = "***"
# -- the tool ---------------------------------------------------------------------------


class CommandTool(DeclaredTool):
    """A ``kind: command`` tool: ``run`` as argv, in its own process group.

    ``environ`` is the bot's environment that ``${NAME}`` references read, at call
    time (default ``os.environ``); tests pass a dict. ``capture_bytes`` bounds what is
    kept of each of stdout and stderr; ``kill_grace`` is the time between SIGTERM and
    SIGKILL when the process group is stopped.
    """

    def __init__(
        self,
        spec: CommandToolSpec,
        *,
        source: str,
        environ: Mapping[str, str] | None = None,
        capture_bytes: int = DEFAULT_CAPTURE_BYTES,
        kill_grace: float = DEFAULT_KILL_GRACE_S,
    ) -> None:
        super().__init__(spec, source=source)
        if capture_bytes < 1:
            raise ValueError("capture_bytes must be positive")
        self.command = spec
        self._environ: Mapping[str, str] = os.environ if environ is None else environ
        self._capture_bytes = capture_bytes
        self._kill_grace = kill_grace
        try:
            self._env = check_env(spec.env)
        except ValueError as exc:
            raise ConfigError(f"{source}: tool {spec.name!r}: {exc}") from None
        for name in self.missing_env():
            log.warning(
                "%s: tool %r: env references ${%s}, which is not set", source, spec.name, name
            )

    @property
    def referenced_env(self) -> frozenset[str]:
        """Names of the bot's environment variables that the tool's env references."""
        return frozenset(
            p.name for parts in self._env.values() for p in parts if isinstance(p, EnvRef)
        )

    def missing_env(self) -> list[str]:
        """Referenced variables not set now (each call needing one would fail)."""
        return sorted(name for name in self.referenced_env if name not in self._environ)

    def argv(self, args: BaseModel, ctx: CallContext) -> list[str]:
        """The templated argv of a call; ``ToolError`` if an element cannot be formatted."""
        values = {name: _Arg(value) for name, value in self.values(args, ctx).items()}
        argv: list[str] = []
        template, where = self.command.run, "run"
        if ctx.dry_run and self.command.dry_run is not None:
            template, where = self.command.dry_run, "dry_run"
        for index, element in enumerate(template):
            try:
                text = element.format_map(values)
            except (ValueError, TypeError, KeyError) as exc:
                raise ToolError(f"{where}[{index}] {element!r}: cannot format: {exc}") from None
            if "\x00" in text:
                raise ToolError(f"{where}[{index}] {element!r}: the value contains a NUL character")
            argv.append(text)
        return argv

    def preview(self, args: BaseModel, ctx: CallContext) -> str | None:
        """The command a call runs, for the approval card, as an SRE reads it: quoted as
        a shell would (it is never run through one), an interpreter's path left out
        (``python -m mod …`` → ``mod …``, ``/usr/bin/python3 /opt/ctl.py …`` →
        ``ctl.py …``), and the arguments that carry the approver (``{confirmed_by}``,
        unknown before the click) named on a second line instead of a placeholder.
        The environment is not shown."""
        template = self.command.run
        if ctx.dry_run and self.command.dry_run is not None:
            template = self.command.dry_run
        return readable_command(self.argv(args, ctx), template)

    def environment(self, ctx: CallContext) -> tuple[dict[str, str], list[str]]:
        """The child's whole environment, and the secret values to redact (longest
        first); ``ToolError`` if a referenced variable is not set."""
        environ = self._environ
        env = {
            "PATH": environ.get("PATH") or DEFAULT_PATH,
            "LANG": environ.get("LANG") or DEFAULT_LANG,
        }
        home = environ.get("HOME")
        if home:
            env["HOME"] = home
        env["OPSLOOP_JOB_ID"] = ctx.job_id
        env["OPSLOOP_CONFIRMED_BY"] = "" if ctx.dry_run else (ctx.confirmed_by or "")
        env["OPSLOOP_IDEMPOTENCY_KEY"] = "" if ctx.dry_run else ctx.idempotency_key
        if ctx.dry_run:
            env["OPSLOOP_DRY_RUN"] = "1"
        secrets: set[str] = set()
        for key, parts in self._env.items():
            chunks: list[str] = []
            for part in parts:
                if isinstance(part, str):
                    chunks.append(part)
                    continue
                value = environ.get(part.name)
                if value is None:
                    raise ToolError(
                        f"env.{key}: ${{{part.name}}} is not set in the bot's environment"
                    )
                if len(value) >= MIN_SECRET_CHARS:
                    secrets.add(value)
                chunks.append(value)
            env[key] = "".join(chunks)
        return env, sorted(secrets, key=len, reverse=True)

    async def execute(self, args: BaseModel, ctx: CallContext) -> str:
        argv = self.argv(args, ctx)
        env, secrets = self.environment(ctx)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        child = await _Child.spawn(argv, env=env, cwd=self.command.cwd, capture=self._capture_bytes)
        timed_out = False
        try:
            try:
                async with asyncio.timeout_at(deadline):
                    await child.proc.wait()
            except TimeoutError:
                timed_out = True
        finally:
            # Also (above all) when cancelled: the group must not outlive the call.
            await _shielded(child.stop(self._kill_grace), on_abandon=child.kill_now)
        out, err = child.stdout.text(secrets), child.stderr.text(secrets)
        if timed_out:
            tail = _tail(err, out)
            raise ToolError(
                f"timed out after {self.timeout:g}s" + (f"; last output:\n{tail}" if tail else "")
            )
        code = child.proc.returncode
        if code != 0:
            tail = _tail(err, out)
            raise ToolError(f"{_status(code)}: {tail}" if tail else f"{_status(code)} (no output)")
        if not err.strip():
            return out
        return out + ("" if not out or out.endswith("\n") else "\n") + "stderr:\n" + err


_INTERPRETER = re.compile(r"^(python[0-9.]*|pypy[0-9.]*|node|nodejs|perl|ruby|bash|sh|dash|zsh)$")
_APPROVER = "{confirmed_by}"


def readable_command(argv: Sequence[str], template: Sequence[str]) -> str:
    """``argv`` (made from ``template``) as the card shows it (``CommandTool.preview``).
    Only the template's own text decides what is left out or shortened: an argument
    made from the model's values is always shown whole."""
    literal = [_APPROVER not in t and "{" not in t for t in template]
    hidden: set[int] = set()
    named: list[str] = []
    for i, element in enumerate(template):
        if _APPROVER not in element or i >= len(argv):
            continue
        hidden.add(i)
        before = template[i - 1] if i > 0 else ""
        if element == _APPROVER and literal[i - 1] and before.startswith("-") and "=" not in before:
            hidden.add(i - 1)  # ``--by {confirmed_by}``: the flag goes with its value
            named.append(before)
        elif element.startswith("-") and "=" in element:
            named.append(element.split("=", 1)[0])
        else:
            named.append("the last argument" if i == len(template) - 1 else "an argument")
    kept = [i for i in range(len(argv)) if i not in hidden]
    shown = [argv[i] for i in kept]
    if len(kept) >= 2 and literal[kept[0]] and _INTERPRETER.match(os.path.basename(shown[0])):
        if shown[1] == "-m" and len(kept) >= 3 and literal[kept[2]]:
            shown = shown[2:]
        elif literal[kept[1]] and not shown[1].startswith("-"):
            shown = [os.path.basename(shown[1]), *shown[2:]]
    text = shlex.join(shown)
    if named:
        text += "\n# and the approver's Slack id as " + ", ".join(named)
    return text


class _Arg:
    """One template value: ``true``/``false`` for booleans, ``""`` for None, ``str()``
    otherwise; a format spec (``{n:03d}``) applies to the value itself."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __str__(self) -> str:
        if self.value is None:
            return ""
        if isinstance(self.value, bool):
            return "true" if self.value else "false"
        return str(self.value)

    def __repr__(self) -> str:
        return repr(str(self))

    def __format__(self, spec: str) -> str:
        if not spec or self.value is None or isinstance(self.value, bool | str):
            return format(str(self), spec)
        return format(self.value, spec)


def _status(code: int | None) -> str:
    if code is None:  # stuck (uninterruptible sleep) even after SIGKILL
        return "did not exit, even after SIGKILL"
    if code >= 0:
        return f"exit {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    return f"exit {code} (killed by {name})"


def _tail(err: str, out: str) -> str:
    """The end of stderr, or of stdout when stderr is empty."""
    text = (err if err.strip() else out).rstrip()
    return text if len(text) <= ERROR_TAIL_CHARS else "…" + text[-ERROR_TAIL_CHARS:]


# -- redaction ------------------------------------------------------------------------


def _redact_cut(text: str, secrets: Sequence[str], *, at_end: bool) -> str:
    """Hide the visible part of a secret that a capture boundary cut in two."""
    for secret in secrets:
        for size in range(len(secret) - 1, MIN_SECRET_CHARS - 1, -1):
            if at_end and text.endswith(secret[:size]):
                text = text[:-size] + MASK
                break
            if not at_end and text.startswith(secret[-size:]):
                text = MASK + text[size:]
                break
    return text


# -- the child process ----------------------------------------------------------------


class _Capture(asyncio.Protocol):
    """One output pipe: keeps the head and a rolling tail, counts what is in between."""

    def __init__(self, limit: int) -> None:
        self._tail_limit = min(TAIL_KEEP_BYTES, limit // 4)
        self._head_limit = limit - self._tail_limit
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def data_received(self, data: bytes) -> None:
        room = self._head_limit - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if not data:
            return
        keep = self._tail_limit
        if len(data) >= keep:
            self.dropped += len(self.tail) + len(data) - keep
            self.tail = bytearray(data[len(data) - keep :])
            return
        self.tail += data
        excess = len(self.tail) - keep
        if excess > 0:
            del self.tail[:excess]
            self.dropped += excess

    def itself(self) -> _Capture:
        """The protocol factory for ``connect_read_pipe``."""
        return self

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)

    def text(self, secrets: Sequence[str]) -> str:
        """Decoded, redacted, with a note of what was not kept."""
        if not self.dropped:
            return mask_values(_decode(self.head + self.tail), secrets, MASK)
        head = _redact_cut(mask_values(_decode(self.head), secrets, MASK), secrets, at_end=True)
        tail = _redact_cut(mask_values(_decode(self.tail), secrets, MASK), secrets, at_end=False)
        return f"{head}\n[… {self.dropped} more bytes not kept …]\n{tail}"


def _decode(data: bytes | bytearray) -> str:
    return bytes(data).decode("utf-8", errors="replace")


def _reader(fd: int) -> IO[bytes]:
    return open(fd, "rb", buffering=0)


@dataclass(slots=True)
class _Child:
    """A spawned program: its process (leader of its own group) and its two pipes."""

    proc: asyncio.subprocess.Process
    stdout: _Capture
    stderr: _Capture
    pipes: list[asyncio.BaseTransport]

    @classmethod
    async def spawn(
        cls, argv: list[str], *, env: dict[str, str], cwd: str | None, capture: int
    ) -> _Child:
        # Shielded: once forked, the child must be known to be killed.
        task = asyncio.ensure_future(_spawn(argv, env=env, cwd=cwd, capture=capture))
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            task.add_done_callback(_abandon_spawn)
            raise

    def signal(self, sig: signal.Signals) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass  # the group is gone
        except PermissionError:
            log.warning(
                "cannot send %s to process group %d: permission denied", sig.name, self.proc.pid
            )

    def kill_now(self) -> None:
        self.signal(signal.SIGKILL)

    async def stop(self, grace: float) -> None:
        """SIGTERM the group, give the leader and the pipes ``grace`` seconds, SIGKILL
        what is left, reap the leader and collect the pipes."""
        leader: asyncio.Future[Any] = asyncio.ensure_future(self.proc.wait())
        pipes: list[asyncio.Future[Any]] = [self.stdout.closed, self.stderr.closed]
        try:
            self.signal(signal.SIGTERM)
            await asyncio.wait([leader, *pipes], timeout=grace)
            self.signal(signal.SIGKILL)
            if not leader.done():
                await asyncio.wait([leader], timeout=REAP_TIMEOUT_S)
                if not leader.done():
                    log.warning("process %d survived SIGKILL; not waiting for it", self.proc.pid)
            # Only a process outside the group (one that made its own session) can
            # still hold a pipe now; its output is not waited for.
            await asyncio.wait(pipes, timeout=grace)
        finally:
            leader.cancel()
            for pipe in self.pipes:
                pipe.close()


SETPRIV = shutil.which("setpriv")  # util-linux: every Debian system has it


def _dies_with_us(argv: list[str], env: dict[str, str], cwd: str | None) -> list[str]:
    """``argv`` run so that it is SIGKILLed if this process dies (a crash, a SIGKILL):
    ``setpriv --pdeathsig KILL`` sets the signal and execs the program in place, so the
    program is still our child. The program is looked up first, so a missing one is the
    same "cannot run" as without the wrapper. Without setpriv, the program as it is."""
    if SETPRIV is None:
        return argv
    program = argv[0]
    if os.sep in program:  # a path: as exec would find it, from the call's cwd
        where = os.path.join(cwd or os.getcwd(), program)
        if not os.path.exists(where):
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)
        if os.path.isdir(where) or not os.access(where, os.X_OK):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), program)
    else:
        # setpriv finds it on the same PATH (execvp); looked up here for the error.
        if shutil.which(program, path=env.get("PATH", os.defpath)) is None:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)
    return [SETPRIV, "--pdeathsig", "KILL", "--", program, *argv[1:]]


async def _spawn(argv: list[str], *, env: dict[str, str], cwd: str | None, capture: int) -> _Child:
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        proc = await asyncio.create_subprocess_exec(
            *_dies_with_us(argv, env, cwd),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out_w,
            stderr=err_w,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
    except BaseException as exc:
        os.close(out_r)
        os.close(err_r)
        if isinstance(exc, OSError):
            if cwd is not None and exc.filename == cwd:
                raise ToolError(f"cannot run in cwd {cwd!r}: {exc.strerror}") from None
            raise ToolError(f"cannot run {argv[0]!r}: {exc.strerror or exc}") from None
        if isinstance(exc, ValueError):  # e.g. an embedded NUL
            raise ToolError(f"cannot run {argv[0]!r}: {exc}") from None
        raise
    finally:
        # The child has its copies; ours must go for the pipes to reach EOF.
        os.close(out_w)
        os.close(err_w)
    loop = asyncio.get_running_loop()
    stdout, stderr = _Capture(capture), _Capture(capture)
    readers = [_reader(out_r), _reader(err_r)]
    pipes: list[asyncio.BaseTransport] = []
    try:
        for reader, sink in zip(readers, (stdout, stderr), strict=True):
            transport, _ = await loop.connect_read_pipe(sink.itself, reader)
            pipes.append(transport)  # it owns the reader now
    except BaseException:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        for pipe in pipes:
            pipe.close()
        for reader in readers[len(pipes) :]:
            reader.close()
        raise
    return _Child(proc=proc, stdout=stdout, stderr=stderr, pipes=pipes)


def _abandon_spawn(task: asyncio.Future[_Child]) -> None:
    """The caller was cancelled while spawning: kill what was spawned, and reap it in the
    background (until then asyncio counts the process as running)."""
    if task.cancelled() or task.exception() is not None:
        return
    child = task.result()
    child.kill_now()
    for pipe in child.pipes:
        pipe.close()
    _keep(asyncio.ensure_future(_reap(child)))


async def _reap(child: _Child) -> None:
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(REAP_TIMEOUT_S):
            await child.proc.wait()


# Cleanups that outlived their caller (a cancelled spawn, a second cancellation):
# referenced until they finish.
_BACKGROUND: set[asyncio.Future[None]] = set()


def _keep(task: asyncio.Future[None]) -> None:
    _BACKGROUND.add(task)
    task.add_done_callback(_BACKGROUND.discard)


async def settle(timeout: float = REAP_TIMEOUT_S + DEFAULT_KILL_GRACE_S) -> None:  # noqa: ASYNC109
    """Wait, at most ``timeout`` seconds, for the cleanups of cancelled calls that finish
    in the background (their processes killed and reaped): before an event loop closes."""
    if _BACKGROUND:
        await asyncio.wait(set(_BACKGROUND), timeout=timeout)


async def _shielded(cleanup: Coroutine[Any, Any, None], *, on_abandon: Callable[[], None]) -> None:
    """Run ``cleanup`` to the end even if the caller is cancelled again meanwhile; if it
    is, ``on_abandon`` runs at once and the cleanup finishes in the background."""
    task = asyncio.ensure_future(cleanup)
    _keep(task)
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        on_abandon()
        raise

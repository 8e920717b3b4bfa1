"""The stdio transport: a server as our child, in its own session, stopped as a group.

Ours rather than the SDK's ``stdio_client`` for two reasons the SDK's does not cover:
the child's whole process group is killed at the end even when the server itself exited
cleanly (a server that started helpers would otherwise leave them orphaned), and each
line the server writes is bounded (``MAX_LINE_BYTES``), so a server that writes without
newlines cannot grow our memory without end; and its stderr is read line by line into
our log (``MAX_STDERR_LINE`` chars a line, ``MAX_STDERR_LINES`` lines a connection), so it
passes the log scrubber like every log line rather than reaching the bot's stderr raw.
Everything else follows the SDK: one
JSON-RPC message per line, a line that is not one is handed to the session as an
exception (it logs it and carries on), and stopping is stdin closed, then SIGTERM, then
SIGKILL, each step bounded.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Sequence

import anyio
import mcp_types
from anyio.abc import Process
from mcp.client._transport import TransportStreams
from mcp.shared.message import SessionMessage

log = logging.getLogger(__name__)

MAX_LINE_BYTES = 64 * 1024 * 1024
STDIN_GRACE_S = 2.0  # for the server to exit on its own once its stdin is closed
TERM_GRACE_S = 2.0  # between SIGTERM and SIGKILL
REAP_S = 2.0
_POLL_S = 0.01  # how often the exit of the child is looked at while stopping it
MAX_STDERR_LINE = 500  # characters of one stderr line kept in the log
MAX_STDERR_LINES = 1000  # stderr lines logged per connection; the rest are counted


def _parse(line: bytes) -> SessionMessage | Exception:
    try:
        message = mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValueError as exc:
        return exc
    return SessionMessage(message)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


async def _exited(process: Process, within: float) -> bool:
    # Not ``process.wait()``: it also waits for the pipes, which a helper may hold open;
    # and no event tells of a child's exit, so its return code is looked at.
    with anyio.move_on_after(within):
        while process.returncode is None:  # noqa: ASYNC110
            await anyio.sleep(_POLL_S)
    return process.returncode is not None


async def _stop(process: Process) -> None:
    pgid = process.pid  # the leader of its own session: its pid is the group's id
    if process.stdin is not None:
        with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            await process.stdin.aclose()
    if not await _exited(process, STDIN_GRACE_S):
        _signal_group(pgid, signal.SIGTERM)
        if not await _exited(process, TERM_GRACE_S):
            _signal_group(pgid, signal.SIGKILL)
            if not await _exited(process, REAP_S):
                log.warning("mcp server process %d survived SIGKILL; abandoning it", pgid)
    _signal_group(pgid, signal.SIGKILL)  # helpers it left behind in its group
    if process.stdout is not None:
        with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            await process.stdout.aclose()
    # The asyncio transport stays open (and complains when collected after the loop
    # closed) unless closed; nothing public reaches it.
    transport = getattr(getattr(process, "_process", None), "_transport", None)
    close = getattr(transport, "close", None)
    if callable(close):
        with contextlib.suppress(PermissionError):
            close()


@contextlib.asynccontextmanager
async def stdio_transport(
    argv: Sequence[str], *, env: dict[str, str], cwd: str | None, name: str
) -> AsyncIterator[TransportStreams]:
    """Start ``argv`` (the server ``name``) and speak MCP over its stdin/stdout; stop its
    group on exit."""
    process = await anyio.open_process(
        list(argv), env=env, cwd=cwd, stderr=subprocess.PIPE, start_new_session=True
    )
    read_send, read_receive = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_send, write_receive = anyio.create_memory_object_stream[SessionMessage](0)

    async def reader() -> None:
        assert process.stdout is not None
        buffer = bytearray()
        try:
            async with read_send:
                async for chunk in process.stdout:
                    buffer.extend(chunk)
                    while (end := buffer.find(b"\n")) >= 0:
                        line = bytes(buffer[:end])
                        del buffer[: end + 1]
                        if line.strip():
                            await read_send.send(_parse(line))
                    if len(buffer) > MAX_LINE_BYTES:
                        log.warning(
                            "mcp server process %d: a line longer than %d bytes; disconnecting",
                            process.pid,
                            MAX_LINE_BYTES,
                        )
                        return
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            pass

    async def errors() -> None:
        assert process.stderr is not None
        buffer = bytearray()
        logged = dropped = 0
        try:
            async for chunk in process.stderr:
                buffer.extend(chunk)
                while (end := buffer.find(b"\n")) >= 0 or len(buffer) > MAX_STDERR_LINE * 4:
                    cut = end if end >= 0 else MAX_STDERR_LINE * 4
                    line = bytes(buffer[:cut]).decode("utf-8", "replace").strip()
                    del buffer[: cut + 1]
                    if not line:
                        continue
                    if logged < MAX_STDERR_LINES:
                        logged += 1
                        log.info("mcp server '%s' stderr: %s", name, line[:MAX_STDERR_LINE])
                    else:
                        dropped += 1
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            pass
        finally:
            if dropped:
                log.info("mcp server '%s': %d more stderr lines not logged", name, dropped)

    async def writer() -> None:
        assert process.stdin is not None
        try:
            async with write_receive:
                async for message in write_receive:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send((data + "\n").encode("utf-8"))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await read_send.aclose()  # the session sees the connection end

    async with anyio.create_task_group() as group:
        group.start_soon(reader)
        group.start_soon(errors)
        group.start_soon(writer)
        try:
            yield read_receive, write_send
        finally:
            with anyio.CancelScope(shield=True):
                await _stop(process)
                for stream in (read_receive, write_send, read_send, write_receive):
                    await stream.aclose()
            group.cancel_scope.cancel()

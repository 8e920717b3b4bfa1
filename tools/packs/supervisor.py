"""The ``supervisor`` pack: programs run by supervisord, over its XML-RPC interface.

``SUPERVISOR_URL`` names the interface: ``http://host:9001`` (``/RPC2`` is added when
the path is empty or ``/``), ``http://user:pass@host:9001/RPC2`` for an
``[inet_http_server]`` with a username, or ``unix:///var/run/supervisor.sock`` for an
``[unix_http_server]`` socket (``unix://user:pass@/path`` with credentials).

    supervisor_status(name?)   read-only    every program, or one program or group; a
                                            failing one (BACKOFF, FATAL, unexpected exit)
                                            with its last log lines
    supervisor_restart(name)   mutating     stop (if running) and start; old/new pid
    supervisor_stop(name)      destructive  the dry run says what would stop

``name`` is what ``supervisorctl`` accepts: ``web``, ``group:process``, or a group
(``workers`` or ``workers:*``); a bare process name that is unique also works.

Supervisor faults (``BAD_NAME``, ``NOT_RUNNING``, ``ALREADY_STARTED``, ``SPAWN_ERROR``, …),
an unreachable or slow supervisord, a refused password and an answer that is not XML-RPC
all become a ``ToolError`` that says what happened in words. Credentials never appear
in a message.

This module owns the tools and the text they answer with; the parts live beside it:
``tools.packs.supervisor_rpc`` (the XML-RPC client over httpx: ``SUPERVISOR_URL``, timeouts,
faults) and ``tools.packs.supervisor_procs`` (processes, what a ``name`` means, status lines).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Any

from pydantic import AfterValidator, Field

from bot.agent.tools import CallContext
from bot.errors import ConfigError, ToolError
from tools.base import tool
from tools.packs import Pack, PackConfig
from tools.packs.supervisor_procs import (
    Proc,
    Target,
    problems_first,
    resolve,
    status_lines,
    summary,
)
from tools.packs.supervisor_rpc import (
    ACTION_TIMEOUT_S,
    FAULTS,
    STATUS_TIMEOUT_S,
    SUCCESS,
    VARIABLE,
    SupervisorClient,
    SupervisorFault,
)

LOG_TAIL_BYTES = 1200
MAX_LINES = 200  # status lines before "… N more"
MAX_LOG_TAILS = 5  # failing processes whose last log lines supervisor_status shows
STATUS_LOG_LINES = 3
STATUS_TAILS_S = 3.0  # for all those log tails together
LOG_LINE_CHARS = 200

NAME_RE = r"^[^\s:]+(:[^\s:]+)?$"  # 'web', 'group:process', 'group:*'


def _whole_name(value: str) -> str:
    # Python's ``$`` also matches before a final newline: 'web\n' passes the pattern.
    if re.fullmatch(NAME_RE[1:-1], value) is None:
        raise ValueError(f"must match the pattern {NAME_RE!r}")
    return value


ProgramName = Annotated[
    str, Field(min_length=1, max_length=200, pattern=NAME_RE), AfterValidator(_whole_name)
]


# -- the tools ----------------------------------------------------------------------


class Supervisor:
    """The three tools over one client."""

    def __init__(self, client: SupervisorClient) -> None:
        self.client = client

    async def processes(self) -> list[Proc]:
        infos = await self.client.call("supervisor.getAllProcessInfo")
        if not isinstance(infos, list):
            raise ToolError("supervisor: getAllProcessInfo did not return a list")
        return [Proc.of(info) for info in infos if isinstance(info, dict)]

    async def status(self, name: str | None) -> str:
        procs = await self.processes()
        if name is None:
            if not procs:
                return "supervisord runs no programs"
            chosen = problems_first(procs)
        else:
            chosen = list(resolve(procs, name).members)
        # "Exited too quickly (process log may have details)": the details are the point.
        failing = [p for p in chosen if p.failing][:MAX_LOG_TAILS]
        try:  # a supervisord slow to read its logs must not cost the states
            async with asyncio.timeout(STATUS_TAILS_S):
                tails = await asyncio.gather(*(self._status_tail(p.spec) for p in failing))
        except TimeoutError:
            tails = [[] for _ in failing]
        return status_text(chosen, dict(zip((p.spec for p in failing), tails, strict=True)))

    async def _status_tail(self, spec: str) -> list[str]:
        try:
            return last_lines(await self._log_tail(spec), STATUS_LOG_LINES)
        except ToolError:
            return []  # best effort: the state is the answer

    async def restart(self, name: str) -> str:
        before = resolve(await self.processes(), name)
        if before.group is not None:
            return await self._restart_group(before)
        old = before.proc
        if old.running:
            try:
                await self.client.act("supervisor.stopProcess", old.spec, True)
            except SupervisorFault as fault:
                if fault.name != "NOT_RUNNING":  # it stopped meanwhile: fine
                    raise self._explain(fault, old, "stop") from None
        note = ""
        try:
            await self.client.act("supervisor.startProcess", old.spec, True)
        except SupervisorFault as fault:
            if fault.name != "ALREADY_STARTED":
                raise await self._start_failed(fault, old) from None
            note = " (something else started it meanwhile)"
        new = Proc.of(await self.client.call("supervisor.getProcessInfo", old.spec))
        text = f"Restarted {old.label}: pid {_pid(old)} → {_pid(new)}, {old.state} → {new.state}"
        if new.state != "RUNNING":
            text += f" ({new.detail()})"
        return text + note

    async def _restart_group(self, before: Target) -> str:
        group = before.group
        assert group is not None
        stopped = await self.client.act("supervisor.stopProcessGroup", group, True)
        started = await self.client.act("supervisor.startProcessGroup", group, True)
        failures = _failures(stopped, ignore={"NOT_RUNNING"}) + _failures(
            started, ignore={"ALREADY_STARTED"}
        )
        after = {p.spec: p for p in await self.processes() if p.group == group}
        lines = [f"Restarted group {group} ({len(before.members)} processes):"]
        for old in before.members:
            new = after.get(old.spec)
            if new is None:
                lines.append(f"  {old.label}: gone from supervisord")
                continue
            lines.append(f"  {old.label}: pid {_pid(old)} → {_pid(new)}, {old.state} → {new.state}")
        lines.extend(f"  failed: {text}" for text in failures)
        return "\n".join(lines)

    async def stop(self, name: str, ctx: CallContext) -> str:
        target = resolve(await self.processes(), name)
        running = [p for p in target.members if p.running]
        if target.group is not None:
            return await self._stop_group(target, running, dry_run=ctx.dry_run)
        proc = target.proc
        if not proc.running:
            raise ToolError(
                f"{proc.label} is not running ({proc.state}{_detail(proc)}); nothing to stop"
            )
        if ctx.dry_run:
            return (
                f"Dry run, nothing stopped: would stop {proc.label} "
                f"({proc.state}: {proc.detail()})."
            )
        try:
            await self.client.act("supervisor.stopProcess", proc.spec, True)
        except SupervisorFault as fault:
            raise self._explain(fault, proc, "stop") from None
        after = Proc.of(await self.client.call("supervisor.getProcessInfo", proc.spec))
        return f"Stopped {proc.label} (was {proc.state}: {proc.detail()}); now {after.state}"

    async def _stop_group(self, target: Target, running: list[Proc], *, dry_run: bool) -> str:
        group = target.group
        assert group is not None
        total = len(target.members)
        if not running:
            raise ToolError(f"no process of group {group} is running; nothing to stop")
        if dry_run:
            lines = [
                f"Dry run, nothing stopped: would stop group {group}, "
                f"{len(running)} of {total} processes running:",
                *(f"  {line}" for line in status_lines(target.members)),
            ]
            return "\n".join(lines)
        results = await self.client.act("supervisor.stopProcessGroup", group, True)
        failures = _failures(results, ignore={"NOT_RUNNING"})
        after = {p.spec: p for p in await self.processes() if p.group == group}
        lines = [f"Stopped group {group} ({len(running)} of {total} were running):"]
        for old in target.members:
            new = after.get(old.spec)
            now = new.state if new is not None else "gone"
            lines.append(f"  {old.label}: {old.state} (pid {_pid(old)}) → {now}")
        lines.extend(f"  failed: {text}" for text in failures)
        return "\n".join(lines)

    def _explain(self, fault: SupervisorFault, proc: Proc, action: str) -> ToolError:
        if fault.name == "NOT_RUNNING":
            return ToolError(f"{proc.label} is not running; nothing to {action}")
        if fault.name == "BAD_NAME":
            return ToolError(f"supervisord no longer knows {proc.label} (config reloaded?)")
        if fault.name == "SHUTDOWN_STATE":
            return ToolError("supervisord is shutting down; it accepts no commands")
        return ToolError(f"cannot {action} {proc.label}: {fault.name}: {fault.text}")

    async def _start_failed(self, fault: SupervisorFault, proc: Proc) -> ToolError:
        reasons = {
            "NO_FILE": "its command was not found",
            "NOT_EXECUTABLE": "its command is not executable",
            "SPAWN_ERROR": "it failed to start",
            "ABNORMAL_TERMINATION": "it exited while starting (before startsecs)",
            "ALREADY_STARTED": "it is already running",
            "SHUTDOWN_STATE": "supervisord is shutting down",
            "BAD_NAME": "supervisord no longer knows it (config reloaded?)",
        }
        reason = reasons.get(fault.name, f"{fault.name}: {fault.text}")
        if proc.running:
            text = f"{proc.label} was stopped but did not start again: {reason}"
        else:
            text = f"{proc.label} did not start: {reason}"
        if fault.name in ("NO_FILE", "NOT_EXECUTABLE"):
            text += f" ({fault.text})"
        try:
            now = Proc.of(await self.client.call("supervisor.getProcessInfo", proc.spec))
            text += f". Now {now.state}{_detail(now)}"
            tail = await self._log_tail(proc.spec)
            if tail:
                text += f"\nLast log output:\n{tail}"
        except ToolError:
            pass  # best effort: the start failure is the message
        return ToolError(text)

    async def _log_tail(self, spec: str) -> str:
        for method in ("supervisor.tailProcessStderrLog", "supervisor.tailProcessStdoutLog"):
            try:
                answer = await self.client.call(method, spec, 0, LOG_TAIL_BYTES)
            except SupervisorFault:
                continue  # NO_FILE: that stream is not logged
            if isinstance(answer, list) and answer and str(answer[0]).strip():
                return str(answer[0]).strip()
        return ""


def status_text(procs: Sequence[Proc], tails: Mapping[str, Sequence[str]]) -> str:
    """``supervisor_status``'s answer: a summary, then a line per process (problems
    first, as ``procs`` come), each failing one followed by its last log lines."""
    lines = [summary(procs)]
    shown = procs[:MAX_LINES]
    for proc, line in zip(shown, status_lines(shown), strict=True):
        lines.append(line)
        lines.extend(f"    log: {text}" for text in tails.get(proc.spec, ()))
    if len(procs) > MAX_LINES:
        lines.append(f"… {len(procs) - MAX_LINES} more")
    return "\n".join(lines)


def last_lines(tail: str, count: int) -> list[str]:
    """The last ``count`` lines of a log tail that hold words, each on one line and
    bounded."""
    found = [" ".join(line.split()) for line in tail.splitlines()]
    # Python's tracebacks underline the failing expression with ~~~^^^: no words there.
    found = [line for line in found if line.strip("~^ ")]
    return [
        line if len(line) <= LOG_LINE_CHARS else line[: LOG_LINE_CHARS - 1] + "…"
        for line in found[-count:]
    ]


def _pid(proc: Proc) -> str:
    return str(proc.pid) if proc.pid else "none"


def _detail(proc: Proc) -> str:
    detail = proc.detail()
    return f", {detail}" if detail else ""


def _failures(results: Any, *, ignore: set[str]) -> list[str]:
    """The members of a group call whose status is not SUCCESS (nor ignorable)."""
    out: list[str] = []
    for item in results if isinstance(results, list) else []:
        if not isinstance(item, dict):
            continue
        code = int(item.get("status", SUCCESS))
        name = FAULTS.get(code, str(code))
        if code == SUCCESS or name in ignore:
            continue
        who = f"{item.get('group', '')}:{item.get('name', '')}"
        out.append(f"{who}: {name} {item.get('description', '')}".rstrip())
    return out


def make_tools(client: SupervisorClient) -> Pack:
    """The pack's tools over ``client`` (tests pass one with short timeouts)."""
    backend = Supervisor(client)

    @tool(category="read_only", parallel=True, timeout=STATUS_TIMEOUT_S + 10)
    async def supervisor_status(name: ProgramName | None = None) -> str:
        """State of supervisord's programs: state, pid, uptime, exit status if exited;
        problems first, and for a program that keeps failing its last log lines.

        Args:
            name: One program or group (e.g. 'web', 'workers'); omit for every program.
        """
        return await backend.status(name)

    @tool(category="mutating", timeout=2 * ACTION_TIMEOUT_S + 20)
    async def supervisor_restart(name: ProgramName) -> str:
        """Restart a supervisord program or group (stop if running, then start).

        Reports the old and new pid and state of each process.

        Args:
            name: Program to restart: 'web', 'group:process', or a group ('workers').
        """
        return await backend.restart(name)

    @tool(category="destructive", timeout=ACTION_TIMEOUT_S + 20)
    async def supervisor_stop(name: ProgramName, ctx: CallContext) -> str:
        """Stop a supervisord program or group; it stays stopped until started again.

        Args:
            name: Program to stop: 'web', 'group:process', or a group ('workers').
        """
        return await backend.stop(name, ctx)

    return Pack(
        tools=(supervisor_status, supervisor_restart, supervisor_stop),
        closers=(client.aclose,),
    )


def build(config: PackConfig) -> Pack:
    """The supervisor pack for ``SUPERVISOR_URL``; ``ConfigError`` when it is missing."""
    url = (config.supervisor_url or "").strip()
    if not url:
        raise ConfigError(f"{VARIABLE} is required for the supervisor pack")
    return make_tools(SupervisorClient(url))

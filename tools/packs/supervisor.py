"""The ``supervisor`` pack: programs run by supervisord, over its XML-RPC interface.

``SUPERVISOR_URL`` names the interface: ``http://host:9001`` (``/RPC2`` is added when
the path is empty or ``/``), ``http://user:pass@host:9001/RPC2`` for an
``[inet_http_server]`` with a username, or ``unix:///var/run/supervisor.sock`` for an
``[unix_http_server]`` socket (``unix://user:pass@/path`` with credentials).

    supervisor_status(name?)   read-only    every program, or one program or group
    supervisor_restart(name)   mutating     stop (if running) and start; old/new pid
    supervisor_stop(name)      destructive  the dry run says what would stop

``name`` is what ``supervisorctl`` accepts: ``web``, ``group:process``, or a group
(``workers`` or ``workers:*``); a bare process name that is unique also works.

The XML-RPC request is built with ``xmlrpc.client.dumps`` and POSTed with one
``httpx.AsyncClient`` (bounded connect and read timeouts, bounded answer size, a new
connection per call), the answer parsed with ``xmlrpc.client.loads``. Supervisor
faults (``BAD_NAME``, ``NOT_RUNNING``, ``ALREADY_STARTED``, ``SPAWN_ERROR``, …), an
unreachable or slow supervisord, a refused password and an answer that is not XML-RPC
all become a ``ToolError`` that says what happened in words. Credentials never appear
in a message.
"""

from __future__ import annotations

import difflib
import os
import re
import xmlrpc.client
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import unquote, urlsplit
from xml.parsers.expat import ExpatError

import httpx
from pydantic import AfterValidator, Field

from bot.agent.tools import CallContext
from bot.errors import ConfigError, ToolError
from tools.base import tool
from tools.packs import Pack, PackConfig

VARIABLE = "SUPERVISOR_URL"
CONNECT_TIMEOUT_S = 5.0
STATUS_TIMEOUT_S = 10.0  # a query: supervisord answers at once or not at all
ACTION_TIMEOUT_S = 60.0  # stop/start wait for stopwaitsecs / startsecs on the server
MAX_ANSWER_BYTES = 8 << 20
KNOWN_NAMES_SHOWN = 20
LOG_TAIL_BYTES = 1200
MAX_LINES = 200  # status lines before "… N more"

# supervisor.xmlrpc.Faults
FAULTS: Mapping[int, str] = {
    1: "UNKNOWN_METHOD",
    2: "INCORRECT_PARAMETERS",
    3: "BAD_ARGUMENTS",
    4: "SIGNATURE_UNSUPPORTED",
    6: "SHUTDOWN_STATE",
    10: "BAD_NAME",
    11: "BAD_SIGNAL",
    20: "NO_FILE",
    21: "NOT_EXECUTABLE",
    30: "FAILED",
    40: "ABNORMAL_TERMINATION",
    50: "SPAWN_ERROR",
    60: "ALREADY_STARTED",
    70: "NOT_RUNNING",
    80: "SUCCESS",
    90: "ALREADY_ADDED",
    91: "STILL_RUNNING",
    92: "CANT_REREAD",
}
SUCCESS = 80
RUNNING_STATES = frozenset({"STARTING", "RUNNING", "BACKOFF"})  # what stopProcess accepts

NAME_RE = r"^[^\s:]+(:[^\s:]+)?$"  # 'web', 'group:process', 'group:*'


def _whole_name(value: str) -> str:
    # Python's ``$`` also matches before a final newline: 'web\n' passes the pattern.
    if re.fullmatch(NAME_RE[1:-1], value) is None:
        raise ValueError(f"must match the pattern {NAME_RE!r}")
    return value


ProgramName = Annotated[
    str, Field(min_length=1, max_length=200, pattern=NAME_RE), AfterValidator(_whole_name)
]


# -- the XML-RPC client -------------------------------------------------------------


class SupervisorFault(ToolError):
    """A fault supervisord answered with; ``name`` is its symbolic code."""

    def __init__(self, code: int, text: str) -> None:
        self.code = code
        self.name = FAULTS.get(code, f"FAULT_{code}")
        self.text = text
        super().__init__(f"supervisor: {text}")


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where the interface is: the POST URL, optional socket and credentials."""

    url: str  # the URL requests go to (no credentials)
    shown: str  # what messages name (no credentials)
    uds: str | None = None
    auth: tuple[str, str] | None = None


def parse_url(raw: str) -> Endpoint:
    """``SUPERVISOR_URL`` as an ``Endpoint``; ``ConfigError`` naming the variable."""
    text = raw.strip()
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"{VARIABLE}: not a valid URL ({exc})") from None
    auth = None
    if parts.username is not None:
        auth = (unquote(parts.username), unquote(parts.password or ""))
    if parts.scheme == "unix":
        path = parts.path
        if not path or path == "/":
            raise ConfigError(f"{VARIABLE}: unix:// needs a socket path, e.g. unix:///run/s.sock")
        return Endpoint(url="http://localhost/RPC2", shown=f"unix://{path}", uds=path, auth=auth)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"{VARIABLE}: expected http://host:port[/RPC2] or unix:///path/to/socket, "
            f"got scheme {parts.scheme or 'none'!r}"
        )
    if parts.query or parts.fragment:
        raise ConfigError(f"{VARIABLE}: a query or fragment makes no sense here")
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    netloc = host if port is None else f"{host}:{port}"
    path = parts.path.rstrip("/") or "/RPC2"
    url = f"{parts.scheme}://{netloc}{path}"
    return Endpoint(url=url, shown=url, auth=auth)


class SupervisorClient:
    """Async XML-RPC calls to one supervisord; ``aclose`` at shutdown."""

    def __init__(
        self,
        url: str,
        *,
        connect_timeout: float = CONNECT_TIMEOUT_S,
        status_timeout: float = STATUS_TIMEOUT_S,
        action_timeout: float = ACTION_TIMEOUT_S,
        max_answer_bytes: int = MAX_ANSWER_BYTES,
    ) -> None:
        self.endpoint = parse_url(url)
        self.status_timeout = status_timeout
        self.action_timeout = action_timeout
        self._max_answer = max_answer_bytes
        self._connect_timeout = connect_timeout
        transport = httpx.AsyncHTTPTransport(uds=self.endpoint.uds) if self.endpoint.uds else None
        self._http = httpx.AsyncClient(
            transport=transport,
            auth=self.endpoint.auth,
            timeout=httpx.Timeout(status_timeout, connect=connect_timeout),
            headers={"Content-Type": "text/xml", "Accept": "text/xml"},
            follow_redirects=False,
            trust_env=False,
            # A connection per call, as supervisorctl does. supervisord's HTTP server
            # (medusa) leaves Nagle on and writes answers in 4 KiB pieces: on a reused
            # connection every answer over 4 KiB (getAllProcessInfo of 5 processes)
            # waits ~40 ms for the client's delayed ACK; a fresh one ACKs at once.
            limits=httpx.Limits(max_keepalive_connections=0),
        )

    @property
    def closed(self) -> bool:
        return self._http.is_closed

    async def aclose(self) -> None:
        await self._http.aclose()

    async def call(self, method: str, *params: Any) -> Any:
        """One XML-RPC query, bounded by ``status_timeout``."""
        return await self._post(method, params, acting=False)

    async def act(self, method: str, *params: Any) -> Any:
        """One XML-RPC call that waits for supervisord to stop or start something,
        bounded by ``action_timeout``."""
        return await self._post(method, params, acting=True)

    async def _post(self, method: str, params: tuple[Any, ...], *, acting: bool) -> Any:
        """The result of one call, or ``ToolError`` / ``SupervisorFault``."""
        body = xmlrpc.client.dumps(params, methodname=method, encoding="utf-8")
        read = self.action_timeout if acting else self.status_timeout
        where = f"supervisor at {self.endpoint.shown}"
        request_timeout = httpx.Timeout(read, connect=self._connect_timeout)
        try:
            async with self._http.stream(
                "POST", self.endpoint.url, content=body.encode("utf-8"), timeout=request_timeout
            ) as response:
                if response.status_code == 401:
                    raise ToolError(
                        f"{where} refused the credentials (HTTP 401); check user:pass in {VARIABLE}"
                    )
                if response.status_code != 200:
                    raise ToolError(
                        f"{where} answered HTTP {response.status_code} to {method}; "
                        "is this supervisord's XML-RPC interface (path /RPC2)?"
                    )
                data = bytearray()
                async for chunk in response.aiter_bytes():
                    data += chunk
                    if len(data) > self._max_answer:
                        raise ToolError(f"{where}: the answer to {method} is too large")
        except httpx.ConnectTimeout:
            raise ToolError(
                f"{where} is unreachable: no connection within {self._connect_timeout:g}s"
            ) from None
        except httpx.TimeoutException:
            text = f"{where} did not answer {method} within {read:g}s"
            if acting:
                text += "; it may still be acting on it: check supervisor_status"
            raise ToolError(text) from None
        except httpx.TransportError as exc:
            raise ToolError(f"{where} is unreachable: {_reason(exc)}") from None
        try:
            (result,), _ = xmlrpc.client.loads(bytes(data), use_builtin_types=True)
        except xmlrpc.client.Fault as fault:
            raise SupervisorFault(fault.faultCode, str(fault.faultString)) from None
        except (ExpatError, xmlrpc.client.ResponseError, ValueError) as exc:
            raise ToolError(f"{where}: not an XML-RPC answer to {method} ({exc})") from None
        return result


def _reason(exc: httpx.TransportError) -> str:
    """The innermost cause's words (``Connection refused``), not httpx's wrapper."""
    cause: BaseException = exc
    for _ in range(8):  # chains are short; never loop on a cyclic one
        inner = cause.__cause__ or cause.__context__
        if inner is None:
            break
        cause = inner
    if isinstance(cause, OSError) and cause.errno:
        return os.strerror(cause.errno)  # asyncio words it "Connect call failed (…)"
    return str(cause) or type(cause).__name__


# -- programs and names -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Proc:
    """One process as ``getAllProcessInfo`` describes it."""

    name: str
    group: str
    state: str
    pid: int
    description: str
    exitstatus: int
    spawnerr: str

    @classmethod
    def of(cls, info: Mapping[str, Any]) -> Proc:
        return cls(
            name=str(info.get("name", "")),
            group=str(info.get("group", "")),
            state=str(info.get("statename", "UNKNOWN")),
            pid=int(info.get("pid") or 0),
            description=str(info.get("description", "")),
            exitstatus=int(info.get("exitstatus") or 0),
            spawnerr=str(info.get("spawnerr") or ""),
        )

    @property
    def spec(self) -> str:
        """The unambiguous name supervisord accepts."""
        return f"{self.group}:{self.name}"

    @property
    def label(self) -> str:
        """What supervisorctl shows: ``web`` alone when group and process share it."""
        return self.name if self.group == self.name else self.spec

    @property
    def running(self) -> bool:
        return self.state in RUNNING_STATES

    def detail(self) -> str:
        """State details: pid and uptime, exit status, spawn error."""
        parts: list[str] = []
        spawnerr = self.spawnerr
        if self.state == "EXITED":
            unexpected = spawnerr.startswith("Bad exit code")
            parts.append(f"exit {self.exitstatus}" + (" (unexpected)" if unexpected else ""))
            if unexpected:
                spawnerr = ""
        description = self.description.strip()
        if description:
            parts.append(description)
        if spawnerr and spawnerr not in description:
            parts.append(spawnerr)
        return "; ".join(parts)


@dataclass(frozen=True, slots=True)
class Target:
    """What a ``name`` argument names: one process, or a whole group."""

    label: str
    members: tuple[Proc, ...]
    group: str | None = None  # set when the name is a group

    @property
    def proc(self) -> Proc:
        return self.members[0]


def resolve(procs: Sequence[Proc], name: str) -> Target:
    """The process or group ``name`` means, as supervisorctl would read it; otherwise
    ``ToolError`` with the known names (bounded) and close matches."""
    name = name.strip()
    if name.endswith((":*", ":")):
        group = name.rsplit(":", 1)[0]
        members = tuple(p for p in procs if p.group == group)
        if members:
            return Target(label=group, members=members, group=group)
    elif ":" in name:
        for p in procs:
            if p.spec == name:
                return Target(label=p.label, members=(p,))
    else:
        for p in procs:
            if p.group == name and p.name == name:
                return Target(label=p.label, members=(p,))
        members = tuple(p for p in procs if p.group == name)
        if members:
            return Target(label=name, members=members, group=name)
        same = [p for p in procs if p.name == name]
        if len(same) == 1:
            return Target(label=same[0].label, members=(same[0],))
        if len(same) > 1:
            options = ", ".join(p.spec for p in same[:KNOWN_NAMES_SHOWN])
            raise ToolError(f"{name!r} is ambiguous: say which one ({options})")
    raise ToolError(unknown_name(name, known_names(procs)))


def known_names(procs: Sequence[Proc]) -> list[str]:
    """Every name a user may pass: processes and (multi-process) groups."""
    names = {p.label for p in procs}
    names.update(p.group for p in procs if p.group != p.name)
    return sorted(names)


def unknown_name(name: str, known: Sequence[str]) -> str:
    """An error message naming close matches and at most ``KNOWN_NAMES_SHOWN`` names."""
    if not known:
        return f"no program named {name!r}: supervisord runs no programs"
    shown = ", ".join(known[:KNOWN_NAMES_SHOWN])
    more = len(known) - KNOWN_NAMES_SHOWN
    text = f"no program named {name!r}; known: {shown}"
    if more > 0:
        text += f" … and {more} more (supervisor_status lists them)"
    close = difflib.get_close_matches(name, known, n=3)
    if close:
        text += f". Did you mean {' or '.join(repr(c) for c in close)}?"
    return text


def status_lines(procs: Sequence[Proc]) -> list[str]:
    """One aligned line per process: name, state, details."""
    width = max((len(p.label) for p in procs), default=0)
    state_width = max((len(p.state) for p in procs), default=0)
    lines = []
    for p in procs:
        lines.append(f"{p.label:<{width}}  {p.state:<{state_width}}  {p.detail()}".rstrip())
    return lines


def summary(procs: Sequence[Proc]) -> str:
    counts: dict[str, int] = {}
    for p in procs:
        counts[p.state] = counts.get(p.state, 0) + 1
    states = ", ".join(f"{n} {state}" for state, n in sorted(counts.items(), key=_state_order))
    noun = "program" if len(procs) == 1 else "programs"
    return f"{len(procs)} {noun}: {states}"


def _state_order(item: tuple[str, int]) -> tuple[int, str]:
    # Problems first: what needs attention should survive any truncation.
    state = item[0]
    return (1 if state == "RUNNING" else 0, state)


def _problems_first(procs: Sequence[Proc]) -> list[Proc]:
    return sorted(procs, key=lambda p: (p.state == "RUNNING", p.label))


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
            chosen = _problems_first(procs)
        else:
            chosen = list(resolve(procs, name).members)
        lines = [summary(chosen), *status_lines(chosen[:MAX_LINES])]
        if len(chosen) > MAX_LINES:
            lines.append(f"… {len(chosen) - MAX_LINES} more")
        return "\n".join(lines)

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
        """State of supervisord's programs: state, pid, uptime, exit status if exited.

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

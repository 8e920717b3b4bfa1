"""The supervisor pack against a real supervisord (``supervisor_backend.py``).

Each test gets its own supervisord with these programs:

    web        one process, running
    worker     a group of two processes, worker:worker_00 and worker:worker_01
    batch      exited at once with an unexpected exit code 3
    idle       not started (autostart=false)
"""

from __future__ import annotations

import asyncio
import contextlib
import xmlrpc.client
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from bot.agent.tools import CallContext, Tool
from bot.errors import ConfigError, ToolError
from tests.tools.packs.supervisor_backend import ManagedSupervisor, Program, alive
from tools.packs import Pack, PackConfig, load_packs
from tools.packs.supervisor import build, make_tools
from tools.packs.supervisor_procs import KNOWN_NAMES_SHOWN, unknown_name
from tools.packs.supervisor_rpc import SupervisorClient, SupervisorFault, parse_url

WORKER_NAMES = "%(program_name)s_%(process_num)02d"
PROGRAMS = (
    Program("web"),
    Program(
        "worker", options={"numprocs": "2", "process_name": "%(program_name)s_%(process_num)02d"}
    ),
    Program(
        "batch", script="import sys; sys.exit(3)", options={"exitcodes": "0"}, settles_as="EXITED"
    ),
    Program("idle", options={"autostart": "false"}),
)


def start(root: Path, programs: tuple[Program, ...] = PROGRAMS, **kw: Any) -> ManagedSupervisor:
    return ManagedSupervisor(root, programs, **kw).start()


@pytest.fixture
def sup(tmp_path: Path) -> Iterator[ManagedSupervisor]:
    managed = start(tmp_path / "sup")
    yield managed
    managed.stop()
    assert managed.leftovers() == []


@pytest.fixture
async def pack(sup: ManagedSupervisor) -> AsyncIterator[Pack]:
    built = build(PackConfig(supervisor_url=sup.url))
    yield built
    for close in built.closers:
        await close()


def tool(pack: Pack, name: str) -> Tool:
    return next(t for t in pack.tools if t.name == name)


async def call(pack: Pack, tool_name: str, /, *, dry_run: bool = False, **args: Any) -> str:
    """Through the argument model and ``execute``, as the agent core calls it."""
    chosen = tool(pack, tool_name)
    model = chosen.args_model.model_validate(args)
    ctx = CallContext(job_id="C1:1.1:j1", call_id="call_1", dry_run=dry_run)
    result = await chosen.execute(model, ctx)
    assert isinstance(result, str)
    return result


def pid_of(sup: ManagedSupervisor, name: str) -> int:
    return int(sup.info(name)["pid"])


def state_of(sup: ManagedSupervisor, name: str) -> str:
    return str(sup.info(name)["statename"])


# -- configuration and contract ----------------------------------------------------


@pytest.mark.parametrize("url", [None, "", "  "])
def test_missing_url_is_a_config_error(url: str | None) -> None:
    with pytest.raises(ConfigError) as caught:
        build(PackConfig(supervisor_url=url))
    assert str(caught.value) == "SUPERVISOR_URL is required for the supervisor pack"


def test_missing_url_through_load_packs() -> None:
    with pytest.raises(ConfigError, match="SUPERVISOR_URL is required"):
        load_packs(["supervisor"], PackConfig())


@pytest.mark.parametrize("url", ["ftp://host:9001", "unix://", "http://", "http://h:99999"])
def test_a_bad_url_is_a_config_error(url: str) -> None:
    with pytest.raises(ConfigError, match="SUPERVISOR_URL"):
        build(PackConfig(supervisor_url=url))


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://h:9001", "http://h:9001/RPC2"),
        ("http://h:9001/", "http://h:9001/RPC2"),
        ("http://h:9001/RPC2", "http://h:9001/RPC2"),
        ("http://h:9001/RPC2/", "http://h:9001/RPC2"),
        ("https://h/sup/RPC2", "https://h/sup/RPC2"),
    ],
)
def test_url_forms(url: str, expected: str) -> None:
    assert parse_url(url).url == expected
    assert parse_url(url).auth is None


def test_credentials_leave_the_url() -> None:
    endpoint = parse_url("http://ops:s%40cret@h:9001/RPC2")
    assert endpoint.auth == ("ops", "s@cret")
    assert "cret" not in endpoint.url and "cret" not in endpoint.shown
    unix = parse_url("unix://ops:pw@/run/supervisor.sock")
    assert unix.uds == "/run/supervisor.sock" and unix.auth == ("ops", "pw")


async def test_tools_names_categories_and_arguments() -> None:
    built = load_packs(["supervisor"], PackConfig(supervisor_url="http://127.0.0.1:9/"))[
        "supervisor"
    ]
    try:
        by_name = {t.name: t for t in built.tools}
        assert {n: t.category for n, t in by_name.items()} == {
            "supervisor_status": "read_only",
            "supervisor_restart": "mutating",
            "supervisor_stop": "destructive",
        }
        assert by_name["supervisor_status"].parallel
        for name, required in [
            ("supervisor_status", []),
            ("supervisor_restart", ["name"]),
            ("supervisor_stop", ["name"]),
        ]:
            schema = by_name[name].args_model.model_json_schema()
            assert list(schema["properties"]) == ["name"]  # no ctx, no confirmed_by
            assert schema.get("required", []) == required
            assert schema["properties"]["name"].get("description")
    finally:
        for close in built.closers:
            await close()


@pytest.mark.parametrize("bad", ["", "web; rm -rf /", "a b", "a:b:c", "x" * 201, "web\n"])
def test_a_malformed_name_is_refused_before_any_call(bad: str) -> None:
    built = make_tools(SupervisorClient("http://127.0.0.1:9/"))
    for chosen in built.tools:
        with pytest.raises(ValidationError):
            chosen.args_model.model_validate({"name": bad})


async def test_the_closer_closes_the_client() -> None:
    client = SupervisorClient("http://127.0.0.1:9/")
    built = make_tools(client)
    assert not client.closed
    for close in built.closers:
        await close()
    assert client.closed


# -- status ---------------------------------------------------------------------------


async def test_status_of_every_program(sup: ManagedSupervisor, pack: Pack) -> None:
    text = await call(pack, "supervisor_status")
    lines = text.splitlines()
    assert lines[0] == "5 programs: 1 EXITED, 1 STOPPED, 3 RUNNING"
    by_label = {line.split()[0]: line for line in lines[1:]}
    assert set(by_label) == {"web", "worker:worker_00", "worker:worker_01", "batch", "idle"}
    assert f"RUNNING  pid {pid_of(sup, 'web')}, uptime " in by_label["web"]
    assert f"pid {pid_of(sup, 'worker:worker_01')}," in by_label["worker:worker_01"]
    assert "EXITED   exit 3 (unexpected)" in by_label["batch"]
    assert "STOPPED  Not started" in by_label["idle"]
    # What needs attention comes first, so a cut-off output still shows it.
    assert [line.split()[0] for line in lines[1:3]] == ["batch", "idle"]


@pytest.mark.parametrize(
    ("name", "labels"),
    [
        ("web", ["web"]),
        ("worker", ["worker:worker_00", "worker:worker_01"]),
        ("worker:*", ["worker:worker_00", "worker:worker_01"]),
        ("worker:worker_01", ["worker:worker_01"]),
        ("worker_01", ["worker:worker_01"]),  # a unique bare process name
        ("web:web", ["web"]),
    ],
)
async def test_status_of_one_program_or_group(
    sup: ManagedSupervisor, pack: Pack, name: str, labels: list[str]
) -> None:
    text = await call(pack, "supervisor_status", name=name)
    lines = text.splitlines()
    assert [line.split()[0] for line in lines[1:]] == labels
    assert lines[0].startswith(f"{len(labels)} program")


async def test_status_over_a_unix_socket(tmp_path: Path) -> None:
    with ManagedSupervisor(tmp_path / "u", PROGRAMS[:1], unix_socket=True) as sup:
        built = build(PackConfig(supervisor_url=sup.unix_url))
        try:
            text = await call(built, "supervisor_status", name="web")
        finally:
            for close in built.closers:
                await close()
        assert f"pid {pid_of(sup, 'web')}," in text


@pytest.mark.parametrize("suffix", ["", "/", "/RPC2"])
async def test_status_with_or_without_the_rpc2_path(sup: ManagedSupervisor, suffix: str) -> None:
    url = f"http://127.0.0.1:{sup.port}{suffix}"
    built = build(PackConfig(supervisor_url=url))
    try:
        assert "RUNNING" in await call(built, "supervisor_status", name="web")
    finally:
        for close in built.closers:
            await close()


async def test_status_shows_why_a_crash_looping_program_fails(tmp_path: Path) -> None:
    crashy = Program(
        "crashy",
        script="import os\nprint('worker starting', flush=True)\nos.environ['DATABASE_URL']\n",
        # Restarted once after exiting "too quickly", then given up on: FATAL.
        options={"autorestart": "true", "startsecs": "3", "startretries": "1"},
        settles_as="FATAL",
    )
    with ManagedSupervisor(tmp_path / "loop", (Program("web"), crashy)) as sup:
        built = build(PackConfig(supervisor_url=sup.url))
        try:
            every = await call(built, "supervisor_status")
            one = await call(built, "supervisor_status", name="crashy")
        finally:
            for close in built.closers:
                await close()
    lines = every.splitlines()
    assert lines[0] == "2 programs: 1 FATAL, 1 RUNNING"
    assert lines[1] == "crashy  FATAL    Exited too quickly (process log may have details)"
    # Its stderr says why, right under it; the RUNNING program comes last.
    assert lines[2] == "    log: os.environ['DATABASE_URL']", every
    assert lines[3].startswith('    log: File "<frozen os>", line '), every
    assert lines[4] == "    log: KeyError: 'DATABASE_URL'", every
    assert lines[5].startswith("web     RUNNING  pid ") and len(lines) == 6, every
    assert one.splitlines() == [
        "1 program: 1 FATAL",
        "crashy  FATAL  Exited too quickly (process log may have details)",
        *lines[2:5],
    ]


# -- restart --------------------------------------------------------------------------


async def test_restart_changes_the_pid(sup: ManagedSupervisor, pack: Pack) -> None:
    old = pid_of(sup, "web")
    text = await call(pack, "supervisor_restart", name="web")
    new = pid_of(sup, "web")
    assert new != old
    assert state_of(sup, "web") == "RUNNING"
    assert not alive(old)
    assert text == f"Restarted web: pid {old} → {new}, RUNNING → RUNNING"


async def test_restart_starts_a_stopped_program(sup: ManagedSupervisor, pack: Pack) -> None:
    text = await call(pack, "supervisor_restart", name="idle")
    assert state_of(sup, "idle") == "RUNNING"
    assert text == f"Restarted idle: pid none → {pid_of(sup, 'idle')}, STOPPED → RUNNING"


async def test_restart_a_group_restarts_every_member(sup: ManagedSupervisor, pack: Pack) -> None:
    names = ["worker:worker_00", "worker:worker_01"]
    old = {n: pid_of(sup, n) for n in names}
    text = await call(pack, "supervisor_restart", name="worker")
    new = {n: pid_of(sup, n) for n in names}
    assert text.splitlines()[0] == "Restarted group worker (2 processes):"
    for n in names:
        assert new[n] != old[n]
        assert f"{n}: pid {old[n]} → {new[n]}, RUNNING → RUNNING" in text


async def test_restart_reports_a_program_that_dies_while_starting(tmp_path: Path) -> None:
    crashy = Program(
        "crashy",
        script="import sys\nprint('boom: /etc/crashy.conf is missing', file=sys.stderr)\n"
        "sys.exit(2)\n",
        options={"autostart": "false", "startsecs": "30"},  # it never gets that far
    )
    with ManagedSupervisor(tmp_path / "c", (crashy,)) as sup:
        built = build(PackConfig(supervisor_url=sup.url))
        try:
            with pytest.raises(ToolError) as caught:
                await call(built, "supervisor_restart", name="crashy")
        finally:
            for close in built.closers:
                await close()
    message = str(caught.value)
    assert message.startswith("crashy did not start: it failed to start. Now FATAL, ")
    assert "Exited too quickly" in message  # supervisord's own words
    assert "boom: /etc/crashy.conf is missing" in message  # the tail of its log


async def test_restart_reports_a_program_that_does_not_come_back(tmp_path: Path) -> None:
    marker = tmp_path / "started-once"
    flaky = Program(
        "flaky",
        script=f"""\
            import pathlib, sys, time
            marker = pathlib.Path({str(marker)!r})
            if marker.exists():
                sys.exit("flaky: port 8080 already in use")
            marker.touch()
            time.sleep(3600)
            """,
        # An exit within 3 s is "too quickly" even on a loaded machine (with 1 s, a slow
        # interpreter start counted as started, then EXITED); no retries: FATAL at once.
        options={"startsecs": "3", "startretries": "0"},
        settles_as="RUNNING",
    )
    with ManagedSupervisor(tmp_path / "f", (flaky,)) as sup:
        old = pid_of(sup, "flaky")
        built = build(PackConfig(supervisor_url=sup.url))
        try:
            with pytest.raises(ToolError) as caught:
                await call(built, "supervisor_restart", name="flaky")
        finally:
            for close in built.closers:
                await close()
        assert state_of(sup, "flaky") == "FATAL" and not alive(old)
    message = str(caught.value)
    assert message.startswith("flaky was stopped but did not start again: it failed to start.")
    assert "flaky: port 8080 already in use" in message


async def test_restart_reports_a_missing_command(tmp_path: Path) -> None:
    gone = Program("gone", command="/nonexistent/bin/gone", options={"autostart": "false"})
    with ManagedSupervisor(tmp_path / "g", (gone,)) as sup:
        built = build(PackConfig(supervisor_url=sup.url))
        try:
            with pytest.raises(ToolError, match="its command was not found.*/nonexistent/bin"):
                await call(built, "supervisor_restart", name="gone")
        finally:
            for close in built.closers:
                await close()


# -- stop -----------------------------------------------------------------------------


async def test_stop_dry_run_stops_nothing_and_says_what_would_stop(
    sup: ManagedSupervisor, pack: Pack
) -> None:
    pid = pid_of(sup, "web")
    text = await call(pack, "supervisor_stop", name="web", dry_run=True)
    assert text.startswith(f"Dry run, nothing stopped: would stop web (RUNNING: pid {pid}, uptime ")
    assert state_of(sup, "web") == "RUNNING"
    assert pid_of(sup, "web") == pid and alive(pid)


async def test_stop_dry_run_of_a_group_lists_its_members(
    sup: ManagedSupervisor, pack: Pack
) -> None:
    pids = [pid_of(sup, f"worker:worker_0{i}") for i in range(2)]
    text = await call(pack, "supervisor_stop", name="worker", dry_run=True)
    lines = text.splitlines()
    assert lines[0] == (
        "Dry run, nothing stopped: would stop group worker, 2 of 2 processes running:"
    )
    for i, pid in enumerate(pids):
        assert f"worker:worker_0{i}" in lines[1 + i] and f"pid {pid}, uptime" in lines[1 + i]
        assert alive(pid)
    assert [state_of(sup, f"worker:worker_0{i}") for i in range(2)] == ["RUNNING", "RUNNING"]


async def test_stop_stops(sup: ManagedSupervisor, pack: Pack) -> None:
    pid = pid_of(sup, "web")
    text = await call(pack, "supervisor_stop", name="web")
    assert state_of(sup, "web") == "STOPPED"
    assert not alive(pid)
    assert text.startswith(f"Stopped web (was RUNNING: pid {pid}, uptime ")
    assert text.endswith("now STOPPED")


async def test_stop_a_group_stops_every_member(sup: ManagedSupervisor, pack: Pack) -> None:
    pids = [pid_of(sup, f"worker:worker_0{i}") for i in range(2)]
    text = await call(pack, "supervisor_stop", name="worker:*")
    assert text.splitlines()[0] == "Stopped group worker (2 of 2 were running):"
    assert [state_of(sup, f"worker:worker_0{i}") for i in range(2)] == ["STOPPED", "STOPPED"]
    assert not any(alive(pid) for pid in pids)
    assert state_of(sup, "web") == "RUNNING"  # nothing else


@pytest.mark.parametrize("dry_run", [True, False])
async def test_stopping_what_is_not_running_is_an_error(
    sup: ManagedSupervisor, pack: Pack, dry_run: bool
) -> None:
    # Also in the dry run: the core then asks nobody to approve a no-op.
    with pytest.raises(ToolError, match=r"^idle is not running \(STOPPED, Not started\)"):
        await call(pack, "supervisor_stop", name="idle", dry_run=dry_run)


# -- errors ---------------------------------------------------------------------------


TOOL_NAMES = ["supervisor_status", "supervisor_restart", "supervisor_stop"]


@pytest.mark.parametrize("tool_name", TOOL_NAMES)
async def test_an_unknown_name_lists_the_known_ones(
    sup: ManagedSupervisor, pack: Pack, tool_name: str
) -> None:
    with pytest.raises(ToolError) as caught:
        await call(pack, tool_name, name="wbe")
    assert str(caught.value) == (
        "no program named 'wbe'; known: batch, idle, web, worker, worker:worker_00, "
        "worker:worker_01. Did you mean 'web'?"
    )
    assert state_of(sup, "web") == "RUNNING"


def test_the_known_names_in_the_error_are_bounded() -> None:
    known = [f"program_{i:03d}" for i in range(500)]
    message = unknown_name("nothing-like-it", known)
    assert f"program_{KNOWN_NAMES_SHOWN - 1:03d}" in message
    assert f"program_{KNOWN_NAMES_SHOWN:03d}" not in message
    assert f"and {500 - KNOWN_NAMES_SHOWN} more" in message
    assert len(message) < 600


async def test_supervisor_faults_become_readable_errors(sup: ManagedSupervisor) -> None:
    client = SupervisorClient(sup.url)
    try:
        with pytest.raises(SupervisorFault) as caught:
            await client.call("supervisor.startProcess", "web:web", False)
        assert caught.value.name == "ALREADY_STARTED"
        assert str(caught.value) == "supervisor: ALREADY_STARTED: web:web"
        with pytest.raises(SupervisorFault) as caught:
            await client.call("supervisor.stopProcess", "idle:idle", False)
        assert caught.value.name == "NOT_RUNNING"
        with pytest.raises(SupervisorFault) as caught:
            await client.call("supervisor.getProcessInfo", "nope")
        assert caught.value.name == "BAD_NAME"
        assert isinstance(caught.value, ToolError)
    finally:
        await client.aclose()


async def test_backend_down_is_a_clear_error(tmp_path: Path) -> None:
    sup = start(tmp_path / "down")
    pids = [pid_of(sup, n) for n in ("web", "worker:worker_00", "worker:worker_01")]
    built = build(PackConfig(supervisor_url=sup.url))
    try:
        assert "RUNNING" in await call(built, "supervisor_status")
        sup.stop()
        assert sup.leftovers() == [] and not any(alive(pid) for pid in pids)
        calls: list[tuple[str, dict[str, Any]]] = [
            ("supervisor_status", {}),
            ("supervisor_restart", {"name": "web"}),
            ("supervisor_stop", {"name": "web"}),
        ]
        for name, args in calls:
            with pytest.raises(ToolError) as caught:
                await call(built, name, **args)
            assert str(caught.value) == (
                f"supervisor at http://127.0.0.1:{sup.port}/RPC2 is unreachable: Connection refused"
            )
    finally:
        for close in built.closers:
            await close()


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@contextlib.asynccontextmanager
async def fake_server(handler: Handler) -> AsyncIterator[str]:
    """A loopback TCP server running ``handler`` per connection; yields its URL. At the
    end every handler is finished and every connection closed."""
    tasks: set[asyncio.Task[Any]] = set()
    writers: list[asyncio.StreamWriter] = []

    async def run(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        tasks.add(task)
        writers.append(writer)
        try:
            await handler(reader, writer)
        finally:
            writer.close()

    server = await asyncio.start_server(run, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for writer in writers:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        await server.wait_closed()


async def _silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Accepts a request and never answers it."""
    await reader.read()  # until the client gives up and closes


async def test_a_slow_backend_is_a_clear_error() -> None:
    async with fake_server(_silent) as url:
        client = SupervisorClient(url, status_timeout=0.2, action_timeout=0.3)
        try:
            with pytest.raises(ToolError) as caught:
                await call(make_tools(client), "supervisor_status")
        finally:
            await client.aclose()
    assert str(caught.value) == (
        f"supervisor at {url}/RPC2 did not answer supervisor.getAllProcessInfo within 0.2s"
    )


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (b"200 OK", "not an XML-RPC answer to supervisor.getAllProcessInfo"),
        (b"404 Not Found", "answered HTTP 404 to supervisor.getAllProcessInfo"),
    ],
)
async def test_something_else_than_supervisord_is_a_clear_error(
    status: bytes, expected: str
) -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        body = b"<html>hello</html>"
        writer.write(b"HTTP/1.1 %s\r\nContent-Length: %d\r\n\r\n%s" % (status, len(body), body))
        await writer.drain()

    async with fake_server(answer) as url:
        client = SupervisorClient(url)
        try:
            with pytest.raises(ToolError, match=expected):
                await call(make_tools(client), "supervisor_status")
        finally:
            await client.aclose()


async def test_every_call_opens_its_own_connection() -> None:
    """Keep-alive costs ~40 ms a call against supervisord (Nagle on its side, delayed
    ACK on ours, for any answer over 4 KiB): the client must not reuse connections."""
    connections = 0
    answer = xmlrpc.client.dumps(([],), methodresponse=True).encode()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        while True:  # HTTP/1.1: as many requests as the client sends on this connection
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                return
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(answer) + answer)
            await writer.drain()

    async with fake_server(serve) as url:
        client = SupervisorClient(url)
        try:
            for _ in range(3):
                assert await client.call("supervisor.getAllProcessInfo") == []
        finally:
            await client.aclose()
    assert connections == 3


async def test_basic_auth_from_the_url(tmp_path: Path) -> None:
    with ManagedSupervisor(tmp_path / "a", PROGRAMS[:1], auth=("ops", "s3cret-pw")) as sup:
        good = build(PackConfig(supervisor_url=sup.url))
        none = build(PackConfig(supervisor_url=f"http://127.0.0.1:{sup.port}/RPC2"))
        wrong = build(PackConfig(supervisor_url=f"http://ops:nope@127.0.0.1:{sup.port}"))
        try:
            assert "RUNNING" in await call(good, "supervisor_status", name="web")
            for refused in (none, wrong):
                with pytest.raises(ToolError) as caught:
                    await call(refused, "supervisor_status")
                message = str(caught.value)
                assert "refused the credentials (HTTP 401)" in message
                assert "s3cret" not in message and "nope" not in message
        finally:
            for built in (good, none, wrong):
                for close in built.closers:
                    await close()

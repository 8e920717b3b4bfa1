"""``kind: http`` tools against a real aiohttp server on 127.0.0.1.

The fetcher's policy allows ``127.0.0.1`` only (loopback is reachable only through an
allowlist). The server records every request it receives, so "refused" also means
"the server saw nothing". Names other than IP literals are resolved by ``FakeDNS``.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import re
import socket
import ssl
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from bot.agent import CallContext, ToolMessage, run
from bot.agent.testing import ScriptedModel, call, calls, text
from bot.errors import ToolError
from tools.http import HttpFetcher, HttpTool, make_client
from tools.netpolicy import AddressPolicy
from tools.spec import HttpRequestSpec, HttpToolSpec, ParamSpec

from ..agent.conftest import make_config
from .test_netpolicy import FakeDNS

STATUS_LINE = re.compile(r"^HTTP (\d{3}) ([^\n]*) in \d+ ms$")
DATA = {"data": {"items": [{"name": "web-01", "up": True}, {"name": "web-02", "up": False}]}}


@dataclass
class Seen:
    method: str
    raw_path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes


@dataclass
class LocalServer:
    """What the server saw; ``release`` lets the slow handler finish."""

    base: str = ""
    port: int = 0
    seen: list[Seen] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    stopped_streaming: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def paths(self) -> list[str]:
        return [s.raw_path for s in self.seen]


def make_app(server: LocalServer) -> web.Application:
    @web.middleware
    async def record(request: web.Request, handler: Any) -> web.StreamResponse:
        server.seen.append(
            Seen(
                method=request.method,
                raw_path=request.raw_path,
                query=dict(request.query),
                headers=dict(request.headers),
                body=await request.read(),
            )
        )
        response: web.StreamResponse = await handler(request)
        return response

    async def echo(request: web.Request) -> web.Response:
        seen = server.seen[-1]
        body = json.loads(seen.body) if seen.body else None
        return web.json_response({"method": request.method, "path": request.raw_path, "json": body})

    async def data(request: web.Request) -> web.Response:
        return web.json_response(DATA)

    async def plain(request: web.Request) -> web.Response:
        return web.Response(text="all good\n")

    async def latin1(request: web.Request) -> web.Response:
        return web.Response(
            body="café".encode("latin-1"), content_type="text/plain", charset="iso-8859-1"
        )

    async def broken_utf8(request: web.Request) -> web.Response:
        return web.Response(body=b"ok \xff\xfe end", content_type="text/plain")

    async def fail(request: web.Request) -> web.Response:
        return web.json_response({"error": "database is down"}, status=500)

    async def redirect(request: web.Request) -> web.Response:
        status = int(request.query.get("status", "302"))
        return web.Response(status=status, headers={"Location": request.query["to"]})

    async def loop(request: web.Request) -> web.Response:
        return web.Response(status=302, headers={"Location": "/loop"})

    async def endless(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "text/plain"})
        await response.prepare(request)
        chunk = b"x" * 65536
        try:
            while True:
                await response.write(chunk)
        except (ConnectionError, RuntimeError):
            server.stopped_streaming.set()  # the client went away
        return response

    async def slow(request: web.Request) -> web.Response:
        await server.release.wait()
        return web.Response(text="late")

    app = web.Application(middlewares=[record])
    app.router.add_route("*", "/echo{tail:.*}", echo)
    app.router.add_get("/data", data)
    app.router.add_get("/text", plain)
    app.router.add_get("/latin1", latin1)
    app.router.add_get("/broken-utf8", broken_utf8)
    app.router.add_get("/fail", fail)
    app.router.add_route("*", "/redirect", redirect)
    app.router.add_get("/loop", loop)
    app.router.add_get("/endless", endless)
    app.router.add_get("/slow", slow)
    return app


async def start(app: web.Application, ssl_context: ssl.SSLContext | None = None) -> web.AppRunner:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ssl_context).start()
    return runner


@pytest.fixture
async def server() -> AsyncIterator[LocalServer]:
    state = LocalServer()
    runner = await start(make_app(state))
    state.port = runner.addresses[0][1]
    state.base = f"http://127.0.0.1:{state.port}"
    yield state
    state.release.set()
    await runner.cleanup()


@pytest.fixture
def dns() -> FakeDNS:
    return FakeDNS({"api.test": ["127.0.0.1"], "evil.test": ["169.254.169.254"]})


@pytest.fixture
async def fetcher(dns: FakeDNS) -> AsyncIterator[HttpFetcher]:
    http = HttpFetcher(AddressPolicy(["127.0.0.1"], resolver=dns))
    yield http
    await http.aclose()


def http_tool(
    fetcher: HttpFetcher,
    url: str,
    *,
    params: dict[str, dict[str, Any]] | None = None,
    method: str = "GET",
    headers: dict[str, str] | None = None,
    body: Any = None,
    select: str | None = None,
    timeout: float = 10.0,
    name: str = "probe",
) -> HttpTool:
    spec = HttpToolSpec.model_validate(
        {
            "name": name,
            "description": "Probe a service",
            "kind": "http",
            "timeout": timeout,
            "params": {k: ParamSpec.model_validate(v) for k, v in (params or {}).items()},
            "request": HttpRequestSpec.model_validate(
                {
                    "method": method,
                    "url": url,
                    "headers": headers or {},
                    "body": body,
                    "select": select,
                }
            ),
        }
    )
    return HttpTool(spec, source="tests", fetcher=fetcher)


async def execute(tool: HttpTool, *, dry_run: bool = False, **arguments: Any) -> str:
    args = tool.args_model.model_validate(arguments)
    return await tool.execute(args, CallContext(job_id="job-1", call_id="c1", dry_run=dry_run))


async def refused(tool: HttpTool, **arguments: Any) -> str:
    with pytest.raises(ToolError) as caught:
        await execute(tool, **arguments)
    return str(caught.value)


def split(result: str) -> tuple[int, str, str]:
    """(status, reason, the rest) of a result."""
    first, _, rest = result.partition("\n")
    match = STATUS_LINE.match(first)
    assert match, f"not a status line: {first!r}"
    return int(match[1]), match[2], rest


STRING = {"type": "string", "description": "any text"}


# -- templating ----------------------------------------------------------------------


async def test_placeholders_inside_a_url_stay_inside_their_segment(
    server: LocalServer, fetcher: HttpFetcher
) -> None:
    tool = http_tool(
        fetcher, server.base + "/echo/files/{name}/meta?q={q}", params={"name": STRING, "q": STRING}
    )
    result = await execute(tool, name="a/../b?c#d", q="x&y=1#z")

    assert server.paths == ["/echo/files/a%2F..%2Fb%3Fc%23d/meta?q=x%26y%3D1%23z"]
    assert server.seen[0].query == {"q": "x&y=1#z"}
    status, _, rest = split(result)
    assert status == 200
    assert json.loads(rest)["path"] == server.paths[0]


async def test_dot_segments_cannot_climb_the_path(
    server: LocalServer, fetcher: HttpFetcher
) -> None:
    tool = http_tool(
        fetcher,
        server.base + "/echo/users/{user}/profile?q={q}",
        params={"user": STRING, "q": STRING},
    )
    assert "'..' is not allowed in a URL path" in await refused(tool, user="..", q="x")
    assert "'.' is not allowed in a URL path" in await refused(tool, user=".", q="x")
    assert server.seen == []
    await execute(tool, user="..x", q="..")  # a dot-dot value is fine in a query
    assert server.paths == ["/echo/users/..x/profile?q=.."]


async def test_a_whole_url_placeholder_is_inserted_as_validated(
    server: LocalServer, fetcher: HttpFetcher
) -> None:
    tool = http_tool(fetcher, "{url}", params={"url": {"type": "string", "pattern": "^https?://"}})
    status, _, _ = split(await execute(tool, url=server.base + "/echo/a/b?x=1&y=%2F"))
    assert status == 200
    assert server.paths == ["/echo/a/b?x=1&y=%2F"]


async def test_headers_are_templated(server: LocalServer, fetcher: HttpFetcher) -> None:
    tool = http_tool(
        fetcher,
        server.base + "/echo/h",
        params={"service": STRING, "verbose": {"type": "boolean", "default": False}},
        headers={"X-Service": "svc={service}", "X-Verbose": "{verbose}", "Accept": "text/plain"},
    )
    await execute(tool, service="web-01 (eu)", verbose=True)
    headers = server.seen[0].headers
    assert headers["X-Service"] == "svc=web-01 (eu)"
    assert headers["X-Verbose"] == "true"
    assert headers["Accept"] == "text/plain"
    assert headers["User-Agent"] == "opsloop"


async def test_the_call_context_is_a_template_variable(
    server: LocalServer, fetcher: HttpFetcher
) -> None:
    tool = http_tool(
        fetcher,
        server.base + "/echo/ctx",
        method="POST",
        headers={"Idempotency-Key": "{idempotency_key}"},
        body={"by": "{confirmed_by}"},
    )
    args = tool.args_model.model_validate({})
    ctx = CallContext(job_id="job-7", call_id="call_3", confirmed_by="U0123ABC")
    await tool.execute(args, ctx)
    assert server.seen[0].headers["Idempotency-Key"] == "job-7:call_3"
    assert json.loads(server.seen[0].body) == {"by": "U0123ABC"}


@pytest.mark.parametrize("value", ["abc\r\nX-Evil: 1", "abc\nX-Evil: 1", "abc\rX", "a\0b"])
async def test_header_injection_is_refused(
    server: LocalServer, fetcher: HttpFetcher, value: str
) -> None:
    tool = http_tool(
        fetcher, server.base + "/echo", params={"trace": STRING}, headers={"X-Trace": "{trace}"}
    )
    assert await refused(tool, trace=value) == (
        "header X-Trace: the value contains a line break or NUL; refused"
    )
    assert server.seen == []


async def test_json_body_keeps_types(server: LocalServer, fetcher: HttpFetcher) -> None:
    tool = http_tool(
        fetcher,
        server.base + "/echo/deploy",
        method="POST",
        params={
            "service": STRING,
            "replicas": {"type": "integer", "min": 1, "max": 10},
            "ratio": {"type": "number"},
            "force": {"type": "boolean"},
        },
        body={
            "service": "{service}",
            "replicas": "{replicas}",
            "spec": {"ratio": "{ratio}", "force": "{force}", "tags": ["{service}", "fixed", 7]},
            "note": "scale {service} to {replicas}",
            "literal": None,
        },
    )
    status, _, rest = split(await execute(tool, service="web", replicas=3, ratio=0.5, force=True))
    assert status == 200
    sent = json.loads(server.seen[0].body)
    assert sent == {
        "service": "web",
        "replicas": 3,
        "spec": {"ratio": 0.5, "force": True, "tags": ["web", "fixed", 7]},
        "note": "scale web to 3",
        "literal": None,
    }
    assert server.seen[0].headers["Content-Type"] == "application/json"
    assert json.loads(rest)["json"] == sent


# -- results -------------------------------------------------------------------------


async def test_json_is_pretty_printed_in_its_own_key_order(
    server: LocalServer, fetcher: HttpFetcher
) -> None:
    status, reason, rest = split(await execute(http_tool(fetcher, server.base + "/data")))
    assert (status, reason) == (200, "OK")
    assert rest == json.dumps(DATA, indent=2)


@pytest.mark.parametrize(
    ("select", "expected"),
    [
        ("data.items.1.name", '"web-02"'),
        ("data.items.-1.up", "false"),
        ("data.items.0", json.dumps({"name": "web-01", "up": True}, indent=2)),
    ],
)
async def test_select_picks_a_value(
    server: LocalServer, fetcher: HttpFetcher, select: str, expected: str
) -> None:
    _, _, rest = split(await execute(http_tool(fetcher, server.base + "/data", select=select)))
    assert rest == expected


@pytest.mark.parametrize(
    ("select", "note"),
    [
        ("data.items.5.name", "no index 5 at 'data.items' (a list of 2 items)"),
        ("data.nope", "no key 'nope' at 'data' (keys: items)"),
        ("data.items.first", "'data.items' is a list (2 items); 'first' is no index"),
        ("data.items.0.name.x", "'data.items.0.name' is a string, not an object or list"),
    ],
)
async def test_select_miss_is_a_note_not_an_error(
    server: LocalServer, fetcher: HttpFetcher, select: str, note: str
) -> None:
    _, _, rest = split(await execute(http_tool(fetcher, server.base + "/data", select=select)))
    assert rest == f"select {select!r}: {note}"


async def test_text_bodies_are_text(server: LocalServer, fetcher: HttpFetcher) -> None:
    assert split(await execute(http_tool(fetcher, server.base + "/text")))[2] == "all good\n"
    assert split(await execute(http_tool(fetcher, server.base + "/latin1")))[2] == "café"
    assert split(await execute(http_tool(fetcher, server.base + "/broken-utf8")))[2] == (
        "ok \ufffd\ufffd end"
    )
    _, _, rest = split(await execute(http_tool(fetcher, server.base + "/text", select="a")))
    assert rest == "select 'a': the body is not JSON\nall good\n"


async def test_a_500_is_an_observation(server: LocalServer, fetcher: HttpFetcher) -> None:
    status, reason, rest = split(await execute(http_tool(fetcher, server.base + "/fail")))
    assert (status, reason) == (500, "Internal Server Error")
    assert json.loads(rest) == {"error": "database is down"}


async def test_head_sends_and_shows_no_body(server: LocalServer, fetcher: HttpFetcher) -> None:
    result = await execute(
        http_tool(fetcher, server.base + "/echo/h", method="HEAD", body={"ignored": True})
    )
    assert split(result)[:2] == (200, "OK") and "\n" not in result
    assert [(s.method, s.body) for s in server.seen] == [("HEAD", b"")]


async def test_an_endless_body_is_cut_at_the_bound(server: LocalServer, dns: FakeDNS) -> None:
    small = HttpFetcher(AddressPolicy(["127.0.0.1"], resolver=dns), max_body_bytes=100_000)
    try:
        result = await execute(http_tool(small, server.base + "/endless"))
    finally:
        await small.aclose()
    _, _, rest = split(result)
    assert rest == "x" * 100_000 + "\n[body cut at 100000 bytes]"
    await asyncio.wait_for(server.stopped_streaming.wait(), 10)  # the connection was dropped


# -- redirects -----------------------------------------------------------------------


async def test_a_redirect_is_followed(server: LocalServer, fetcher: HttpFetcher) -> None:
    tool = http_tool(fetcher, server.base + "/redirect?to=/echo/landed")
    status, _, rest = split(await execute(tool))
    assert status == 200
    assert rest.startswith(f"Redirected to {server.base}/echo/landed\n")
    assert server.paths == ["/redirect?to=/echo/landed", "/echo/landed"]


async def test_303_turns_a_post_into_a_get_without_body(
    server: LocalServer, fetcher: HttpFetcher
) -> None:
    tool = http_tool(
        fetcher, server.base + "/redirect?status=303&to=/echo/done", method="POST", body={"a": 1}
    )
    await execute(tool)
    assert [(s.method, s.body) for s in server.seen] == [("POST", b'{"a":1}'), ("GET", b"")]


async def test_307_keeps_method_and_body(server: LocalServer, fetcher: HttpFetcher) -> None:
    tool = http_tool(
        fetcher, server.base + "/redirect?status=307&to=/echo/done", method="PUT", body={"a": 1}
    )
    await execute(tool)
    assert [(s.method, s.body) for s in server.seen] == [("PUT", b'{"a":1}'), ("PUT", b'{"a":1}')]


async def test_credentials_are_not_sent_to_another_origin(
    server: LocalServer, fetcher: HttpFetcher
) -> None:
    # api.test resolves to 127.0.0.1 (allowed by address): the same server, another origin.
    elsewhere = f"http://api.test:{server.port}/echo/elsewhere"
    tool = http_tool(
        fetcher,
        server.base + f"/redirect?to={elsewhere}",
        headers={"Authorization": "Bearer s3cret", "X-Keep": "yes"},
    )
    await execute(tool)
    first, second = server.seen
    assert first.headers["Authorization"] == "Bearer s3cret"
    assert "Authorization" not in second.headers and second.headers["X-Keep"] == "yes"
    assert second.headers["Host"] == f"api.test:{server.port}"


@pytest.mark.parametrize(
    ("to", "message"),
    [
        (
            "http://169.254.169.254/latest/meta-data/",
            "refused: 169.254.169.254 is a cloud metadata address (a redirect from ",
        ),
        ("http://evil.test/", "refused: evil.test resolves to 169.254.169.254, a cloud metadata"),
        ("http://127.0.0.2:{port}/echo", "refused: 127.0.0.2 is not in OPSLOOP_HTTP_ALLOW"),
        ("http://[::1]:{port}/echo", "refused: ::1 is not in OPSLOOP_HTTP_ALLOW"),
        ("file:///etc/passwd", "refused: scheme 'file' is not allowed"),
        ("gopher://127.0.0.1:{port}/_x", "refused: scheme 'gopher' is not allowed"),
    ],
)
async def test_every_redirect_is_checked_again(
    server: LocalServer, fetcher: HttpFetcher, to: str, message: str
) -> None:
    tool = http_tool(fetcher, "{url}", params={"url": STRING})
    location = to.format(port=server.port)
    start_url = f"{server.base}/redirect?to={location}"
    assert message in await refused(tool, url=start_url)
    assert len(server.seen) == 1  # only the redirecting request reached the server


async def test_redirects_are_bounded(server: LocalServer, fetcher: HttpFetcher) -> None:
    message = await refused(http_tool(fetcher, server.base + "/loop"))
    assert message.startswith("more than 5 redirects from ")
    assert server.paths == ["/loop"] * 6


# -- failures ------------------------------------------------------------------------


async def test_a_timeout_is_an_error(server: LocalServer, fetcher: HttpFetcher) -> None:
    message = await refused(http_tool(fetcher, server.base + "/slow", timeout=0.2))
    assert message.startswith("timed out after 0.2s")
    assert message.endswith(f"GET {server.base}/slow")


async def test_connection_refused_is_an_error(fetcher: HttpFetcher) -> None:
    with socket.socket() as bound:  # bound, not listening: connections are refused
        bound.bind(("127.0.0.1", 0))
        port = bound.getsockname()[1]
        message = await refused(http_tool(fetcher, f"http://127.0.0.1:{port}/"))
    assert message.startswith(f"cannot connect to 127.0.0.1:{port}: ")


async def test_a_name_that_does_not_resolve_is_an_error(fetcher: HttpFetcher) -> None:
    message = await refused(http_tool(fetcher, "http://nowhere.test/"))
    assert message == "cannot resolve nowhere.test: Name or service not known"


# -- the policy where it cannot be raced ---------------------------------------------


async def test_connections_go_to_the_checked_address(server: LocalServer, dns: FakeDNS) -> None:
    # api.test exists only in FakeDNS: the request can only arrive if the client
    # connected to the address the policy checked.
    http = HttpFetcher(AddressPolicy(["api.test"], resolver=dns))
    try:
        result = await execute(http_tool(http, f"http://api.test:{server.port}/echo/pinned"))
    finally:
        await http.aclose()
    assert split(result)[0] == 200
    assert server.seen[0].headers["Host"] == f"api.test:{server.port}"


async def test_dns_rebinding_is_refused_at_connect_time(server: LocalServer) -> None:
    # The first answer is public (the check passes); the second, asked when the
    # connection opens, is the metadata address.
    dns = FakeDNS({"rebind.test": ["93.184.216.34"]}, then={"rebind.test": ["169.254.169.254"]})
    http = HttpFetcher(AddressPolicy(resolver=dns))
    try:
        message = await refused(http_tool(http, "http://rebind.test/latest/meta-data/"))
    finally:
        await http.aclose()
    assert message == "refused: rebind.test resolves to 169.254.169.254, a cloud metadata address"
    assert dns.asked == ["rebind.test", "rebind.test"]


async def test_a_dry_run_sends_nothing(server: LocalServer, fetcher: HttpFetcher) -> None:
    tool = http_tool(
        fetcher,
        server.base + "/echo/pods/{pod}",
        method="DELETE",
        params={"pod": STRING},
        headers={"Authorization": "Bearer s3cret"},
        body={"grace": 0},
    )
    result = await execute(tool, dry_run=True, pod="web-1")
    assert result == (
        f"Dry run: would send DELETE {server.base}/echo/pods/web-1\n"
        "Headers: Authorization\n" + json.dumps({"grace": 0}, indent=2)
    )
    assert server.seen == []
    dangerous = http_tool(fetcher, "http://169.254.169.254/{pod}", params={"pod": STRING})
    with pytest.raises(ToolError, match="cloud metadata"):
        await execute(dangerous, dry_run=True, pod="x")


# -- TLS through the pinned connection -----------------------------------------------


@dataclass
class Certificates:
    ca: Path
    cert: Path
    key: Path


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Certificates]:
    """A throwaway CA and a server certificate for ``api.test``."""
    x509 = pytest.importorskip("cryptography.x509")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "opsloop test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "api.test")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("api.test")]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    folder = tmp_path_factory.mktemp("tls")
    paths = Certificates(ca=folder / "ca.pem", cert=folder / "cert.pem", key=folder / "key.pem")
    paths.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths.cert.write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    paths.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    yield paths


async def test_https_verifies_the_name_over_the_pinned_address(
    certificates: Certificates,
) -> None:
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(certificates.cert, certificates.key)
    state = LocalServer()
    runner = await start(make_app(state), ssl_context=server_tls)
    port = runner.addresses[0][1]
    client_tls = ssl.create_default_context(cafile=str(certificates.ca))
    dns = FakeDNS({"api.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]})
    policy = AddressPolicy(["api.test", "other.test"], resolver=dns)
    http = HttpFetcher(policy, client=make_client(policy, verify=client_tls))
    try:
        good = await http.fetch("GET", f"https://api.test:{port}/echo/tls", time_limit=10)
        assert good.status == 200
        assert good.peer_certificate is not None
        assert good.peer_certificate["subjectAltName"] == (("DNS", "api.test"),)
        # Same address, another name: the certificate does not cover it.
        with pytest.raises(ToolError, match="cannot connect to other.test.*certificate"):
            await http.fetch("GET", f"https://other.test:{port}/echo/tls", time_limit=10)
    finally:
        await http.client.aclose()
        await runner.cleanup()
    assert state.paths == ["/echo/tls"]


# -- through the agent core ----------------------------------------------------------


async def test_the_result_reaches_the_model(server: LocalServer, fetcher: HttpFetcher) -> None:
    tool = http_tool(
        fetcher,
        server.base + "/echo/status/{service}",
        params={"service": {"type": "string", "pattern": "^[a-z0-9-]+$", "description": "Unit"}},
        select="path",
        name="service_status",
    )
    model = ScriptedModel([calls(call("service_status", "c1", service="web-01")), text("fine")])
    result = await run(make_config(model, tools=[tool]))

    assert result.output == "fine", result.error
    seen = model.histories[1][-1]
    assert isinstance(seen, ToolMessage) and not seen.is_error
    status, _, rest = split(seen.content)
    assert status == 200 and rest == '"/echo/status/web-01"'
    assert server.paths == ["/echo/status/web-01"]


@pytest.mark.parametrize(
    ("url", "error"),
    [
        (
            "http://127.0.0.1:{port}/echo/secret",
            "Error: refused: 127.0.0.1 is a loopback address; only public hosts are allowed while "
            "OPSLOOP_HTTP_ALLOW is not set",
        ),
        (
            "http://evil.test/latest/meta-data/",
            "Error: refused: evil.test resolves to 169.254.169.254, a cloud metadata address",
        ),
        (
            "http://169.254.169.254/latest/meta-data/",
            "Error: refused: 169.254.169.254 is a cloud metadata address",
        ),
    ],
)
async def test_a_refused_host_is_an_error_result_and_nothing_is_sent(
    server: LocalServer, dns: FakeDNS, url: str, error: str
) -> None:
    public_only = HttpFetcher(AddressPolicy(resolver=dns))  # no allowlist: public hosts only
    tool = http_tool(public_only, "{url}", params={"url": STRING}, name="http_get")
    model = ScriptedModel(
        [calls(call("http_get", "c1", url=url.format(port=server.port))), text("refused")]
    )
    try:
        result = await run(make_config(model, tools=[tool]))
    finally:
        await public_only.aclose()

    assert result.output == "refused", result.error
    seen = model.histories[1][-1]
    assert isinstance(seen, ToolMessage) and seen.is_error
    assert seen.content == error
    assert server.seen == []


async def test_the_preview_names_the_request_without_header_values(
    server: LocalServer, fetcher: HttpFetcher
) -> None:
    tool = http_tool(
        fetcher,
        server.base + "/echo/pods/{pod}",
        method="DELETE",
        params={"pod": STRING},
        headers={"Authorization": "Bearer s3cret"},
        body={"grace": 0},
    )
    args = tool.args_model.model_validate({"pod": "web 1"})
    preview = tool.preview(args, CallContext(job_id="job-1", call_id="c1"))
    assert preview == (
        f"DELETE {server.base}/echo/pods/web%201\n"
        "Headers: Authorization\n" + json.dumps({"grace": 0}, indent=2)
    )
    assert server.seen == []  # nothing sent

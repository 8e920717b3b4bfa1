"""The ``http`` pack's ``http_check`` against real aiohttp servers on 127.0.0.1, plain
and TLS (certificates made here with ``cryptography``: self-signed, expired, and one
signed by a throwaway CA).

The server records every request it receives, so "refused" and "no HTTP request was
sent" also mean "the server saw nothing". Names are resolved by ``FakeDNS``.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import re
import socket
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from bot.agent import ToolMessage, run
from bot.agent.testing import ScriptedModel, call, calls, text
from bot.errors import ConfigError, ToolError
from tools.http import make_client
from tools.netpolicy import AddressPolicy
from tools.packs import PackConfig
from tools.packs import http as http_pack
from tools.packs.http import SNIPPET_CHARS, HttpChecker, parse_certificate

from ...agent.conftest import make_config
from ..test_netpolicy import FakeDNS

x509 = pytest.importorskip("cryptography.x509")
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.oid import NameOID  # noqa: E402

FIRST_LINE = re.compile(r"^GET (\S+) → HTTP (\d{3}) ([^\n]*?) in \d+ ms")
UTC = datetime.UTC


@dataclass
class Server:
    base: str = ""
    port: int = 0
    paths: list[str] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)


def make_app(server: Server) -> web.Application:
    @web.middleware
    async def record(request: web.Request, handler: Any) -> web.StreamResponse:
        server.paths.append(request.raw_path)
        response: web.StreamResponse = await handler(request)
        return response

    async def ok(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def fail(request: web.Request) -> web.Response:
        return web.Response(status=500, text="boom: database unreachable\n")

    async def redirect(request: web.Request) -> web.Response:
        raise web.HTTPMovedPermanently("/ok")

    async def away(request: web.Request) -> web.Response:
        raise web.HTTPFound("http://api.example.com/")

    async def metadata(request: web.Request) -> web.Response:
        raise web.HTTPFound("http://169.254.169.254/latest/meta-data/")

    async def loop(request: web.Request) -> web.Response:
        raise web.HTTPFound("/loop")

    async def slow(request: web.Request) -> web.Response:
        await server.release.wait()
        return web.Response(text="late")

    async def big(request: web.Request) -> web.Response:
        return web.Response(text="a" * (1 << 20))

    async def chunked(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "text/plain"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        for _ in range(64):
            await response.write(b"word " * 1000)
        await response.write_eof()
        return response

    async def binary(request: web.Request) -> web.Response:
        return web.Response(body=b"\x00\x01\x02" * 10, content_type="application/octet-stream")

    async def empty(request: web.Request) -> web.Response:
        return web.Response(status=204)

    async def busy(request: web.Request) -> web.Response:
        return web.Response(status=503, headers={"Retry-After": "120"}, text="overloaded")

    app = web.Application(middlewares=[record])
    for path, handler in {
        "/ok": ok,
        "/fail": fail,
        "/redirect": redirect,
        "/away": away,
        "/metadata": metadata,
        "/loop": loop,
        "/slow": slow,
        "/big": big,
        "/chunked": chunked,
        "/binary": binary,
        "/empty": empty,
        "/busy": busy,
    }.items():
        app.router.add_get(path, handler)
    return app


async def start(server: Server, ssl_context: ssl.SSLContext | None = None) -> web.AppRunner:
    runner = web.AppRunner(make_app(server), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ssl_context).start()
    server.port = runner.addresses[0][1]
    server.base = f"{'https' if ssl_context else 'http'}://127.0.0.1:{server.port}"
    return runner


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    state = Server()
    runner = await start(state)
    yield state
    state.release.set()
    await runner.cleanup()


@pytest.fixture
def dns() -> FakeDNS:
    return FakeDNS(
        {
            "api.test": ["127.0.0.1"],
            "other.test": ["127.0.0.1"],
            "api.example.com": ["93.184.216.34"],
        }
    )


@pytest.fixture
async def checker(dns: FakeDNS) -> AsyncIterator[HttpChecker]:
    check = HttpChecker(AddressPolicy(["127.0.0.1", "api.test"], resolver=dns))
    yield check
    await check.aclose()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- plain http ---------------------------------------------------------------------


async def test_a_healthy_endpoint(server: Server, checker: HttpChecker) -> None:
    report = await checker.check(server.base + "/ok")
    lines = report.splitlines()
    match = FIRST_LINE.match(lines[0])
    assert match is not None, report
    assert match.groups() == (server.base + "/ok", "200", "OK")
    assert lines[1] == 'Body: application/json, 16 bytes: {"status": "ok"}'
    assert len(lines) == 2  # no TLS line for http
    assert server.paths == ["/ok"]


async def test_a_500_is_a_result_not_an_error(server: Server, checker: HttpChecker) -> None:
    report = await checker.check(server.base + "/fail")
    match = FIRST_LINE.match(report)
    assert match is not None and match.group(2, 3) == ("500", "Internal Server Error")
    assert report.splitlines()[1] == "Body: text/plain, 27 bytes: boom: database unreachable"


async def test_bodies_are_summarised_within_bounds(server: Server, checker: HttpChecker) -> None:
    big = await checker.check(server.base + "/big")
    body = big.splitlines()[1]
    assert body == "Body: text/plain, 1.0 MiB: " + "a" * SNIPPET_CHARS + "…"
    assert len(big) < 400
    chunked = await checker.check(server.base + "/chunked")
    assert re.match(r"Body: text/plain, at least \d+\.\d KiB: word word", chunked.splitlines()[1])
    binary = await checker.check(server.base + "/binary")
    assert binary.splitlines()[1] == "Body: application/octet-stream, 30 bytes (binary)"
    empty = await checker.check(server.base + "/empty")
    assert FIRST_LINE.match(empty) is not None and " 204 No Content " in empty
    assert empty.splitlines()[1].endswith(", empty")


async def test_redirects_are_reported_and_followed(server: Server, checker: HttpChecker) -> None:
    report = await checker.check(server.base + "/redirect")
    lines = report.splitlines()
    assert FIRST_LINE.match(lines[0]) is not None
    assert " → HTTP 200 OK in " in lines[0]
    assert "(after 1 redirect, " in lines[0] and f"final URL {server.base}/ok)" in lines[0]
    assert lines[1] == "  HTTP 301 Moved Permanently → /ok"
    assert server.paths == ["/redirect", "/ok"]


@pytest.mark.parametrize(
    ("path", "refusal"),
    [
        ("/away", "refused: api.example.com (93.184.216.34) is not in OPSLOOP_HTTP_ALLOW"),
        ("/metadata", "refused: 169.254.169.254 is a cloud metadata address"),
    ],
)
async def test_a_redirect_to_a_refused_host_is_reported_not_followed(
    server: Server, checker: HttpChecker, path: str, refusal: str
) -> None:
    report = await checker.check(server.base + path)
    first = report.splitlines()[0]
    assert first.startswith(f"GET {server.base}{path} → HTTP 302 Found (1 redirect received in ")
    assert first.endswith(f"; not followed: {refusal}")
    assert server.paths == [path]


async def test_an_endless_redirect_stops_after_the_bound(
    server: Server, checker: HttpChecker
) -> None:
    report = await checker.check(server.base + "/loop")
    assert report.splitlines()[0].endswith("; not followed: more than 5 redirects")
    assert server.paths == ["/loop"] * 6
    assert len(report.splitlines()) == 7


# -- refusals and failures ----------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "refusal"),
    [
        ("http://other.test:{port}/ok", "refused: other.test (127.0.0.1) is not in"),
        ("http://127.0.0.1:{port}/ok", "refused: 127.0.0.1 is not in OPSLOOP_HTTP_ALLOW"),
        ("http://169.254.169.254/latest/", "refused: 169.254.169.254 is a cloud metadata"),
        ("http://metadata.google.internal/", "refused: metadata.google.internal is a cloud"),
        ("ftp://127.0.0.1/", "refused: scheme 'ftp' is not allowed"),
        ("127.0.0.1/ok", "refused: '127.0.0.1/ok' is not an absolute http"),
        ("http://[::1", "bad URL"),
    ],
)
async def test_a_refused_url_is_an_error_before_any_request(
    server: Server, dns: FakeDNS, url: str, refusal: str
) -> None:
    # other.test reaches the server's address, but only api.test is allowed by name;
    # link-local is allowed by the list, and still the metadata address is refused.
    check = HttpChecker(AddressPolicy(["api.test", "169.254.0.0/16"], resolver=dns))
    try:
        with pytest.raises(ToolError, match=re.escape(refusal)):
            await check.check(url.format(port=server.port))
    finally:
        await check.aclose()
    assert server.paths == []


async def test_a_slow_server_hits_the_time_limit(server: Server, dns: FakeDNS) -> None:
    check = HttpChecker(AddressPolicy(["127.0.0.1"], resolver=dns), total_s=0.3)
    try:
        with pytest.raises(ToolError, match=r"^timed out .*(0\.3s)"):
            await check.check(server.base + "/slow")
    finally:
        await check.aclose()
    assert server.paths == ["/slow"]


async def test_nothing_listening_is_a_clear_error(checker: HttpChecker) -> None:
    port = free_port()
    with pytest.raises(ToolError, match=f"^cannot connect to 127.0.0.1:{port}: "):
        await checker.check(f"http://127.0.0.1:{port}/")


async def test_a_password_in_the_url_is_sent_but_never_shown(
    server: Server, checker: HttpChecker
) -> None:
    report = await checker.check(f"http://ops:s3cr%40t@127.0.0.1:{server.port}/redirect")
    assert "s3cr" not in report, report
    assert report.startswith(f"GET http://ops:***@127.0.0.1:{server.port}/redirect → "), report
    assert f"final URL http://ops:***@127.0.0.1:{server.port}/ok)" in report, report
    port = free_port()
    with pytest.raises(ToolError) as caught:
        await checker.check(f"http://ops:s3cr%40t@127.0.0.1:{port}/")
    assert "s3cr" not in str(caught.value)


async def test_a_503_gives_its_retry_after_and_slow_answers_read_in_seconds(
    server: Server, checker: HttpChecker
) -> None:
    report = await checker.check(server.base + "/busy")
    assert re.match(r"GET \S+ → HTTP 503 Service Unavailable in \d+ ms; Retry-After: 120\n", report)
    assert http_pack._ms(4.512) == "4.5 s" and http_pack._ms(0.0421) == "42 ms"


# -- TLS ----------------------------------------------------------------------------


@dataclass
class Issued:
    cert: Path
    key: Path
    ca: Path | None
    not_after: datetime.datetime
    der: bytes


def whole_second(moment: datetime.datetime) -> datetime.datetime:
    return moment.replace(microsecond=0)


def issue(
    folder: Path,
    name: str,
    *,
    not_after: datetime.datetime,
    not_before: datetime.datetime | None = None,
    signed_by_ca: bool = False,
) -> Issued:
    """A certificate for ``name`` and 127.0.0.1: self-signed, or signed by a fresh CA."""
    now = datetime.datetime.now(UTC)
    not_before = not_before or whole_second(now - datetime.timedelta(days=1))
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    issuer_name, issuer_key, ca_path = subject, key, None
    if signed_by_ca:
        issuer_key = ec.generate_private_key(ec.SECP256R1())
        issuer_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "opsloop test CA")])
        ca = (
            x509.CertificateBuilder()
            .subject_name(issuer_name)
            .issuer_name(issuer_name)
            .public_key(issuer_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(issuer_key, hashes.SHA256())
        )
        ca_path = folder / f"{name}-ca.pem"
        ca_path.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName(name), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .sign(issuer_key, hashes.SHA256())
    )
    issued = Issued(
        cert=folder / f"{name}.pem",
        key=folder / f"{name}.key",
        ca=ca_path,
        not_after=not_after,
        der=cert.public_bytes(serialization.Encoding.DER),
    )
    issued.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    issued.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return issued


def at(moment: datetime.datetime) -> Callable[[], datetime.datetime]:
    return lambda: moment


async def serve_tls(issued: Issued) -> tuple[Server, web.AppRunner]:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(issued.cert, issued.key)
    state = Server()
    runner = await start(state, ssl_context=context)
    return state, runner


async def test_a_self_signed_certificate_is_reported_with_its_expiry(
    tmp_path: Path, dns: FakeDNS
) -> None:
    not_after = whole_second(datetime.datetime.now(UTC) + datetime.timedelta(days=400))
    issued = issue(tmp_path, "selfie.test", not_after=not_after)
    state, runner = await serve_tls(issued)
    check = HttpChecker(
        AddressPolicy(["127.0.0.1"], resolver=dns),
        clock=at(not_after - datetime.timedelta(days=30)),
    )
    try:
        report = await check.check(state.base + "/ok")
    finally:
        await check.aclose()
        await runner.cleanup()
    lines = report.splitlines()
    assert re.match(
        rf"^GET {re.escape(state.base)}/ok → TLS certificate verification FAILED for "
        r"127\.0\.0\.1: self[- ]signed certificate\. No HTTP request was sent",
        lines[0],
    ), report
    assert lines[1] == (
        f"TLS: certificate NOT verified; expires {not_after:%Y-%m-%d %H:%M} UTC (30 days left); "
        "subject CN=selfie.test, issuer CN=selfie.test (read without verification)"
    )
    assert state.paths == []  # the server never saw an HTTP request


async def test_an_expired_certificate_says_so(tmp_path: Path, dns: FakeDNS) -> None:
    now = whole_second(datetime.datetime.now(UTC))
    issued = issue(
        tmp_path,
        "old.test",
        not_before=now - datetime.timedelta(days=100),
        not_after=now - datetime.timedelta(days=3),
    )
    state, runner = await serve_tls(issued)
    check = HttpChecker(AddressPolicy(["127.0.0.1"], resolver=dns), clock=at(now))
    try:
        report = await check.check(state.base + "/ok")
    finally:
        await check.aclose()
        await runner.cleanup()
    assert "verification FAILED" in report.splitlines()[0]
    assert "TLS: certificate NOT verified; EXPIRED 3 days ago (" in report.splitlines()[1]
    assert state.paths == []


async def test_a_verified_certificate_reports_days_left_and_soon_warns(
    tmp_path: Path, dns: FakeDNS
) -> None:
    not_after = whole_second(datetime.datetime.now(UTC) + datetime.timedelta(days=90))
    issued = issue(tmp_path, "api.test", not_after=not_after, signed_by_ca=True)
    assert issued.ca is not None
    state, runner = await serve_tls(issued)
    policy = AddressPolicy(["api.test"], resolver=dns)
    trusting = ssl.create_default_context(cafile=str(issued.ca))
    soon = HttpChecker(
        policy,
        client=make_client(policy, verify=trusting),
        clock=at(not_after - datetime.timedelta(days=5, hours=12)),
    )
    try:
        report = await soon.check(f"https://api.test:{state.port}/ok")
    finally:
        await soon.aclose()
        await runner.cleanup()
    lines = report.splitlines()
    assert FIRST_LINE.match(lines[0]) is not None and " 200 OK " in lines[0]
    assert lines[1] == (
        f"TLS: certificate verified; expires {not_after:%Y-%m-%d %H:%M} UTC — only 5.5 days "
        "left; subject CN=api.test, issuer CN=opsloop test CA"
    )
    assert lines[2].startswith("Body: application/json")
    assert state.paths == ["/ok"]


@pytest.mark.parametrize("years", [1, 30])  # 30: past 2049, GeneralizedTime in the DER
def test_parse_certificate_agrees_with_cryptography(tmp_path: Path, years: int) -> None:
    not_after = whole_second(datetime.datetime.now(UTC) + datetime.timedelta(days=365 * years))
    issued = issue(tmp_path, "parse.test", not_after=not_after, signed_by_ca=True)
    parsed = parse_certificate(issued.der)
    reference = x509.load_der_x509_certificate(issued.der)
    assert parsed.not_after == reference.not_valid_after_utc == not_after
    assert parsed.not_before == reference.not_valid_before_utc
    assert (parsed.subject, parsed.issuer) == ("CN=parse.test", "CN=opsloop test CA")


@pytest.mark.parametrize("der", [b"", b"\x30\x82\xff\xff", b"not a certificate at all"])
def test_parse_certificate_refuses_garbage(der: bytes) -> None:
    with pytest.raises(ValueError):
        parse_certificate(der)


def test_parse_certificate_refuses_a_truncated_certificate(tmp_path: Path) -> None:
    issued = issue(tmp_path, "cut.test", not_after=datetime.datetime(2040, 1, 1, tzinfo=UTC))
    with pytest.raises(ValueError):
        parse_certificate(issued.der[: len(issued.der) // 2])


# -- the pack through the agent core ------------------------------------------------


async def test_through_the_core_a_500_is_a_result_and_a_refusal_an_error(
    server: Server,
) -> None:
    pack = http_pack.build(PackConfig(http_allow="127.0.0.1"))
    (tool,) = pack.tools
    model = ScriptedModel(
        [
            calls(
                call("http_check", "c1", url=server.base + "/fail"),
                call("http_check", "c2", url=f"http://127.0.0.2:{server.port}/fail"),
            ),
            text("the service is failing"),
        ]
    )
    try:
        result = await run(make_config(model, tools=[tool]))  # type: ignore[list-item]
    finally:
        for close in pack.closers:
            await close()
    assert result.output == "the service is failing", result.error
    seen = [m for m in model.histories[1] if isinstance(m, ToolMessage)]
    assert [m.is_error for m in seen] == [False, True]
    assert " → HTTP 500 Internal Server Error in " in seen[0].content
    assert seen[1].content == "Error: refused: 127.0.0.2 is not in OPSLOOP_HTTP_ALLOW"
    assert server.paths == ["/fail"]


def test_a_bad_allowlist_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="OPSLOOP_HTTP_ALLOW"):
        http_pack.build(PackConfig(http_allow="http://example.com/"))


@pytest.mark.parametrize(
    ("der", "year"),
    [(b"\x17\x0d991231235959Z", 1999), (b"\x17\x0d491231235959Z", 2049)],
)
def test_utc_time_years_follow_rfc_5280(der: bytes, year: int) -> None:
    moment = http_pack._time(der, (0x17, 2, len(der)))
    assert (moment.year, moment.month, moment.tzinfo) == (year, 12, UTC)

"""The ``http`` pack: ``http_check(url)``, one GET reported as an observation.

What the model reads: the status and the time to the answer's headers, every redirect,
for https the certificate's expiry (days left) and whether it verified, and the start
of the body (content type, size, a one-line snippet). Any HTTP status is a result (a
500 is an observation about the service, not a failure of the tool); ``Error:`` is for
what the tool could not do: a refused URL, no connection, a timeout.

The address policy is ``OPSLOOP_HTTP_ALLOW`` through ``tools/netpolicy.py``, exactly as
``kind: http`` tools use it: the URL is checked before anything is sent, every redirect
hop is checked before it is followed, and the client (``tools.http_client.make_client``)
re-checks each address when it connects. A redirect to a refused place is reported,
not followed; more than ``MAX_REDIRECTS`` redirects are reported and not followed.

Why not ``tools.http.HttpFetcher``: a check wants the redirect chain hop by hop, a
refused or endless redirect as an observation rather than an error, a separate connect
timeout, and the certificate even when it does not verify. Both follow redirects with
``tools.http_client.PolicyClient.follow``.

A certificate that fails verification (self-signed, unknown CA, wrong name, expired):
no HTTP request is sent over that unverified connection; the tool then opens a TLS
connection without verification (to the addresses the policy allows, nothing sent
over it) only to read the certificate's dates and names, and says plainly that
verification failed. The certificate is parsed by a small DER reader here (the
standard library decodes peer certificates only once they have verified).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ssl
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from urllib.parse import quote

import httpx

from bot.errors import ToolError
from tools.base import tool
from tools.http_client import (
    MAX_REDIRECTS,
    Hop,
    PolicyClient,
    RedirectStopped,
    decode_body,
    host_port,
    peer_ssl_object,
)
from tools.netpolicy import AddressPolicy, Target, parse_address
from tools.packs import Pack, PackConfig
from tools.packs.host_proc import human_bytes

CHECK_TOTAL_S = 10.0
CHECK_CONNECT_S = 5.0
SNIPPET_READ_BYTES = 4096
SNIPPET_CHARS = 200
CERT_WARN_DAYS = 14

Clock = Callable[[], datetime.datetime]


def _utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


# -- certificates -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Certificate:
    """What a check reports about a certificate."""

    not_before: datetime.datetime
    not_after: datetime.datetime
    subject: str
    issuer: str


_CN = bytes.fromhex("550403")  # 2.5.4.3 commonName
_O = bytes.fromhex("55040a")  # 2.5.4.10 organizationName


def _tlv(data: bytes, at: int) -> tuple[int, int, int]:
    """One DER element at ``at``: (tag, content start, content end)."""
    if at + 2 > len(data):
        raise ValueError("truncated DER")
    tag, length = data[at], data[at + 1]
    at += 2
    if length & 0x80:
        count = length & 0x7F
        if not 1 <= count <= 4 or at + count > len(data):
            raise ValueError("bad DER length")
        length = int.from_bytes(data[at : at + count], "big")
        at += count
    if at + length > len(data):
        raise ValueError("truncated DER")
    return tag, at, at + length


def _children(data: bytes, start: int, end: int) -> list[tuple[int, int, int]]:
    found: list[tuple[int, int, int]] = []
    at = start
    while at < end:
        element = _tlv(data, at)
        found.append(element)
        at = element[2]
    return found


def _time(data: bytes, element: tuple[int, int, int]) -> datetime.datetime:
    tag, start, end = element
    text = data[start:end].decode("ascii")
    if tag == 0x17:  # UTCTime, YYMMDDHHMMSSZ; years 50-99 are 19xx (RFC 5280)
        parsed = datetime.datetime.strptime(text, "%y%m%d%H%M%SZ")
        if parsed.year >= 2050:
            parsed = parsed.replace(year=parsed.year - 100)
    elif tag == 0x18:  # GeneralizedTime, YYYYMMDDHHMMSSZ
        parsed = datetime.datetime.strptime(text, "%Y%m%d%H%M%SZ")
    else:
        raise ValueError(f"unexpected time tag {tag:#x}")
    return parsed.replace(tzinfo=datetime.UTC)


def _name(data: bytes, element: tuple[int, int, int]) -> str:
    """A Name's common name (else its organisation), or ``?``."""
    values: dict[bytes, str] = {}
    for _, set_start, set_end in _children(data, element[1], element[2]):
        for _, seq_start, seq_end in _children(data, set_start, set_end):
            parts = _children(data, seq_start, seq_end)
            if len(parts) >= 2 and parts[0][0] == 0x06:
                oid = data[parts[0][1] : parts[0][2]]
                raw = data[parts[1][1] : parts[1][2]]
                encoding = "utf-16-be" if parts[1][0] == 0x1E else "utf-8"
                values.setdefault(oid, raw.decode(encoding, errors="replace"))
    if _CN in values:
        return f"CN={values[_CN]}"
    if _O in values:
        return f"O={values[_O]}"
    return "?"


def parse_certificate(der: bytes) -> Certificate:
    """Validity and names of an X.509 certificate; ``ValueError`` when it is not one."""
    try:
        _, start, end = _tlv(der, 0)  # Certificate
        tbs = _children(der, start, end)[0]  # TBSCertificate
        fields = _children(der, tbs[1], tbs[2])
        if fields and fields[0][0] == 0xA0:  # [0] version
            fields = fields[1:]
        # serialNumber, signature, issuer, validity, subject, ...
        issuer, validity, subject = fields[2], fields[3], fields[4]
        dates = _children(der, validity[1], validity[2])
        return Certificate(
            not_before=_time(der, dates[0]),
            not_after=_time(der, dates[1]),
            subject=_name(der, subject),
            issuer=_name(der, issuer),
        )
    except (IndexError, UnicodeDecodeError) as exc:
        raise ValueError(f"not an X.509 certificate: {exc}") from None


def describe_certificate(cert: Certificate, now: datetime.datetime, *, verified: bool) -> str:
    left = cert.not_after - now
    days = left.total_seconds() / 86400
    expiry = f"expires {cert.not_after:%Y-%m-%d %H:%M} UTC"
    if days < 0:
        state = f"EXPIRED {-days:.0f} days ago ({cert.not_after:%Y-%m-%d %H:%M} UTC)"
    elif days < CERT_WARN_DAYS:
        state = f"{expiry} — only {days:.1f} days left"
    else:
        state = f"{expiry} ({days:.0f} days left)"
    if cert.not_before > now:
        state += f"; not valid before {cert.not_before:%Y-%m-%d %H:%M} UTC"
    trust = "verified" if verified else "NOT verified"
    return f"TLS: certificate {trust}; {state}; subject {cert.subject}, issuer {cert.issuer}"


def _verify_failure(exc: BaseException) -> ssl.SSLCertVerificationError | None:
    """The certificate verification error behind an httpx error, if that is its cause."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ssl.SSLCertVerificationError):
            return current
        for arg in current.args:
            if isinstance(arg, ssl.SSLCertVerificationError):
                return arg
        current = current.__cause__ or current.__context__
    return None


# -- the check ----------------------------------------------------------------------


class _Unverified(Exception):
    """An https hop whose certificate failed verification. Nothing was sent over the
    connection; the check reports the certificate instead of an answer."""

    def __init__(
        self, target: Target, hops: Sequence[Hop], failure: ssl.SSLCertVerificationError
    ) -> None:
        super().__init__(str(failure))
        self.target = target
        self.hops = tuple(hops)
        self.failure = failure


def _status(status: int, reason: str) -> str:
    if not reason:
        with contextlib.suppress(ValueError):
            reason = HTTPStatus(status).phrase
    return f"HTTP {status} {reason}".rstrip()


def _size(n: int) -> str:
    """``27 bytes``, ``1.0 MiB``."""
    return f"{n} bytes" if n < 1024 else human_bytes(n)


def _ms(seconds: float) -> str:
    """``12 ms``, and from a second on ``4.5 s``: a slow answer should read as slow."""
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.1f} s"


def _failure(exc: Exception, url: httpx.URL, connect_s: float, total_s: float) -> ToolError:
    where = host_port(url)
    if isinstance(exc, httpx.ConnectTimeout):
        return ToolError(f"timed out after {connect_s:g}s connecting to {where}")
    if isinstance(exc, httpx.TimeoutException):
        return ToolError(f"timed out waiting for the answer from {url} (limit {total_s:g}s)")
    if isinstance(exc, httpx.ConnectError):
        return ToolError(f"cannot connect to {where}: {str(exc) or 'no answer'}")
    detail = str(exc) or type(exc).__name__
    return ToolError(f"GET {url} failed ({type(exc).__name__}): {detail}")


def _password_hider(url: str) -> Callable[[str], str]:
    """A function writing ``***`` for the password of ``url`` wherever a text holds it
    (as given, or percent-encoded as httpx writes URLs back)."""
    try:
        password = httpx.URL(url.strip()).password
    except (httpx.InvalidURL, TypeError, ValueError):
        password = ""
    if not password:
        return lambda text: text
    forms = sorted({password, quote(password, safe=""), quote(password, safe="!$&'()*+,;=")})

    def hide(text: str) -> str:
        for form in forms:
            text = text.replace(f":{form}@", ":***@")
        return text

    return hide


class HttpChecker(PolicyClient):
    """``http_check``'s work: one client under ``policy``, closed by ``aclose`` (a given
    one too).

    ``client``: for tests (default ``make_client(policy)``, verifying certificates);
    ``clock`` (certificate expiry) and ``timer`` (latencies) likewise.
    """

    def __init__(
        self,
        policy: AddressPolicy,
        *,
        client: httpx.AsyncClient | None = None,
        total_s: float = CHECK_TOTAL_S,
        connect_s: float = CHECK_CONNECT_S,
        max_redirects: int = MAX_REDIRECTS,
        clock: Clock = _utc_now,
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        super().__init__(policy, client, close_given=True, max_redirects=max_redirects)
        self.total_s = total_s
        self.connect_s = min(connect_s, total_s)
        self._clock = clock
        self._timer = timer  # what latencies are measured with (tests pass a fake)

    async def check(self, url: str) -> str:
        """The report on ``url``; ``ToolError`` when no answer could be had. A password
        in the URL is sent (basic auth) but never shown."""
        hide = _password_hider(url)
        try:
            async with asyncio.timeout(self.total_s):
                return hide(await self._check(url.strip()))
        except TimeoutError:
            raise ToolError(hide(f"timed out after {self.total_s:g}s: GET {url}")) from None
        except ToolError as exc:
            raise ToolError(hide(str(exc))) from None

    async def _check(self, url: str) -> str:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.total_s
        started = self._timer()
        latency = 0.0  # of the last hop: from sending to the answer's headers

        async def send(target: Target, hops: Sequence[Hop]) -> httpx.Response:
            nonlocal latency
            remaining = max(deadline - loop.time(), 0.001)
            request = self.client.build_request(
                "GET",
                target.url,
                timeout=httpx.Timeout(remaining, connect=min(self.connect_s, remaining)),
            )
            sent = self._timer()
            try:
                response = await self.client.send(request, stream=True)
            except httpx.ConnectError as exc:
                failure = _verify_failure(exc)
                if failure is None or target.url.scheme != "https":
                    raise _failure(exc, target.url, self.connect_s, self.total_s) from None
                raise _Unverified(target, hops, failure) from None
            except (httpx.HTTPError, httpx.InvalidURL) as exc:
                raise _failure(exc, target.url, self.connect_s, self.total_s) from None
            latency = self._timer() - sent
            return response

        async def answer(target: Target, response: httpx.Response, hops: Sequence[Hop]) -> str:
            try:
                snippet = await self._snippet(response)
            except httpx.HTTPError as exc:
                raise _failure(exc, target.url, self.connect_s, self.total_s) from None
            return self._report(url, target, response, hops, latency, started, snippet)

        try:
            return await self.follow(url, send=send, answer=answer)
        except RedirectStopped as stop:
            return self._redirect_report(url, stop.hops, started, f"not followed: {stop}")
        except _Unverified as unverified:
            return await self._unverified_report(
                url, unverified.target, unverified.hops, unverified.failure
            )

    async def _snippet(self, response: httpx.Response) -> str:
        """``Body: <type>, <size>: <first chars on one line>``; reads a few KiB at most."""
        chunks: list[bytes] = []
        size = 0
        cut = False
        async for chunk in response.aiter_bytes():
            chunks.append(chunk)
            size += len(chunk)
            if size >= SNIPPET_READ_BYTES:
                cut = True
                break
        body = b"".join(chunks)
        media = (response.headers.get("content-type") or "no content type").split(";")[0]
        declared = response.headers.get("content-length")
        if declared is not None and declared.isdigit():
            length = _size(int(declared))
        else:
            length = f"at least {_size(len(body))}" if cut else _size(len(body))
        if not body:
            return f"Body: {media}, empty"
        if b"\0" in body[:1024]:
            return f"Body: {media}, {length} (binary)"
        text = " ".join(decode_body(body, response.headers.get("content-type")).split())
        if len(text) > SNIPPET_CHARS:
            text = text[:SNIPPET_CHARS] + "…"
        return f"Body: {media}, {length}: {text}"

    def _redirect_lines(self, hops: Sequence[Hop]) -> list[str]:
        return [f"  {_status(h.status, h.reason)} → {h.location}" for h in hops]

    def _report(
        self,
        url: str,
        target: Target,
        response: httpx.Response,
        hops: Sequence[Hop],
        latency: float,
        started: float,
        snippet: str,
    ) -> str:
        status = _status(response.status_code, response.reason_phrase)
        first = f"GET {url} → {status} in {_ms(latency)}"
        if hops:
            total = self._timer() - started
            first += f" (after {len(hops)} redirect{'s' if len(hops) > 1 else ''}, "
            first += f"{_ms(total)} in all; final URL {target.url})"
        if response.status_code >= 400 and (retry := response.headers.get("retry-after")):
            first += f"; Retry-After: {' '.join(retry.split())[:60]}"
        lines = [first, *self._redirect_lines(hops)]
        if target.url.scheme == "https":
            lines.append(self._verified_certificate(response))
        lines.append(snippet)
        return "\n".join(lines)

    def _redirect_report(self, url: str, hops: Sequence[Hop], started: float, note: str) -> str:
        last = hops[-1]
        total = self._timer() - started
        lines = [
            f"GET {url} → {_status(last.status, last.reason)} ({len(hops)} "
            f"redirect{'s' if len(hops) > 1 else ''} received in {_ms(total)}); {note}",
            *self._redirect_lines(hops),
        ]
        return "\n".join(lines)

    def _verified_certificate(self, response: httpx.Response) -> str:
        ssl_object = peer_ssl_object(response)
        der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        if not der:
            return "TLS: certificate verified; could not read its details"
        try:
            cert = parse_certificate(der)
        except ValueError as exc:
            return f"TLS: certificate verified; could not parse it: {exc}"
        return describe_certificate(cert, self._clock(), verified=True)

    async def _unverified_report(
        self,
        url: str,
        target: Target,
        hops: Sequence[Hop],
        failure: ssl.SSLCertVerificationError,
    ) -> str:
        reason = failure.verify_message or failure.reason or str(failure)
        lines = [
            f"GET {url} → TLS certificate verification FAILED for {target.host}: {reason}. "
            "No HTTP request was sent over the unverified connection.",
            *self._redirect_lines(hops),
        ]
        try:
            der = await self._read_certificate(target)
            cert = parse_certificate(der)
        except (OSError, ssl.SSLError, ValueError, ToolError) as exc:
            lines.append(f"TLS: could not read the certificate without verification: {exc}")
        else:
            described = describe_certificate(cert, self._clock(), verified=False)
            lines.append(f"{described} (read without verification)")
        return "\n".join(lines)

    async def _read_certificate(self, target: Target) -> bytes:
        """The server's certificate over a TLS connection that verifies nothing; only
        to addresses the policy allows, and nothing is sent over it."""
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        sni = "" if parse_address(target.host) is not None else target.host
        failure: Exception = OSError("no address to connect to")
        for address in await self.policy.addresses(target.host, target.port):
            try:
                async with asyncio.timeout(self.connect_s):
                    _, writer = await asyncio.open_connection(
                        str(address), target.port, ssl=context, server_hostname=sni
                    )
            except (OSError, ssl.SSLError, TimeoutError) as exc:
                failure = exc if not isinstance(exc, TimeoutError) else OSError("timed out")
                continue
            try:
                ssl_object = writer.get_extra_info("ssl_object")
                der = ssl_object.getpeercert(binary_form=True) if ssl_object else None
            finally:
                writer.close()
                with contextlib.suppress(OSError, ssl.SSLError, TimeoutError):
                    async with asyncio.timeout(1.0):
                        await writer.wait_closed()
            if not der:
                raise ValueError("the server sent no certificate")
            return bytes(der)
        raise failure


# -- the pack -----------------------------------------------------------------------


def build(config: PackConfig) -> Pack:
    """The http pack, under ``OPSLOOP_HTTP_ALLOW`` (``ConfigError`` for a bad entry)."""
    checker = HttpChecker(AddressPolicy.from_setting(config.http_allow))

    @tool(parallel=True, timeout=CHECK_TOTAL_S + 5)
    async def http_check(url: str) -> str:
        """Check an HTTP(S) endpoint with one GET: status, latency, redirects, the TLS
        certificate's expiry for https, and the start of the body. Any HTTP status
        (a 500 too) is reported as a result.

        Args:
            url: The http:// or https:// URL to check.
        """
        return await checker.check(url)

    return Pack(tools=(http_check,), closers=(checker.aclose,))

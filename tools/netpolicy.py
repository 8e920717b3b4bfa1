"""Which hosts ``http`` tools may reach (``OPSLOOP_HTTP_ALLOW``), enforced twice.

The rules (docs/security.md, "What is refused"):

- only ``http`` and ``https`` URLs;
- never a link-local address (169.254.0.0/16, fe80::/10) nor a cloud metadata endpoint
  (by address or by name), whatever the allowlist says;
- no allowlist: public hosts only; *every* address a name resolves to must be public (no
  loopback, private, shared, unspecified, multicast or reserved address);
- an allowlist (comma-separated host names, ``*.suffix`` wildcards, IPs and CIDRs): a host
  is allowed when its name matches an entry, or when resolved addresses lie inside an
  allowed network; only those addresses are then used.

IPv6 addresses that embed an IPv4 one (mapped ``::ffff:a.b.c.d``, compatible, NAT64
``64:ff9b::/96``, 6to4 ``2002::/16``) are judged by both.

``AddressPolicy.check(url)`` runs before every request and every redirect hop and names
its reason in a ``ToolError`` ("refused: 169.254.169.254 is a cloud metadata address").
``PolicyTransport`` enforces the same policy where it cannot be raced: it resolves and
checks again when it opens a connection and connects only to the addresses that passed,
so a DNS answer that changes between the check and the connection (rebinding) never
reaches a refused address. It connects directly (no proxy: a proxy would resolve names
itself, out of the policy's sight).
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
import ssl
import urllib.parse
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass

import httpcore
import httpx

from bot.errors import ConfigError, ToolError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], Awaitable[Iterable[str]]]
"""``(host, port) → addresses`` as strings; raises ``OSError`` when the name is unknown."""

SETTING = "OPSLOOP_HTTP_ALLOW"
SCHEMES = ("http", "https")

METADATA_ADDRESSES: frozenset[IPAddress] = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, Oracle, DigitalOcean, …
        "169.254.170.2",  # AWS ECS task metadata
        "169.254.170.23",  # AWS EKS pod identity
        "fd00:ec2::254",  # AWS IMDS over IPv6
        "fd00:ec2::23",  # AWS EKS pod identity over IPv6
        "100.100.100.200",  # Alibaba Cloud
        "192.0.0.192",  # Oracle Cloud (legacy)
    )
)
METADATA_NAMES = frozenset(
    {
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "instance-data",
        "instance-data.ec2.internal",
    }
)

_LINK_LOCAL = (ipaddress.ip_network("169.254.0.0/16"), ipaddress.ip_network("fe80::/10"))
_PRIVATE = tuple(
    ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7")
)
# Not public, though Python 3.11's ``is_global`` says otherwise for some of them.
_NOT_PUBLIC = tuple(ipaddress.ip_network(n) for n in ("100.64.0.0/10", "192.0.0.0/24", "fec0::/10"))
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_COMPATIBLE = ipaddress.ip_network("::/96")
_PUBLIC_ONLY = f"only public hosts are allowed while {SETTING} is not set"
_NAME = re.compile(r"^[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*$")


async def system_resolver(host: str, port: int) -> list[str]:
    """The operating system's resolver (``getaddrinfo``), without blocking the loop."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


def masked(url: str) -> str:
    """``url`` with the password of its userinfo replaced by ``***`` (``user:***@host``),
    also when the text does not parse as a URL (an error message must not echo it)."""
    return re.sub(r"(//[^/@\s:]*:)[^/@\s]*@", r"\1***@", url)


@dataclass(frozen=True, slots=True)
class Target:
    """A URL that passed the policy, with the addresses it may be reached at."""

    url: httpx.URL
    host: str
    port: int
    addresses: tuple[IPAddress, ...]


def parse_address(text: str) -> IPAddress | None:
    """An IP address (brackets and IPv6 zone ids dropped), or ``None`` for a name."""
    text = urllib.parse.unquote(text).strip("[]").split("%", 1)[0]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries (mapped, compatible, NAT64 or 6to4)."""
    if isinstance(address, ipaddress.IPv4Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64 or (address in _COMPATIBLE and int(address) > 1):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def _forms(address: IPAddress) -> tuple[IPAddress, ...]:
    """The addresses to judge: a mapped, compatible or NAT64 address is only a spelling
    of its IPv4 one; a 6to4 address is itself and the IPv4 host behind it."""
    inner = embedded_ipv4(address)
    if inner is None:
        return (address,)
    assert isinstance(address, ipaddress.IPv6Address)
    return (address, inner) if address.sixtofour is not None else (inner,)


def never_reason(address: IPAddress) -> str | None:
    """Why no policy may reach ``address`` (metadata, link-local), or ``None``."""
    for form in _forms(address):
        if form in METADATA_ADDRESSES:
            return "a cloud metadata address"
        if any(form in net for net in _LINK_LOCAL):
            return "a link-local address"
    return None


def non_public_reason(address: IPAddress) -> str | None:
    """Why ``address`` is not a public one, or ``None`` when it is."""
    for form in _forms(address):
        if form.is_loopback:
            return "a loopback address"
        if form.is_unspecified:
            return "the unspecified address"
        if form.is_multicast:
            return "a multicast address"
        if any(form in net for net in _PRIVATE):
            return "a private address"
        if form.is_reserved:
            return "a reserved address"
        if not form.is_global or any(form in net for net in _NOT_PUBLIC):
            return "not a public address"
    return None


def _host_name(text: str) -> str:
    """A host name (already ASCII/IDNA) as compared: lower case, no trailing dot."""
    return text.lower().rstrip(".")


def _parse_entry(entry: str) -> tuple[str, str | IPNetwork]:
    """One allowlist entry → ("name" | "suffix" | "network", value)."""
    if "/" in entry or parse_address(entry) is not None:
        try:
            return "network", ipaddress.ip_network(entry.strip("[]"), strict=False)
        except ValueError:
            raise ConfigError(f"{SETTING}: {entry!r} is not an IP address or CIDR") from None
    wildcard = entry.startswith("*.")
    name = entry[2:] if wildcard else entry
    try:
        ascii_name = _host_name(httpx.URL(scheme="http", host=name).raw_host.decode("ascii"))
    except (httpx.InvalidURL, UnicodeError, ValueError):
        ascii_name = ""
    if not _NAME.match(ascii_name):
        raise ConfigError(
            f"{SETTING}: {entry!r} is not a host name, '*.domain', IP address or CIDR "
            "(no scheme, port or path)"
        )
    return ("suffix", "." + ascii_name) if wildcard else ("name", ascii_name)


class AddressPolicy:
    """The hosts ``http`` tools may reach; see the module docstring for the rules.

    ``allow``: entries of ``OPSLOOP_HTTP_ALLOW`` (``None`` or empty: any public host).
    ``resolver``: name → addresses (default: ``getaddrinfo``); tests inject their own.
    """

    def __init__(
        self, allow: Sequence[str] | None = None, *, resolver: Resolver | None = None
    ) -> None:
        self._resolver: Resolver = resolver or system_resolver
        names: set[str] = set()
        suffixes: list[str] = []
        networks: list[IPNetwork] = []
        for raw in allow or ():
            entry = raw.strip()
            if not entry:
                continue
            kind, value = _parse_entry(entry)
            if isinstance(value, str) and kind == "name":
                names.add(value)
            elif isinstance(value, str):
                suffixes.append(value)
            else:
                networks.append(value)
        self._names = frozenset(names)
        self._suffixes = tuple(suffixes)
        self._networks = tuple(networks)
        self._entries = tuple(e.strip() for e in allow or () if e.strip())

    @classmethod
    def from_setting(cls, value: str | None, *, resolver: Resolver | None = None) -> AddressPolicy:
        """From the comma-separated value of ``OPSLOOP_HTTP_ALLOW``."""
        return cls((value or "").split(","), resolver=resolver)

    @property
    def restricted(self) -> bool:
        """An allowlist is set (otherwise: any public host)."""
        return bool(self._entries)

    @property
    def entries(self) -> tuple[str, ...]:
        return self._entries

    def __repr__(self) -> str:
        allow = ",".join(self._entries) if self._entries else "any public host"
        return f"AddressPolicy({allow})"

    async def check(self, url: str | httpx.URL) -> Target:
        """Refuse (``ToolError``) a URL the policy does not allow; nothing is sent."""
        try:
            parsed = url if isinstance(url, httpx.URL) else httpx.URL(url)
        except httpx.InvalidURL as exc:
            raise ToolError(f"bad URL {masked(str(url))!r}: {exc}") from None
        if parsed.scheme not in SCHEMES:
            if not parsed.scheme:
                raise ToolError(f"refused: {masked(str(url))!r} is not an absolute http(s) URL")
            raise ToolError(f"refused: scheme {parsed.scheme!r} is not allowed (http, https)")
        host = parsed.raw_host.decode("ascii")
        if not host:
            raise ToolError(f"refused: {masked(str(url))!r} has no host")
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        return Target(url=parsed, host=host, port=port, addresses=await self.addresses(host, port))

    async def addresses(self, host: str, port: int) -> tuple[IPAddress, ...]:
        """The addresses of ``host`` this policy lets a connection use, resolving names;
        ``ToolError`` naming the reason when there are none."""
        literal = parse_address(host)
        if literal is not None:
            self._check_literal(literal)
            return (literal,)
        name = _host_name(host)
        if name in METADATA_NAMES:
            raise ToolError(f"refused: {name} is a cloud metadata host name")
        found = await self._resolve(name, port)
        for address in found:
            reason = never_reason(address)
            if reason is not None:
                raise ToolError(f"refused: {name} resolves to {address}, {reason}")
        if not self.restricted:
            for address in found:
                reason = non_public_reason(address)
                if reason is not None:
                    raise ToolError(
                        f"refused: {name} resolves to {address}, {reason}; {_PUBLIC_ONLY}"
                    )
            return found
        if self._name_allowed(name):
            return found
        allowed = tuple(a for a in found if self._address_allowed(a))
        if not allowed:
            shown = ", ".join(str(a) for a in found)
            raise ToolError(f"refused: {name} ({shown}) is not in {SETTING}")
        return allowed

    def _check_literal(self, address: IPAddress) -> None:
        reason = never_reason(address)
        if reason is not None:
            raise ToolError(f"refused: {address} is {reason}")
        if not self.restricted:
            reason = non_public_reason(address)
            if reason is not None:
                raise ToolError(f"refused: {address} is {reason}; {_PUBLIC_ONLY}")
        elif not self._address_allowed(address):
            raise ToolError(f"refused: {address} is not in {SETTING}")

    def _name_allowed(self, name: str) -> bool:
        return name in self._names or any(name.endswith(s) for s in self._suffixes)

    def _address_allowed(self, address: IPAddress) -> bool:
        return any(
            form.version == net.version and form in net
            for form in (address, *_forms(address))
            for net in self._networks
        )

    async def _resolve(self, name: str, port: int) -> tuple[IPAddress, ...]:
        try:
            raw = list(await self._resolver(name, port))
        except (OSError, UnicodeError) as exc:
            detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise ToolError(f"cannot resolve {name}: {detail}") from None
        found: list[IPAddress] = []
        for text in raw:
            address = parse_address(text)
            if address is None:
                raise ToolError(f"cannot resolve {name}: the resolver answered {text!r}")
            if address not in found:
                found.append(address)
        if not found:
            raise ToolError(f"cannot resolve {name}: no addresses")
        return tuple(found)


# -- enforcement at connect time ----------------------------------------------------


class PolicyBackend(httpcore.AsyncNetworkBackend):
    """Opens TCP connections only to addresses the policy allows for the host, resolved
    at that moment; the TLS layer above still verifies the certificate for the name."""

    def __init__(
        self, policy: AddressPolicy, inner: httpcore.AsyncNetworkBackend | None = None
    ) -> None:
        self._policy = policy
        self._inner = inner or httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        failure: Exception | None = None
        for address in await self._policy.addresses(host, port):
            try:
                return await self._inner.connect_tcp(
                    str(address),
                    port,
                    timeout=timeout,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc  # try the next address, as getaddrinfo users do
        assert failure is not None  # addresses() never returns an empty tuple
        raise failure

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


# httpcore's errors as httpx's, most specific first (what httpx's own transport does).
_ERRORS: tuple[tuple[type[Exception], type[httpx.TransportError]], ...] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
    (httpcore.ProtocolError, httpx.ProtocolError),
)


def _translate(exc: Exception) -> Exception:
    for core, ours in _ERRORS:
        if isinstance(exc, core):
            return ours(str(exc))
    return exc


class _ResponseStream(httpx.AsyncByteStream):
    def __init__(self, stream: AsyncIterable[bytes]) -> None:
        self._stream = stream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for part in self._stream:
                yield part
        except Exception as exc:
            translated = _translate(exc)
            if translated is exc:
                raise
            raise translated from exc

    async def aclose(self) -> None:
        close = getattr(self._stream, "aclose", None)
        if close is not None:
            await close()


class PolicyTransport(httpx.AsyncBaseTransport):
    """An httpx transport whose every connection goes through ``PolicyBackend``.

    Built on httpcore's public pool and network-backend API (httpx's own transport
    does not take a network backend); HTTP/1.1, direct connections only.
    """

    def __init__(
        self,
        policy: AddressPolicy,
        *,
        verify: ssl.SSLContext | bool = True,
        limits: httpx.Limits | None = None,
        network_backend: httpcore.AsyncNetworkBackend | None = None,
    ) -> None:
        limits = limits or httpx.Limits(max_connections=100, max_keepalive_connections=20)
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=httpx.create_ssl_context(verify=verify),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=PolicyBackend(policy, network_backend),
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.AsyncByteStream)
        core_request = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        try:
            response = await self._pool.handle_async_request(core_request)
        except Exception as exc:
            translated = _translate(exc)
            if translated is exc:
                raise  # ToolError from the policy, and anything we do not know
            raise translated from exc
        assert isinstance(response.stream, AsyncIterable)
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_ResponseStream(response.stream),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._pool.aclose()

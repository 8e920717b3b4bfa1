"""The HTTP client under an address policy, shared by ``kind: http`` tools
(``tools.http.HttpFetcher``) and the ``http`` pack (``tools.packs.http.HttpChecker``).

- ``make_client``: an ``httpx.AsyncClient`` over ``PolicyTransport`` that follows no
  redirect, reads no environment and asks for no compression.
- ``PolicyClient``: a policy and the client that sends under it, made on first use,
  and ``follow``, the one redirect loop. Each hop is checked by the policy before it is
  sent, a ``Location`` is resolved against the URL that sent it, and the chain is
  bounded; a redirect that is not followed ends it with ``RedirectStopped``, which the
  fetcher turns into an error and the checker into a report.
- ``read_bounded``, ``decode_body`` and ``peer_ssl_object``: reading an answer (the
  first also for the packs' own clients).
"""

from __future__ import annotations

import codecs
import email.message
import ssl
from collections.abc import AsyncIterable, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from bot.errors import ToolError
from tools.netpolicy import AddressPolicy, PolicyTransport, Target

USER_AGENT = "opsloop"
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
MAX_REDIRECTS = 5

T = TypeVar("T")


def make_client(
    policy: AddressPolicy, *, verify: ssl.SSLContext | bool = True
) -> httpx.AsyncClient:
    """A client that reaches only what ``policy`` allows, at connect time too.

    No redirects (the caller follows them, re-checking each), no environment
    (proxies and .netrc would bypass or widen the policy), no compression (a small
    compressed body can expand far past the bound before it is counted).
    """
    return httpx.AsyncClient(
        transport=PolicyTransport(policy, verify=verify),
        follow_redirects=False,
        trust_env=False,
        headers={"user-agent": USER_AGENT, "accept-encoding": "identity"},
    )


# -- redirects ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Hop:
    """One redirect received."""

    source: httpx.URL  # the URL that answered with it
    status: int
    reason: str
    location: str  # the Location as sent
    url: httpx.URL | None  # where it points; None when the Location is no URL


class RedirectStopped(Exception):
    """A redirect that is not followed: the policy refused where it points, its
    ``Location`` is no URL, or the chain is longer than allowed. The message says which;
    ``hops`` are the redirects received, the stopped one last; ``cause`` the error
    behind a refusal or a bad ``Location``."""

    def __init__(self, message: str, hops: Sequence[Hop], *, cause: str = "") -> None:
        super().__init__(message)
        self.hops = tuple(hops)
        self.cause = cause


class PolicyClient:
    """An address policy and the client that sends under it: ``make_client(policy)``,
    made on first use, or the client given, and the one redirect loop (``follow``, at
    most ``max_redirects``). The base of ``HttpFetcher`` and of the ``http`` pack's
    checker.

    ``aclose`` closes the client it made, and a given one too when ``close_given``; a
    use after it makes a fresh one.
    """

    def __init__(
        self,
        policy: AddressPolicy,
        client: httpx.AsyncClient | None = None,
        *,
        close_given: bool = False,
        max_redirects: int = MAX_REDIRECTS,
    ) -> None:
        self.policy = policy
        self.max_redirects = max_redirects
        self._client = client
        self._closes_client = close_given or client is None

    @property
    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = make_client(self.policy)
        return self._client

    async def aclose(self) -> None:
        if self._closes_client and self._client is not None:
            await self._client.aclose()
            self._client = None

    async def follow(
        self,
        url: str,
        *,
        send: Callable[[Target, Sequence[Hop]], Awaitable[httpx.Response]],
        answer: Callable[[Target, httpx.Response, Sequence[Hop]], Awaitable[T]],
    ) -> T:
        """``send`` a request to ``url`` and to each redirect after it, every hop checked
        by the policy first (a refused ``url`` itself raises the policy's ``ToolError``);
        the first answer that is not a redirect goes to ``answer``. ``send`` gets the
        redirects so far (to adapt the request to them); every response is closed here.
        A redirect that is not followed ends the chain with ``RedirectStopped``."""
        hops: list[Hop] = []
        current: str | httpx.URL = url
        while True:
            try:
                target = await self.policy.check(current)
            except ToolError as exc:
                if not hops:
                    raise
                raise RedirectStopped(str(exc), hops, cause=str(exc)) from None
            response = await send(target, hops)
            try:
                location = response.headers.get("location")
                if response.status_code not in REDIRECT_STATUSES or not location:
                    return await answer(target, response, hops)
                try:
                    following: httpx.URL | None = target.url.join(location)
                    problem = ""
                except httpx.InvalidURL as exc:
                    following, problem = None, str(exc)
                hop = Hop(
                    target.url, response.status_code, response.reason_phrase, location, following
                )
                hops.append(hop)
                if following is None:
                    raise RedirectStopped(
                        f"bad Location {location!r}: {problem}", hops, cause=problem
                    )
                if len(hops) > self.max_redirects:
                    raise RedirectStopped(f"more than {self.max_redirects} redirects", hops)
                current = following
            finally:
                await response.aclose()


# -- reading an answer --------------------------------------------------------------


async def read_bounded(chunks: AsyncIterable[bytes], limit: int) -> tuple[bytes, bool]:
    """The first ``limit`` bytes of a body and whether it went on past them. Reading
    stops there: the rest is never fetched (a huge answer costs no more than the bound)."""
    parts: list[bytes] = []
    size = 0
    async for chunk in chunks:
        room = limit - size
        if len(chunk) > room:
            parts.append(chunk[:room])
            return b"".join(parts), True
        parts.append(chunk)
        size += len(chunk)
    return b"".join(parts), False


def decode_body(body: bytes, content_type: str | None) -> str:
    """``body`` decoded with the charset ``content_type`` names (UTF-8 by default),
    never failing."""
    charset = "utf-8"
    if content_type:
        message = email.message.Message()
        message["content-type"] = content_type
        declared = message.get_content_charset()
        if declared:
            try:
                charset = codecs.lookup(declared).name
            except LookupError:
                pass
    return body.decode(charset, errors="replace")


def peer_ssl_object(response: httpx.Response) -> Any:
    """The ``ssl.SSLObject`` of the connection an https answer came over, else ``None``."""
    stream = response.extensions.get("network_stream")
    return stream.get_extra_info("ssl_object") if stream is not None else None


def host_port(url: httpx.URL) -> str:
    """``host:port`` of ``url``, the scheme's default port written out."""
    return f"{url.host}:{url.port or (443 if url.scheme == 'https' else 80)}"

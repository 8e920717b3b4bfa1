"""A web page as bounded plain text, fetched under the http tools' address policy.

An alert's ``runbook_url`` outside the runbooks folder (``OPSLOOP_RUNBOOKS_URL``) is read
here, and only when ``OPSLOOP_HTTP_ALLOW`` is set and allows its host: the same
``AddressPolicy`` as the ``http`` tools (``tools.netpolicy``) checks the URL and every
redirect before anything is sent, so a link to the cloud metadata address, a private
network or any host not listed sends no request at all. An unrestricted policy (no
allowlist) reads nothing: a link in an alert annotation is not reason enough to reach
any public host.

The answer is read up to ``MAX_BYTES`` (the rest is never fetched), HTML turned into
text by the standard library's ``html.parser`` in a worker thread (scripts, styles and
other non-text elements dropped, one line per block element), whitespace collapsed, and
cut to ``max_chars``. Not Beautiful Soup: on top of the same parser it took 5 s for a
half-megabyte page of paragraphs where ``HTMLParser`` alone takes 0.7 s, and text is all
this needs. Scrubbing and quoting are the caller's: the text is the page's.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from dataclasses import dataclass
from html.parser import HTMLParser

import httpx

from bot.errors import ToolError
from tools.http_client import Hop, PolicyClient, RedirectStopped, decode_body, read_bounded
from tools.netpolicy import AddressPolicy, Target, masked

MAX_BYTES = 256 * 1024
TIMEOUT_S = 5.0
DEFAULT_CHARS = 8_000
_DROPPED = frozenset(
    {"script", "style", "noscript", "template", "svg", "head", "iframe", "object", "title"}
)
_BLOCKS = frozenset(
    {"p", "div", "br", "li", "ul", "ol", "tr", "table", "section", "article", "pre", "hr"}
    | {"h1", "h2", "h3", "h4", "h5", "h6", "blockquote", "dd", "dt", "header", "footer"}
)
_BLANKS = re.compile(r"\n\s*\n+")
_SPACES = re.compile(r"[ \t\r\f\v]+")


class PageRefused(ToolError):
    """The URL is not one this reader may fetch (nothing was sent)."""


@dataclass(frozen=True, slots=True)
class PageText:
    url: str  # as asked (credentials masked)
    text: str
    cut: bool  # the page went on past the bounds


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.dropped = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _DROPPED:
            self.dropped += 1
        elif tag in _BLOCKS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in _DROPPED:
            self.dropped = max(0, self.dropped - 1)
        elif tag in _BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self.dropped:
            self.parts.append(data)


def html_text(markup: str) -> str:
    """The readable text of an HTML document: one line per block, blank lines collapsed."""
    parser = _Text()
    parser.feed(markup)
    parser.close()
    lines = (_SPACES.sub(" ", line).strip() for line in "".join(parser.parts).splitlines())
    return _BLANKS.sub("\n\n", "\n".join(line for line in lines if line)).strip()


@dataclass
class PageReader:
    """Reads pages under ``policy`` (``AddressPolicy.from_setting(OPSLOOP_HTTP_ALLOW)``)."""

    policy: AddressPolicy
    timeout_s: float = TIMEOUT_S
    max_bytes: int = MAX_BYTES

    def allows_any(self) -> bool:
        """Whether an allowlist is set at all (without one, nothing is read)."""
        return self.policy.restricted

    async def read(self, url: str, *, max_chars: int = DEFAULT_CHARS) -> PageText:
        """The page at ``url`` as text; ``PageRefused`` when the policy does not allow it,
        ``ToolError`` when it cannot be read (status, timeout, network)."""
        if not self.policy.restricted:
            raise PageRefused(
                f"refused: {masked(url)!r}: OPSLOOP_HTTP_ALLOW is not set, so no page outside "
                "the runbooks folder is read"
            )
        try:
            await self.policy.check(url)
        except ToolError as exc:
            raise PageRefused(str(exc)) from None
        client = PolicyClient(self.policy)

        async def send(target: Target, hops: Sequence[Hop]) -> httpx.Response:
            request = client.client.build_request(
                "GET", target.url, headers={"accept": "text/html, text/markdown, text/plain"}
            )
            return await client.client.send(request, stream=True)

        async def answer(target: Target, response: httpx.Response, hops: Sequence[Hop]) -> PageText:
            if response.status_code >= 400:
                raise ToolError(f"{masked(url)!r} answered HTTP {response.status_code}")
            body, more = await read_bounded(response.aiter_raw(), self.max_bytes)
            content_type = response.headers.get("content-type")
            text = decode_body(body, content_type)
            if "html" in (content_type or "").lower() or text.lstrip()[:1] == "<":
                text = await asyncio.to_thread(html_text, text)
            return PageText(
                url=masked(url), text=text[:max_chars], cut=more or len(text) > max_chars
            )

        try:
            async with asyncio.timeout(self.timeout_s):
                return await client.follow(url, send=send, answer=answer)
        except TimeoutError:
            raise ToolError(f"{masked(url)!r} did not answer within {self.timeout_s:g} s") from None
        except RedirectStopped as exc:
            raise PageRefused(f"{masked(url)!r}: redirect not followed: {exc}") from None
        except httpx.HTTPError as exc:
            raise ToolError(f"{masked(url)!r} could not be read: {type(exc).__name__}") from None
        finally:
            await client.aclose()

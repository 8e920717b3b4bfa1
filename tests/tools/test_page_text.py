"""A runbook page read under the http tools' address policy: nothing is read without an
allowlist or from a host it does not name (no request leaves), the metadata address is
refused even when listed, a redirect to a refused host is not followed, and an allowed
page comes back as text — scripts and markup dropped — bounded however large it is."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from bot.emulator.app_server import AppServer
from bot.errors import ToolError
from tools.netpolicy import AddressPolicy
from tools.page_text import PageReader, PageRefused, html_text


@pytest.fixture
async def site() -> AsyncIterator[tuple[str, list[str]]]:
    hits: list[str] = []
    huge = "<html><body>" + "<p>step</p>" * 200_000 + "</body></html>"

    async def page(request: web.Request) -> web.Response:
        hits.append(request.path)
        name = request.match_info["name"]
        if name == "away":
            raise web.HTTPFound("http://169.254.169.254/latest/meta-data/")
        if name == "huge":
            return web.Response(text=huge, content_type="text/html")
        if name == "missing":
            return web.Response(status=404, text="no")
        return web.Response(
            text="<html><head><style>p{}</style><script>evil()</script></head>"
            "<body><h1>Restart the consumer</h1><p>1. Check   lag.</p><p>2. Restart.</p>"
            "</body></html>",
            content_type="text/html",
        )

    app = web.Application()
    app.router.add_get("/{name}", page)
    server = AppServer()
    port = await server.start(app)
    yield f"http://127.0.0.1:{port}", hits
    await server.stop()


async def test_an_allowed_page_is_text(site: tuple[str, list[str]]) -> None:
    url, hits = site
    page = await PageReader(AddressPolicy.from_setting("127.0.0.1")).read(url + "/rb")
    assert page.text == "Restart the consumer\n1. Check lag.\n2. Restart."
    assert not page.cut and hits == ["/rb"]


async def test_a_huge_page_is_bounded(site: tuple[str, list[str]]) -> None:
    url, _ = site
    page = await PageReader(AddressPolicy.from_setting("127.0.0.1")).read(
        url + "/huge", max_chars=1000
    )
    assert page.cut and len(page.text) <= 1000


async def test_nothing_is_sent_where_the_policy_does_not_allow(
    site: tuple[str, list[str]],
) -> None:
    url, hits = site
    with pytest.raises(PageRefused, match="OPSLOOP_HTTP_ALLOW is not set"):
        await PageReader(AddressPolicy.from_setting("")).read(url + "/rb")
    with pytest.raises(PageRefused):
        await PageReader(AddressPolicy.from_setting("wiki.example.com")).read(url + "/rb")
    with pytest.raises(PageRefused):
        await PageReader(AddressPolicy.from_setting("169.254.169.254")).read(
            "http://169.254.169.254/latest/meta-data/"
        )
    assert hits == []
    with pytest.raises(PageRefused, match="redirect"):
        await PageReader(AddressPolicy.from_setting("127.0.0.1")).read(url + "/away")
    assert hits == ["/away"]
    with pytest.raises(ToolError, match="404"):
        await PageReader(AddressPolicy.from_setting("127.0.0.1")).read(url + "/missing")


def test_markup_and_scripts_are_dropped() -> None:
    assert html_text("<p>a</p><script>x()</script><p>b <b>c</b></p>") == "a\nb c"

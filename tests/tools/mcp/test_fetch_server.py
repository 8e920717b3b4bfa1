"""The reference ``mcp-server-fetch`` (PyPI; nobody on this team wrote it) against pages
this test serves on loopback, through our catalogue and the agent.

Its one tool, ``fetch``, is hinted read-only (and open-world): ``mutating`` unless the
entry trusts annotations. A page comes back converted to Markdown as the tool's text; a
page bigger than the tool's output bound is cut for the model with the whole text kept
as an artifact; a 404, a page its robots.txt disallows and (without
``--allow-private-ips``) any loopback address are ``isError`` results, so ``Error:``
results naming the server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

import pytest
from aiohttp import web

from bot.agent import InMemoryArtifacts, InMemoryHistory, ToolMessage, UserMessage, run
from bot.agent.config import AgentConfig
from bot.agent.testing import ScriptedModel, call, calls, text
from bot.agent.tools import Tool
from tests.tools.mcp.conftest import Connect
from tools.mcp.tool import McpTool

WAIT_S = 60.0
ROBOTS = "User-agent: *\nDisallow: /private/\n"
RUNBOOK = """<!doctype html>
<html><head><title>nginx runbook</title></head>
<body><nav><a href="/">home</a></nav>
<article>
<h1>Restarting nginx</h1>
<p>When the workers hang, check the error log first.</p>
<ul><li>drain the node</li><li>restart the service</li></ul>
</article></body></html>
"""
BIG_PARAGRAPHS = 3000
END_MARK = "end of the long runbook"


def big_page() -> str:
    step = "<p>step {}: look at the dashboards again</p>\n"
    body = "".join(step.format(n) for n in range(BIG_PARAGRAPHS))
    return (
        "<html><head><title>long runbook</title></head><body><article>"
        f"<h1>Long runbook</h1>\n{body}<p>{END_MARK}</p></article></body></html>"
    )


@dataclass
class Site:
    base: str
    hits: list[str] = field(default_factory=list)  # the paths requested, in order


@pytest.fixture
async def site() -> AsyncIterator[Site]:
    """An HTTP server on a free 127.0.0.1 port: /robots.txt, /runbook, /big; anything
    else (/private/… included) is a 404."""
    pages = {"/robots.txt": (ROBOTS, "text/plain"), "/runbook": (RUNBOOK, "text/html")}
    pages["/big"] = (big_page(), "text/html")
    hits: list[str] = []

    async def handle(request: web.Request) -> web.Response:
        hits.append(request.path)
        page = pages.get(request.path)
        if page is None:
            return web.Response(status=404, text="<html><body>not found</body></html>")
        return web.Response(text=page[0], content_type=page[1])

    app = web.Application()
    app.router.add_get("/{tail:.*}", handle)
    runner = web.AppRunner(app)
    async with asyncio.timeout(WAIT_S):
        await runner.setup()
        server = web.TCPSite(runner, "127.0.0.1", 0)
        await server.start()
    host, port = runner.addresses[0][:2]
    try:
        yield Site(base=f"http://{host}:{port}", hits=hits)
    finally:
        async with asyncio.timeout(WAIT_S):
            await runner.cleanup()


def entry(argv: Sequence[str], *, trust: bool = True) -> str:
    return f"""
        mcp_servers:
          - name: web
            command: {json.dumps(list(argv))}
            trust_annotations: {json.dumps(trust)}
        """


@dataclass
class Ran:
    message: ToolMessage
    artifacts: InMemoryArtifacts


async def fetch_once(tool: Tool, **arguments: object) -> Ran:
    """One ``web_fetch`` call through the agent (no one to approve); its result."""
    model = ScriptedModel([calls(call("web_fetch", "c1", **arguments)), text("read")])
    memory = InMemoryHistory()
    memory.append(UserMessage(content="read the runbook"))
    artifacts = InMemoryArtifacts()
    config = AgentConfig(
        job_id="job-1",
        client=model,
        memory=memory,
        system_prompt="SRE",
        tools=[tool],
        artifacts=artifacts,
    )
    async with asyncio.timeout(WAIT_S):
        result = await run(config)
    assert result.output == "read", result.error
    [message] = [m for m in model.requests[1].messages if isinstance(m, ToolMessage)]
    model.assert_done()
    return Ran(message, artifacts)


async def test_fetch_is_mutating_unless_its_hints_are_trusted(
    connect: Connect, fetch_server: list[str], fetch_environ: dict[str, str]
) -> None:
    untrusted = await connect(entry(fetch_server, trust=False), environ=fetch_environ)
    trusted = await connect(entry(fetch_server), environ=fetch_environ)
    assert sorted(untrusted.tools) == ["web_fetch"]
    plain = untrusted.tools["web_fetch"]
    assert isinstance(plain, McpTool)
    [listed] = await plain.connection.relist()
    hints = listed.annotations
    assert hints is not None
    assert (hints.read_only_hint, hints.destructive_hint, hints.open_world_hint) == (
        True,
        False,
        True,
    )
    assert (plain.category, plain.category_reason) == ("mutating", "default")
    hinted = trusted.tools["web_fetch"]
    assert isinstance(hinted, McpTool)
    assert (hinted.category, hinted.category_reason) == ("read_only", "annotation")


async def test_a_page_becomes_markdown_in_the_models_next_request(
    connect: Connect, fetch_server: list[str], fetch_environ: dict[str, str], site: Site
) -> None:
    catalog = await connect(entry([*fetch_server, "--allow-private-ips"]), environ=fetch_environ)
    url = f"{site.base}/runbook"
    ran = await fetch_once(catalog.tools["web_fetch"], url=url)
    out = ran.message.content
    assert not ran.message.is_error, out
    assert out.startswith(f"Contents of {url}:\n"), out
    assert (
        "# Restarting nginx\n\nWhen the workers hang, check the error log first.\n\n"
        "* drain the node\n* restart the service"
    ) in out
    assert "<h1>" not in out and "<li>" not in out and "<p>" not in out
    assert ran.message.artifact is None
    assert site.hits == ["/robots.txt", "/runbook"]  # robots.txt asked first


async def test_a_big_page_is_cut_by_our_bound_and_kept_as_an_artifact(
    connect: Connect, fetch_server: list[str], fetch_environ: dict[str, str], site: Site
) -> None:
    catalog = await connect(entry([*fetch_server, "--allow-private-ips"]), environ=fetch_environ)
    tool = catalog.tools["web_fetch"]
    url = f"{site.base}/big"

    whole = await fetch_once(tool, url=url, max_length=999_999)  # the server's own maximum
    shown = whole.message.content
    assert not whole.message.is_error, shown[:500]
    assert shown.startswith(f"Contents of {url}:\nlong runbook\n\n# Long runbook\n\nstep 0: ")
    assert len(shown) < tool.output_bound + 500
    assert "[output cut: " in shown and END_MARK not in shown
    assert whole.message.artifact is not None
    kept = whole.artifacts.items[whole.message.artifact]
    assert kept.startswith(shown[: tool.output_bound])
    assert END_MARK in kept and f"step {BIG_PARAGRAPHS - 1}:" in kept
    assert "Content truncated" not in kept  # the server sent it all
    assert f"[output cut: {len(kept)} chars in all;" in shown

    # By default the server cuts at 5000 characters and says how to go on; that is past
    # our bound of 4000, so the model reads our note, and the server's is in the artifact.
    default = await fetch_once(tool, url=url)
    assert default.message.artifact is not None
    assert "[output cut: " in default.message.content
    assert "start_index of 5000" not in default.message.content
    kept = default.artifacts.items[default.message.artifact]
    assert kept.rstrip().endswith(
        "<error>Content truncated. Call the fetch tool with a start_index of 5000 to get "
        "more content.</error>"
    )


async def test_a_404_is_an_error_result(
    connect: Connect, fetch_server: list[str], fetch_environ: dict[str, str], site: Site
) -> None:
    catalog = await connect(entry([*fetch_server, "--allow-private-ips"]), environ=fetch_environ)
    url = f"{site.base}/gone"
    ran = await fetch_once(catalog.tools["web_fetch"], url=url)
    assert ran.message.is_error
    assert ran.message.content.startswith("Error: mcp server 'web': "), ran.message.content
    assert f"Failed to fetch {url} - status code 404" in ran.message.content
    assert site.hits == ["/robots.txt", "/gone"]


async def test_a_page_robots_txt_disallows_is_an_error_and_never_requested(
    connect: Connect, fetch_server: list[str], fetch_environ: dict[str, str], site: Site
) -> None:
    catalog = await connect(entry([*fetch_server, "--allow-private-ips"]), environ=fetch_environ)
    ran = await fetch_once(catalog.tools["web_fetch"], url=f"{site.base}/private/keys")
    assert ran.message.is_error
    assert ran.message.content.startswith("Error: mcp server 'web': "), ran.message.content
    assert "specifies that autonomous fetching of this page is not allowed" in ran.message.content
    assert site.hits == ["/robots.txt"]


async def test_loopback_is_refused_without_allow_private_ips(
    connect: Connect, fetch_server: list[str], fetch_environ: dict[str, str], site: Site
) -> None:
    catalog = await connect(entry(fetch_server), environ=fetch_environ)
    ran = await fetch_once(catalog.tools["web_fetch"], url=f"{site.base}/runbook")
    assert ran.message.is_error
    assert ran.message.content.startswith("Error: mcp server 'web': "), ran.message.content
    assert "which is not a public address" in ran.message.content
    assert site.hits == []  # not even robots.txt was asked for

"""An alert job starts with the team's runbook, end to end (``opsloop serve``, the fake
Slack, the scripted model): the file its ``runbook_url`` points at under
``OPSLOOP_RUNBOOKS_URL``, else the runbook naming the alert; a ``runbook_url`` elsewhere
is read only through the http tools' network policy — a host the allowlist does not name
gets no request at all, the metadata address is refused even when listed, and an allowed
loopback page is read as text, bounded; and an alert that fired before brings its earlier
incident into the new job's first request."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from bot.emulator.app_server import AppServer
from bot.emulator.scripted import Reply, ScriptedRequest
from bot.emulator.slack import FakeSlack

from .alerts_kit import CHANNEL, TOKEN, notification, post_alert, roots
from .conftest import StartBot
from .harness import ScriptedModel, mention, seed

RUNBOOKS_URL = "https://runbooks.example.com/ops/"
CPU_RUNBOOK = """\
---
title: Host CPU saturated
alerts: [HostCPUHigh]
services: [web]
---
# Host CPU saturated

## Triage
1. Run host_top_processes on the instance and note the top consumer.
2. A runaway cron job: propose stopping it, with the evidence.

## Escalate
Page the owning team when nothing on the host explains the load.
"""
DISK_RUNBOOK = """\
---
title: Disk full
alerts: [DiskAlmostFull]
---
# Disk full

## Free space
1. Find the largest files under /var/log with host_disk.
2. Never delete data files; ask on the card before removing logs.
"""
SCRIPT_MARK = "SCRIPT-TEXT-NEVER-READ"
PAGE_MARK = "Loopback runbook: restart the queue consumer"


def runbooks(tmp_path: Path) -> Path:
    root = tmp_path / "runbooks"
    (root / "hosts").mkdir(parents=True)
    (root / "hosts" / "cpu.md").write_text(CPU_RUNBOOK)
    (root / "disk.md").write_text(DISK_RUNBOOK)
    return root


def alert(name: str, runbook_url: str | None = None) -> dict[str, Any]:
    body = notification(("web-03", "firing"), name=name)
    if runbook_url is not None:
        body["commonAnnotations"]["runbook_url"] = runbook_url
    return body


def first_request_of(model: ScriptedModel, name: str) -> str:
    """The conversation (no system prompt) of the first model request naming ``name``."""
    for request in model.requests:
        text = json.dumps([m for m in request.messages if m.get("role") != "system"])
        if name in text:
            return text
    raise AssertionError(f"no model request names {name}")


@dataclass
class Pages:
    """A loopback web server counting the requests it gets."""

    server: AppServer = field(default_factory=AppServer)
    hits: list[str] = field(default_factory=list)
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture
async def pages() -> AsyncIterator[Pages]:
    found = Pages()
    big = (
        f"<html><head><title>rb</title><script>var x = '{SCRIPT_MARK}';</script></head><body>"
        f"<h1>{PAGE_MARK}</h1>"
        + "".join(f"<p>step {n}: check the consumer lag on queue-{n}</p>" for n in range(60_000))
        + "</body></html>"
    )

    async def page(request: web.Request) -> web.Response:
        found.hits.append(request.path)
        return web.Response(text=big, content_type="text/html")

    app = web.Application()
    app.router.add_get("/{name}", page)
    found.port = await found.server.start(app)
    yield found
    await found.server.stop()


def answer_each(request: ScriptedRequest) -> Reply:
    return Reply(content="Looked at it.")


async def wait_for_requests(model: ScriptedModel, *names: str) -> None:
    await model.wait_for(
        lambda requests: all(any(n in json.dumps(r.messages) for r in requests) for n in names),
        timeout=30,
    )


async def test_the_runbook_at_the_alerts_url_or_naming_the_alert_is_in_the_first_request(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, tmp_path: Path
) -> None:
    model.policy = answer_each  # type: ignore[assignment]
    serve = await bot(
        OPSLOOP_ALERTS_TOKEN=TOKEN,
        OPSLOOP_ALERTS_CHANNEL=CHANNEL,
        OPSLOOP_RUNBOOKS=str(runbooks(tmp_path)),
        OPSLOOP_RUNBOOKS_URL=RUNBOOKS_URL,
    )
    # By URL: a section of a file under OPSLOOP_RUNBOOKS_URL (whatever the alert is called).
    by_url = alert("WebLatencyHigh", RUNBOOKS_URL + "hosts/cpu.md#triage")
    assert (await post_alert(serve, by_url))[0] == 200
    # By name: no runbook_url, a runbook's front matter names the alert.
    assert (await post_alert(serve, alert("DiskAlmostFull")))[0] == 200
    # Neither: nothing is made up.
    assert (await post_alert(serve, alert("QueueBacklog")))[0] == 200
    await wait_for_requests(model, "WebLatencyHigh", "DiskAlmostFull", "QueueBacklog")

    first = first_request_of(model, "WebLatencyHigh")
    assert "hosts/cpu.md#triage" in first
    assert "Run host_top_processes on the instance" in first
    assert "Page the owning team" not in first  # the section the URL names, not the file
    assert "Follow it" in first and "every change still needs an approval" in first
    second = first_request_of(model, "DiskAlmostFull")
    assert "disk.md" in second and "Never delete data files" in second
    third = first_request_of(model, "QueueBacklog")
    assert "The team's runbook" not in third
    # Every tool request offers the runbook tools too.
    tools = {t["function"]["name"] for t in model.requests[0].tools}
    assert {"search_runbooks", "read_runbook", "search_past_incidents"} <= tools
    assert len(roots(slack)) == 3


async def test_a_runbook_url_elsewhere_is_read_only_through_the_network_policy(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, pages: Pages
) -> None:
    model.policy = answer_each  # type: ignore[assignment]
    # The allowlist names another host: the loopback page gets no request.
    serve = await bot(
        OPSLOOP_ALERTS_TOKEN=TOKEN,
        OPSLOOP_ALERTS_CHANNEL=CHANNEL,
        OPSLOOP_HTTP_ALLOW="wiki.example.com,169.254.169.254",
    )
    assert (await post_alert(serve, alert("HostRefused", pages.url + "/rb.html")))[0] == 200
    metadata = "http://169.254.169.254/latest/meta-data/iam/security-credentials/"
    assert (await post_alert(serve, alert("Metadata", metadata)))[0] == 200
    await wait_for_requests(model, "HostRefused", "Metadata")
    assert pages.hits == []
    refused = first_request_of(model, "HostRefused")
    assert PAGE_MARK not in refused and "was not read" in refused
    assert "was not read" in first_request_of(model, "Metadata")
    await serve.stop()

    # Allowed: read once, as text, bounded, scripts dropped.
    serve = await bot(
        OPSLOOP_ALERTS_TOKEN=TOKEN, OPSLOOP_ALERTS_CHANNEL=CHANNEL, OPSLOOP_HTTP_ALLOW="127.0.0.1"
    )
    assert (await post_alert(serve, alert("PageFetched", pages.url + "/queue.html")))[0] == 200
    await wait_for_requests(model, "PageFetched")
    assert pages.hits == ["/queue.html"]
    allowed = first_request_of(model, "PageFetched")
    assert PAGE_MARK in allowed and "(cut)" in allowed
    assert SCRIPT_MARK not in allowed and "<p>" not in allowed
    assert allowed.count("check the consumer lag") < 400  # 8,000 characters, not 60,000 steps


async def test_an_alert_that_fired_before_starts_with_its_earlier_incident(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel
) -> None:
    answers = iter(["The cron job backup.sh took all the CPU; stopped it.", "Second look."])
    model.policy = lambda request: Reply(content=next(answers))  # type: ignore[assignment]
    serve = await bot(OPSLOOP_ALERTS_TOKEN=TOKEN, OPSLOOP_ALERTS_CHANNEL=CHANNEL)
    name = "HostCPUHigh"
    assert (await post_alert(serve, notification(("web-03", "firing"), name=name)))[0] == 200
    await slack.wait_for(
        lambda: any(
            "backup.sh" in m.text for r in roots(slack) for m in slack.messages(CHANNEL, r.ts)
        ),
        timeout=30,
    )
    resolved = notification(("web-03", "resolved"), name=name)
    assert (await post_alert(serve, resolved))[0] == 200
    await slack.wait_for(lambda: "Resolved" in roots(slack)[0].text, timeout=30)
    assert (await post_alert(serve, notification(("web-03", "firing"), name=name)))[0] == 200
    await model.wait_for(lambda requests: len(requests) >= 2, timeout=30)

    second = json.dumps(model.requests[1].messages)
    assert f"Earlier incidents with the alert {name}" in second
    assert "backup.sh took all the CPU" in second
    assert json.dumps(model.requests[0].messages).count("Earlier incidents") == 0


async def test_a_person_asking_in_an_alerts_thread_gets_its_runbook_too(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, tmp_path: Path
) -> None:
    model.policy = answer_each  # type: ignore[assignment]
    serve = await bot(
        OPSLOOP_ALERTS_TOKEN=TOKEN,
        OPSLOOP_ALERTS_CHANNEL=CHANNEL,
        OPSLOOP_ALERT_INVESTIGATIONS_PER_HOUR="0",  # the alert is posted, nobody starts a job
        OPSLOOP_RUNBOOKS=str(runbooks(tmp_path)),
    )
    assert (await post_alert(serve, alert("HostCPUHigh")))[0] == 200
    await slack.wait_for(lambda: len(roots(slack)) == 1, timeout=30)
    [root] = roots(slack)
    event = mention(CHANNEL, "U1", "what is going on here?", thread_ts=root.ts)
    seed(slack, event)
    assert (await serve.send(event))[0] == 200
    await model.wait_for(lambda requests: len(requests) >= 1, timeout=30)
    first = json.dumps([m for m in model.requests[0].messages if m.get("role") != "system"])
    assert "This thread is about the alert HostCPUHigh" in first
    assert "hosts/cpu.md" in first and "Run host_top_processes on the instance" in first
    assert first.index("HostCPUHigh") < first.index("what is going on here?")

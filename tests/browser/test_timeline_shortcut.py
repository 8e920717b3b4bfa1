"""The dev page shows an incident timeline posted by the “Incident timeline” shortcut, in the real
browser (Debian's Chromium, ``--dump-dom``; none of this folder's fixtures): the message the
fake Slack shares the file in (a real v2 upload of ``to_markdown``'s output) renders the
file's Markdown under its link — one list item per event, kinds in bold, a hostile request's
``<@U…>`` and ``<script>`` shown as text, never markup — and every message's "⋯" menu offers
both shortcuts with their manifest callback ids.

(The whole flow in ``opsloop dev`` needs its emulator to serve the fake Slack's upload
routes: see the shortcut's report.)"""

from __future__ import annotations

import asyncio
import html
import json
import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml
from slack_sdk.web.async_client import AsyncWebClient

from bot.dev.page import STATIC_DIR, html_safe_json
from bot.emulator.slack import FakeSlack
from bot.knowledge.timeline import Timeline, TimelineEvent, to_markdown
from bot.slack.files import post_file

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
)
ROOT = Path(__file__).resolve().parents[2]
T = 1_700_000_000.0
EVENTS = [
    TimelineEvent(T, "request", "UALICE", "restart web-03 <@UBOSS> <script>alert(1)</script>"),
    TimelineEvent(T + 5, "approval_requested", "opsloop", "restart host=web-03 · mutating"),
    TimelineEvent(T + 60, "approved", "UBOB", "restart host=web-03"),
    TimelineEvent(T + 90, "job_ended", "opsloop", "j1 completed · 2 iterations"),
]
PAGE = """<!doctype html><html><body><pre id="out"></pre><div id="box"></div>
<script src="APP"></script><script src="TASKS"></script><script src="SHORTCUT"></script>
<script>
var box = document.getElementById("box"), msg = MESSAGE;
box.innerHTML = window.opsloopTasks.files(msg);
var menu = document.createElement("div");
menu.innerHTML = window.opsloopShortcut.menu({channel: "C0INCIDENT"});
var preview = box.querySelector('[data-testid="file-preview"]');
document.getElementById("out").textContent = JSON.stringify({
  link: box.querySelector('[data-testid="file-link"]').textContent,
  items: Array.prototype.map.call(preview.querySelectorAll("li"), function (li) {
    return li.textContent;
  }),
  bold: Array.prototype.map.call(preview.querySelectorAll("li strong"), function (b) {
    return b.textContent;
  }),
  heading: preview.querySelector("h1").textContent,
  scripts: box.querySelectorAll("script").length,
  shortcuts: Array.prototype.map.call(menu.querySelectorAll("[data-callback-id]"), function (b) {
    return [b.dataset.callbackId, b.textContent];
  })
});
</script></body></html>"""


async def shared_message() -> dict[str, Any]:
    """The message the fake Slack shares an uploaded timeline in, as the page gets it."""
    async with FakeSlack() as slack:
        client = AsyncWebClient(token="xoxb-test", base_url=slack.api_url)
        root = slack.add_message("C0INCIDENT", None, "UALICE", "restart web-03")
        markdown = to_markdown(
            Timeline("C0INCIDENT:" + root, EVENTS), names={"UALICE": "alice", "UBOB": "bob"}
        )
        file_id = await post_file(
            client,
            channel="C0INCIDENT",
            thread_ts=root,
            filename=f"incident-timeline-{root}.md",
            content=markdown,
            title="Incident timeline",
            comment="Incident timeline, 4 events, requested by <@UBOB>",
        )
        assert file_id is not None
        [shared] = [m for m in slack.messages("C0INCIDENT", root) if m.extra.get("files")]
        return shared.as_slack()


@pytest.fixture(scope="module")
def shown(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    if CHROMIUM is None:
        pytest.skip("Debian's chromium is not installed")
    # In a thread of its own: the module's tests may share an event loop (pytestmark).
    with ThreadPoolExecutor(1) as pool:
        message = pool.submit(asyncio.run, shared_message()).result(timeout=60)
    folder = tmp_path_factory.mktemp("timeline")
    page = folder / "timeline.html"
    text = PAGE.replace("MESSAGE", html_safe_json(message))
    for name in ("APP", "TASKS", "SHORTCUT"):
        uri = (STATIC_DIR / f"{name.lower()}.js").resolve().as_uri()
        text = text.replace(f'src="{name}"', f'src="{uri}"')
    page.write_text(text)
    done = subprocess.run(
        [CHROMIUM, *FLAGS, f"--user-data-dir={folder / 'profile'}", "--dump-dom", page.as_uri()],
        capture_output=True,
        timeout=60,
        check=True,
        env={**os.environ, "TZ": "UTC"},
    )
    found = re.search(r'<pre id="out">(.*?)</pre>', done.stdout.decode(), re.DOTALL)
    assert found, done.stdout.decode()[-2000:]
    return dict(json.loads(html.unescape(found.group(1))))


async def test_the_timeline_file_renders_its_events_in_order(shown: dict[str, Any]) -> None:
    assert shown["link"] == "Incident timeline"
    assert shown["heading"].startswith("Incident timeline: C0INCIDENT:")
    assert shown["bold"] == ["request", "approval_requested", "approved", "job_ended"]
    items = shown["items"]
    assert len(items) == 4
    assert items[0].startswith("2023-11-14 22:13:20 UTC · request · @alice · restart web-03")
    assert items[2] == "2023-11-14 22:14:20 UTC · approved · @bob · restart host=web-03"


async def test_hostile_text_in_the_file_is_shown_as_text(shown: dict[str, Any]) -> None:
    assert "<@UBOSS> <script>alert(1)</script>" in shown["items"][0]
    assert shown["scripts"] == 0


async def test_the_menu_offers_both_shortcuts_as_the_manifest_declares_them(
    shown: dict[str, Any],
) -> None:
    manifest = yaml.safe_load((ROOT / "manifest.yml").read_text())
    declared = [[s["callback_id"], s["name"]] for s in manifest["features"]["shortcuts"]]
    assert shown["shortcuts"] == declared

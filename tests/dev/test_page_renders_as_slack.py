"""The dev page renders what Slack would, in the real browser (Debian's Chromium).

A ``markdown`` block has no mention syntax: ``<@U…>`` shows literally there (the bot
must write names itself). In mrkdwn, ``<@U…>`` is ``@name`` and ``<#C…>`` is
``#channel`` for the people and channels the page knows; ``<!date^…>`` is the time in
the viewer's zone, formatted by its tokens (its fallback when it cannot be read).
Message times read on a 24-hour clock, like the times the bot writes.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess

import pytest

from bot.dev.page import STATIC_DIR, html_safe_json

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
)
T = 1_700_000_000  # 2023-11-14 22:13:20 UTC, a Tuesday
CASES = {
    "mention": ("mrkdwn", "approved by <@UBOB>"),
    "labelled": ("mrkdwn", "ask <@UNOBODY|someone>"),
    "channel": ("mrkdwn", "in <#C0INCIDENT>"),
    "channel_label": ("mrkdwn", "in <#C0OTHER|ops>"),
    "markdown_mention": ("markdown", "approved by <@UBOB> in <#C0INCIDENT>"),
    "date_num": ("mrkdwn", f"<!date^{T}^{{date_num}} {{time_secs}}|fallback>"),
    "date_short": ("mrkdwn", f"<!date^{T}^{{date_short}} at {{time}}|fallback>"),
    "date_long": ("mrkdwn", f"<!date^{T}^{{date_long}}|fallback>"),
    "date_link": ("mrkdwn", f"<!date^{T}^{{date}}^https://ex.com/x|fallback>"),
    "date_bad": ("mrkdwn", "<!date^soon^{date}|the fallback>"),
}
PAGE = """<!doctype html><html><body><pre id="out"></pre>
<script src="APP"></script>
<script>
var cases = CASES, render = window.opsloopRender, out = {};
render.names.UBOB = "bob";
render.channels.C0INCIDENT = "incident";
Object.keys(cases).forEach(function (k) {
  var kind = cases[k][0], text = cases[k][1], box = document.createElement("div");
  box.innerHTML = kind === "markdown"
    ? render([{type: "markdown", text: text}], "")
    : render([{type: "section", text: {type: "mrkdwn", text: text}}], text);
  out[k] = {text: box.textContent, html: box.innerHTML};
});
out.clock = render.clock("1700000000.000100");
document.getElementById("out").textContent = JSON.stringify(out);
</script></body></html>"""


@pytest.fixture(scope="module")
def shown(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    if CHROMIUM is None:
        pytest.skip("Debian's chromium is not installed")
    folder = tmp_path_factory.mktemp("render")
    page = folder / "render.html"
    script = (STATIC_DIR / "app.js").resolve().as_uri()
    page.write_text(PAGE.replace("APP", script).replace("CASES", html_safe_json(CASES)))
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


def text(shown: dict[str, object], case: str) -> str:
    value = shown[case]
    assert isinstance(value, dict)
    return str(value["text"])


def test_mrkdwn_mentions_show_names(shown: dict[str, object]) -> None:
    assert text(shown, "mention") == "approved by @bob"
    assert text(shown, "labelled") == "ask @someone"
    assert text(shown, "channel") == "in #incident"
    assert text(shown, "channel_label") == "in #ops"


def test_a_markdown_block_shows_mentions_literally(shown: dict[str, object]) -> None:
    assert text(shown, "markdown_mention") == "approved by <@UBOB> in <#C0INCIDENT>"


def test_dates_read_as_slack_formats_them(shown: dict[str, object]) -> None:
    assert text(shown, "date_num") == "2023-11-14 22:13:20"
    assert text(shown, "date_short") == "Nov 14, 2023 at 22:13"
    assert text(shown, "date_long") == "Tuesday, November 14th, 2023"
    assert text(shown, "date_link") == "November 14th, 2023"
    link = shown["date_link"]
    assert isinstance(link, dict) and 'href="https://ex.com/x"' in str(link["html"])
    assert text(shown, "date_bad") == "the fallback"


def test_message_times_read_on_a_24_hour_clock(shown: dict[str, object]) -> None:
    assert shown["clock"] == "22:13:20"

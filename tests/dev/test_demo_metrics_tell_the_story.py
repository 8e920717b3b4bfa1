"""The demo service's numbers say what the bot concludes from them.

Its metrics describe the state it is in now — the requests since it degraded (or since
it started), at most the last minute, with that window in ``window_s`` — so a minute
that was mostly healthy no longer shows "2% of requests failed" next to a log saying
about 30 % fail; a window with no finished request says so (no 0 % made up). The
``web_metrics`` tool's first line — what the step's card and the status message show —
is that summary (not ``HTTP 200 OK``, a success line for a failing service), and the
demo model words its evidence with the same window.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.dev import demo_service as service
from bot.dev.demo_model import demo_policy
from bot.dev.demo_service import WebState, summary_line
from bot.emulator.scripted import ScriptedRequest

from .test_demo_model import HEALTH_BAD, TOOLS, Conversation


def fresh(healthy_for: float = 0.0) -> WebState:
    return WebState(port=8080, healthy_for=healthy_for)


def test_metrics_describe_the_state_since_it_began() -> None:
    web = fresh(healthy_for=20.0)
    for _ in range(90):
        web.record(2.0, True)  # the healthy first part of the minute
    web.degrade()
    for k in range(10):
        web.record(2000.0, k % 10 >= 3)  # 3 of 10 fail, all slow

    m = web.metrics()

    assert m["state"] == "degraded"
    assert (m["requests_last_min"], m["errors_last_min"]) == (10, 3)
    assert m["error_rate"] == 0.3
    assert m["p50_ms"] == 2000.0
    assert 0 <= m["window_s"] < 5


def test_no_finished_request_is_no_rate() -> None:
    m = fresh().metrics()
    assert m["requests_last_min"] == 0
    assert m["error_rate"] is None and m["p95_ms"] is None
    assert "no request finished" in summary_line(m)


def test_the_summary_line_says_the_failure_share() -> None:
    web = fresh()
    web.degrade()
    for k in range(20):
        web.record(1900.0 + k, k >= 6)  # 6 of 20 fail

    line = summary_line(web.metrics())

    assert line.startswith("web is degraded: 30% of 20 requests failed in the last ")
    assert "p95 1919 ms" in line


def test_the_metrics_command_prints_the_summary_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state_dir = tmp_path / "dev"
    service.start_service(state_dir, 0, healthy_for=0)
    try:
        assert service.main(["metrics", "--dir", str(state_dir)]) == 0
    finally:
        service.stop_service(state_dir)
    first, rest = capsys.readouterr().out.split("\n", 1)
    shown = json.loads(rest)
    assert first == summary_line(shown)
    assert first.startswith("web is degraded: ")


def test_the_demo_model_words_the_evidence_with_the_window() -> None:
    metrics = {
        "state": "degraded",
        "window_s": 42.0,
        "requests_last_min": 120,
        "error_rate": 0.3,
        "p50_ms": 1900.0,
        "p95_ms": 2431.0,
        "cpu_burn": "on",
        "cpu_percent": 60.0,
    }
    chat = Conversation().user("web is slow")
    first = chat.ask()
    chat.take(first, {"web_health": HEALTH_BAD})
    chat.take(chat.ask(), {"web_metrics": summary_line(metrics) + "\n" + json.dumps(metrics)})
    body = {"model": "demo", "messages": chat.messages, "tools": TOOLS}
    proposal = demo_policy()(ScriptedRequest("openai", "/v1/chat/completions", body, {}))
    assert "30.0% of 120 requests failed in the last 42 s (p95 2431 ms)" in (proposal.content or "")

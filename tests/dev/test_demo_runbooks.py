"""``opsloop dev`` ships the team's runbooks for its demo, and the demo model follows them.

The folder (``bot/dev/runbooks``) parses with the bot's own runbook reader: web's runbook
names the demo's alerts in its front matter, its steps name the demo's tools, and the
others are unrelated. The demo's alerts point their ``runbook_url`` at web's runbook under
the address ``opsloop dev`` gives as ``OPSLOOP_RUNBOOKS_URL``, which resolves to that file.

The demo model, given an alert job's request carrying the runbook (as the bot words it),
cites the runbook's sections and the steps it followed; given a person's mention with
``search_runbooks`` offered, searches once with its first read-only calls, reads the top
hit's runbook when ``read_runbook`` is offered, names the runbook step its restart is,
and cites what it followed (or the top hit); without those tools, nothing changes.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest

from bot.dev import demo_runbook as rb
from bot.dev.demo_alerts import ERROR_RATE, LATENCY, Rule
from bot.dev.demo_model import demo_policy
from bot.dev.demo_tools import TOOL_NAMES
from bot.emulator.scripted import Reply, ScriptedRequest
from bot.knowledge.markdown import parse_runbook
from bot.knowledge.runbooks import Runbooks
from bot.turns.knowledge import Knowledge
from tools.packs.runbooks import hits_text

from .test_demo_model import (
    HEALTH_BAD,
    HEALTH_OK,
    LOGS,
    METRICS_BAD,
    METRICS_OK,
    REQUEST,
    RESTARTED,
    TOOLS,
    Conversation,
    names,
)
from .test_demo_model_investigates_alerts import alert_request

RUNBOOK_TOOLS = [
    {"type": "function", "function": {"name": n, "parameters": {}}}
    for n in ("search_runbooks", "read_runbook", "search_past_incidents")
]
ALERTS = {ERROR_RATE.name, LATENCY.name}


@pytest.fixture(scope="module")
def runbooks() -> Runbooks:
    return Runbooks(rb.RUNBOOKS_DIR, base_url=rb.RUNBOOKS_URL)


@dataclass
class Chat(Conversation):
    """A conversation whose requests offer ``offered`` (default: the demo's tools and the
    knowledge tools every job gets), with the runbook tools answered by the real folder."""

    offered: list[dict[str, Any]] = field(default_factory=lambda: TOOLS + RUNBOOK_TOOLS)
    folder: Runbooks | None = None

    def user(self, text: str) -> Chat:
        super().user(text)
        return self

    def ask(self) -> Reply:
        body = {"model": "demo", "messages": list(self.messages), "tools": self.offered}
        return demo_policy()(ScriptedRequest("openai", "/v1/chat/completions", body, {}))

    def answer(self, reply: Reply, **results: str) -> Reply:
        """Answer ``reply``'s calls: the runbook tools from the folder, the rest from
        ``results``; then ask again."""
        assert self.folder is not None
        given = dict(results)
        for call in reply.tool_calls:
            args = cast(dict[str, Any], call.arguments)
            if call.name == "search_runbooks":
                hits = self.folder.search(args["query"], args.get("limit", 5))
                given[call.name] = hits_text(hits, query=args["query"], indexed=3)
            elif call.name == "read_runbook":
                given[call.name] = self.folder.read(args["ref"])
        assert names(reply) == sorted(given), (names(reply), sorted(given))
        self.take(reply, given)
        return self.ask()


def with_runbook(runbooks: Runbooks, rule: Rule = ERROR_RATE) -> str:
    """An alert job's first request as the bot writes it: the alert, then its runbook."""
    knowledge = Knowledge(incidents=cast(Any, None), retention_s=1.0, runbooks=runbooks)
    paragraph = asyncio.run(knowledge.runbook_for(rule.name, rule.runbook))
    assert paragraph is not None
    return f"{alert_request(rule)}\n\n{paragraph}"


# -- the folder ----------------------------------------------------------------------------


def test_the_folder_parses_and_web_runbook_names_the_demos_alerts(runbooks: Runbooks) -> None:
    files = sorted(rb.RUNBOOKS_DIR.glob("*.md"))
    assert 2 <= len(files) <= 4
    metas = {f.name: parse_runbook(f.read_text()).meta for f in files}
    assert all(m.title for m in metas.values())
    web = metas[rb.WEB_RUNBOOK]
    assert set(web.alerts) == ALERTS and web.services == ("web",)
    others = [m for name, m in metas.items() if name != rb.WEB_RUNBOOK]
    assert others and all("web" not in m.services and not ALERTS & set(m.alerts) for m in others)

    summary = runbooks.summary()
    assert summary.skipped == () and summary.files == len(files)
    assert ALERTS <= set(summary.alerts)


def test_web_runbook_steps_name_the_demo_tools() -> None:
    text = parse_runbook((rb.RUNBOOKS_DIR / rb.WEB_RUNBOOK).read_text()).markdown
    book = rb.Runbook.parse(rb.WEB_RUNBOOK, "web", text)
    sections = {s.slug: s for s in book.sections}
    triage = [s.tools for s in sections["triage"].steps]
    assert triage[:3] == [{"web_health"}, {"web_metrics"}, {"web_logs"}]
    restart = sections["restart-web"].steps
    assert restart[0].tools == {"web_restart"} and restart[0].name == "propose the restart"
    assert restart[2].tools == {"web_health", "web_metrics"} and restart[2].name == "verify after"
    named = {t for s in book.sections for step in s.steps for t in step.tools}
    assert named <= set(TOOL_NAMES)


@pytest.mark.parametrize("rule", [ERROR_RATE, LATENCY])
def test_the_alerts_runbook_url_is_web_runbook_under_the_published_address(
    runbooks: Runbooks, rule: Rule
) -> None:
    assert rule.runbook.startswith(rb.RUNBOOKS_URL)
    found = runbooks.for_url(rule.runbook)
    assert found is not None and found.ref == rb.WEB_RUNBOOK


def test_dev_points_the_bot_at_the_folder_unless_you_have_your_own(tmp_path: Path) -> None:
    assert rb.runbooks_env({}) == {
        "OPSLOOP_RUNBOOKS": str(rb.RUNBOOKS_DIR),
        "OPSLOOP_RUNBOOKS_URL": rb.RUNBOOKS_URL,
    }
    assert rb.runbooks_env({"OPSLOOP_RUNBOOKS_URL": "https://x.example/"}) == rb.runbooks_env({})
    assert rb.runbooks_env({"OPSLOOP_RUNBOOKS": str(tmp_path)}) == {}


# -- an alert job with its runbook ---------------------------------------------------------


def test_an_alert_job_follows_its_runbook_and_cites_the_steps(runbooks: Runbooks) -> None:
    chat = Chat(folder=runbooks).user(with_runbook(runbooks))
    first = chat.ask()
    assert names(first) == ["web_health", "web_logs", "web_metrics"]  # no search: it has one

    answer = chat.answer(first, web_health=HEALTH_BAD, web_metrics=METRICS_BAD, web_logs=LOGS)

    text = answer.content or ""
    assert text.startswith("**WebErrorRateHigh: confirmed — web is degraded.**")
    assert text.endswith(
        "Following the team's runbook `web.md#triage` (web: failing or slow requests): "
        "steps 1–3 — check health, read the metrics, read the log."
    )


def test_a_healthy_alert_still_names_the_runbook_it_followed(runbooks: Runbooks) -> None:
    chat = Chat(folder=runbooks, offered=TOOLS).user(with_runbook(runbooks, LATENCY))
    answer = chat.step(web_health=HEALTH_OK, web_metrics=METRICS_OK, web_logs="")
    text = answer.content or ""
    assert text.startswith("**WebLatencyHigh: not confirmed")
    assert "Following the team's runbook `web.md#triage`" in text


def test_an_unrelated_runbook_is_named_without_claiming_its_steps() -> None:
    text = (rb.RUNBOOKS_DIR / "redis-memory.md").read_text()
    body = "\n".join(f"> {line}" if line else ">" for line in text.splitlines())
    request = (
        f"{alert_request()}\n\nThe team's runbook redis-memory.md (Redis: memory near "
        "maxmemory). This is the team's runbook for this alert. Follow it where it "
        f"applies.\n{body}"
    )
    chat = Chat(offered=TOOLS).user(request)
    answer = chat.step(web_health=HEALTH_BAD, web_metrics=METRICS_BAD, web_logs=LOGS)
    text = answer.content or ""
    assert "`redis-memory.md` (Redis: memory near maxmemory)" in text
    assert "none of its steps is one I took here" in text


def test_an_alert_without_a_runbook_searches_by_its_name(runbooks: Runbooks) -> None:
    chat = Chat(folder=runbooks).user(alert_request())
    first = chat.ask()
    assert names(first) == ["search_runbooks", "web_health", "web_logs", "web_metrics"]
    search = cast(dict[str, Any], first.tool_calls[-1].arguments)
    assert search == {"query": "WebErrorRateHigh triage", "limit": rb.SEARCH_LIMIT}

    answer = chat.answer(first, web_health=HEALTH_BAD, web_metrics=METRICS_BAD, web_logs=LOGS)
    text = answer.content or ""
    assert text.startswith("**WebErrorRateHigh: confirmed")
    assert text.endswith(
        "The team's runbook for this: `web.md#triage` (web: failing or slow requests › Triage)."
    )


# -- a person's mention -------------------------------------------------------------------


def test_a_mention_searches_reads_and_follows_the_runbook(runbooks: Runbooks) -> None:
    chat = Chat(folder=runbooks).user(REQUEST)
    first = chat.ask()
    assert names(first) == ["search_runbooks", "web_health"]  # at once, the first step
    assert first.content == "Checking web's health endpoint first."
    query = cast(dict[str, Any], first.tool_calls[-1].arguments)["query"]
    assert "web" in query and "slow" in query and "<@" not in query

    second = chat.answer(first, web_health=HEALTH_BAD)
    assert names(second) == ["read_runbook", "web_metrics"]
    assert cast(dict[str, Any], second.tool_calls[-1].arguments) == {"ref": "web.md"}

    proposal = chat.answer(second, web_metrics=METRICS_BAD)
    assert names(proposal) == ["web_restart"]
    assert (proposal.content or "").endswith(
        "This is step 1 of the team's runbook `web.md#restart-web` (propose the restart)."
    )

    verify = chat.answer(proposal, web_restart=RESTARTED)
    assert names(verify) == ["web_health", "web_metrics"]  # searched once, read once
    answer = chat.answer(verify, web_health=HEALTH_OK, web_metrics=METRICS_OK)

    text = answer.content or ""
    assert text.startswith("**web is healthy again.**")
    assert text.endswith(
        "Following the team's runbook `web.md#triage` (web: failing or slow requests): "
        "steps 1 and 2 — check health, read the metrics; then `web.md#restart-web`: "
        "steps 1 and 3 — propose the restart, verify after."
    )


def test_with_search_only_the_answer_cites_the_top_hit(runbooks: Runbooks) -> None:
    offered = [t for t in TOOLS + RUNBOOK_TOOLS if "read_runbook" not in json.dumps(t)]
    chat = Chat(folder=runbooks, offered=offered).user(REQUEST)
    first = chat.ask()
    assert names(first) == ["search_runbooks", "web_health"]
    answer = chat.answer(first, web_health=HEALTH_OK)

    text = answer.content or ""
    assert text.startswith("**web looks healthy:**")
    assert text.endswith(
        "The team's runbook for this: `web.md#triage` (web: failing or slow requests › Triage)."
    )


def test_no_matching_runbook_is_said(runbooks: Runbooks) -> None:
    chat = Chat(folder=runbooks).user(REQUEST)
    first = chat.ask()
    chat.take(
        first,
        {
            "web_health": HEALTH_OK,
            "search_runbooks": "No runbook section matches 'x' (0 runbooks).",
        },
    )
    text = chat.ask().content or ""
    assert text.endswith("No team runbook matched this (search_runbooks found none).")


def test_without_the_runbook_tools_nothing_changes() -> None:
    with_tools, without = Chat(folder=None), Conversation()
    for chat in (with_tools, without):
        chat.user(REQUEST)
    first = without.ask()
    assert names(first) == ["web_health"]
    assert "runbook" not in json.dumps([c.arguments for c in first.tool_calls])
    # Offered but with nothing found, the steps are the same as without them.
    searched = with_tools.ask()
    assert [c.name for c in searched.tool_calls if c.name != "search_runbooks"] == ["web_health"]

    without.take(first, {"web_health": HEALTH_BAD})
    second = without.ask()
    without.take(second, {"web_metrics": METRICS_BAD})
    proposal = without.ask()
    assert names(proposal) == ["web_restart"] and "runbook" not in (proposal.content or "")
    without.take(proposal, {"web_restart": RESTARTED})
    answer = without.step(web_health=HEALTH_OK, web_metrics=METRICS_OK)
    assert "runbook" not in (answer.content or "")


def test_runbook_text_is_read_from_the_request_and_from_read_runbook(
    runbooks: Runbooks,
) -> None:
    given = rb.given_runbook(with_runbook(runbooks))
    read = rb.read_result(runbooks.read("web.md"))
    assert given is not None and read is not None
    assert given.ref == read.ref == "web.md"
    assert given.title == read.title == "web: failing or slow requests"
    assert [s.slug for s in given.sections] == [s.slug for s in read.sections]
    assert [s.slug for s in given.sections][1:3] == ["triage", "restart-web"]
    assert rb.read_result("Error: no runbook 'x'") is None
    assert rb.given_runbook(alert_request()) is None
    hit = rb.top_hit(hits_text(runbooks.search("restart web", 3), query="restart web", indexed=3))
    assert hit is not None and hit.ref == "web.md#restart-web" and hit.path == "web.md"

"""The demo model: a scripted incident responder that follows the conversation.

Driven directly with OpenAI-shaped conversations (what the bot sends): degraded →
metrics → a restart proposed with its reason; declined → an answer without a restart;
restarted → verified → a before/after table naming the approver; a correction mid-turn →
logs and no restart until asked again; healthy → nothing changed. Then the real agent
loop over HTTP (``ScriptedServer`` + ``OpenAIClient``) with the real tools of the
generated tools.yml against the real service: approved, the process is really replaced
and the answer says so; denied or corrected, it is left alone.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from bot.agent import (
    AgentConfig,
    Approved,
    ConfirmRequest,
    Decision,
    Denied,
    Injected,
    InMemoryHistory,
    RunResult,
    StopReason,
    UserMessage,
    run,
)
from bot.dev import demo_service as service
from bot.dev.demo_model import demo_policy, restart_intent
from bot.dev.demo_tools import TOOL_NAMES, write_tools_file
from bot.emulator.model_server import ScriptedServer
from bot.emulator.scripted import Reply, ScriptedRequest
from bot.llm.chain import ModelChain
from bot.llm.openai import OpenAIClient
from bot.prompts import default_prompt
from tools.registry import build_catalog

from .test_demo_service import leftovers, set_healthy_for, state_dir, wait_until

__all__ = ["state_dir"]  # the fixture, shared with the service tests

HEALTH_BAD = (
    "HTTP 500 Internal Server Error in 2517 ms\n"
    "error: reindex job holds every worker (timed out waiting for a worker)"
)
HEALTH_SLOW = "HTTP 200 OK in 1834 ms\nok"
HEALTH_OK = "HTTP 200 OK in 3 ms\nok"
METRICS_BAD = "HTTP 200 OK in 62 ms\n" + json.dumps(
    {
        "service": "web",
        "pid": 4242,
        "state": "degraded",
        "uptime_s": 35.2,
        "requests_last_min": 130,
        "error_rate": 0.238,
        "p50_ms": 1762.2,
        "p95_ms": 2400.7,
        "cpu_burn": "on",
        "cpu_percent": 60.4,
    },
    indent=2,
)
METRICS_OK = "HTTP 200 OK in 2 ms\n" + json.dumps(
    {
        "pid": 4388,
        "state": "healthy",
        "requests_last_min": 3,
        "error_rate": 0.0,
        "p95_ms": 1.2,
        "cpu_burn": "off",
        "cpu_percent": 1.0,
    },
    indent=2,
)
LOGS = (
    "2026-01-05 10:00:21,100 WARNING background job 'reindex' is stuck in a busy loop after "
    "20 s of uptime (demo fault): requests now take 1.5-2.5 s, about 30% fail, CPU burn on\n"
    "2026-01-05 10:00:23,100 ERROR GET / 500 in 2013 ms: timed out waiting for a worker\n"
    "2026-01-05 10:00:23,400 WARNING GET / 200 in 1603 ms (slow)\n"
)
RESTARTED = "restarted web: pid 4242 → 4388, healthy (approved by <@U123>)\n"
DECLINED = "Error: declined: denied by <@U456>"
REQUEST = "<@UBOT> web is slow and throwing errors, can you look into it?"
TOOLS = [{"type": "function", "function": {"name": n, "parameters": {}}} for n in TOOL_NAMES]


@dataclass
class Conversation:
    """What the bot sends the model, grown the way the agent loop grows it."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    ids: int = 0

    def __post_init__(self) -> None:
        self.messages.append({"role": "system", "content": default_prompt()})

    def user(self, text: str) -> Conversation:
        self.messages.append({"role": "user", "content": text})
        return self

    def ask(self) -> Reply:
        body = {"model": "demo", "messages": list(self.messages), "tools": TOOLS}
        return demo_policy()(ScriptedRequest("openai", "/v1/chat/completions", body, {}))

    def take(self, reply: Reply, results: dict[str, str]) -> Conversation:
        """The assistant message of ``reply``, then a result for each of its calls."""
        calls: list[dict[str, Any]] = []
        for call in reply.tool_calls:
            self.ids += 1
            calls.append(
                {
                    "id": f"call_{self.ids}",
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments_json},
                }
            )
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if calls:
            message["tool_calls"] = calls
        self.messages.append(message)
        for wire in calls:
            name = wire["function"]["name"]
            self.messages.append(
                {"role": "tool", "tool_call_id": wire["id"], "content": results[name]}
            )
        return self

    def step(self, **results: str) -> Reply:
        """Ask, check the calls are answered by ``results``, append both, ask again."""
        reply = self.ask()
        assert names(reply) == sorted(results), reply
        self.take(reply, results)
        return self.ask()


def names(reply: Reply) -> list[str]:
    return sorted(c.name for c in reply.tool_calls)


def degraded_until_restart() -> tuple[Conversation, Reply]:
    """A request on a degraded web, up to the proposed restart."""
    chat = Conversation().user(REQUEST)
    first = chat.ask()
    assert names(first) == ["web_health"]
    assert first.content == "Checking web's health endpoint first."
    chat.take(first, {"web_health": HEALTH_BAD})
    second = chat.ask()
    assert names(second) == ["web_metrics"]
    chat.take(second, {"web_metrics": METRICS_BAD})
    return chat, chat.ask()


# -- the policy, step by step ------------------------------------------------------------


def test_degraded_service_gets_a_restart_proposed_with_its_reason() -> None:
    _, proposal = degraded_until_restart()

    assert names(proposal) == ["web_restart"]
    assert proposal.tool_calls[0].arguments == {}
    reason = proposal.content or ""
    assert "/health answered HTTP 500 in 2517 ms" in reason
    assert "23.8% of 130 requests failed in the last minute (p95 2401 ms)" in reason
    assert "60.4% CPU" in reason
    assert "check /health and the metrics again afterwards" in reason


def test_slow_health_counts_as_degraded() -> None:
    chat = Conversation().user(REQUEST)
    reply = chat.step(web_health=HEALTH_SLOW)
    assert names(reply) == ["web_metrics"]
    assert "HTTP 200 in 1834 ms: web is degraded" in (reply.content or "")


def test_declined_restart_ends_with_an_answer_and_no_restart() -> None:
    chat, proposal = degraded_until_restart()
    chat.take(proposal, {"web_restart": DECLINED})

    answer = chat.ask()

    assert answer.tool_calls == ()
    text = answer.content or ""
    assert text.startswith(
        "**I did not restart web**: the restart was declined (denied by <@U456>)"
    )
    assert "/health: HTTP 500 in 2517 ms" in text
    assert "23.8% of 130 requests failed" in text
    assert "read its log (`web_logs`)" in text  # what it would do next
    assert "restarted web" not in text


def test_approved_restart_is_verified_then_reported_with_a_table() -> None:
    chat, proposal = degraded_until_restart()
    chat.take(proposal, {"web_restart": RESTARTED})
    verify = chat.ask()
    assert names(verify) == ["web_health", "web_metrics"]
    assert "pid 4242 → 4388" in (verify.content or "")

    answer = chat.step(web_health=HEALTH_OK, web_metrics=METRICS_OK)

    assert answer.tool_calls == ()
    text = answer.content or ""
    assert text.startswith("**web is healthy again.**")
    assert "| /health | HTTP 500 in 2517 ms | HTTP 200 in 3 ms |" in text
    assert "| state | degraded | healthy |" in text
    assert "| failed requests | 23.8% of 130 (last minute) | 0.0% of 3 (last minute) |" in text
    assert "| p95 latency | 2401 ms | 1 ms |" in text
    assert "| CPU | 60% (burn on) | 1% (burn off) |" in text
    assert "| pid | 4242 | 4388 |" in text
    assert "**Action:** restarted web (pid 4242 → 4388), approved by <@U123>." in text


def test_still_unhealthy_after_the_restart_is_said_plainly() -> None:
    chat, proposal = degraded_until_restart()
    chat.take(proposal, {"web_restart": RESTARTED})
    answer = chat.step(web_health=HEALTH_BAD, web_metrics=METRICS_BAD)
    text = answer.content or ""
    assert text.startswith("**web was restarted but is still not healthy:** HTTP 500")
    assert "approved by <@U123>" in text


def test_failed_restart_is_reported() -> None:
    chat, proposal = degraded_until_restart()
    chat.take(proposal, {"web_restart": "Error: exit 1: web: web did not answer /health"})
    text = chat.ask().content or ""
    assert text.startswith("**The restart of web failed**")
    assert "`Error: exit 1: web: web did not answer /health`" in text


def test_correction_mid_turn_shows_the_logs_instead_of_restarting() -> None:
    chat = Conversation().user(REQUEST)
    chat.take(chat.ask(), {"web_health": HEALTH_BAD})
    # Without the correction the next step would be the metrics, then the restart.
    assert names(chat.ask()) == ["web_metrics"]
    chat.user("<@U123>: don’t restart, show me the logs first")

    logs = chat.ask()

    assert names(logs) == ["web_logs"]
    assert logs.tool_calls[0].arguments == {"lines": 40}
    assert logs.content == "Understood: I won't restart web. Here is its log."
    chat.take(logs, {"web_logs": LOGS})
    answer = chat.ask()
    assert answer.tool_calls == ()
    text = answer.content or ""
    assert text.startswith("**Holding off on a restart, as you asked.**")
    assert "log: 1 failed and 1 slow requests in the last 3 lines" in text
    assert "background job 'reindex' is stuck in a busy loop" in text
    assert "Nothing was changed" in text
    chat.take(answer, {})

    # Asked again (a new turn): check the current state, then propose the restart.
    chat.user("<@U123>: ok, restart web")
    first = chat.ask()
    assert names(first) == ["web_health"]
    proposal = chat.step(web_health=HEALTH_BAD)
    assert names(proposal) == ["web_restart"]
    assert (proposal.content or "").startswith("As you asked, proposing a restart.")


def test_hold_in_the_request_itself_never_proposes_a_restart() -> None:
    chat = Conversation().user("web is slow, look into it but do not restart anything")
    reply = chat.step(web_health=HEALTH_BAD)
    assert names(reply) == ["web_logs"]
    chat.take(reply, {"web_logs": LOGS})
    answer = chat.ask()
    assert answer.tool_calls == ()
    assert (answer.content or "").startswith("**Holding off on a restart")


def test_correction_after_the_restart_ran_says_so() -> None:
    chat, proposal = degraded_until_restart()
    chat.take(proposal, {"web_restart": RESTARTED})
    chat.user("<@U123>: wait, don't restart it, show me the logs")

    logs = chat.ask()

    assert names(logs) == ["web_logs"]
    assert (logs.content or "").startswith(
        "web had already been restarted (pid 4242 → 4388, approved by <@U123>)"
    )
    chat.take(logs, {"web_logs": LOGS})
    assert names(chat.ask()) == ["web_health", "web_metrics"]  # then it verifies


CORRECTION = "<@UALICE>: don't restart, show me the logs first"
WHILE_WAITING = (
    "(opsloop: sent at 16:01:02 UTC while `web_restart` waited for approval; <@UBOB> "
    "approved it at 16:01:47 UTC, after this message; the call has run and its result is above)"
)


def restarted_then(reply: str) -> tuple[Conversation, Reply]:
    """Up to the approved restart's result, then ``reply`` as the history holds it."""
    chat, proposal = degraded_until_restart()
    chat.take(
        proposal, {"web_restart": "restarted web: pid 4242 → 4388, healthy (approved by <@UBOB>)"}
    )
    chat.user(reply)
    return chat, chat.ask()


def test_a_reply_sent_while_the_restart_waited_is_answered_in_its_true_order() -> None:
    chat, logs = restarted_then(f"{CORRECTION}\n\n{WHILE_WAITING}")

    assert names(logs) == ["web_logs"]
    lead = logs.content or ""
    assert lead.startswith(
        "Your message came in while the restart waited for approval; <@UBOB> approved it "
        "at 16:01:47 UTC, after your message, so web was restarted (pid 4242 → 4388)."
    ), lead
    assert "already" not in lead and "when your message came in" not in lead
    assert lead.endswith("Here are the logs you asked for.")

    chat.take(logs, {"web_logs": LOGS})
    answer = chat.step(web_health=HEALTH_OK, web_metrics=METRICS_OK)
    text = answer.content or ""
    assert text.startswith("**web is healthy again.**")
    assert (
        "**Your message** (sent at 16:01:02 UTC) came in while the restart waited for "
        "approval; <@UBOB> approved it at 16:01:47 UTC, after your message."
    ) in text
    assert "**Logs you asked for:** 1 failed and 1 slow requests in the last 3 lines" in text
    assert "already" not in text


@pytest.mark.parametrize(
    ("note", "lead"),
    [
        (
            "(opsloop: sent at 16:00:58 UTC, before `web_restart` asked for approval at "
            "16:01:00 UTC; read only now, after <@UBOB> approved it at 16:01:47 UTC; the "
            "call has run and its result is above)",
            "Your message came in before I asked to restart web, but I read it only after "
            "<@UBOB> approved the restart at 16:01:47 UTC, so web was restarted "
            "(pid 4242 → 4388).",
        ),
        (
            "(opsloop: sent at 16:01:50 UTC, after <@UBOB> approved `web_restart` at 16:01:47 UTC)",
            "web had already been restarted (pid 4242 → 4388, approved by <@UBOB> at "
            "16:01:47 UTC) when your message came in; that cannot be undone.",
        ),
    ],
)
def test_a_reply_read_after_the_restart_says_when_it_came(note: str, lead: str) -> None:
    _, logs = restarted_then(f"{CORRECTION}\n\n{note}")
    assert names(logs) == ["web_logs"]
    assert (logs.content or "").startswith(lead), logs.content


def test_a_reply_sent_while_the_restart_waited_then_denied_says_so() -> None:
    chat, proposal = degraded_until_restart()
    chat.take(proposal, {"web_restart": "Error: declined: denied by <@UBOB>"})
    note = (
        "(opsloop: sent at 16:01:02 UTC while `web_restart` waited for approval; <@UBOB> "
        "denied it at 16:01:47 UTC, after this message; the call did not run)"
    )
    chat.user(f"{CORRECTION}\n\n{note}")
    logs = chat.ask()
    assert names(logs) == ["web_logs"]
    assert (logs.content or "").startswith(
        "Your message came in while the restart waited for approval; <@UBOB> denied it at "
        "16:01:47 UTC, so web was not restarted."
    ), logs.content
    chat.take(logs, {"web_logs": LOGS})
    text = chat.ask().content or ""
    assert text.startswith("**I did not restart web**")
    assert (
        "**Your message** (sent at 16:01:02 UTC) came in while the restart waited for "
        "approval; <@UBOB> denied it at 16:01:47 UTC, after your message."
    ) in text


def test_a_runtime_note_is_not_read_as_the_persons_words() -> None:
    # The note names the tool (``web_restart``) and says "the call has run": neither is
    # a person asking for a restart.
    chat, proposal = degraded_until_restart()
    chat.take(proposal, {"web_restart": DECLINED})
    chat.user(f"<@UALICE>: thanks\n\n{WHILE_WAITING}")
    answer = chat.ask()
    assert answer.tool_calls == ()
    assert (answer.content or "").startswith("**I did not restart web**")


def test_healthy_service_is_not_restarted() -> None:
    chat = Conversation().user(REQUEST)

    answer = chat.step(web_health=HEALTH_OK)

    assert answer.tool_calls == ()
    text = answer.content or ""
    assert text.startswith("**web looks healthy:** /health answered HTTP 200 in 3 ms.")
    assert "I changed nothing" in text


def test_an_earlier_incident_in_the_thread_does_not_count() -> None:
    chat, proposal = degraded_until_restart()
    chat.take(proposal, {"web_restart": RESTARTED})
    answer = chat.step(web_health=HEALTH_OK, web_metrics=METRICS_OK)
    chat.take(answer, {})
    chat.user("<@U123>: and now?")
    assert names(chat.ask()) == ["web_health"]


def test_a_tool_not_offered_is_not_called() -> None:
    chat, _ = degraded_until_restart()
    body = {"messages": chat.messages, "tools": [t for t in TOOLS if "restart" not in str(t)]}
    reply = demo_policy()(ScriptedRequest("openai", "/v1/chat/completions", body, {}))
    assert reply.tool_calls == ()
    assert "I can't use `web_restart` here" in (reply.content or "")


def test_anthropic_shaped_conversations_are_read_too() -> None:
    messages = [
        {"role": "user", "content": REQUEST},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "tu_1", "name": "web_health", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "tu_1", "content": HEALTH_OK}],
        },
    ]
    body = {"messages": messages}
    reply = demo_policy()(ScriptedRequest("anthropic", "/v1/messages", body, {}))
    assert (reply.content or "").startswith("**web looks healthy:**")


@pytest.mark.parametrize(
    ("text", "intent"),
    [
        ("<@U1>: don’t restart, show me the logs first", "hold"),
        ("please hold off on the restart", "hold"),
        ("no restarts during the sale", "hold"),
        ("wait, do not restart web yet", "hold"),
        ("ok, restart web", "go"),
        ("<@U1>: go ahead", "go"),
        ("why is web slow?", None),
        ("was it restarted already?", None),
    ],
)
def test_what_a_message_says_about_restarting(text: str, intent: str | None) -> None:
    assert restart_intent(text) == intent


def test_replies_are_deterministic() -> None:
    chat, _ = degraded_until_restart()
    assert chat.ask() == chat.ask()


# -- the real agent loop, the real tools, the real service ----------------------------


@dataclass
class Setup:
    state_dir: Path
    port: int
    pid: int
    tools_file: Path


@pytest.fixture
async def degraded_web(state_dir: Path) -> Setup:
    """The service, degraded; a restart will start one that stays healthy a while."""
    pid = await asyncio.to_thread(service.start_service, state_dir, 0, 0.5)
    port = service.service_port(state_dir)

    def degraded() -> bool:
        return str(service.fetch_metrics(port)["state"]) == "degraded"

    await asyncio.to_thread(wait_until, degraded, what="degraded")
    set_healthy_for(state_dir, 60)
    return Setup(state_dir, port, pid, write_tools_file(state_dir, port=port))


@pytest.fixture
async def model() -> AsyncIterator[ScriptedServer]:
    async with ScriptedServer(demo_policy()) as server:
        yield server


class Once:
    """An inject source that hands over one message before the second model call."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.fetches = 0
        self.acked: list[str] = []

    async def fetch(self) -> Sequence[Injected]:
        self.fetches += 1
        if self.fetches == 2 and not self.acked:
            return [Injected(id="m2", text=self.text, author="U123")]
        return []

    async def ack(self, items: Sequence[Injected]) -> None:
        self.acked += [i.id for i in items]


async def run_agent(
    setup: Setup, model: ScriptedServer, decision: Decision, inject: Once | None = None
) -> tuple[RunResult, list[ConfirmRequest]]:
    asked: list[ConfirmRequest] = []

    async def confirm(request: ConfirmRequest) -> Decision:
        asked.append(request)
        return decision

    catalog = build_catalog(tools_file=setup.tools_file, http_allow="127.0.0.1")
    memory = InMemoryHistory()
    memory.append(UserMessage(content=REQUEST))
    try:
        async with httpx.AsyncClient(trust_env=False, timeout=30) as http:
            client = OpenAIClient(model="demo", base_url=model.base_url, http=http)
            config = AgentConfig(
                job_id="job-demo",
                client=ModelChain([client]),
                memory=memory,
                system_prompt=default_prompt(),
                tools=catalog.for_channel(None),
                confirm=confirm,
                inject=inject,
                stream=True,
            )
            result = await asyncio.wait_for(run(config), timeout=60)
    finally:
        await catalog.aclose()
    return result, asked


def called(model: ScriptedServer) -> list[list[str]]:
    """The tools of each of the model's tool-calling responses, from its last request."""
    return [
        [c["function"]["name"] for c in m["tool_calls"]]
        for m in model.requests[-1].messages
        if m.get("role") == "assistant" and m.get("tool_calls")
    ]


async def test_agent_loop_restarts_the_real_service(
    degraded_web: Setup, model: ScriptedServer
) -> None:
    result, asked = await run_agent(degraded_web, model, Approved(confirmed_by="U123"))

    assert result.stop_reason is StopReason.COMPLETED, result.error
    new = service.read_pid(degraded_web.state_dir)
    old = degraded_web.pid
    assert new is not None and new != old
    assert not service.alive(old)
    assert service.fetch_metrics(degraded_web.port)["pid"] == new
    assert called(model) == [
        ["web_health"],
        ["web_metrics"],
        ["web_restart"],
        ["web_health", "web_metrics"],
    ]
    (card,) = asked
    assert card.tool == "web_restart"
    assert card.reason is not None and card.reason.startswith("web is degraded: /health answered")
    output = result.output or ""
    assert output.startswith("**web is healthy again.**"), output
    assert f"**Action:** restarted web (pid {old} → {new}), approved by <@U123>." in output
    assert re.search(rf"\| pid \| {old} \| {new} \|", output)
    assert leftovers(degraded_web.state_dir) == [new]


async def test_agent_loop_denied_leaves_the_service_alone(
    degraded_web: Setup, model: ScriptedServer
) -> None:
    result, asked = await run_agent(degraded_web, model, Denied(reason="denied by <@U456>"))

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert len(asked) == 1
    assert service.read_pid(degraded_web.state_dir) == degraded_web.pid
    assert service.alive(degraded_web.pid)
    assert (result.output or "").startswith("**I did not restart web**")
    assert "denied by <@U456>" in (result.output or "")


async def test_agent_loop_follows_a_correction_mid_turn(
    degraded_web: Setup, model: ScriptedServer
) -> None:
    inject = Once("don't restart, show me the logs first")

    result, asked = await run_agent(
        degraded_web, model, Approved(confirmed_by="U123"), inject=inject
    )

    assert result.stop_reason is StopReason.COMPLETED, result.error
    assert inject.acked == ["m2"]
    assert asked == []  # no restart was even proposed
    assert called(model) == [["web_health"], ["web_logs"]]
    assert service.read_pid(degraded_web.state_dir) == degraded_web.pid
    output = result.output or ""
    assert output.startswith("**Holding off on a restart, as you asked.**")
    assert "stuck in a busy loop" in output

"""MCP servers as a tool source, end to end through Slack: a read-only (by override) tool of
the reference ``mcp-server-time`` answers in the thread without a card; a tool annotated
destructive gets a card without a dry run, the two-person rule, and reaches its server once
with the approver in ``_meta``; a server killed mid-call is an ``Error:`` result and is
started again by the next job's call.

The recording server is the SDK's own ``MCPServer`` (as in
``tests/tools/mcp/test_approved_call_carries_the_approver.py``); it differs from that one in
its annotations and in writing what it received into a file the test reads."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bot.emulator.scripted import Reply, ScriptedRequest
from bot.emulator.slack import FakeSlack

from ..tools.mcp.conftest import npm_server
from .approvals_kit import (
    answered,
    call_then_answer,
    cards,
    click,
    first_job,
    texts,
    wait_card,
    wait_until,
)
from .conftest import StartBot
from .harness import BotProcess, ScriptedModel, mention

WAIT_S = 30.0

SERVER = '''
import json, os, sys, time
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ToolAnnotations

log = sys.argv[1]
app = MCPServer("rec")


def write(entry):
    with open(log, "a") as f:
        f.write(json.dumps({**entry, "pid": os.getpid()}) + "\\n")


@app.tool(annotations=ToolAnnotations(destructiveHint=True))
def wipe(volume: str, ctx: Context) -> str:
    """Wipe a volume."""
    write({"tool": "wipe", "volume": volume, "meta": dict(ctx.request_context.meta or {})})
    return f"wiped {volume}"


@app.tool()
def block(seconds: int) -> str:
    """Wait a while."""
    write({"tool": "block"})
    time.sleep(seconds)
    return "woke up"


@app.tool()
def ping() -> str:
    """Answer pong."""
    write({"tool": "ping"})
    return "pong"


app.run()
'''


def rec_server(tmp_path: Path) -> tuple[str, Path, Path]:
    """A tools.yml (path) whose server ``rec`` is ``SERVER``; its script and its log."""
    script = tmp_path / "mcp_recorder.py"
    script.write_text(SERVER)
    log = tmp_path / "mcp_calls.jsonl"
    path = tmp_path / "tools.yml"
    argv = json.dumps([sys.executable, str(script), str(log)])
    path.write_text(
        f"""\
mcp_servers:
  - name: rec
    command: {argv}
    timeout: 120
    tools:
      block: {{category: read_only}}
      ping: {{category: read_only}}
"""
    )
    return str(path), script, log


def calls(log: Path, tool: str) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    found = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return [c for c in found if c["tool"] == tool]


def tool_results(request: ScriptedRequest) -> list[str]:
    return [str(m["content"]) for m in request.messages if m.get("role") == "tool"]


def call_ids(request: ScriptedRequest) -> list[str]:
    return [
        str(c["id"])
        for m in request.messages
        if m.get("role") == "assistant"
        for c in m.get("tool_calls") or []
    ]


def server_pids(serve: BotProcess, script: Path) -> list[int]:
    """Live children of ``serve`` running ``script`` (Linux ``/proc``)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if str(script).encode() not in (entry / "cmdline").read_bytes():
                continue
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[1]) == serve.pid:
            found.append(int(entry.name))
    return found


def by_request(
    policies: dict[str, Callable[[ScriptedRequest], Reply]],
) -> Callable[[ScriptedRequest], Reply]:
    """The policy of the first word of ``policies`` the conversation's first user message has."""

    def policy(request: ScriptedRequest) -> Reply:
        first = next(str(m["content"]) for m in request.messages if m.get("role") == "user")
        word = next(w for w in policies if w in first)
        return policies[word](request)

    return policy


async def test_a_read_only_mcp_tool_answers_without_a_card(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, tmp_path: Path
) -> None:
    tools = tmp_path / "tools.yml"
    argv = json.dumps([sys.executable, "-m", "mcp_server_time"])
    tools.write_text(
        f"""\
mcp_servers:
  - name: time
    command: {argv}
    tools:
      get_current_time: {{category: read_only}}
"""
    )
    model.policy = call_then_answer(
        "time_get_current_time", {"timezone": "UTC"}, reason="Checking the clock."
    )
    serve = await bot(OPSLOOP_TOOLS=str(tools))
    event = mention("C1", "U1", "what time is it in UTC?")
    await serve.send(event)

    await slack.wait_for(lambda: answered(slack, event["ts"]), timeout=WAIT_S)
    assert cards(slack, "C1", event["ts"]) == []
    [result] = tool_results(model.requests[-1])
    assert '"timezone": "UTC"' in result and '"datetime"' in result, result
    assert not result.startswith("Error:")
    [answer] = [t for t in texts(slack, "C1", event["ts"]) if t.startswith("Result:")]
    assert '"timezone": "UTC"' in answer, answer


async def test_a_destructive_mcp_tool_needs_another_person_who_reaches_the_server(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, tmp_path: Path
) -> None:
    tools, _, log = rec_server(tmp_path)
    model.policy = call_then_answer(
        "rec_wipe", {"volume": "scratch"}, reason="The scratch volume is full of junk."
    )
    serve = await bot(OPSLOOP_TOOLS=tools)
    event = mention("C1", "U1", "wipe the scratch volume")
    await serve.send(event)

    card = await wait_card(slack, "C1", event["ts"])
    assert "rec_wipe" in card.text and "scratch" in str(card.blocks)
    assert "No dry run available" in str(card.blocks)
    assert "destructive" in str(card.blocks)
    assert calls(log, "wipe") == []

    assert await click(serve, slack, card, "U1", "Approve") == 200  # the requester
    await slack.wait_for(lambda: bool(slack.ephemerals("C1", "U1")), timeout=10)
    assert "someone else" in slack.ephemerals("C1", "U1")[0].text
    assert calls(log, "wipe") == []

    assert await click(serve, slack, card, "UAPPROVER1", "Approve") == 200
    await slack.wait_for(lambda: answered(slack, event["ts"]), timeout=WAIT_S)
    assert "Result: wiped scratch" in texts(slack, "C1", event["ts"])
    [done] = calls(log, "wipe")
    [call_id] = call_ids(model.requests[-1])
    assert done["meta"]["opsloop/confirmed_by"] == "UAPPROVER1"
    assert done["meta"]["opsloop/idempotency_key"] == f"{first_job('C1', event['ts'])}:{call_id}"
    await slack.wait_for(
        lambda: "Approved by <@UAPPROVER1>" in slack.message("C1", card.ts).text, timeout=10
    )


async def test_a_server_killed_mid_call_is_an_error_and_the_next_job_restarts_it(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, tmp_path: Path
) -> None:
    tools, script, log = rec_server(tmp_path)
    model.policy = by_request(
        {
            "wait": call_then_answer("rec_block", {"seconds": 600}, reason="Waiting."),
            "ping": call_then_answer("rec_ping", {}, reason="Pinging."),
        }
    )
    serve = await bot(OPSLOOP_TOOLS=tools)
    first = mention("C1", "U1", "wait for the deploy")
    await serve.send(first)

    await wait_until(lambda: calls(log, "block"), timeout=WAIT_S, what="the call in flight")
    [pid] = server_pids(serve, script)
    assert calls(log, "block")[0]["pid"] == pid
    os.killpg(pid, signal.SIGKILL)  # the server leads its own process group

    await slack.wait_for(lambda: answered(slack, first["ts"]), timeout=WAIT_S)
    [result] = tool_results(model.requests[-1])
    assert result.startswith("Error: mcp server 'rec' "), result
    answers = [t for t in texts(slack, "C1", first["ts"]) if t.startswith("Result:")]
    assert [a.startswith("Result: Error: mcp server 'rec' ") for a in answers] == [True], answers

    second = mention("C1", "U2", "ping the server")
    await serve.send(second)
    await slack.wait_for(lambda: answered(slack, second["ts"]), timeout=WAIT_S)
    assert "Result: pong" in texts(slack, "C1", second["ts"])
    [pinged] = calls(log, "ping")
    assert pinged["pid"] != pid  # a new server process answered
    assert server_pids(serve, script) == [pinged["pid"]]


async def test_an_mcp_servers_progress_shows_on_the_status_message(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, tmp_path: Path
) -> None:
    """``server-everything``'s long-running operation reports each step; the status
    message's line for the running tool shows the latest one while the call runs."""
    tools = tmp_path / "tools.yml"
    argv = json.dumps([npm_server("mcp-server-everything")])
    tools.write_text(
        f"""\
mcp_servers:
  - name: everything
    command: {argv}
    include: [trigger-long-running-operation]
    trust_annotations: true
"""
    )
    name = "everything_trigger-long-running-operation"
    model.policy = call_then_answer(name, {"duration": 4, "steps": 4}, reason="Running it.")
    serve = await bot(OPSLOOP_TOOLS=str(tools))
    event = mention("C1", "U1", "run the long operation")
    await serve.send(event)

    await slack.wait_for(lambda: answered(slack, event["ts"]), timeout=WAIT_S)
    [result] = tool_results(model.requests[-1])
    assert result.startswith("Long running operation completed"), result
    shown = [str(c.get("blocks")) for c in slack.calls_of("chat.update")]
    steps = {s for s in ("1/4", "2/4", "3/4") if any(f"running… {s}" in b for b in shown)}
    assert steps, [b for b in shown if name in b]
    status_ts = str(slack.calls_of("chat.update")[0]["ts"])
    await slack.wait_for(
        lambda: not slack.message("C1", status_ts).text.startswith("Working"), timeout=10
    )
    ending = slack.message("C1", status_ts)
    assert "running…" not in str(ending.blocks), ending  # the ending shows no progress

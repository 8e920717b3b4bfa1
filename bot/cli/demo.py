"""``opsloop demo``: the dev page's incident, told in the terminal, offline.

The same story as ``make run``'s page: alice mentions the bot about the demo service
"web" ("web is slow, look into it"); the bot checks its health and its metrics, proposes a
restart, and the approval card is drawn in the terminal; the restart runs only once
someone approves it, then the bot checks web again and answers. The bot's side is the
dev page's own demo model (``bot.dev.demo_model``) driving the real agent loop
(``bot.agent.run``) with its four tools (``web_health``, ``web_metrics``, ``web_logs``,
``web_restart``); only "web" itself is played here, in process, with the numbers a
degraded and then a freshly restarted web answer (no Slack, Redis, model API key or
process of its own).

Approval: in a terminal the card waits for one key — Enter approves (as bob, the page's
approver), ``d`` denies, Ctrl-C stops the demo. ``--yes`` approves and ``--deny`` denies
without asking. When stdin is not a terminal and neither is given, nobody can press a
key: the card says how to approve (``opsloop demo --yes``) and is denied, as an
unanswered card never runs anything; the demo then ends with the bot's answer to that.
Exit 0 when the run ended well, 130 on Ctrl-C.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field
from rich.console import Console
from rich.markdown import Markdown

from bot.agent import (
    AgentConfig,
    Approved,
    CallContext,
    ConfirmRequest,
    Decision,
    Denied,
    FunctionTool,
    InMemoryHistory,
    ModelRequest,
    ModelResponse,
    ToolCall,
    UserMessage,
    run,
)
from bot.agent.events import Event
from bot.agent.testing import ScriptedModel
from bot.agent.work_done import work_done
from bot.dev.demo_model import DemoPolicy
from bot.llm.openai import render_message

REQUESTER, APPROVER = "alice", "bob"
DEMO_PROMPT = "@opsloop web is slow, look into it"
DEMO_SYSTEM = "You are opsloop, an SRE assistant. Investigate before you change anything."
CARD_WIDTH = 76
APPROVE_KEYS, DENY_KEYS = ("\r", "\n"), ("d", "D")
NO_TERMINAL = (
    "stdin is not a terminal, so nobody can press a key: the card is denied. To approve\n"
    "it, run `opsloop demo --yes` (or `opsloop demo` in a terminal and press Enter)."
)


# -- "web", played in process -----------------------------------------------------------


@dataclass(slots=True)
class DemoWeb:
    """The demo service as its tools see it: degraded until restarted."""

    pid: int = 4242
    degraded: bool = True

    def health(self) -> str:
        if self.degraded:
            return (
                "HTTP 500 Internal Server Error in 2140 ms\n"
                "error: reindex job holds every worker (timed out waiting for a worker)"
            )
        return "HTTP 200 OK in 4 ms\nok"

    def metrics(self) -> str:
        degraded = self.degraded
        data = {
            "service": "web",
            "pid": self.pid,
            "state": "degraded" if degraded else "healthy",
            "uptime_s": 83.4 if degraded else 6.2,
            "requests_last_min": 236 if degraded else 24,
            "errors_last_min": 73 if degraded else 0,
            "error_rate": 0.309 if degraded else 0.0,
            "p50_ms": 1950.0 if degraded else 3.1,
            "p95_ms": 2460.0 if degraded else 8.4,
            "cpu_burn": "on" if degraded else "off",
            "cpu_percent": 61.0 if degraded else 2.0,
        }
        return "HTTP 200 OK in 3 ms\n" + json.dumps(data, indent=2)

    def logs(self, lines: int) -> str:
        tail = [
            "2026-05-28 20:26:01 INFO started: pid 4242 on 127.0.0.1:8081, healthy for 20 s",
            "2026-05-28 20:26:21 WARNING background job 'reindex' is stuck in a busy loop "
            "after 20 s of uptime (demo fault): requests now take 1.5-2.5 s, about 30% fail, "
            "CPU burn on",
            "2026-05-28 20:26:40 ERROR GET / 500 in 2210 ms: timed out waiting for a worker",
            "2026-05-28 20:26:41 WARNING GET / 200 in 1890 ms (slow)",
        ]
        return "\n".join(tail[-lines:])

    def restart(self, approved_by: str | None) -> str:
        old, self.pid, self.degraded = self.pid, 4311, False
        by = f" (approved by {approved_by})" if approved_by else ""
        return f"restarted web: pid {old} → {self.pid}, healthy{by}"


class NoArgs(BaseModel):
    pass


class LogArgs(BaseModel):
    lines: int = Field(default=40, ge=1, le=200, description="How many lines from the end")


def demo_tools(web: DemoWeb) -> list[FunctionTool]:
    """The dev page's four tools (``bot.dev.demo_tools``), answered by ``web``."""

    async def health(args: NoArgs, ctx: CallContext) -> str:
        return web.health()

    async def metrics(args: NoArgs, ctx: CallContext) -> str:
        return web.metrics()

    async def logs(args: LogArgs, ctx: CallContext) -> str:
        return web.logs(args.lines)

    async def restart(args: NoArgs, ctx: CallContext) -> str:
        return web.restart(ctx.confirmed_by)

    def read(name: str, text: str, args: type[BaseModel], fn: Any) -> FunctionTool:
        return FunctionTool(name=name, description=text, args_model=args, fn=fn, parallel=True)

    return [
        read("web_health", 'Health check of the service "web": GET /health.', NoArgs, health),
        read("web_metrics", 'Metrics of the service "web" over the last minute.', NoArgs, metrics),
        read("web_logs", 'The last lines of the log of the service "web".', LogArgs, logs),
        FunctionTool(
            name="web_restart",
            description='Restart the service "web": a fresh process on the same port.',
            args_model=NoArgs,
            fn=restart,
            category="mutating",
        ),
    ]


# -- the bot's side: the page's demo model --------------------------------------------------


def demo_model(say: Callable[[str], None]) -> ScriptedModel:
    """The page's demo model on the neutral request; its step notes go to ``say`` (a
    note that comes with a change is the card's reason, shown there once)."""
    policy, ids = DemoPolicy(), itertools.count(1)

    def answer(request: ModelRequest) -> ModelResponse:
        reply = policy.answer([render_message(m) for m in request.messages])
        calls = tuple(
            ToolCall(id=f"demo{next(ids)}", name=c.name, arguments=c.arguments_json)
            for c in reply.tool_calls
        )
        if calls and reply.content and all(c.name != "web_restart" for c in calls):
            say(reply.content)
        return ModelResponse(content=reply.content or "", tool_calls=calls)

    return ScriptedModel(fn=answer, name="demo model")


# -- the terminal ---------------------------------------------------------------------------


def card(request: ConfirmRequest, *, does: str, asking: bool) -> str:
    """The approval card as a box: what the Slack card says (``does``: what the tool
    does), and the keys."""
    rule = "─" * (CARD_WIDTH - 2)
    body = [f"Approval needed: {request.tool}", ""]
    if request.reason:
        body += ["Reason", *textwrap.wrap(request.reason, CARD_WIDTH - 4), ""]
    args = {k: v for k, v in request.arguments.items() if k != "confirmed_by"}
    call = f"{request.tool}({json.dumps(args) if args else ''})"
    body += ["Will run", *textwrap.wrap(f"{call}: {does}", CARD_WIDTH - 4), ""]
    body.append(f"Requested by {REQUESTER} · {request.category} · approver: {APPROVER}")
    if asking:
        body += ["", "[ Approve: Enter ]   [ Deny: d ]"]
    lines = [f"┌{rule}┐", *(f"│ {line:<{CARD_WIDTH - 4}} │" for line in body), f"└{rule}┘"]
    return "\n".join(lines)


def ask() -> bool:
    """Enter approves, ``d`` denies; any other key asks again; end of input denies. Keys
    typed before the card was shown are dropped: only a key pressed at the card decides."""
    import termios
    import tty

    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)  # one key, no Enter needed, not echoed
        termios.tcflush(fd, termios.TCIFLUSH)
        while True:
            print("Enter: approve · d: deny › ", end="", flush=True)
            key = os.read(fd, 1).decode(errors="replace")
            print()
            if key in APPROVE_KEYS:
                return True
            if key in DENY_KEYS or key == "":
                return False
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def _print_event(event: Event) -> None:
    match event.kind:
        case "tool_start":
            args = {k: v for k, v in event.arguments.items() if k != "confirmed_by"}
            print(f"  → {event.tool}({json.dumps(args) if args else ''})")
        case "tool_end":
            print(f"  ← {event.tool}: {'error' if event.is_error else 'ok'}")
        case _:
            pass


def main(*, approve: bool | None) -> int:
    """Play the demo; ``approve=None`` asks on the terminal (denies without one)."""
    try:
        return asyncio.run(run_demo(approve=approve, terminal=sys.stdin.isatty()))
    except KeyboardInterrupt:
        print("\nopsloop demo: stopped, nothing approved.", file=sys.stderr)
        return 130


async def run_demo(*, approve: bool | None, terminal: bool) -> int:
    """The story, start to end; the exit status."""
    console = Console(highlight=False)

    tools = demo_tools(DemoWeb())
    does = {tool.name: tool.description for tool in tools}

    async def confirm(request: ConfirmRequest) -> Decision:
        asking = approve is None and terminal
        print()
        print(card(request, does=does.get(request.tool, ""), asking=asking))
        if approve is None and not terminal:
            print(NO_TERMINAL + "\n")
            return Denied(reason="nobody approved it: no terminal to ask")
        # Blocking on purpose: nothing else runs while the card waits.
        if ask() if asking else approve:
            print(f"✓ Approved by {APPROVER}\n")
            return Approved(confirmed_by=APPROVER)
        print(f"✗ Denied by {APPROVER}\n")
        return Denied(reason=f"denied by {APPROVER}")

    memory = InMemoryHistory()
    memory.append(UserMessage(content=DEMO_PROMPT))
    print(f'Incident: the demo service "web" is degrading. {REQUESTER} asks the bot:\n')
    print(f"{REQUESTER}: {DEMO_PROMPT}\n")
    config = AgentConfig(
        job_id="demo",
        client=demo_model(lambda note: print(f"opsloop: {note}")),
        memory=memory,
        system_prompt=DEMO_SYSTEM,
        tools=tools,
        confirm=confirm,
        stop=work_done,  # as in the bot: a change must be checked before the job is done
        on_event=_print_event,
    )
    result = await run(config)
    with console.capture() as answer:  # the Markdown (bold, the table) drawn as text
        console.print(Markdown(result.output or ""), width=CARD_WIDTH)
    print("\nopsloop:")
    print("\n".join(line.rstrip() for line in answer.get().splitlines()))
    print(
        f"[{result.stop_reason.value}: {result.iterations} iterations, "
        f"{result.tool_executions} tool runs]"
    )
    sys.stdout.flush()
    return 0 if result.ok else 1

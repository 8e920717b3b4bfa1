"""``opsloop demo``: one incident played in the terminal, offline.

One agent turn runs with a scripted model and stand-in tools, so the loop can be seen
working without Slack, Redis or a model API key: it prints each model call and tool call,
asks for approval of the restart it proposes (``--approve`` / ``--deny`` answer on the
command line; without either, the terminal is asked, and a stdin that is not a terminal
approves), then prints the answer and how the run ended. Exit 0 when the run ended well.
The script reacts to the history (tool results and decisions), not to a fixed call count.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Sequence

from pydantic import BaseModel, Field

from bot.agent import (
    AgentConfig,
    AnyMessage,
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
    ToolMessage,
    UserMessage,
    run,
)
from bot.agent.events import Event
from bot.agent.testing import ScriptedModel
from bot.agent.work_done import work_done

DEMO_PROMPT = "web-03 is at 95% CPU, look into it"
DEMO_SYSTEM = "You are opsloop, an SRE assistant. Investigate before you change anything."


class HostArgs(BaseModel):
    host: str = Field(description="Host name, e.g. web-03")


class LogArgs(BaseModel):
    host: str = Field(description="Host name")
    lines: int = Field(default=20, ge=1, le=200, description="How many lines from the end")


class RestartArgs(BaseModel):
    host: str = Field(description="Host name")
    service: str = Field(description="Unit name", pattern=r"^[a-z0-9@._-]+$")


async def _cpu(args: HostArgs, ctx: CallContext) -> str:
    return f"{args.host}: cpu 95.2% (user 91.0%), load 7.8/7.1/5.2 on 4 cores"


async def _logs(args: LogArgs, ctx: CallContext) -> str:
    return (
        f"{args.host} nginx error.log (last 3 of {args.lines}):\n"
        "worker process 4121 exited on signal 9\n"
        "upstream timed out (110) while reading response header\n"
        "worker_connections are not enough"
    )


async def _restart(args: RestartArgs, ctx: CallContext) -> str:
    return f"restarted {args.service} on {args.host} (approved by {ctx.confirmed_by})"


def demo_tools() -> list[FunctionTool]:
    return [
        FunctionTool(
            name="host_cpu",
            description="CPU usage and load of a host.",
            args_model=HostArgs,
            fn=_cpu,
            parallel=True,
        ),
        FunctionTool(
            name="tail_log",
            description="The last lines of a host's nginx error log.",
            args_model=LogArgs,
            fn=_logs,
            parallel=True,
        ),
        FunctionTool(
            name="restart_service",
            description="Restart a systemd service on a host.",
            args_model=RestartArgs,
            fn=_restart,
            category="mutating",
        ),
    ]


def _call(call_id: str, name: str, **arguments: object) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=json.dumps(arguments))


def demo_script(request: ModelRequest) -> ModelResponse:
    """The demo model: investigate, propose a restart, check it, then report."""
    results = [m for m in request.messages if isinstance(m, ToolMessage)]
    by_name = {m.name: m for m in results}
    if not results:
        return ModelResponse(
            content="Checking CPU and the nginx log on web-03.",
            tool_calls=(
                _call("d1", "host_cpu", host="web-03"),
                _call("d2", "tail_log", host="web-03", lines=50),
            ),
        )
    if "restart_service" not in by_name:
        return ModelResponse(
            content="nginx workers are being OOM-killed and requests time out; "
            "a restart should clear the stuck workers.",
            tool_calls=(_call("d3", "restart_service", host="web-03", service="nginx"),),
        )
    outcome = by_name["restart_service"]
    if outcome.is_error:
        return ModelResponse(
            content="The restart was not approved, so nothing changed. web-03 stays at 95% "
            "CPU with nginx workers being killed; next step: raise worker_connections."
        )
    if results[-1].name == "restart_service":
        # An approved change is done once a read-only call checked it.
        return ModelResponse(
            content="Checking that the restart helped.",
            tool_calls=(_call("d4", "host_cpu", host="web-03"),),
        )
    return ModelResponse(
        content="Restarted nginx on web-03 (approved by "
        f"{outcome.confirmed_by}); CPU is falling. "
        "Root cause: worker_connections too low for current traffic."
    )


def demo_model() -> ScriptedModel:
    return ScriptedModel(fn=demo_script, name="demo model")


def _print_event(event: Event) -> None:
    match event.kind:
        case "model_request_start":
            print(f"· model call (iteration {event.iteration})")
        case "tool_start":
            print(f"  → {event.tool}({json.dumps(event.arguments)})")
        case "tool_end":
            print(f"  ← {event.tool}: {'error' if event.is_error else 'ok'}")
        case _:
            pass


def _history_text(history: Sequence[AnyMessage]) -> str:
    return "\n".join(f"{m.role}: {getattr(m, 'content', '')}" for m in history)


def main(*, approve: bool | None) -> int:
    """Run the demo turn; ``approve=None`` asks on the terminal, or approves without one."""
    if approve is None and not sys.stdin.isatty():
        approve = True
    return asyncio.run(run_demo(approve=approve))


async def run_demo(*, approve: bool | None) -> int:
    """Run the demo turn; ``approve=None`` asks on the terminal."""

    async def confirm(request: ConfirmRequest) -> Decision:
        print(f"\nApproval needed: {request.tool}({json.dumps(request.arguments)})")
        print(f"  reason: {request.reason}")
        answer = approve
        if answer is None:
            reply = await asyncio.to_thread(input, "  Approve? [y/N] ")
            answer = reply.strip().lower() in ("y", "yes")
        if answer:
            return Approved(confirmed_by="U_DEMO")
        return Denied(reason="denied by <@U_DEMO>")

    memory = InMemoryHistory()
    memory.append(UserMessage(content=DEMO_PROMPT))
    print(f"user: {DEMO_PROMPT}")
    config = AgentConfig(
        job_id="demo",
        client=demo_model(),
        memory=memory,
        system_prompt=DEMO_SYSTEM,
        tools=demo_tools(),
        confirm=confirm,
        stop=work_done,  # as in the bot: a change must be checked before the job is done
        on_event=_print_event,
    )
    result = await run(config)
    print(f"\nopsloop: {result.output}")
    print(
        f"[{result.stop_reason.value}: {result.iterations} iterations, "
        f"{result.tool_executions} tool runs]"
    )
    sys.stdout.flush()
    return 0 if result.ok else 1

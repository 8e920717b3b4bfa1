"""Shared pieces of the approval, Stop/Continue and crash end-to-end tests: a tools.yml
with real command tools that record every run in a file, scripted model policies, and
helpers to find cards and click their buttons."""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from bot.emulator.recording_tools import RECORDER, runs, tool_processes
from bot.emulator.recording_tools import tools_yml as tools_yml  # the tests import it from here
from bot.emulator.scripted import Reply, ScriptedCall, ScriptedRequest
from bot.emulator.slack import BOT_USER_ID, FakeSlack, Message
from bot.slack.status_blocks import ACTION_STOP
from bot.store.keys import Keys, Thread, thread_of

from .harness import BotProcess, block_actions_body, click_body, find_button


def scale_tools_yml(tmp_path: Path) -> tuple[str, Path]:
    """``scale_deployment`` (mutating: a whole number, an enum) and ``delete_pods``
    (destructive, with a dry run), both real processes recording every run."""
    script = tmp_path / "recorder.py"
    script.write_text(RECORDER)
    log = tmp_path / "runs.jsonl"
    py = sys.executable
    text = f"""\
tools:
  - name: scale_deployment
    description: Scale a deployment.
    category: mutating
    params:
      name: {{type: string, pattern: "^[a-z0-9-]+$", description: Deployment}}
      replicas: {{type: integer, min: 0, max: 50, description: The new replica count}}
      strategy: {{type: string, enum: [rolling, recreate], description: How}}
    timeout: 60
    run: ["{py}", "{script}", "{log}", "scale_deployment", "{{name}}", "{{replicas}}",
          "{{strategy}}", "{{confirmed_by}}"]
  - name: delete_pods
    description: Delete pods.
    category: destructive
    params:
      selector: {{type: string, pattern: "^[a-z0-9=-]+$", description: Label selector}}
    timeout: 60
    run: ["{py}", "{script}", "{log}", "delete_pods", "{{selector}}"]
"""
    path = tmp_path / "tools.yml"
    path.write_text(text)
    return str(path), log


def call_then_answer(
    tool: str, args: dict[str, object], *, reason: str = "Restarting nginx to clear the leak."
) -> Callable[[ScriptedRequest], Reply]:
    """The model calls ``tool`` once, then answers with what the tool said."""

    def policy(request: ScriptedRequest) -> Reply:
        if request.tool_results() == 0:
            return Reply(content=reason, tool_calls=[ScriptedCall(tool, args)])
        last = [m for m in request.messages if m.get("role") == "tool"][-1]
        return Reply(content=f"Result: {last['content']}")

    return policy


def change_then_check(
    tool: str, args: dict[str, object], *, reason: str = "Restarting nginx to clear the leak."
) -> Callable[[ScriptedRequest], Reply]:
    """The model calls ``tool`` once, checks with ``check_host`` after it (an approved
    change is done only once a read-only call checked it), then answers with what
    ``tool`` said."""

    def policy(request: ScriptedRequest) -> Reply:
        done = request.tool_results()
        if done == 0:
            return Reply(content=reason, tool_calls=[ScriptedCall(tool, args)])
        if done == 1:
            return Reply(tool_calls=[ScriptedCall("check_host", {"host": "web-03"})])
        first = [m for m in request.messages if m.get("role") == "tool"][0]
        return Reply(content=f"Result: {first['content']}")

    return policy


def cards(slack: FakeSlack, channel: str, thread_ts: str) -> list[Message]:
    return [
        m
        for m in slack.messages(channel, thread_ts)
        if m.user == "UBOT" and m.blocks and "Approval" in m.text
    ]


async def wait_card(slack: FakeSlack, channel: str, thread_ts: str) -> Message:
    await slack.wait_for(lambda: bool(cards(slack, channel, thread_ts)), timeout=30)
    return cards(slack, channel, thread_ts)[0]


async def click(
    serve: BotProcess, slack: FakeSlack, message: Message, user: str, button: str
) -> int:
    body = click_body(
        message.as_slack(), message.channel, user, slack.api_url + "response", text=button
    )
    status, _ = await serve.post_event(body)
    return status


def answered(
    slack: FakeSlack, thread_ts: str, prefix: str = "Result:", *, channel: str = "C1"
) -> bool:
    """Whether a message in the thread starts with ``prefix`` (the scripted answers
    of ``call_then_answer`` start with ``Result:``)."""
    return any(t.startswith(prefix) for t in texts(slack, channel, thread_ts))


def texts(slack: FakeSlack, channel: str, thread_ts: str) -> list[str]:
    return [m.text for m in slack.messages(channel, thread_ts)]


# ---- Stop, Continue, several processes, crashes ------------------------------------------

POLL_S = 0.02  # for conditions nothing announces (a file, a process, a Redis key)


async def wait_until(
    predicate: Callable[[], object | Awaitable[object]],
    *,
    timeout: float,  # noqa: ASYNC109 (a hang guard)
    what: str = "condition",
) -> None:
    """Return once ``predicate()`` (sync or async) is truthy; a bounded poll for state that
    announces nothing (files written by tools, processes, Redis keys)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if isinstance(value, Awaitable):
            value = await value
        if value:
            return
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what} not met within {timeout}s")
        await asyncio.sleep(POLL_S)


def status_of(slack: FakeSlack, channel: str, thread_ts: str) -> Message | None:
    """The job's status message: the bot's first message in the thread."""
    mine = [m for m in slack.messages(channel, thread_ts) if m.user == BOT_USER_ID]
    return mine[0] if mine else None


async def wait_status(slack: FakeSlack, channel: str, thread_ts: str) -> Message:
    await slack.wait_for(lambda: status_of(slack, channel, thread_ts) is not None, timeout=10)
    status = status_of(slack, channel, thread_ts)
    assert status is not None
    return status


def has_button(message: Message, action_id: str) -> bool:
    try:
        find_button(message.blocks, action_id=action_id)
    except LookupError:
        return False
    return True


async def press_stop(
    serve: BotProcess, slack: FakeSlack, status: Message, user: str, job_id: str
) -> int:
    """Click ``Stop`` on the status message; while the message shows no button yet, the
    same click as Slack would post it (``opsloop_stop``, value: the job id)."""
    fresh = slack.message(status.channel, status.ts)
    if has_button(fresh, ACTION_STOP):
        body = click_body(
            fresh.as_slack(), fresh.channel, user, slack.api_url + "response", action_id=ACTION_STOP
        )
    else:
        body = block_actions_body(
            user,
            ACTION_STOP,
            job_id,
            fresh.channel,
            fresh.ts,
            slack.api_url + "response",
            thread_ts=fresh.thread_ts,
            message=fresh.as_slack(),
            text="Stop",
        )
    status_code, _ = await serve.post_event(body)
    return status_code


def first_job(channel: str, thread_ts: str) -> str:
    """The id of the thread's first job (``C1:ts:j1``)."""
    return Thread(channel, thread_ts).job_id(1)


async def job_hash(redis_url: str, job_id: str) -> dict[str, Any]:
    """The job's hash as stored (``status``, ``fence``, ``cancel``) with ``data`` parsed."""
    client = aioredis.Redis.from_url(redis_url, decode_responses=True)
    try:
        raw = await client.hgetall(Keys().job(job_id))
        current = await client.get(Keys().current_job(thread_of(job_id)))
    finally:
        await client.aclose()
    found: dict[str, Any] = {str(k): str(v) for k, v in raw.items()}
    if "data" in found:
        found["data"] = json.loads(found["data"])
    found["current_job"] = current
    return found


def started(log: Path, tool: str) -> list[dict[str, Any]]:
    """Real runs of ``tool`` that began (whatever became of them)."""
    return runs(log, tool=tool, phase="start")


def runner_of(log: Path, bots: list[BotProcess]) -> BotProcess:
    """The bot whose child is the running tool recording into ``log``."""
    parents = set(tool_processes(log).values())
    owners = [b for b in bots if b.pid in parents]
    assert len(owners) == 1, f"tool parents {parents}, bots {[b.pid for b in bots]}"
    return owners[0]


async def model_calls(serve: BotProcess) -> float:
    """The ``opsloop_model_calls_total`` counter of one process (``/metrics``)."""
    status, text = await serve.get("/metrics")
    assert status == 200
    found = re.search(r"^opsloop_model_calls_total (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0

"""One malformed tool call does not poison its thread: over the real protocols, against a
scripted model server as strict as vLLM (a history with a call whose arguments are not a
JSON object is refused with a 400), the model's cut-off call is answered with an
``Error:``, the job completes, and a later reply in the same thread (a new job on the
stored history) completes too. ``opsloop trace`` shows what the model wrote."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot.emulator.redis_server import ManagedRedis
from bot.emulator.scripted import Reply, ScriptedCall, ScriptedRequest
from bot.emulator.slack import FakeSlack

from .approvals_kit import answered, first_job, runs, texts, tools_yml, wait_until
from .conftest import StartBot
from .harness import ScriptedModel, mention, reply, steps
from .test_trace_cmd import opsloop_trace

CUT_OFF = '{"host": "web-0'


@pytest.fixture
async def model() -> AsyncIterator[ScriptedModel]:
    """The scripted model server, refusing an invalid history as vLLM does."""
    scripted = ScriptedModel(strict=True)
    await scripted.server.start()
    yield scripted
    await scripted.server.stop()


def tool_calls(request: ScriptedRequest) -> list[dict[str, Any]]:
    return [c for m in request.messages for c in m.get("tool_calls") or ()]


def ended(slack: FakeSlack, thread_ts: str, answer: str) -> bool:
    """The job answered, or ended some other way (named by its stop reason code)."""
    return answered(slack, thread_ts, answer) or any(
        "`failed`" in t or "`stalled`" in t for t in texts(slack, "C1", thread_ts)
    )


async def test_a_cut_off_tool_call_leaves_the_thread_usable(
    bot: StartBot,
    slack: FakeSlack,
    model: ScriptedModel,
    redis_server: ManagedRedis,
    tmp_path: Path,
) -> None:
    tools, log = tools_yml(tmp_path)
    model.policy = steps(  # type: ignore[arg-type]
        Reply(content="Checking web-03.", tool_calls=[ScriptedCall("check_host", CUT_OFF)]),
        Reply(content="Result: my call was cut off, sorry."),
        Reply(content="Result: web-04 is fine."),
    )
    serve = await bot(OPSLOOP_TOOLS=tools)
    event = mention("C1", "U1", "web-03 is at 95% CPU, look into it")

    assert (await serve.send(event))[0] == 200
    first = "Result: my call was cut off"
    await wait_until(lambda: ended(slack, event["ts"], first), timeout=30, what="first job")

    assert answered(slack, event["ts"], first), texts(slack, "C1", event["ts"])
    assert runs(log) == []  # the tool never ran with made-up arguments
    told = [m for m in model.requests[1].messages if m.get("role") == "tool"]
    assert told[-1]["content"].startswith(
        "Error: invalid arguments for tool 'check_host': not valid JSON"
    )
    assert [c["function"] for c in tool_calls(model.requests[1])] == [
        {"name": "check_host", "arguments": "{}"}
    ]

    later = reply("C1", "U1", "and web-04?", thread_ts=event["ts"])
    assert (await serve.send(later))[0] == 200
    second = "Result: web-04 is fine."
    await wait_until(lambda: ended(slack, event["ts"], second), timeout=30, what="second job")

    assert model.server.refusals == []  # the strict server never had to say 400
    assert answered(slack, event["ts"], second), texts(slack, "C1", event["ts"])
    assert len(model.requests) == 3
    history = model.requests[2].messages
    assert [c["function"]["arguments"] for c in tool_calls(model.requests[2])] == ["{}"]
    assert history[-1]["content"] == "<@U1>: and web-04?"

    # The incident review still sees what the model wrote.
    code, out, err = await opsloop_trace(redis_server, first_job("C1", event["ts"]))
    assert code == 0, err
    assert f"check_host {CUT_OFF} · not run: malformed arguments" in out
    code, out, err = await opsloop_trace(redis_server, "--json", first_job("C1", event["ts"]))
    assert code == 0, err
    (call,) = json.loads(out)["malformed_calls"].values()
    assert call["tool"] == "check_host" and call["arguments"] == CUT_OFF
    assert call["error"].startswith("not valid JSON")

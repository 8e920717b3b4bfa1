"""After a click, the conversation says who approved: the model's next request carries the
approved call with ``confirmed_by`` = the clicker (not what the model wrote there), and
``opsloop trace``, run as its own process on the same Redis, shows the same approver."""

from __future__ import annotations

import json
from pathlib import Path

from bot.emulator.redis_server import ManagedRedis
from bot.emulator.scripted import Reply, ScriptedCall, ScriptedRequest
from bot.emulator.slack import FakeSlack

from .approvals_kit import answered, click, runs, tools_yml, wait_card, wait_until
from .conftest import StartBot
from .harness import ScriptedModel, mention
from .test_trace_cmd import opsloop_trace


async def test_the_next_request_and_the_trace_name_the_clicker(
    bot: StartBot,
    slack: FakeSlack,
    model: ScriptedModel,
    redis_server: ManagedRedis,
    tmp_path: Path,
) -> None:
    tools, log = tools_yml(tmp_path)

    def policy(request: ScriptedRequest) -> Reply:
        # The restart (with a confirmed_by of the model's own), a check of it, the answer.
        done = request.tool_results()
        if done == 0:
            restart = ScriptedCall(
                "restart_service", {"service": "nginx", "confirmed_by": "UMADEUP1"}
            )
            return Reply(content="Restarting nginx to clear the leak.", tool_calls=[restart])
        if done == 1:
            return Reply(tool_calls=[ScriptedCall("check_host", {"host": "web-03"})])
        return Reply(content="nginx restarted and web-03 checked.")

    model.policy = policy  # type: ignore[assignment]
    serve = await bot(OPSLOOP_TOOLS=tools)
    event = mention("C1", "U1", "nginx leaks memory on web-03, restart it")
    await serve.send(event)
    card = await wait_card(slack, "C1", event["ts"])
    assert await click(serve, slack, card, "UAPPROVER1", "Approve") == 200
    await slack.wait_for(lambda: answered(slack, event["ts"], "nginx restarted"), timeout=30)
    assert [r["args"] for r in runs(log, tool="restart_service")] == [["nginx", "UAPPROVER1"]]

    # The requests after the approval: the call, as stored and sent, names the clicker.
    assert len(model.requests) == 3
    [after_click, after] = [r.messages for r in model.requests[1:]]
    assert after[: len(after_click)] == after_click
    for messages in (after_click, after):
        sent = [
            c["function"]
            for m in messages
            if m.get("role") == "assistant"
            for c in m.get("tool_calls") or []
        ]
        assert sent[0]["name"] == "restart_service"
        assert json.loads(sent[0]["arguments"]) == {
            "service": "nginx",
            "confirmed_by": "UAPPROVER1",
        }
    assert "UMADEUP1" not in json.dumps(after)

    job_id = f"C1:{event['ts']}:j1"

    async def ended() -> bool:
        return "end       completed" in (await opsloop_trace(redis_server, job_id))[1]

    await wait_until(ended, timeout=15, what="the job's end in its trace")
    code, out, err = await opsloop_trace(redis_server, job_id)
    assert code == 0, err
    [tool] = [line for line in out.splitlines() if "  tool  " in line and "restart_service" in line]
    assert '"confirmed_by": "UAPPROVER1"' in tool and "confirmed by UAPPROVER1" in tool
    assert "UMADEUP1" not in out
    code, raw, err = await opsloop_trace(redis_server, job_id, "--json")
    assert code == 0, err
    [entry] = [
        e
        for e in json.loads(raw)["trace"]
        if e["kind"] == "tool" and e["tool"] == "restart_service"
    ]
    assert entry["confirmed_by"] == "UAPPROVER1"
    assert json.loads(entry["arguments"])["confirmed_by"] == "UAPPROVER1"

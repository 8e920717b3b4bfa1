"""OpenTelemetry traces from ``opsloop serve`` processes, exported over OTLP/HTTP to a
real receiver on loopback that decodes the protobuf requests: a job with an approval
asked for in one process and resumed in another is one trace whose second
``invoke_agent`` span links to the first; the approved call's ``execute_tool`` span
names the approver; the ending names the trace id, and so does ``opsloop trace``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.emulator.otlp_receiver import OtlpReceiver, ReceivedSpan
from bot.emulator.redis_server import ManagedRedis
from bot.emulator.slack import FakeSlack

from .approvals_kit import answered, change_then_check, click, runs, tools_yml, wait_card
from .conftest import StartBot
from .harness import ScriptedModel, mention
from .test_trace_cmd import opsloop_trace

RUN = "invoke_agent opsloop"


@pytest.fixture
async def otlp() -> AsyncIterator[OtlpReceiver]:
    async with OtlpReceiver() as receiver:
        yield receiver


def runs_of(spans: list[ReceivedSpan]) -> list[ReceivedSpan]:
    return [s for s in spans if s.name == RUN]


@pytest.mark.timeout(180)
async def test_a_job_resumed_in_another_process_is_one_linked_trace(
    bot: StartBot,
    slack: FakeSlack,
    model: ScriptedModel,
    redis_server: ManagedRedis,
    otlp: OtlpReceiver,
    tmp_path: Path,
) -> None:
    tools, log = tools_yml(tmp_path)
    model.policy = change_then_check("restart_service", {"service": "nginx"})  # type: ignore[assignment]
    otel = {
        "OPSLOOP_TOOLS": tools,
        "OTEL_EXPORTER_OTLP_ENDPOINT": otlp.endpoint,
        "OTEL_SERVICE_NAME": "opsloop-e2e",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "OTEL_EXPORTER_OTLP_HEADERS": "x-tenant=ops",
    }
    first = await bot(**otel)
    second = await bot(**otel)
    event = mention("C1", "U1", "nginx leaks memory on web-03, restart it")
    await first.send(event)
    card = await wait_card(slack, "C1", event["ts"])
    paused = await otlp.wait_for(lambda s: len(runs_of(s)) == 1, timeout=30)
    assert await click(second, slack, card, "UAPPROVER1", "Approve") == 200
    await slack.wait_for(lambda: answered(slack, event["ts"]), timeout=30)
    assert len(runs(log, tool="restart_service")) == 1
    spans = await otlp.wait_for(
        lambda s: len(runs_of(s)) == 2 and any(x.name == "execute_tool check_host" for x in s),
        timeout=30,
    )

    [asked] = runs_of(paused)
    resumed = runs_of(spans)[1]
    job_id = f"C1:{event['ts']}:j1"
    assert asked.attributes["opsloop.job.id"] == resumed.attributes["opsloop.job.id"] == job_id
    assert asked.attributes["opsloop.stop_reason"] == "awaiting_approval"
    assert asked.event("opsloop.approval.requested") is not None
    # Two processes, one trace: the resumed run links to the run it continues.
    assert asked.resource["process.pid"] != resumed.resource["process.pid"]
    assert asked.resource["process.pid"] == first.pid
    assert resumed.resource["service.name"] == "opsloop-e2e"
    assert resumed.trace_id == asked.trace_id and resumed.parent_span_id == ""
    assert [(link.trace_id, link.span_id) for link in resumed.links] == [
        (asked.trace_id, asked.span_id)
    ]
    approved = resumed.event("opsloop.approval.approved")
    assert approved is not None and approved.attributes["opsloop.approver.id"] == "UAPPROVER1"
    assert resumed.attributes["opsloop.stop_reason"] == "completed"

    children = {s.name: s for s in spans if s.parent_span_id == resumed.span_id}
    restart = children["execute_tool restart_service"]
    assert restart.attributes["gen_ai.tool.call.id"] and restart.kind == "INTERNAL"
    assert restart.attributes["opsloop.tool.category"] == "mutating"
    assert restart.attributes["opsloop.approver.id"] == "UAPPROVER1"
    assert children["execute_tool check_host"].attributes["opsloop.tool.category"] == "read_only"
    chats = [s for s in spans if s.name.startswith("chat ")]
    assert len(chats) == 3 and {c.parent_span_id for c in chats} == {
        asked.span_id,
        resumed.span_id,
    }
    for chat in chats:
        assert chat.kind == "CLIENT" and chat.attributes["gen_ai.provider.name"] == "openai"
        assert chat.attributes["gen_ai.usage.input_tokens"] >= 0
        assert chat.attributes["gen_ai.response.finish_reasons"]
    assert all(h.get("x-tenant") == "ops" for h in otlp.headers)  # the SDK read the env

    # The ending's job line and ``opsloop trace`` name the trace.
    status = next(m for m in slack.messages("C1", event["ts"]) if m.user == "UBOT")
    await slack.wait_for(
        lambda: asked.trace_id in str(slack.message("C1", status.ts).blocks), timeout=15
    )
    code, out, err = await opsloop_trace(redis_server, job_id)
    assert code == 0, err
    assert f"OpenTelemetry trace {asked.trace_id}" in out

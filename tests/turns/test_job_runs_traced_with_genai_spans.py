"""A job's runs as OpenTelemetry spans (GenAI semantic conventions 1.41.0), exported over
OTLP/HTTP to a real receiver on loopback that decodes the protobuf requests: span names,
attributes, parentage, the approval's events, the resumed run's link, contents only when
asked for (and scrubbed), and an endpoint that is down or slow never holding up a job."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator

import pytest
import redis.asyncio as aioredis
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

from bot.agent import ModelRequest, ModelResponse, StopReason
from bot.agent.testing import ScriptedModel, call, calls, text
from bot.emulator.otlp_receiver import OtlpReceiver, ReceivedSpan
from bot.metrics import Metrics
from bot.otel.spans import GenAiTracing
from bot.otel.tracing import SPAN_META, TRACE_META, TracingOptions
from bot.service import build_turns
from bot.store.keys import Keys, Thread
from bot.store.parts import Stores
from bot.turns.parts import Turns
from bot.turns.run import TurnSettings
from tests.agent.conftest import echo_tool
from tools.registry import Catalog

from .notifier import Notes
from .test_approvals_stop_continue import LIMITS, TS

SECRET = "AKIAABCDEFGHIJKLMNOP"  # an AWS key id: a credential shape the scrubber knows


@pytest.fixture
async def otlp() -> AsyncIterator[OtlpReceiver]:
    async with OtlpReceiver() as receiver:
        yield receiver


@pytest.fixture
def fast_batches(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")  # ms: the batch goes out at once
    yield


def open_tracing(
    otlp: OtlpReceiver, *, capture: bool = False, metrics: Metrics | None = None
) -> GenAiTracing:
    exporter = OTLPSpanExporter(endpoint=f"{otlp.endpoint}/v1/traces", timeout=2)
    options = TracingOptions(
        capture_content=capture,
        provider="openai",
        service_version="test",
        on_dropped=metrics.otel_spans_dropped.inc if metrics is not None else None,
    )
    return GenAiTracing.open(options, exporter=exporter)


def make_turns(
    redis: aioredis.Redis, keys: Keys, model: ScriptedModel, tracing: GenAiTracing | None
) -> tuple[Turns, Notes]:
    notes = Notes()
    read = echo_tool()
    write = echo_tool("restart", category="mutating")
    turns = build_turns(
        Stores.build(redis, keys),
        resolver=model,
        catalog=Catalog(
            tools={read.name: read, write.name: write},
            sources={read.name: "test", write.name: "test"},
        ),
        system_prompt="You are opsloop.",
        settings=TurnSettings(limits=LIMITS),
        notifier=notes,
        consumer="test-process",
        tracing=tracing,
    )
    return turns, notes


def answered_by(model_name: str, response: ModelResponse) -> ModelResponse:
    return response.model_copy(update={"model": model_name})


def by_name(spans: list[ReceivedSpan], name: str) -> list[ReceivedSpan]:
    return [s for s in spans if s.name == name]


async def flushed(tracing: GenAiTracing) -> None:
    # The export is a blocking HTTP call to a receiver served by this event loop.
    assert await asyncio.to_thread(tracing.force_flush)


async def test_a_run_is_an_invoke_agent_span_with_chat_and_tool_children(
    redis: aioredis.Redis, keys: Keys, thread: Thread, otlp: OtlpReceiver, fast_batches: None
) -> None:
    first = answered_by("gpt-test-2025", calls(call("check", "c1", host="web-03")))
    model = ScriptedModel([first, text("web-03 is fine")])
    tracing = open_tracing(otlp)
    turns, _ = make_turns(redis, keys, model, tracing)
    receipt = await turns.receiver.receive(thread, ts=TS, user="UREQ", text="look at web-03")
    assert receipt.job_id is not None
    result = await turns.runner.run_job(receipt.job_id)
    assert result is not None and result.stop_reason is StopReason.COMPLETED
    await flushed(tracing)
    spans = await otlp.wait_for(lambda s: any(x.name.startswith("invoke_agent") for x in s))

    [run] = by_name(spans, "invoke_agent opsloop")
    chats = by_name(spans, "chat scripted")
    [tool] = by_name(spans, "execute_tool check")
    assert len(chats) == 2
    assert run.parent_span_id == "" and run.kind == "INTERNAL" and run.links == []
    assert run.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert run.attributes["gen_ai.agent.name"] == "opsloop"
    assert run.attributes["opsloop.job.id"] == receipt.job_id
    assert run.attributes["opsloop.stop_reason"] == "completed"
    assert run.schema_url == "https://opentelemetry.io/schemas/1.41.0"
    assert run.resource["service.name"] == "opsloop"
    for child in [*chats, tool]:
        assert child.parent_span_id == run.span_id and child.trace_id == run.trace_id

    chat = chats[0]
    assert chat.kind == "CLIENT"
    assert chat.attributes["gen_ai.operation.name"] == "chat"
    assert chat.attributes["gen_ai.provider.name"] == "openai"
    assert chat.attributes["gen_ai.request.model"] == "scripted"
    assert chat.attributes["gen_ai.response.model"] == "gpt-test-2025"
    assert chat.attributes["gen_ai.response.finish_reasons"] == ["tool_calls"]
    assert chats[1].attributes["gen_ai.response.finish_reasons"] == ["stop"]
    for key in (
        "gen_ai.usage.input_tokens",
        "gen_ai.usage.output_tokens",
        "gen_ai.usage.cache_read.input_tokens",
    ):
        assert isinstance(chat.attributes[key], int)

    assert tool.kind == "INTERNAL"
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
    assert tool.attributes["gen_ai.tool.name"] == "check"
    assert tool.attributes["gen_ai.tool.call.id"] == "c1"
    assert tool.attributes["gen_ai.tool.type"] == "function"
    assert tool.attributes["opsloop.tool.category"] == "read_only"
    assert "error.type" not in tool.attributes and tool.status == "UNSET"
    assert "gen_ai.tool.call.arguments" not in tool.attributes  # contents are opt-in

    stored = await turns.stores.jobs.get(receipt.job_id)
    assert stored is not None and stored.meta[TRACE_META] == run.trace_id
    assert stored.meta[SPAN_META].startswith(f"00-{run.trace_id}-{run.span_id}-")
    await asyncio.to_thread(tracing.close)


async def test_the_resumed_run_links_to_the_paused_one_and_names_the_approver(
    redis: aioredis.Redis, keys: Keys, thread: Thread, otlp: OtlpReceiver, fast_batches: None
) -> None:
    restart_and_check = calls(call("restart", "c1", host="web-03"), call("check", host="web-03"))
    model = ScriptedModel([restart_and_check, text("restarted")])
    paused_in = open_tracing(otlp)
    turns, notes = make_turns(redis, keys, model, paused_in)
    job_id = (
        await turns.receiver.receive(thread, ts=TS, user="UREQ", text="restart web-03")
    ).job_id
    assert job_id is not None
    paused = await turns.runner.run_job(job_id)
    assert paused is not None and paused.stop_reason is StopReason.AWAITING_APPROVAL
    await asyncio.to_thread(paused_in.close)  # the first process is gone; another resumes
    await turns.stores.approvals.decide(
        job_id, notes.cards[0].call_id, outcome="approved", by="UAPPROVER", args_hash=None,
        now=time.time(),
    )  # fmt: skip
    resumed_in = open_tracing(otlp)
    other, _ = make_turns(redis, keys, model, resumed_in)
    done = await other.runner.run_job(job_id)
    assert done is not None and done.stop_reason is StopReason.COMPLETED
    await flushed(resumed_in)
    spans = await otlp.wait_for(lambda s: len(by_name(s, "invoke_agent opsloop")) == 2)

    first, second = by_name(spans, "invoke_agent opsloop")
    assert first.attributes["opsloop.stop_reason"] == "awaiting_approval"
    asked = first.event("opsloop.approval.requested")
    assert asked is not None and asked.attributes["gen_ai.tool.name"] == "restart"
    # One trace for the job, the second run linked to the first (they share no parent).
    assert second.trace_id == first.trace_id and second.parent_span_id == ""
    assert [(link.trace_id, link.span_id) for link in second.links] == [
        (first.trace_id, first.span_id)
    ]
    assert second.attributes["opsloop.run.resumed"] is True
    approved = second.event("opsloop.approval.approved")
    assert approved is not None
    assert approved.attributes["opsloop.approver.id"] == "UAPPROVER"
    assert approved.attributes["gen_ai.tool.call.id"] == "c1"
    [restart] = by_name(spans, "execute_tool restart")
    assert restart.parent_span_id == second.span_id
    assert restart.attributes["opsloop.tool.category"] == "mutating"
    assert restart.attributes["opsloop.approver.id"] == "UAPPROVER"
    await asyncio.to_thread(resumed_in.close)


async def test_a_denial_is_an_event_with_the_approver_and_a_declined_tool_span(
    redis: aioredis.Redis, keys: Keys, thread: Thread, otlp: OtlpReceiver, fast_batches: None
) -> None:
    model = ScriptedModel(
        [calls(call("restart", "c1", host="web-03")), text("I will not restart it.")]
    )
    tracing = open_tracing(otlp)
    turns, notes = make_turns(redis, keys, model, tracing)
    job_id = (
        await turns.receiver.receive(thread, ts=TS, user="UREQ", text="restart web-03")
    ).job_id
    assert job_id is not None
    await turns.runner.run_job(job_id)
    await turns.stores.approvals.decide(
        job_id, notes.cards[0].call_id, outcome="denied", by="UNO", args_hash=None, now=time.time()
    )
    await turns.runner.run_job(job_id)
    await flushed(tracing)
    spans = await otlp.wait_for(lambda s: len(by_name(s, "invoke_agent opsloop")) == 2)

    second = by_name(spans, "invoke_agent opsloop")[1]
    denied = second.event("opsloop.approval.denied")
    assert denied is not None and denied.attributes["opsloop.approver.id"] == "UNO"
    [restart] = by_name(spans, "execute_tool restart")
    assert restart.attributes["error.type"] == "declined" and restart.status == "ERROR"
    assert restart.attributes["opsloop.tool.ran"] is False
    await asyncio.to_thread(tracing.close)


async def test_contents_are_captured_only_when_asked_and_scrubbed(
    redis: aioredis.Redis, keys: Keys, thread: Thread, otlp: OtlpReceiver, fast_batches: None
) -> None:
    model = ScriptedModel([calls(call("check", "c1", host=f"web-03 {SECRET}")), text("fine")])
    tracing = open_tracing(otlp, capture=True)
    turns, _ = make_turns(redis, keys, model, tracing)
    job_id = (await turns.receiver.receive(thread, ts=TS, user="UREQ", text="look")).job_id
    assert job_id is not None
    await turns.runner.run_job(job_id)
    await flushed(tracing)
    spans = await otlp.wait_for(lambda s: bool(by_name(s, "invoke_agent opsloop")))

    [tool] = by_name(spans, "execute_tool check")
    arguments = tool.attributes["gen_ai.tool.call.arguments"]
    assert "web-03" in arguments and SECRET not in arguments and "[redacted]" in arguments
    assert SECRET not in tool.attributes["gen_ai.tool.call.result"]
    [run] = by_name(spans, "invoke_agent opsloop")
    assert '"content": "fine"' in run.attributes["gen_ai.output.messages"]
    await asyncio.to_thread(tracing.close)


async def test_an_endpoint_that_is_down_counts_dropped_spans(
    redis: aioredis.Redis, keys: Keys, thread: Thread, fast_batches: None
) -> None:
    metrics = Metrics()
    async with OtlpReceiver(status=503) as down:
        tracing = open_tracing(down, metrics=metrics)
        model = ScriptedModel([text("fine")])
        turns, _ = make_turns(redis, keys, model, tracing)
        job_id = (await turns.receiver.receive(thread, ts=TS, user="UREQ", text="look")).job_id
        assert job_id is not None
        result = await turns.runner.run_job(job_id)
        assert result is not None and result.stop_reason is StopReason.COMPLETED
        await asyncio.to_thread(tracing.force_flush)
        assert down.requests >= 1
    assert tracing.dropped == 2  # the run and its one chat span
    assert b"opsloop_otel_spans_dropped_total 2.0" in metrics.scrape(None)
    await asyncio.to_thread(tracing.close)


async def test_an_endpoint_that_hangs_never_holds_up_the_job(
    redis: aioredis.Redis, keys: Keys, thread: Thread, otlp: OtlpReceiver, fast_batches: None
) -> None:
    otlp.hold()  # every export request waits until released
    exporter = OTLPSpanExporter(endpoint=f"{otlp.endpoint}/v1/traces", timeout=60)
    tracing = GenAiTracing.open(TracingOptions(shutdown_s=0.5), exporter=exporter)

    async def answer_after_an_export(request: ModelRequest) -> ModelResponse:
        if request.messages and len(request.messages) > 2:
            # The first batch (chat 1, the tool) is on its way and held.
            await otlp.wait_requests(1)
        return text("fine")

    model = ScriptedModel([calls(call("check", "c1", host="a")), answer_after_an_export])
    turns, _ = make_turns(redis, keys, model, tracing)
    job_id = (await turns.receiver.receive(thread, ts=TS, user="UREQ", text="look")).job_id
    assert job_id is not None
    # An export blocking the job would hold it for the exporter's 60 s timeout.
    result = await asyncio.wait_for(turns.runner.run_job(job_id), 20)
    assert result is not None and result.stop_reason is StopReason.COMPLETED
    assert otlp.requests >= 1 and otlp.span_count == 0  # the export is still held
    otlp.release()
    await asyncio.to_thread(tracing.close)


async def test_a_full_queue_drops_and_counts_instead_of_waiting(
    redis: aioredis.Redis,
    keys: Keys,
    thread: Thread,
    otlp: OtlpReceiver,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "2")
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "2")
    otlp.hold()  # the worker's first export hangs: nothing else leaves the queue
    metrics = Metrics()
    tracing = open_tracing(otlp, metrics=metrics)
    model = ScriptedModel(
        [calls(call("check", "c1", host="a"), call("check", "c2", host="b")), text("fine")]
    )
    turns, _ = make_turns(redis, keys, model, tracing)
    job_id = (await turns.receiver.receive(thread, ts=TS, user="UREQ", text="look")).job_id
    assert job_id is not None
    result = await turns.runner.run_job(job_id)
    assert result is not None and result.stop_reason is StopReason.COMPLETED
    # 5 spans (the run, two chats, two tools); at most 2 in the queue and 2 in the held
    # export: at least one is dropped, counted, and the job did not wait for room.
    assert tracing.dropped >= 1
    counted = metrics.registry.get_sample_value("opsloop_otel_spans_dropped_total")
    assert counted is not None and counted >= 1
    otlp.release()
    await asyncio.to_thread(tracing.close)

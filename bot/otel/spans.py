"""A job's runs as OpenTelemetry spans, named as the GenAI semantic conventions name them.

Imported only by ``bot.otel.tracing.open_tracing`` when tracing is on: this is the one
module that imports the OpenTelemetry SDK. We follow the GenAI conventions of
semantic-conventions **v1.41.0** (status Development; the last release before they
moved to the ``semantic-conventions-genai`` repository), the
``gen_ai_latest_experimental`` names:

- ``invoke_agent opsloop`` (INTERNAL), one per run of a job. Every run of one job is in
  one trace (the id in the job's ``meta``, ``bot.otel.tracing``); a run that resumes a job
  (after an approval, a Continue, a takeover) links to the run it continues.
- ``chat {model}`` (CLIENT), one per model request, child of the run: provider,
  request and response model, input/output/cached tokens, finish reasons.
- ``execute_tool {name}`` (INTERNAL), one per tool call (a dry run and a call refused
  before running included), child of the run: tool name, call id, type, our category,
  ``error.type`` when it failed.
- Span events on the run (``opsloop.*``): an approval asked for, the decision the run
  resumes with (with the approver's Slack id), replies injected, a limit reached, a
  fallback, condensing.

Contents (tool arguments and results, the answer) only with
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``, scrubbed and bounded.

Export: the SDK's ``BatchSpanProcessor`` (a bounded queue, a worker thread) to the OTLP
HTTP exporter, both configured by the standard ``OTEL_*`` environment, so an endpoint
that is down or slow costs a job only the ``on_end`` of its spans; spans lost to a full
queue or a failed export are counted (``opsloop_otel_spans_dropped_total``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace import (
    INVALID_SPAN_ID,
    INVALID_TRACE_ID,
    Link,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    Tracer,
    set_span_in_context,
)
from opentelemetry.util.types import Attributes

# The core's events, always named ``events.…``: a span's own events (``add_event``) are
# OpenTelemetry's.
from bot.agent import events
from bot.agent.ports import Approved, Decision, Denied
from bot.agent.state import StopReason
from bot.agent.tools import Tool
from bot.otel.meta import SPAN_META, TRACE_META, TracingOptions
from bot.store.jobs import JobRecord
from bot.store.trace import bound_text

log = logging.getLogger(__name__)

SEMCONV_VERSION = "1.41.0"
SCHEMA_URL = f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}"
AGENT_NAME = "opsloop"
MAX_CONTENT_CHARS = 4_000
MAX_IDS = 20
# A model error's text is not a low-cardinality ``error.type``: these kinds are.
MODEL_ERROR_TYPES = frozenset({"timeout", "cancel", "deadline", "repetition"})
MENTION = re.compile(r"<@([A-Z0-9]+)>")
TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")


def traceparent(context: SpanContext) -> str:
    """The W3C ``traceparent`` of ``context``."""
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def parse_traceparent(value: str | None) -> SpanContext | None:
    """A remote span context from a ``traceparent``; None for anything else."""
    match = TRACEPARENT.match(value or "")
    if match is None:
        return None
    trace_id, span_id = int(match[1], 16), int(match[2], 16)
    if trace_id == INVALID_TRACE_ID or span_id == INVALID_SPAN_ID:
        return None
    return SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(int(match[3], 16)))


def provider_and_model(label: str, default_provider: str) -> tuple[str, str]:
    """``gen_ai.provider.name`` and the model name of a chain label
    (``anthropic:claude-…`` names its provider; a bare name is the primary's)."""
    prefix, sep, rest = label.partition(":")
    if sep and prefix in ("openai", "anthropic") and rest:
        return prefix, rest
    return default_provider, label


class _JobTraceIds(RandomIdGenerator):
    """Random ids, except the trace id of a run's span, which is its job's (``forced``)."""

    def __init__(self) -> None:
        self._wanted: ContextVar[int | None] = ContextVar("opsloop_trace_id", default=None)

    def generate_trace_id(self) -> int:
        wanted = self._wanted.get()
        return wanted if wanted is not None else super().generate_trace_id()

    @contextlib.contextmanager
    def forced(self, trace_id: int | None) -> Iterator[None]:
        token = self._wanted.set(trace_id)
        try:
            yield
        finally:
            self._wanted.reset(token)


class _CountingExporter(SpanExporter):
    """The OTLP exporter, counting the spans of every export that failed."""

    def __init__(self, inner: SpanExporter, on_dropped: Callable[[int], None]) -> None:
        self._inner = inner
        self._on_dropped = on_dropped

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self._inner.export(spans)
        except Exception:
            log.warning("OpenTelemetry: the span export raised", exc_info=True)
            result = SpanExportResult.FAILURE
        if result is not SpanExportResult.SUCCESS:
            self._on_dropped(len(spans))
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self._inner.force_flush(timeout_millis)


class _CountingBatch(BatchSpanProcessor):
    """The SDK's batch processor, counting the spans its full queue drops.

    The queue is the SDK's (a bounded deque that drops its oldest entry when full); the
    count peeks at its length, and is simply not taken if a later SDK moves it."""

    def __init__(self, exporter: SpanExporter, on_dropped: Callable[[int], None]) -> None:
        super().__init__(exporter)
        self._on_dropped = on_dropped

    def on_end(self, span: ReadableSpan) -> None:
        queue = getattr(getattr(self, "_batch_processor", None), "_queue", None)
        if isinstance(queue, deque) and queue.maxlen is not None and len(queue) >= queue.maxlen:
            self._on_dropped(1)
        super().on_end(span)


@dataclass(eq=False)
class GenAiTracing:
    """The process's tracer provider, batch processor and exporter (one per process)."""

    provider: TracerProvider
    options: TracingOptions
    ids: _JobTraceIds
    tracer: Tracer = field(init=False)
    dropped: int = field(default=0, init=False)  # spans lost to a full queue or a failed export
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        self.tracer = self.provider.get_tracer(
            "opsloop", self.options.service_version or None, schema_url=SCHEMA_URL
        )

    @classmethod
    def open(cls, options: TracingOptions, exporter: SpanExporter | None = None) -> GenAiTracing:
        """Everything from the standard ``OTEL_*`` environment (the SDK reads it):
        endpoint, headers, timeout, service name, resource attributes, sampler, queue."""
        own: dict[str, str | int] = {"process.pid": os.getpid()}
        if options.service_version:
            own[SERVICE_VERSION] = options.service_version
        resource = Resource.create(own)
        if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
            resource = resource.merge(Resource({SERVICE_NAME: AGENT_NAME}))
        ids = _JobTraceIds()
        # No exit hook: the SDK's waits up to 30 s for an endpoint that is down; ``close``
        # is bounded instead.
        provider = TracerProvider(resource=resource, id_generator=ids, shutdown_on_exit=False)
        tracing = cls(provider, options, ids)
        counted = _CountingExporter(exporter or OTLPSpanExporter(), tracing._count_dropped)
        provider.add_span_processor(_CountingBatch(counted, tracing._count_dropped))
        return tracing

    def _count_dropped(self, count: int) -> None:
        with self._lock:
            self.dropped += count
        if self.options.on_dropped is not None:
            self.options.on_dropped(count)

    def run(self, record: JobRecord, decision: Decision | None, tools: Sequence[Tool]) -> RunSpans:
        """The spans of one run of ``record``'s job (its ``invoke_agent`` span starts now)."""
        return RunSpans(self, record, decision, {t.name: t.category for t in tools})

    def force_flush(self, timeout_s: float = 5.0) -> bool:
        """Export what is queued now (tests, benchmarks)."""
        return self.provider.force_flush(int(timeout_s * 1000))

    def close(self) -> None:
        """Export what is queued and stop, waiting at most ``shutdown_s`` (an endpoint that
        is down must not hold up the process's exit)."""
        worker = threading.Thread(target=self.provider.shutdown, name="otel-shutdown", daemon=True)
        worker.start()
        worker.join(self.options.shutdown_s)


class RunSpans:
    """One run's spans, built from the run's events (a ``bot.otel.tracing.RunTrace``)."""

    def __init__(
        self,
        tracing: GenAiTracing,
        record: JobRecord,
        decision: Decision | None,
        categories: dict[str, str],
    ) -> None:
        self._tracer = tracing.tracer
        self._options = tracing.options
        self._categories = categories
        self._chat: Span | None = None
        self._tools: dict[tuple[str, bool], Span] = {}
        self._ended = False
        pending = record.progress.pending
        self._decided_call = (
            pending.approval.call_id if pending is not None and pending.approval else None
        )
        self._denied = isinstance(decision, Denied)
        previous = parse_traceparent(record.meta.get(SPAN_META))
        links = [Link(previous, {"opsloop.link.type": "continues"})] if previous else []
        job_trace = record.meta.get(TRACE_META)
        trace_id = (
            int(job_trace, 16) if job_trace and re.fullmatch(r"[0-9a-f]{32}", job_trace) else None
        )
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": AGENT_NAME,
            "gen_ai.provider.name": self._options.provider,
            "gen_ai.conversation.id": f"{record.channel}:{record.thread_ts}",
            "opsloop.job.id": record.id,
            "opsloop.job.requester": record.requester,
            "opsloop.run.resumed": previous is not None,
        }
        with tracing.ids.forced(trace_id):
            self.span = self._tracer.start_span(
                f"invoke_agent {AGENT_NAME}",
                context=Context(),  # a root: never a child of whatever is current
                kind=SpanKind.INTERNAL,
                attributes=attributes,
                links=links,
            )
        own = self.span.get_span_context()
        self._parent = set_span_in_context(self.span)
        self.record = record.model_copy(
            update={
                "meta": {
                    **record.meta,
                    TRACE_META: f"{own.trace_id:032x}",
                    SPAN_META: traceparent(own),
                }
            }
        )
        if decision is not None:
            self._decision_event(
                decision, pending.approval.tool if pending and pending.approval else None
            )

    # -- the sink ---------------------------------------------------------------------

    def __call__(self, event: events.Event) -> None:
        if self._ended:
            return
        try:
            self._on(event)
        except Exception:  # reporting never breaks a run (and says so once per event)
            log.warning("OpenTelemetry: event %s not traced", event.kind, exc_info=True)

    def abandon(self) -> None:
        """End what is open: the run stopped without its ``RunEnd`` (handed over to
        another process, or the store failed)."""
        if self._ended:
            return
        self.span.set_attribute("opsloop.run.abandoned", True)
        self._end_all()

    # -- events -------------------------------------------------------------------------

    def _on(self, event: events.Event) -> None:
        match event:
            case events.StreamDelta():
                return
            case events.ModelRequestStart():
                self._chat_start(event)
            case events.ModelRequestEnd():
                self._chat_end(event)
            case events.ToolStart():
                self._tool_start(event)
            case events.ToolProgress():
                span = self._tools.get((event.call_id, False)) or self._tools.get(
                    (event.call_id, True)
                )
                if span is not None and self._options.capture_content:
                    span.add_event(
                        "opsloop.tool.progress", {"opsloop.message": self._content(event.message)}
                    )
            case events.ToolEnd():
                self._tool_end(event)
            case events.ApprovalRequested():
                approval = event.approval
                attributes: dict[str, Any] = {
                    "gen_ai.tool.call.id": approval.call_id,
                    "gen_ai.tool.name": approval.tool,
                    "opsloop.approval.args_hash": approval.args_hash,
                }
                if self._options.capture_content:
                    attributes["gen_ai.tool.call.arguments"] = self._json(approval.arguments)
                self.span.add_event("opsloop.approval.requested", attributes)
            case events.InjectedMessages():
                self.span.add_event(
                    "opsloop.injected",
                    {
                        "opsloop.inject.count": len(event.ids),
                        "opsloop.inject.ids": list(event.ids[:MAX_IDS]),
                    },
                )
            case events.ModelFallback():
                self.span.add_event(
                    "opsloop.model.fallback",
                    {
                        "opsloop.model.from": event.from_model,
                        "opsloop.model.to": event.to_model,
                        "opsloop.error": self._scrubbed(event.error),
                    },
                )
            case events.LimitReached():
                self.span.add_event(
                    "opsloop.limit",
                    {
                        "opsloop.stop_reason": event.reason.value,
                        "opsloop.limit.detail": self._scrubbed(event.detail),
                    },
                )
            case events.CondenseDone():
                self.span.add_event(
                    "opsloop.condensed", {"opsloop.condense.replaced": event.replaced}
                )
            case events.CondenseFailed():
                self.span.add_event(
                    "opsloop.condense_failed", {"opsloop.error": self._scrubbed(event.error)}
                )
            case events.RunEnd():
                self._run_end(event)

    def _decision_event(self, decision: Decision, tool: str | None) -> None:
        attributes: dict[str, Any] = {}
        if self._decided_call is not None:
            attributes["gen_ai.tool.call.id"] = self._decided_call
        if tool is not None:
            attributes["gen_ai.tool.name"] = tool
        if isinstance(decision, Approved):
            attributes["opsloop.approver.id"] = decision.confirmed_by
            if decision.arguments is not None:
                attributes["opsloop.approval.edited"] = True
            self.span.add_event("opsloop.approval.approved", attributes)
        elif isinstance(decision, Denied):
            # ``bot.store.approvals.to_decision``: "denied by <@U…>", "approval expired",
            # "cancelled by <@U…>" (Stop while the card was pending).
            who = MENTION.search(decision.reason)
            if who is not None:
                attributes["opsloop.approver.id"] = who[1]
            attributes["opsloop.approval.reason"] = self._scrubbed(decision.reason)
            outcome = next((w for w in ("expired", "cancelled") if w in decision.reason), "denied")
            self.span.add_event(f"opsloop.approval.{outcome}", attributes)

    def _chat_span(self, label: str, attributes: Attributes = None) -> Span:
        """A ``chat {model}`` span for the model ``label`` names (``provider:model``),
        with ``attributes`` besides the operation, provider and model."""
        provider, model = provider_and_model(label, self._options.provider)
        return self._tracer.start_span(
            f"chat {model}",
            context=self._parent,
            kind=SpanKind.CLIENT,
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": provider,
                "gen_ai.request.model": model,
                **(attributes or {}),
            },
        )

    def _chat_start(self, event: events.ModelRequestStart) -> None:
        if self._chat is not None:  # a start without its end: close it first
            self._chat.end()
        self._chat = self._chat_span(
            event.model, {"opsloop.iteration": event.iteration, "opsloop.attempt": event.attempt}
        )

    def _chat_end(self, event: events.ModelRequestEnd) -> None:
        span, self._chat = self._chat, None
        if span is None:  # an end without its start: the span still tells the outcome
            span = self._chat_span(event.model)
        if event.response_model:
            span.set_attribute("gen_ai.response.model", event.response_model)
        if event.finish_reason:
            span.set_attribute("gen_ai.response.finish_reasons", [event.finish_reason])
        if event.usage is not None:
            span.set_attribute("gen_ai.usage.input_tokens", event.usage.prompt_tokens)
            span.set_attribute("gen_ai.usage.output_tokens", event.usage.completion_tokens)
            span.set_attribute("gen_ai.usage.cache_read.input_tokens", event.usage.cached_tokens)
        if event.tool_calls:
            span.set_attribute("opsloop.tool_calls", event.tool_calls)
        if event.error is not None:
            kind = event.error if event.error in MODEL_ERROR_TYPES else "model_error"
            span.set_attribute("error.type", kind)
            span.set_status(Status(StatusCode.ERROR, self._scrubbed(event.error)))
        span.end()

    def _tool_span(self, call_id: str, tool: str, dry_run: bool) -> Span:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool,
            "gen_ai.tool.call.id": call_id,
            "gen_ai.tool.type": "function",
            "opsloop.tool.category": self._categories.get(tool, "unknown"),
        }
        if dry_run:
            attributes["opsloop.tool.dry_run"] = True
        return self._tracer.start_span(
            f"execute_tool {tool}",
            context=self._parent,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
        )

    def _tool_start(self, event: events.ToolStart) -> None:
        span = self._tool_span(event.call_id, event.tool, event.dry_run)
        if self._options.capture_content:
            span.set_attribute("gen_ai.tool.call.arguments", self._json(event.arguments))
        if event.proposed is not None:  # approved with edits: the arguments ran are the edit
            span.set_attribute("opsloop.approval.edited", True)
            if self._options.capture_content:
                span.set_attribute("opsloop.tool.proposed_arguments", self._json(event.proposed))
        self._tools[(event.call_id, event.dry_run)] = span

    def _tool_end(self, event: events.ToolEnd) -> None:
        span = self._tools.pop((event.call_id, event.dry_run), None)
        if span is None:  # refused before running: no ToolStart, a span of no length
            span = self._tool_span(event.call_id, event.tool, event.dry_run)
        span.set_attribute("opsloop.tool.ran", event.ran)
        span.set_attribute("opsloop.tool.output_chars", event.output_chars)
        if event.confirmed_by:
            span.set_attribute("opsloop.approver.id", event.confirmed_by)
        if event.is_error:
            if not event.ran and self._denied and event.call_id == self._decided_call:
                kind = "declined"
            elif not event.ran:
                kind = "refused"
            else:
                kind = "tool_error"
            span.set_attribute("error.type", kind)
            span.set_status(Status(StatusCode.ERROR))
        if self._options.capture_content and event.summary:
            span.set_attribute("gen_ai.tool.call.result", self._content(event.summary))
        span.end()

    def _run_end(self, event: events.RunEnd) -> None:
        result = event.result
        span = self.span
        span.set_attribute("opsloop.stop_reason", result.stop_reason.value)
        span.set_attribute("opsloop.job.iterations", result.iterations)
        span.set_attribute("opsloop.job.tool_executions", result.tool_executions)
        span.set_attribute("opsloop.job.input_tokens", result.usage.prompt_tokens)
        span.set_attribute("opsloop.job.output_tokens", result.usage.completion_tokens)
        if result.model:
            span.set_attribute("gen_ai.response.model", result.model)
        if result.approval is not None:
            span.set_attribute("opsloop.pending.call_id", result.approval.call_id)
        if result.stop_reason in (StopReason.FAILED, StopReason.NO_ACTION):
            span.set_attribute("error.type", result.stop_reason.value)
            span.set_status(Status(StatusCode.ERROR, self._scrubbed(result.error or "")))
        if self._options.capture_content and result.output:
            message = {
                "role": "assistant",
                "parts": [{"type": "text", "content": self._content(result.output)}],
            }
            span.set_attribute("gen_ai.output.messages", json.dumps([message], ensure_ascii=False))
        self._end_all()

    def _end_all(self) -> None:
        self._ended = True
        if self._chat is not None:
            self._chat.end()
            self._chat = None
        for span in self._tools.values():
            span.end()
        self._tools.clear()
        self.span.end()

    # -- contents -----------------------------------------------------------------------

    def _scrubbed(self, text: str) -> str:
        return bound_text(self._options.scrub(text), MAX_CONTENT_CHARS)

    def _content(self, text: str) -> str:
        return self._scrubbed(text)

    def _json(self, value: object) -> str:
        return self._scrubbed(json.dumps(value, sort_keys=True, ensure_ascii=False, default=str))

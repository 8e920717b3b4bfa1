"""What a traced job keeps in its record, and the tracer's options: no OpenTelemetry here.

A job's record ``meta`` (which every process already reads and writes with the record)
holds ``TRACE_META``, the job's trace id (32 hex digits, fixed by its first traced run,
so every run of the job is in one trace), and ``SPAN_META``, the W3C ``traceparent`` of
its latest run's ``invoke_agent`` span, which the next run links to (``bot.otel.tracing``).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass

from bot.agent.redact import redact_secrets
from bot.store.jobs import JobRecord

TRACE_META = "otel_trace_id"
SPAN_META = "otel_span"


@dataclass(frozen=True, slots=True, kw_only=True)
class TracingOptions:
    """What the composition root decides once per process (from ``OtelSettings``)."""

    capture_content: bool = False  # OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT
    provider: str = "openai"  # gen_ai.provider.name of a model label without a prefix
    service_version: str = ""
    scrub: Callable[[str], str] = redact_secrets  # contents are scrubbed like every output
    on_dropped: Callable[[int], None] | None = None  # spans lost (queue full, export failed)
    shutdown_s: float = 3.0  # how long closing may wait for the last export


def with_trace_id(record: JobRecord) -> JobRecord:
    """The record with its job's trace id in ``meta`` (a new random one on its first run)."""
    if TRACE_META in record.meta:
        return record
    return record.model_copy(update={"meta": {**record.meta, TRACE_META: secrets.token_hex(16)}})


def trace_id_of(record: JobRecord) -> str | None:
    """The job's trace id, if a traced run ever ran it."""
    return record.meta.get(TRACE_META)

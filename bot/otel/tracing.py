"""OpenTelemetry traces of jobs, when the process is configured for them: the switch.

This module imports no OpenTelemetry: with tracing off (the default) nothing of the SDK
is loaded and a job's run pays nothing. ``open_tracing`` loads ``bot.otel.spans``
(the GenAI semantic-convention spans, the exporter, the bounded batch queue) only when
the settings turn tracing on; ``Turns`` then adds each run's ``RunTrace`` to its event
sinks, beside the Redis trace (``bot.store.trace``).

What the job keeps in Redis for its traces is in its record's ``meta``
(``bot.otel.meta``): its trace id, fixed by its first traced run, so every run of
the job is in one trace and the status message and ``opsloop trace`` can name it; and
its latest run's span context, which the next run — in this process or another — links
to.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from bot.agent.events import Event
from bot.agent.ports import Decision
from bot.agent.tools import Tool
from bot.otel.meta import (
    SPAN_META,
    TRACE_META,
    TracingOptions,
    trace_id_of,
    with_trace_id,
)
from bot.store.jobs import JobRecord

__all__ = [
    "SPAN_META",
    "TRACE_META",
    "RunTrace",
    "Tracing",
    "TracingOptions",
    "open_tracing",
    "trace_id_of",
    "with_trace_id",
]


class RunTrace(Protocol):
    """One run's spans: an event sink, and ``abandon`` for a run that ends without its
    ``RunEnd`` (handed over, or the store failed)."""

    record: JobRecord  # the job's record with this run's span context in ``meta``

    def __call__(self, event: Event) -> None: ...

    def abandon(self) -> None: ...


class Tracing(Protocol):
    """The process's tracer (one per process)."""

    def run(
        self, record: JobRecord, decision: Decision | None, tools: Sequence[Tool]
    ) -> RunTrace: ...

    def force_flush(self, timeout_s: float = 5.0) -> bool: ...

    def close(self) -> None: ...


def open_tracing(enabled: bool, options: TracingOptions) -> Tracing | None:
    """The process's tracer, or None when tracing is off (and then nothing is imported)."""
    if not enabled:
        return None
    from bot.otel.spans import GenAiTracing  # the SDK only when it is used

    return GenAiTracing.open(options)

"""OpenTelemetry traces of jobs, off unless the process's ``OTEL_*`` environment says so.

Imported where spans are made (the runner adds a run's spans to its event sinks, the
composition root opens the tracer) and where a job's trace id is named (the status
message, ``opsloop trace``):

- ``tracing``: the switch (``open_tracing``) and the ports the runner holds (``Tracing``,
  ``RunTrace``); no OpenTelemetry import, so tracing off loads nothing of the SDK.
- ``meta``: what a traced job keeps in its record's ``meta`` (trace id, latest span
  context) and the tracer's options; no OpenTelemetry import.
- ``spans``: the GenAI semantic-convention spans, exporter and batch queue; the only
  module importing the OpenTelemetry SDK, loaded by ``open_tracing`` when tracing is on.

Jobs themselves (receive, run, finish) are ``bot.turns``; the Redis trace of a run that
``opsloop trace`` reads is ``bot.store.trace``.
"""

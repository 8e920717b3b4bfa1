"""A traced job's ending names its OpenTelemetry trace id on the job line, next to the
job id ``opsloop trace`` takes; an untraced job's job line is as it was."""

from __future__ import annotations

from bot.agent import StopReason
from bot.slack.status_blocks import ending_message

JOB = "C1:1700000000.000100:j2"
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def job_line(trace_id: str | None) -> str:
    ending = ending_message(
        StopReason.LIMIT_ITERATIONS,
        job_id=JOB,
        iterations=20,
        max_iterations=20,
        tokens=1_500,
        token_budget=200_000,
        tools_run=2,
        trace_id=trace_id,
    )
    context = next(b for b in ending.blocks if b["type"] == "context")
    text: str = context["elements"][0]["text"]
    assert TRACE not in ending.text  # the notification text stays short
    return text


def test_a_traced_job_line_names_the_trace() -> None:
    assert job_line(TRACE).endswith(f" · job `{JOB}` · trace `{TRACE}`")


def test_an_untraced_job_line_names_the_job_only() -> None:
    assert job_line(None).endswith(f" · job `{JOB}`")

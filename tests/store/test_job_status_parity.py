"""Every way a run stops is a job status of the same name and value, and nothing else is.

``JobStatus`` is ``StopReason`` plus ``queued`` and ``running`` (the two a run has no
reason for). A ``StopReason`` added without its ``JobStatus`` fails here, before a job
that stops that way fails to be recorded.
"""

from __future__ import annotations

import pytest

from bot.agent import StopReason
from bot.store.jobs import JobStatus

JOB_ONLY = {"QUEUED": "queued", "RUNNING": "running"}


@pytest.mark.parametrize("reason", list(StopReason), ids=lambda reason: reason.name)
def test_every_stop_reason_is_a_job_status(reason: StopReason) -> None:
    status = JobStatus.of(reason)
    assert status.name == reason.name
    assert status.value == reason.value


def test_job_status_is_stop_reason_plus_queued_and_running() -> None:
    extra = {status.name: status.value for status in JobStatus}.items() - {
        reason.name: reason.value for reason in StopReason
    }.items()
    assert dict(extra) == JOB_ONLY


def test_live_and_final_statuses() -> None:
    live = {status for status in JobStatus if not status.final}
    assert live == {JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.AWAITING_APPROVAL}
    assert {status for status in JobStatus if status.limit} == {
        JobStatus.of(StopReason.LIMIT_ITERATIONS),
        JobStatus.of(StopReason.LIMIT_TOKENS),
        JobStatus.of(StopReason.LIMIT_DEADLINE),
    }

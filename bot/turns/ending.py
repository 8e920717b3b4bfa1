"""How a run's end is saved and its delivery settled.

``save_end`` writes the job's status with its result: a pause for approval is saved as
it is; an ending goes through ``Jobs.finish``, one script that also looks at the
thread's inject stream, so a reply that arrived after the loop's last read ends this
job anyway and starts a follow-up job in the same conversation (its id is returned).
``settle_delivery`` records that the ending reached the thread (``Jobs.delivered``), or
leaves it owed for the scanner of any process. ``report_unknown_outcomes`` tells the
thread, once per call, about mutating calls an interruption left without a result.
"""

from __future__ import annotations

import logging
from typing import Any

from bot.agent import RunResult
from bot.agent.state import StopReason
from bot.errors import StoreError
from bot.store.jobs import JobRecord, JobStatus
from bot.store.parts import Stores
from bot.store.trace import TraceRecorder
from bot.turns.ports import JobSink, Notifier

log = logging.getLogger(__name__)

UNKNOWN_TOLD = "unknown_told"  # the job's meta: the ledger keys already reported unknown


async def save_end(
    stores: Stores,
    record: JobRecord,
    result: RunResult,
    *,
    fence: int,
    seen: int,
    trace: TraceRecorder,
) -> str | None:
    """Save how the job ended (with the trace's last entries when it ends); the id of
    a follow-up job if replies are pending."""
    jobs = stores.jobs
    status = JobStatus.of(result.stop_reason)
    update: dict[str, Any] = {
        "progress": result.state,
        "stop_reason": result.stop_reason.value,
        "error": result.error,
        "output": result.output,
    }
    if result.stop_reason is StopReason.AWAITING_APPROVAL:
        await jobs.save(record, status, fence=fence, via=None, **update)
        return None
    entries = trace.drain()
    try:
        ended = await jobs.finish(
            record, status, fence=fence, inject_seen=seen, trace=entries, **update
        )
    except BaseException:
        trace.put_back(entries)
        raise
    if ended is not None:
        return None
    trace.put_back(entries)  # not written: the flush after the follow-up's start
    # A reply arrived after the loop's last read: end this job anyway and let a new job
    # in the conversation take the reply in.
    await jobs.save(record, status, fence=fence, via=None, **update)
    follow = await jobs.create(record.thread, requester=record.requester, limits=record.limits)
    await stores.recent.add(follow.id, requester=record.requester, at=follow.created_at)
    log.info("job %s ended with replies pending; %s takes them", record.id, follow.id)
    return follow.id


async def settle_delivery(stores: Stores, job_id: str, reporter: JobSink | None) -> None:
    """Settle the ended job's ending (``Jobs.finish``): shown in the thread, or no one
    to show it to. One Slack could not take stays owed: the scanner of any process tries
    again once this lease is gone (``bot.turns.scanner``)."""
    if reporter is not None and not reporter.delivered:
        log.warning("job %s: its ending did not reach the thread; left owed", job_id)
        return
    try:
        await stores.jobs.delivered(job_id)
    except StoreError:  # a redelivery finds the answer in the thread: none is doubled
        log.warning("job %s: its delivery was not recorded", job_id, exc_info=True)


async def report_unknown_outcomes(
    stores: Stores, notifier: Notifier | None, record: JobRecord
) -> JobRecord:
    """Tell people about mutating calls an interruption left without a result (once
    per call); the loop tells the model when it meets them."""
    if notifier is None or not record.progress.call_ids:
        return record
    told = set(filter(None, record.meta.get(UNKNOWN_TOLD, "").split(",")))
    entries = await stores.ledger.entries(record.id)
    unknown = {
        key: entry for key, entry in entries.items() if entry.state == "started" and key not in told
    }
    if not unknown:
        return record
    await notifier.tell_unknown(record, list(unknown.values()))
    told.update(unknown)
    return record.model_copy(update={"meta": {**record.meta, UNKNOWN_TOLD: ",".join(sorted(told))}})

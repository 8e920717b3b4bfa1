"""The workspace's daily caps in the turns: the core's ``Spend`` port, and Continue's raise.

``WorkspaceSpend`` adapts ``bot.store.quota.DailyCaps`` to the core's ``Spend`` protocol
(``bot.agent.ports``): the core reserves before every model call and settles after it;
a refusal ends the job ``limit_tokens`` with the refusal's detail, which names
``WORKSPACE_CAP``. The caps and the new-jobs gate are built from the settings by the
composition root (``bot.service.daily_caps``, ``bot.service.job_admission``).

A job stopped by the workspace's cap (``stopped_by_cap``) is continued differently from
one stopped by its own limits (``bot.turns.controls.Controls.raise_limit``): its Continue, which
only an approver may press (the Slack edge asks its policy first), raises the
workspace's cap for the day (``raise_workspace_cap``: the base cap once more, recorded
in the audit log in the same script) and makes the job runnable again without touching
its own budget (``continue_capped``). The job's record gets a raise of 0 tokens by the
approver: a limit ending returns to ``running`` only through a recorded raise
(``bot.store.jobs``), and it makes the button single use like every Continue. When
someone else raised the day first, the job just continues.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass

from bot.agent.ports import WORKSPACE_CAP, SpendHold, SpendRefused
from bot.store.audit_entry import AuditEntry, staged_json
from bot.store.jobs import JobRecord, Jobs, JobStatus, LimitRaise
from bot.store.keys import QUOTA_TAG
from bot.store.quota import CapStatus, DailyCaps, NotReached, Raised, utc_day
from bot.store.staging import AuditNotify
from bot.turns.controls import run_again

log = logging.getLogger(__name__)

# The caps and a raise's outcome, for the Slack edge (which takes only record types from
# the store: it holds the caps for ``continue_capped`` and reads what that returns).
__all__ = [
    "CapContinued",
    "DailyCaps",
    "NotReached",
    "Raised",
    "WorkspaceSpend",
    "continue_capped",
    "raise_workspace_cap",
    "stopped_by_cap",
]

USED = "this Continue was already used; only the latest ending's button continues"


@dataclass(frozen=True, slots=True)
class WorkspaceSpend:
    """The core's ``Spend`` port over the workspace's daily caps."""

    caps: DailyCaps

    async def reserve(
        self, *, model: str, tokens: int, cost_usd: float | None
    ) -> SpendHold | SpendRefused:
        refused = await self.caps.reserve(tokens, cost_usd)
        if isinstance(refused, SpendRefused):
            log.info("model call to %s refused: %s", model, refused.detail)
        return refused

    async def settle(self, hold: SpendHold, *, tokens: int, cost_usd: float | None) -> None:
        await self.caps.settle(hold, tokens, cost_usd)


def stopped_by_cap(record: JobRecord) -> bool:
    """Whether the job's last ending was the workspace's daily cap (not its own budget)."""
    return record.status is JobStatus.LIMIT_TOKENS and WORKSPACE_CAP in (record.error or "")


def cap_raised_entry(
    caps: DailyCaps, by: str, *, at: float, day: str, job: JobRecord | None, seq: int | None
) -> AuditEntry:
    """The audit entry of a raise (``daily_cap_raised``); one per Continue button."""
    who = f"{job.id}:{seq}" if job is not None and seq is not None else uuid.uuid4().hex
    return AuditEntry(
        id=f"daily_cap_raised:{day}:{who}",
        kind="daily_cap_raised",
        at=at,
        actor=by,
        job_id=job.id if job is not None else None,
        channel=job.channel if job is not None else None,
        thread_ts=job.thread_ts if job is not None else None,
        detail={"day": day, "tokens": caps.tokens, "cost_usd": caps.cost_usd},
    )


async def raise_workspace_cap(
    caps: DailyCaps,
    by: str,
    *,
    job: JobRecord | None = None,
    seq: int | None = None,
    on_audit: AuditNotify | None = None,
) -> Raised | NotReached:
    """Raise today's caps by their base once more, on behalf of the approver ``by``, if
    they are reached (two approvers at once raise once); ``job`` and ``seq`` name the
    Continue that asked, for the audit entry staged with the raise."""
    now = caps.now()
    entry = cap_raised_entry(caps, by, at=now, day=utc_day(now), job=job, seq=seq)
    result = await caps.raise_for_day(
        by,
        only_if_reached=True,
        audit_outbox=caps.audit_outbox,
        audit_json=staged_json(entry),
        at=now,
    )
    if isinstance(result, Raised):
        log.info("%s raised the workspace's daily cap: %s", by, result.status.figures())
        if on_audit is not None:
            on_audit(QUOTA_TAG)
    return result


@dataclass(frozen=True, slots=True)
class CapContinued:
    """The job is runnable again; ``raised`` is the day's raise (``NotReached``: someone
    raised it first, or a new day began, and the job just continues; ``None``: no
    daily cap is configured any more)."""

    record: JobRecord
    raised: Raised | NotReached | None

    @property
    def status(self) -> CapStatus | None:
        return self.raised.status if self.raised is not None else None


async def continue_capped(
    jobs: Jobs,
    caps: DailyCaps | None,
    job_id: str,
    by: str,
    *,
    seq: int | None,
    on_audit: AuditNotify | None = None,
) -> CapContinued | str:
    """Continue a job the workspace's cap stopped: raise the day (if still reached) and
    make the job runnable with its own limits unchanged; the outcome, or why not.
    ``seq`` is ``raise_limit``'s: each button continues once."""
    record = await jobs.get(job_id)
    if record is None:
        return "this job no longer exists"
    if seq is not None and seq != len(record.raises):
        return USED
    if not stopped_by_cap(record):
        return f"the job is {record.status.value.replace('_', ' ')}, not stopped by {WORKSPACE_CAP}"
    raised = None
    if caps is not None:
        raised = await raise_workspace_cap(caps, by, job=record, seq=seq, on_audit=on_audit)
    raises = [*record.raises, LimitRaise(limit="tokens", amount=0, by=by, at=time.time())]
    saved = await run_again(jobs, record, raises)
    return saved if isinstance(saved, str) else CapContinued(saved, raised)

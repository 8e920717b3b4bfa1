"""What people do to a job from outside its run: decide its approval, stop it, continue it.

``Controls`` holds them over the process's approvals and jobs; the edge calls it
(``Turns.controls``). A click only names an approval or a job; everything is looked up and
judged here, and the caller (the Slack edge) only renders the verdict:

- ``decide``: an ``Accepted`` decision (this click won the atomic pending → decided
  transition, see ``bot.store.approvals``; ``replicated`` False when no replica confirmed
  it in time — it stands all the same, and the job is resumed as for any decision), or
  ``Refused`` with its reason: the card is
  unknown, out of date (another message of the same approval), already decided,
  expired, no longer matching the job's pending call (stale), or the clicker may not
  decide it (the edge's approver policy, asked last through ``authorize``).
  A destructive call in a job nobody asked for as a person (an alert started it:
  ``two_approvers``) needs two different approvers: the first Approve is a
  ``FirstApproval`` (recorded on the approval, nothing decided), the same person's
  Approve again is refused, and a different approver's Approve decides it as any
  decision (``confirmed_by`` is theirs). Deny decides at once, whoever was first.
- ``stop``: at once for a job nobody runs (queued or awaiting approval: its pending card
  is cancelled too), else by flag and signal (the running loop ends it ``cancelled``).
- ``raise_limit``: Continue raises the limit that stopped the job by its original value,
  once per button, and makes the job runnable again.

Store errors are not caught here: the edge tells the clicker to try again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from bot.agent.state import StopReason
from bot.alerts.text import REQUESTER as ALERT_REQUESTER
from bot.errors import StoreError
from bot.store.approvals import (
    REFUSED_CHANGED as REFUSED_CHANGED,
)
from bot.store.approvals import (
    REFUSED_EXPIRED,
    REFUSED_STALE,
    ApprovalRecord,
    Approvals,
    Outcome,
    refusal_text,
)
from bot.store.audit import AuditEntry, AuditKind
from bot.store.connection import StoreConflict
from bot.store.jobs import JobRecord, Jobs, JobStatus, LimitRaise
from bot.store.keys import LEASE_TTL_MS

log = logging.getLogger(__name__)

RefusalKind = Literal["unknown", "out_of_date", "decided", "expired", "stale", "not_allowed"]

UNKNOWN_CARD = "this card is no longer valid"
OUT_OF_DATE = "this card is out of date"
ALREADY_DECIDED = "this approval was already decided"
SECOND_APPROVER = "a second, different approver must approve"


def two_approvers(approval: ApprovalRecord) -> bool:
    """Whether the call needs two different approvers: a destructive call in a job no
    person asked for (an alert started it), where no requester stands behind it, or a
    destructive call someone edited (their edit is the first approval,
    ``bot.turns.edits``)."""
    return approval.category == "destructive" and (
        approval.requester == ALERT_REQUESTER or approval.edited_by is not None
    )


@dataclass(frozen=True, slots=True)
class Accepted:
    """The click decided the approval; ``record`` is the decided approval.
    ``replicated``: whether replicas confirmed it (OPSLOOP_REDIS_MIN_REPLICAS); when not,
    the card still changed and the clicker is told so, never "nothing changed"."""

    record: ApprovalRecord
    kind: Literal["accepted"] = "accepted"
    replicated: bool = True


@dataclass(frozen=True, slots=True)
class Refused:
    """Nothing changed; ``text`` says why, to the clicker."""

    reason: RefusalKind
    text: str
    kind: Literal["refused"] = "refused"


@dataclass(frozen=True, slots=True)
class FirstApproval:
    """The click was the first of the two approvals the call needs; ``record`` (still
    pending) names its ``first_approver``. Nothing runs until someone else approves."""

    record: ApprovalRecord
    kind: Literal["first_approval"] = "first_approval"


Verdict = Accepted | FirstApproval | Refused

# The clicker's permission for this approval: a refusal text, or None when allowed.
Authorize = Callable[[ApprovalRecord], Awaitable[str | None]]


@dataclass(frozen=True, slots=True)
class StopOutcome:
    """What ``stop`` did: ``cancelled`` at once (nobody ran the job), ``signalled`` to
    the process running it, or the job had already ``ended``."""

    kind: Literal["cancelled", "signalled", "ended"]
    record: JobRecord | None
    approval: ApprovalRecord | None = None  # the pending card it cancelled


LIMIT_FIELDS: dict[JobStatus, tuple[Literal["iterations", "tokens", "deadline"], str]] = {
    JobStatus.LIMIT_ITERATIONS: ("iterations", "max_iterations"),
    JobStatus.LIMIT_TOKENS: ("tokens", "token_budget"),
    JobStatus.LIMIT_DEADLINE: ("deadline", "deadline_s"),
}


def stopped_by(user: str) -> str:
    """The cancel reason naming who pressed Stop (the ending shows it)."""
    return f"stopped by <@{user}>"


DECIDED_LOOK_S = LEASE_TTL_MS / 1000 + 1.0


@dataclass(frozen=True, slots=True)
class Controls:
    """Approve, Deny, Stop and Continue over the process's approvals and jobs."""

    approvals: Approvals
    jobs: Jobs

    async def decide(
        self,
        job_id: str,
        call_id: str,
        *,
        outcome: Outcome,
        by: str,
        card_ts: str | None,
        authorize: Authorize,
        args_hash: str | None = None,
        edited: dict[str, object] | None = None,
        seen_edit: str | None = None,
    ) -> Verdict:
        """Judge a click on the card ``card_ts`` of approval ``job_id``/``call_id`` and, when
        nothing refuses it, record the decision (see the module docstring). ``edited``: an
        approval with edits (``bot.turns.edits``); ``seen_edit``: the edit the card the
        decider saw showed (``None``: not checked)."""
        approval = await self.approvals.get(job_id, call_id) if call_id else None
        if approval is None:
            return Refused("unknown", UNKNOWN_CARD)
        if approval.card_ts and card_ts and card_ts != approval.card_ts:
            return Refused("out_of_date", OUT_OF_DATE)
        if approval.status != "pending":
            if approval.status == outcome and approval.decided_by == by:
                return await self._own_click_again(approval, args_hash)
            return Refused("decided", refusal_text(approval))
        waiting = await self.waiting_job(approval)
        if isinstance(waiting, Refused):
            return waiting
        if (refusal := await authorize(approval)) is not None:
            return Refused("not_allowed", refusal)
        if seen_edit is not None and seen_edit != approval.edit_tag:
            return Refused("stale", REFUSED_CHANGED)
        if outcome == "approved" and two_approvers(approval):
            if (first := await self._first_approval(approval, by)) is not None:
                return first
        result = await self.approvals.decide(
            job_id,
            call_id,
            outcome=outcome,
            by=by,
            args_hash=args_hash,
            now=time.time(),
            edited=edited,
            seen_edit=seen_edit,
        )
        if result is None:
            return Refused("unknown", UNKNOWN_CARD)
        if not result.won:
            reason: RefusalKind = (
                "expired"
                if result.refusal == REFUSED_EXPIRED
                else "stale"
                if result.refusal in (REFUSED_STALE, REFUSED_CHANGED)
                else "decided"
            )
            return Refused(reason, result.refusal or ALREADY_DECIDED)
        await self._look_soon(job_id)
        return Accepted(result.record, replicated=result.replicated)

    async def waiting_job(self, approval: ApprovalRecord) -> JobRecord | Refused:
        """The job of a pending ``approval`` if the card still stands for the call it waits
        on; refused when the card expired or the job no longer waits on this very call
        (stale)."""
        if time.time() >= approval.expires_at:
            return Refused("expired", REFUSED_EXPIRED)
        record = await self.jobs.get(approval.job_id)
        pending = record.progress.pending if record is not None else None
        current = pending.approval if pending is not None else None
        if (
            record is None
            or record.status is not JobStatus.AWAITING_APPROVAL
            or current is None
            or current.call_id != approval.call_id
            or current.args_hash != approval.args_hash
        ):
            return Refused("stale", REFUSED_STALE)
        return record

    async def _first_approval(self, approval: ApprovalRecord, by: str) -> Verdict | None:
        """An Approve of a call that needs two approvers: recorded as its first approval
        when nobody approved it yet (of two first clicks at once, one is first), refused
        when ``by`` was first; ``None`` when someone else was first: this Approve decides."""
        first = approval.first_approver
        if not first:
            stored = await self.approvals.first_approval(approval.job_id, approval.call_id, by)
            if stored is None:
                return Refused("unknown", UNKNOWN_CARD)
            if stored.status != "pending":
                return None  # decided meanwhile: deciding says by whom
            if stored.first_approver == by:
                return FirstApproval(stored)
            first = stored.first_approver
        return Refused("not_allowed", SECOND_APPROVER) if first == by else None

    async def _look_soon(self, job_id: str) -> None:
        """A decided job is resumed by whoever took the click; should that process die
        before its resume holds the lease, a scan anywhere resumes it within about a lease
        (instead of at the paused job's next look, up to ``AWAITING_RECHECK_S`` away). A
        hint: best effort."""
        try:
            await self.jobs.index(job_id, time.time() + DECIDED_LOOK_S)
        except StoreError:
            log.warning("job %s: no early look after its decision", job_id, exc_info=True)

    async def _own_click_again(self, approval: ApprovalRecord, args_hash: str | None) -> Verdict:
        """The decider clicks the same button again: the retry of a click whose answer was
        lost or refused after the decision was written (Redis timed out, too few replicas
        confirmed it). It stands as the same decision — its card is edited and its job
        resumed as for the first click — once the decision is confirmed: ``decide`` finds it
        decided and, with ``OPSLOOP_REDIS_MIN_REPLICAS``, waits for its replicas."""
        result = await self.approvals.decide(
            approval.job_id,
            approval.call_id,
            outcome=approval.status,  # type: ignore[arg-type]  # decided: never "pending"
            by=approval.decided_by,
            args_hash=args_hash,
            now=time.time(),
        )
        if result is None:
            return Refused("unknown", UNKNOWN_CARD)
        if (
            result.record.status != approval.status
            or result.record.decided_by != approval.decided_by
        ):
            return Refused("decided", refusal_text(result.record))
        return Accepted(result.record, replicated=result.replicated)

    async def stop(self, job_id: str, by: str) -> StopOutcome:
        """Stop the job on behalf of ``by``: at once if nobody runs it, else by flag and
        signal (the running loop ends it ``cancelled``)."""
        for _ in range(3):
            record = await self.jobs.get(job_id)
            if record is None or record.status.final:
                return StopOutcome("ended", record)
            if record.status is JobStatus.RUNNING:
                await self.jobs.request_cancel(job_id, by)
                return StopOutcome("signalled", record)
            try:
                saved = await self.jobs.save(
                    record,
                    JobStatus.CANCELLED,
                    fence=record.fence,
                    audit=_audit(record, "job_stopped", by, detail={"while": record.status.value}),
                    stop_reason=StopReason.CANCELLED.value,
                    error=stopped_by(by),
                )
            except StoreConflict:
                continue  # it changed meanwhile (picked up, decided): look again
            approval = None
            pending = record.progress.pending
            if pending is not None and pending.approval is not None:
                decided = await self.approvals.decide(
                    job_id,
                    pending.approval.call_id,
                    outcome="cancelled",
                    by=by,
                    args_hash=None,
                    now=time.time(),
                )
                approval = decided.record if decided is not None and decided.won else None
            return StopOutcome("cancelled", saved, approval)
        await self.jobs.request_cancel(job_id, by)
        return StopOutcome("signalled", await self.jobs.get(job_id))

    async def raise_limit(self, job_id: str, by: str, *, seq: int | None = None) -> JobRecord | str:
        """Continue a job stopped by a limit: raise that limit by its original value,
        record who did, and make the job runnable; the new record, or why not.

        ``seq`` is the number of raises the job had when the clicked Continue was shown:
        each button raises once (a replay, or the button of an earlier ending, finds
        more raises recorded and changes nothing). ``None``: a button from before
        buttons carried it."""
        record = await self.jobs.get(job_id)
        if record is None:
            return "this job no longer exists"
        if seq is not None and seq != len(record.raises):
            return "this Continue was already used; only the latest ending's button continues"
        if not record.status.limit:
            return f"the job is {record.status.value.replace('_', ' ')}, not stopped by a limit"
        name, field_name = LIMIT_FIELDS[record.status]
        raised = sum(r.amount for r in record.raises if r.limit == name)
        current = float(getattr(record.limits, field_name))
        original = current - raised
        amount = int(original) if field_name != "deadline_s" else original
        limits = record.limits.model_copy(
            update={field_name: type(getattr(record.limits, field_name))(current + amount)}
        )
        raised_at = time.time()
        raises = [*record.raises, LimitRaise(limit=name, amount=amount, by=by, at=raised_at)]
        entry = _audit(
            record,
            "limit_raised",
            by,
            seq=len(raises),
            at=raised_at,
            detail={
                "limit": name,
                "amount": amount,
                "from": getattr(record.limits, field_name),
                "to": getattr(limits, field_name),
            },
        )
        return await run_again(self.jobs, record, raises, audit=entry, limits=limits)


async def run_again(
    jobs: Jobs,
    record: JobRecord,
    raises: list[LimitRaise],
    *,
    audit: AuditEntry | None = None,
    **update: object,
) -> JobRecord | str:
    """A job a limit stopped, made runnable again with ``raises`` (and ``update``: the
    raised limits, if any); why not when someone else continued or changed it first.
    Continue's path, and the workspace cap's (``bot.turns.spend``)."""
    try:
        return await jobs.save(
            record,
            JobStatus.RUNNING,
            fence=record.fence,
            via="raise",
            audit=audit,
            raises=raises,
            stop_reason=None,
            **update,
        )
    except StoreConflict:
        return "someone else continued or changed this job first"


def _audit(
    record: JobRecord,
    kind: AuditKind,
    by: str,
    *,
    seq: int | None = None,
    at: float | None = None,
    detail: dict[str, object],
) -> AuditEntry:
    """The audit entry of a change people make to a job (a stop, a limit raised)."""
    return AuditEntry(
        id=f"{kind}:{record.id}" + (f":{seq}" if seq is not None else ""),
        kind=kind,
        at=time.time() if at is None else at,
        actor=by,
        job_id=record.id,
        channel=record.channel,
        thread_ts=record.thread_ts,
        detail=detail,
    )

"""The audit entries an approval stages: asked for, and decided.

``bot.store.approvals`` stages them in the same script as the fact (``bot.store.staging``):
the request's entry whole, the decision's as a head the deciding script completes with
what only the stored record knows (the tool, the arguments hash, the card; an approval
with edits: who edited and the approved ``arguments``, beside the request's proposed ones).
"""

from __future__ import annotations

from bot.records import ApprovalRecord, Outcome
from bot.store.audit import ACTOR_BOT, AuditEntry, bound_result, job_fields, staged_json
from bot.store.staging import head_json

MAX_AUDIT_TEXT = 2000  # the dry run and the reason, in the audit log


def requested_entry(record: ApprovalRecord) -> str:
    """The audit entry of a new approval (staged by the create script)."""
    detail: dict[str, object] = {
        "category": record.category,
        "requester": record.requester,
        "expires_at": record.expires_at,
    }
    for name in ("dry_run_output", "preview", "reason"):
        value = getattr(record, name)
        if value:
            detail[name] = bound_result(value, MAX_AUDIT_TEXT)
    return staged_json(
        AuditEntry(
            id=f"approval_requested:{record.job_id}:{record.call_id}",
            kind="approval_requested",
            at=record.requested_at,
            actor=ACTOR_BOT,
            job_id=record.job_id,
            channel=record.channel,
            thread_ts=record.thread_ts,
            tool=record.tool,
            call_id=record.call_id,
            args_hash=record.args_hash,
            arguments=record.arguments,
            detail=detail,
        )
    )


def decided_entry_head(
    job_id: str, call_id: str, *, outcome: Outcome, by: str | None, at: float
) -> str:
    """The audit entry of a decision without its closing brace: the deciding script adds
    the tool, the arguments hash and the card, which only the stored record knows."""
    entry = AuditEntry(
        id=f"approval_decided:{job_id}:{call_id}",
        kind="approval_decided",
        at=at,
        actor=by or ACTOR_BOT,
        **job_fields(job_id),
        call_id=call_id,
        outcome=outcome,
    )
    return head_json(entry, completed_with=("tool", "args_hash", "detail", "arguments"))

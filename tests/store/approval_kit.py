"""A pending approval record for the store's tests (each module overrides what it needs)."""

from __future__ import annotations

from bot.store.approvals import ApprovalRecord
from bot.store.keys import Thread

NOW = 1_700_000_000.0
REQUESTER = "U0REQUES1"


def pending_approval(
    thread: Thread,
    *,
    args_hash: str,
    call_id: str = "call_1",
    requested_at: float = NOW,
    ttl_s: float = 3600,
    **update: object,
) -> ApprovalRecord:
    """Job 1's ``restart_service`` call in ``thread``, pending for ``ttl_s``."""
    return ApprovalRecord(
        job_id=thread.job_id(1),
        call_id=call_id,
        tool="restart_service",
        category="mutating",
        args_hash=args_hash,
        arguments={"service": "nginx"},
        requester=REQUESTER,
        channel=thread.channel,
        thread_ts=thread.thread_ts,
        requested_at=requested_at,
        expires_at=requested_at + ttl_s,
    ).model_copy(update=update)

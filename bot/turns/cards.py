"""A paused job's approval card: posted once, and found again by the job it waits in.

A job that pauses for approval is saved as ``awaiting_approval`` with its lease released
before its card is posted (``bot.turns.run``); ``post`` posts it through the notifier
unless the card is already in the thread or another process is posting it
(``Approvals.claim_card``), and records its message ts with the approval. The scanner
posts a card a crash left unposted the same way. ``waiting`` is the approval a paused
job waits for, which the edge shows replies on and the App Home lists.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from bot.store.approvals import ApprovalRecord
from bot.store.jobs import JobStatus
from bot.store.parts import Stores
from bot.turns.ports import Notifier


@dataclass(frozen=True, slots=True)
class Cards:
    """The approval cards of paused jobs; ``notifier=None``: headless, nothing posted."""

    stores: Stores
    notifier: Notifier | None = None

    async def post(self, job_id: str, call_id: str) -> bool:
        """Post the card of a pending approval unless it is in the thread or someone is
        posting it (see ``Approvals.claim_card``); whether this call posted it."""
        if self.notifier is None:
            return False
        approvals = self.stores.approvals
        if not await approvals.claim_card(job_id, call_id, now=time.time()):
            return False  # already posted (e.g. a re-ask after a crash), or being posted
        record = await self.stores.jobs.get(job_id)
        approval = await approvals.get(job_id, call_id)
        if record is None or approval is None:
            return False
        card_ts = await self.notifier.post_card(record, approval)
        await approvals.set_card(job_id, call_id, card_ts)
        return True

    async def waiting(self, job_id: str) -> ApprovalRecord | None:
        """The approval a job awaiting approval waits for (its card), or None."""
        record = await self.stores.jobs.get(job_id)
        if record is None or record.status is not JobStatus.AWAITING_APPROVAL:
            return None
        pending = record.progress.pending
        if pending is None or pending.approval is None:
            return None
        return await self.stores.approvals.get(job_id, pending.approval.call_id)

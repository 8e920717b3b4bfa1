"""What people said in a thread while one of its calls waited for approval.

A reply typed while a card waits is persisted in the thread's inject stream like any
reply (``bot.store.receipt``) and read by the job only when it resumes. Its card shows it
at once, so the people who decide see the correction before they click: ``CardReplies``
reads the thread's stream (no state of its own, so any process renders the same card,
after a crash too) for the people's messages sent between the request for approval and
its decision (Slack's ``ts`` is the sending time), newest last. Bounded: one ``XRANGE``
from the request's time (less ``CLOCK_SKEW_S``, the stream ids being Redis' clock and
``requested_at`` ours) of at most ``SCAN_LIMIT`` entries. ``CardReply``, the value it
returns, is a record the edge renders (``bot.records``), re-exported here.
"""

from __future__ import annotations

from bot.records import ApprovalRecord
from bot.records import CardReply as CardReply
from bot.store.connection import translated
from bot.store.inject import F_AUTHOR, F_TEXT, F_TS, sent_at
from bot.store.keys import Thread
from bot.store.redis_store import RedisStore

SCAN_LIMIT = 200  # entries read per card: far more than a thread says in one wait
CLOCK_SKEW_S = 60.0


class CardReplies(RedisStore):
    """The replies a card shows (see the module docstring)."""

    async def of(self, approval: ApprovalRecord) -> list[CardReply]:
        """The people's messages in the card's thread sent from the request for approval
        until its decision (or now), oldest first."""
        thread = Thread(approval.channel, approval.thread_ts)
        since = approval.requested_at
        until = approval.decided_at if approval.status != "pending" else None
        start = max(int((since - CLOCK_SKEW_S) * 1000), 0)
        async with translated("card replies"):
            entries = await self.redis.xrange(
                self.keys.inject(thread), min=f"{start}-0", max="+", count=SCAN_LIMIT
            )
        replies = []
        for _id, raw in entries or ():
            fields = {_text(k): _text(v) for k, v in (raw or {}).items()}
            ts, author = fields.get(F_TS, ""), fields.get(F_AUTHOR, "")
            at = sent_at(ts)
            if not author or at is None or at < since or (until is not None and at > until):
                continue
            replies.append(CardReply(ts=ts, author=author, text=fields.get(F_TEXT, ""), sent_at=at))
        replies.sort(key=lambda r: r.sent_at)
        return replies


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value

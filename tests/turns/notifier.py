"""A ``Notifier`` that records what jobs would show in their threads (tests of Turns)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from bot.agent import Injected
from bot.agent.events import Event
from bot.store.approvals import ApprovalRecord
from bot.store.jobs import JobRecord
from bot.store.keys import Thread
from bot.store.ledger import LedgerRecord


class QuietSink:
    """A job's progress that shows nothing."""

    status_ts: str | None = None
    delivered = True

    def __call__(self, event: Event) -> None:
        pass

    async def aclose(self) -> None:
        pass


@dataclass
class Notes:
    """Cards posted (their ts ``card_ts(n)``), visible acks, unknown-outcome notes.
    ``cards_fail``: posting a card raises, as when Slack is down."""

    cards: list[ApprovalRecord] = field(default_factory=list)
    acks: list[tuple[str, ...]] = field(default_factory=list)
    unknown: list[list[LedgerRecord]] = field(default_factory=list)
    cards_fail: bool = False

    async def open_progress(self, record: JobRecord, *, taken_over: bool = False) -> QuietSink:
        return QuietSink()

    async def post_card(self, record: JobRecord, approval: ApprovalRecord) -> str:
        if self.cards_fail:
            raise RuntimeError("slack is down")
        self.cards.append(approval)
        return card_ts(len(self.cards))

    async def tell_unknown(self, record: JobRecord, entries: Sequence[LedgerRecord]) -> None:
        self.unknown.append(list(entries))

    async def acknowledge(self, thread: Thread, items: Sequence[Injected]) -> None:
        self.acks.append(tuple(i.id for i in items))


def card_ts(n: int) -> str:
    """The message ts of the ``n``-th card posted."""
    return f"1700000000.{900 + n:06d}"

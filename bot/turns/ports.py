"""What a running job needs from the surface people see it on (the Slack edge).

``Turns`` takes a ``Notifier`` through its constructor and calls it at four points of a
job's life; the Slack edge (``bot.slack.notifier``) implements it without knowing
``Turns``, so nothing is patched in after construction and the click handlers
(``bot.slack.actions``) can take ``Turns`` in turn. Without a notifier (``None``) jobs run
headless: no status message, no card posted, nobody told.

Nothing here talks to Slack or Redis: the protocols only name what is shown and when.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from bot.agent.events import Event
from bot.agent.ports import Injected
from bot.store.approvals import ApprovalRecord
from bot.store.jobs import JobRecord
from bot.store.keys import Thread
from bot.store.ledger import LedgerRecord


class JobSink(Protocol):
    """A job's progress reporter: receives the run's events, then ``aclose``.
    ``status_ts`` is its status message (kept in the job so a resumed run edits it);
    ``delivered``, after ``aclose``: the ended job's answer and ending reached the thread
    (else they stay owed, for the scanner to deliver)."""

    @property
    def status_ts(self) -> str | None: ...

    @property
    def delivered(self) -> bool: ...

    def __call__(self, event: Event) -> None: ...

    async def aclose(self) -> None: ...


class Notifier(Protocol):
    """How a job shows itself in its thread."""

    async def open_progress(self, record: JobRecord, *, taken_over: bool = False) -> JobSink:
        """The job's face in the thread, opened once this process holds its lease (it
        posts the status message, or takes over the one ``record.meta`` names); closed
        when the run is over. ``taken_over``: the thread's lease was held before (a
        process may have died between posting the status message and saving its ts):
        look for that message in the thread before posting another."""
        ...

    async def post_card(self, record: JobRecord, approval: ApprovalRecord) -> str:
        """Post the approval card of a paused job (saved, its lease released); the card's
        message ts, which ``Turns`` records with the approval."""
        ...

    async def tell_unknown(self, record: JobRecord, entries: Sequence[LedgerRecord]) -> None:
        """Tell the thread that these mutating calls were started before an interruption
        and their outcome is unknown (once per call)."""
        ...

    async def acknowledge(self, thread: Thread, items: Sequence[Injected]) -> None:
        """The visible ack of messages the job took in (after they are durable and
        XACKed); must tolerate an ack that is already there."""
        ...

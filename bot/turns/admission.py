"""Admission: whether a message that would start a new job may, on the ack path.

``Gate`` stands in front of the job a message would create (``bot.turns.receive`` asks
it): the workspace's daily caps must not be reached and the author must not have started their
hourly rate of jobs (``bot.store.quota.JobAdmission``: one script, one round trip).
Only a message that would *start* a job is asked about; a reply or mention in a thread
whose job is live joins that job as always (a correction is never refused), and a reply
in a thread that holds no conversation is ignored as always.

Whether a message would start a job is what the thread's look (``bot.store.held``,
which ``bot.turns.context.context_first`` makes before reading a thread's earlier
messages) already says, so the gate is asked from there: ``context_first`` asks for
the thread's context exactly when the message can start a job (not the thread's root,
no live job, not a duplicate, a reply only in a conversation), and the gate sits in
front of that request. A thread's root starts a job unless it is a duplicate: the gate
is asked first, and Slack's retry of an admitted message is admitted again without
counting (the gate remembers each message's verdict for an hour). So a new job costs
one round trip more, and a message that starts nothing costs none.

A refused message writes nothing to its thread (no job, no inject entry): the caller
tells its author why (``NotAdmitted``). A store failure of the gate is the ack path's
like any other (raised: a 503, and Slack retries).
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.store.keys import Thread
from bot.store.quota import Admitted, CapReached, JobAdmission, RateLimited, Verdict
from bot.turns.context import ContextWindow, ThreadContext

# The gate and its verdicts, for the Slack edge (which imports no store module: it reads
# the verdicts ``Receiver.receive`` returns).
__all__ = ["CapReached", "Gate", "JobAdmission", "NotAdmitted", "RateLimited", "message_key"]


@dataclass(frozen=True, slots=True)
class NotAdmitted:
    """No job: the caps are reached or the author's rate is exceeded."""

    verdict: CapReached | RateLimited


def message_key(thread: Thread, ts: str) -> str:
    """What the gate knows a message by (its channel and ts, as the receipt does)."""
    return f"{thread.channel}:{ts}"


class Gate:
    """One message's admission, asked at most once."""

    def __init__(self, admission: JobAdmission, user: str, thread: Thread, ts: str) -> None:
        self._admission = admission
        self._user = user
        self._key = message_key(thread, ts)
        self.verdict: Verdict | None = None
        self.failure: Exception | None = None

    async def ask(self) -> Verdict:
        if self.verdict is None:
            self.verdict = await self._admission.admit(self._user, key=self._key)
        return self.verdict

    def before(self, context: ThreadContext | None) -> ThreadContext:
        """``context`` behind the gate: read only once the job is admitted."""

        async def read(window: ContextWindow) -> str | None:
            try:
                verdict = await self.ask()
            except Exception as exc:  # context_first logs and drops what its port raises
                self.failure = exc
                return None
            if not isinstance(verdict, Admitted) or context is None:
                return None
            return await context(window)

        return read

    def refusal(self) -> NotAdmitted | None:
        if self.failure is not None:
            raise self.failure
        if self.verdict is None or isinstance(self.verdict, Admitted):
            return None
        return NotAdmitted(self.verdict)

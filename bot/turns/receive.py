"""Receiving a person's message on the ack path: admission, thread context, receipt, index.

``Receiver.receive`` is the one path every message that may start or join a job takes
(a mention, a reply in a thread, the message shortcut), written once:

1. **Admission** (``bot.turns.admission``): a message that would *start* a job passes
   the new-jobs gate first (the workspace's daily caps, the author's hourly rate); a
   refused one writes nothing and comes back as ``NotAdmitted``. A message joining a live
   job is never refused.
2. **Thread context** (``bot.turns.context``): when the message can start a job in a
   thread whose earlier messages the history does not hold yet, the edge's reading of
   them (``context``) enters the inject stream first — asked only once the gate admits
   the job.
3. **Receipt** (``bot.store.receipt``, one script): the message into the thread's inject
   stream, and a new ``queued`` job unless one is live. A ``reply`` (not a mention) is
   taken only in a thread that holds a conversation.
4. **Index**: a receipt that ``needs_run`` puts the job in the scanner's index (the
   caller runs it), and a created job enters App Home's recent jobs.

Store failures are raised: the edge answers 503 and Slack retries the delivery, which the
receipt recognises as a duplicate.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from bot.store.jobs import JobLimits
from bot.store.keys import Thread
from bot.store.parts import Stores
from bot.store.receipt import Receipt
from bot.turns.admission import Gate, NotAdmitted
from bot.turns.context import ContextWindow, ThreadContext, context_first
from bot.turns.knowledge import Knowledge


@dataclass(frozen=True, slots=True)
class Receiver:
    """The ack path's receipt of messages (see the module docstring)."""

    stores: Stores
    limits: JobLimits  # a new job's limits (OPSLOOP_MAX_ITERATIONS, ...)
    # The alert's runbook and earlier incidents, read with the context of the first job a
    # person starts in an alert's thread (``Knowledge.thread_context``); None: not read.
    knowledge: Knowledge | None = None

    async def receive(
        self,
        thread: Thread,
        *,
        ts: str,
        user: str,
        text: str,
        reply: bool = False,
        context: ThreadContext | None = None,
        meta: dict[str, str] | None = None,
    ) -> Receipt | NotAdmitted:
        """Admit, read the thread's context first when due, persist, index (see the
        module docstring). Without a gate (``Stores.admission`` off) every message is
        admitted."""
        if context is not None and self.knowledge is not None:
            context = self._with_knowledge(thread, context, self.knowledge)
        admission = self.stores.admission
        if admission is not None and admission.active:
            gate = Gate(admission, user, thread, ts)
            if ts == thread.thread_ts:  # a thread's root starts a job unless a duplicate
                await gate.ask()
            else:
                await self._context_first(thread, ts, reply, gate.before(context))
            if (refused := gate.refusal()) is not None:
                return refused
        elif context is not None:
            await self._context_first(thread, ts, reply, context)
        return await self._persist(thread, ts=ts, user=user, text=text, reply=reply, meta=meta)

    @staticmethod
    def _with_knowledge(
        thread: Thread, context: ThreadContext, knowledge: Knowledge
    ) -> ThreadContext:
        async def read(window: ContextWindow) -> str | None:
            text = await context(window)
            if window.after is not None:  # a later job: the first one read it
                return text
            extra = await knowledge.thread_context(thread)
            return "\n\n".join(t for t in (text, extra) if t) or None

        return read

    async def _context_first(
        self, thread: Thread, ts: str, reply: bool, context: ThreadContext
    ) -> None:
        stores = self.stores
        await context_first(
            stores.held, stores.receipts, thread, ts=ts, reply=reply, context=context
        )

    async def _persist(
        self,
        thread: Thread,
        *,
        ts: str,
        user: str,
        text: str,
        reply: bool,
        meta: dict[str, str] | None = None,
    ) -> Receipt:
        stores = self.stores
        receipt = await stores.receipts.receive(
            thread,
            ts=ts,
            user=user,
            text=text,
            limits=self.limits,
            needs_conversation=reply,
            meta=meta or None,
        )
        if receipt.needs_run and receipt.job_id is not None:
            await stores.jobs.index(receipt.job_id, time.time())
        if receipt.outcome == "created" and receipt.job_id is not None:  # App Home's index
            await stores.recent.add(receipt.job_id, requester=user, at=time.time())
        return receipt

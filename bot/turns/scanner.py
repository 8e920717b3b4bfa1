"""The one periodic loop: find work nobody is doing, and expire old cards.

Every ``SCAN_INTERVAL_S`` (5 s) each process looks at the live jobs that are due in the
workspace-wide index (``Jobs.due``) and at approvals past their expiry
(``Approvals.due``), every bucket of each index (``bot.store.buckets``):

- entries an earlier version left in the single, unbucketed index keys: moved into
  their buckets first (``move_unbucketed``), so a rolling upgrade loses no job.
- approvals past their reminder time (``Approvals.take_reminders``, each taken by one
  process): recall the still pending card once in its thread.
- ``queued``: (re)schedule it; the thread's lease decides who runs it. A process at its
  limit of running jobs (``bot.turns.background``) leaves it queued: its next look is then
  just past this scan, so the next scan of any process with room takes it (a process
  that is full skips the jobs it already left waiting, with one command per page).
- ``running`` with no lease: its process died; resume it (from its last step; a
  resume, like a decided approval's, may use the reserve above the limit). With a
  lease held elsewhere: look again just after that lease would expire (a timer, so a
  crashed process's job is taken over within the lease's 15 s, not 15 s + a scan), and
  again after that while its holder keeps renewing it. The process running a job keeps
  pushing its next look forward; a job that becomes ``running`` is due at once
  (``Jobs.save``), so every other process looks at it and times its look to the lease.
- ``awaiting_approval`` whose approval was decided but never resumed (the deciding
  process died): resume it; still pending but its card never reached the thread (the
  pausing process died before posting it, or Slack failed): post the card.
- an ended job whose answer and ending are still owed to its thread (its process died
  before showing them, or Slack refused them past its patience; ``Jobs.finish``): once
  its lease is free, take the lease and deliver them (``bot.slack.redelivery``: the
  answer only if the thread lacks it), at most ``MAX_DELIVERIES`` times.
- a decided card whose edit is still owed a few seconds after the decision (its
  deciding process died before the edit, or Slack refused it): edit it now.
- an approval past its expiry: decide it ``expired`` (atomic; a click that won first
  stands), edit its card, and resume its job, whose model then reads
  ``Error: declined: approval expired``.
- audit entries staged by a process that died before chaining them
  (``AuditPublisher.drain``), and the audit log's retention.

Indexes are hints: everything is re-read and every transition is a compare-and-set, so
any number of processes may scan at once. A scan takes every job that is due, a page at
a time, looking at a few at once, and scans start every interval however long one took
(a slow scan does not push the next one later). A Redis outage skips a scan, never ends the loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from bot.agent.state import PendingBatch
from bot.errors import StoreError
from bot.store.approvals import ApprovalRecord
from bot.store.buckets import move_unbucketed
from bot.store.jobs import JobRecord, JobStatus
from bot.store.keys import LEASE_TTL_MS
from bot.store.lease import LeaseKeeper
from bot.turns.parts import Turns

log = logging.getLogger(__name__)

SCAN_INTERVAL_S = 5.0
LEASE_MARGIN_S = 0.2  # look again this long after a lease would have expired
AWAITING_RECHECK_S = 30.0  # a paused job is mostly resumed by its click, not the scan
DUE_PAGE = 100  # jobs read from the index at a time
LOOKS_AT_ONCE = 16  # jobs looked at concurrently
# A job left waiting for room is looked at again this long after the scan that left it:
# past that scan's ``now`` (so its paging moves on), due for the next scan anywhere.
NUDGE_S = 0.001
MAX_DELIVERIES = 3  # tries at an owed ending by other processes before giving up
DELIVERY_RETRY_S = 30.0  # after a try Slack refused


class Scanner:
    def __init__(
        self,
        turns: Turns,
        *,
        schedule: Callable[[str], None],
        resume: Callable[[str], None] | None = None,
        waits: Callable[[str], bool] | None = None,
        on_expired: Callable[[ApprovalRecord], Awaitable[None]],
        on_remind: Callable[[ApprovalRecord], Awaitable[None]] | None = None,
        on_card: Callable[[ApprovalRecord], Awaitable[bool]] | None = None,
        on_ending: Callable[[JobRecord], Awaitable[bool]] | None = None,
        on_replies: Callable[[ApprovalRecord], Awaitable[None]] | None = None,
        on_alerts: Callable[[float], Awaitable[None]] | None = None,
        interval_s: float = SCAN_INTERVAL_S,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.turns = turns
        self.schedule = schedule  # a new job (``Tasks.schedule``)
        self.resume = resume or schedule  # a job under way (``Tasks.resume``)
        self.waits = waits or (lambda job_id: False)  # left waiting for room here
        self.on_expired = on_expired
        self.on_remind = on_remind
        self.on_card = on_card
        self.on_ending = on_ending
        self.on_replies = on_replies  # replies a pending card does not show yet
        self.on_alerts = on_alerts  # alert groups whose Slack work is left (``AlertDesk.scan``)
        self.interval_s = interval_s
        self.now = now
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._looks: set[asyncio.Task[None]] = set()  # looks the timers started

    async def run(self) -> None:
        """Scan every interval until cancelled. Scans start on a fixed cadence: the
        sleep is what is left of the interval, so a scan slowed down by load (a busy
        event loop, many due jobs) does not delay every later one."""
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        try:
            while True:
                try:
                    await self.scan()
                except StoreError:
                    log.warning("scan skipped: Redis unavailable", exc_info=True)
                except Exception:
                    log.exception("scan failed")
                # After an overlong scan, start again at once, but do not catch up.
                next_at = max(next_at + self.interval_s, loop.time())
                await asyncio.sleep(next_at - loop.time())
        finally:
            for timer in self._timers.values():
                timer.cancel()
            for task in list(self._looks):
                task.cancel()

    async def scan(self) -> None:
        now = self.now()
        await move_unbucketed(
            self.turns.stores.redis, self.turns.stores.keys
        )  # left by older versions
        for job_id, call_id in await self.turns.stores.approvals.due(now):
            await self._expire(job_id, call_id, now)
        if self.on_remind is not None:
            for job_id, call_id in await self.turns.stores.approvals.take_reminders(now):
                await self._remind(job_id, call_id)
        if self.on_card is not None:
            for job_id, call_id in await self.turns.stores.approvals.take_card_edits(now):
                await self._redo_card(job_id, call_id)
        await self._look_at_due(now)
        if self.on_alerts is not None:
            await self.on_alerts(now)
        if self.turns.audit is not None:
            await self.turns.audit.drain()

    async def _redo_card(self, job_id: str, call_id: str) -> None:
        """Edit a decided card its deciding process never edited (it died after the
        acknowledgement, or Slack refused); taken from the index by this process alone
        until the retry time, settled by the hook once the edit landed."""
        record = await self.turns.stores.approvals.get(job_id, call_id)
        if record is None or record.status == "pending" or not record.card_owed:
            await self.turns.stores.approvals.card_edited(job_id, call_id)  # a stale hint
            return
        assert self.on_card is not None
        try:
            if await self.on_card(record):
                log.info("edited the decided card of %s/%s", job_id, call_id)
        except Exception:
            log.warning("could not edit the card of %s/%s", job_id, call_id, exc_info=True)

    async def _look_at_due(self, now: float) -> None:
        """Every job due by ``now``: each look moves a job's next look past ``now`` (or
        drops it), so the index is read again until a page brings nothing new."""
        seen: set[str] = set()
        while True:
            page = await self.turns.stores.jobs.due(now, DUE_PAGE)
            fresh = [job_id for job_id in page if job_id not in seen]
            # Jobs this process is running need no look, only their next one pushed
            # forward: one command for all of them, not a look each (under load most
            # due jobs are running here, and a look per job competes with the acks).
            here = {j: now + self.interval_s for j in fresh if j in self.turns.runner.running}
            # Jobs this process left waiting for room (it takes them when it has some):
            # due again for every other process's next scan, without a read here.
            here.update({j: now + NUDGE_S for j in fresh if j not in here and self.waits(j)})
            await self.turns.stores.jobs.index_many(here)
            await self._look_at_all([j for j in fresh if j not in here], now)
            seen.update(fresh)
            if len(page) < DUE_PAGE or not fresh:
                return

    async def _look_at_all(self, job_ids: list[str], now: float) -> None:
        """Look at a few jobs at a time: a look is a few round trips, and thousands of
        them one after another, each waiting out a busy event loop, took longer than a
        lease lives. A failed look cancels no other (redis-py commands are never
        cancelled mid-flight); the first failure is raised once all are done."""
        gate = asyncio.Semaphore(LOOKS_AT_ONCE)

        async def look(job_id: str) -> None:
            async with gate:
                await self._look_at(job_id, now)

        outcomes = await asyncio.gather(*map(look, job_ids), return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome

    async def _expire(self, job_id: str, call_id: str, now: float) -> None:
        result = await self.turns.stores.approvals.decide(
            job_id, call_id, outcome="expired", by=None, args_hash=None, now=now
        )
        if result is None or not result.won:
            return
        log.info("approval %s/%s expired", job_id, call_id)
        try:
            await self.on_expired(result.record)
        except Exception:
            log.warning("could not mark the card of %s/%s expired", job_id, call_id, exc_info=True)
        self.resume(job_id)

    async def _remind(self, job_id: str, call_id: str) -> None:
        """Recall a card still pending (taken from the index by this process alone)."""
        record = await self.turns.stores.approvals.get(job_id, call_id)
        if record is None or record.status != "pending" or self.on_remind is None:
            return
        try:
            await self.on_remind(record)
        except Exception:
            log.warning("could not remind about %s/%s", job_id, call_id, exc_info=True)

    async def _look_at(self, job_id: str, now: float) -> None:
        turns = self.turns
        if job_id in turns.runner.running:
            await turns.stores.jobs.index(job_id, now + self.interval_s)
            return
        record = await turns.stores.jobs.get(job_id)
        if record is None:
            await turns.stores.jobs.unindex(job_id)  # a stale hint
            return
        if record.status.final:
            await self._owed_ending(record, now)
            return
        match record.status:
            case JobStatus.QUEUED:
                self.schedule(job_id)
                await turns.stores.jobs.index(
                    job_id, self._next_look(job_id, now, now + self.interval_s)
                )
            case JobStatus.RUNNING:
                left = await turns.stores.leases.expires_in(record.thread)
                if left is None:
                    log.info("job %s has no live lease: resuming it", job_id)
                    self.resume(job_id)
                    await turns.stores.jobs.index(
                        job_id, self._next_look(job_id, now, now + self.interval_s)
                    )
                else:
                    self._later(job_id, left + LEASE_MARGIN_S)
                    await turns.stores.jobs.index(job_id, now + left + LEASE_MARGIN_S)
            case JobStatus.AWAITING_APPROVAL:
                if await turns.runner.decision(record) is not None:
                    self.resume(job_id)
                else:
                    await self._card_posted(record.progress.pending, job_id)
                    await self._replies_shown(record)
                await turns.stores.jobs.index(
                    job_id, self._next_look(job_id, now, now + AWAITING_RECHECK_S)
                )

    async def _owed_ending(self, record: JobRecord, now: float) -> None:
        """An ended job still in the index: its answer and ending may be owed to its
        thread (its process died before showing them, or Slack refused). Delivered under
        the thread's lease, so never while its own process may still be at it."""
        turns, job_id = self.turns, record.id
        if self.on_ending is None or await turns.stores.jobs.owed(job_id) is None:
            await turns.stores.jobs.unindex(job_id)  # delivered: a stale hint
            return
        lease = await turns.stores.leases.acquire(record.thread)
        if lease is None:  # its process is still showing it, or the thread's next job runs
            left = await turns.stores.leases.expires_in(record.thread) or 0.0
            self._later(job_id, left + LEASE_MARGIN_S)
            await turns.stores.jobs.index(job_id, now + left + LEASE_MARGIN_S)
            return
        async with LeaseKeeper(turns.stores.leases, lease):
            tries = await turns.stores.jobs.delivery_attempt(job_id)
            if tries is None:
                return  # delivered meanwhile
            if tries > MAX_DELIVERIES:
                log.error("job %s: gave up delivering its ending after %d tries", job_id, tries - 1)
                await turns.stores.jobs.delivered(job_id)
                return
            try:
                shown = await self.on_ending(record)
            except Exception:
                log.warning("could not deliver the ending of %s", job_id, exc_info=True)
                shown = False
            if shown:
                await turns.stores.jobs.delivered(job_id)
            else:
                await turns.stores.jobs.index(job_id, now + DELIVERY_RETRY_S)

    def _next_look(self, job_id: str, now: float, later: float) -> float:
        """When to look at a job this look (re)scheduled: ``later``, or, when this
        process left it waiting for room, just past this scan (see the module docstring)."""
        return now + NUDGE_S if self.waits(job_id) else later

    async def _replies_shown(self, record: JobRecord) -> None:
        """A paused job whose thread received messages its card does not show yet (the
        process that received them died before editing the card): show them now."""
        pending = record.progress.pending
        if self.on_replies is None or pending is None or pending.approval is None:
            return
        approval = await self.turns.stores.approvals.get(record.id, pending.approval.call_id)
        if approval is None or approval.status != "pending" or approval.card_ts is None:
            return
        if await self.turns.stores.receipts.count(record.thread) <= approval.replies_seq:
            return
        try:
            await self.on_replies(approval)
        except StoreError:
            raise
        except Exception:
            log.warning("could not show the replies on %s's card", record.id, exc_info=True)

    async def _card_posted(self, pending: PendingBatch | None, job_id: str) -> None:
        """A paused job whose card never reached the thread (its process died between
        saving the pause and posting the card, or Slack failed): post it now."""
        if pending is None or pending.approval is None:
            return
        try:
            if await self.turns.cards.post(job_id, pending.approval.call_id):
                log.info("posted the missing approval card of %s", job_id)
        except StoreError:
            raise
        except Exception:
            log.warning("could not post the approval card of %s", job_id, exc_info=True)

    def _later(self, job_id: str, delay: float) -> None:
        """Look at the job again when its current lease would have expired: resume it if
        the lease is gone, or wait for the lease's new expiry if its holder renewed it
        meanwhile (the holder may die after any renewal)."""
        if delay > LEASE_TTL_MS / 1000 + LEASE_MARGIN_S or job_id in self._timers:
            return  # no lease lives that long; an earlier look is already timed

        def fire() -> None:
            self._timers.pop(job_id, None)
            task = asyncio.create_task(self._look_again(job_id), name=f"look at {job_id}")
            self._looks.add(task)
            task.add_done_callback(self._looks.discard)

        self._timers[job_id] = asyncio.get_running_loop().call_later(delay, fire)

    async def _look_again(self, job_id: str) -> None:
        try:
            await self._look_at(job_id, self.now())
        except StoreError:
            log.warning("could not look at job %s: Redis unavailable", job_id, exc_info=True)
        except Exception:
            log.exception("looking at job %s failed", job_id)

"""Running a thread's job: lease, job state, the AgentConfig, the run, the ending.

``Turns`` is everything the Slack edge asks of the jobs; the edge never touches the
store itself. It persists what must not be lost (``receive``: the job as ``queued`` and
the message in the thread's inject stream, after the thread's earlier messages the
history does not hold yet when the message starts a job: ``bot.turns.context``) and
schedules ``run_job``. The runner takes
the thread's lease (or leaves the job to whoever holds it), resumes the job from its
saved progress with its remaining budget, and ends it atomically with a look at the
inject stream: a reply that arrived after the loop's last read starts a new job.
The request message itself enters the conversation through the inject stream, exactly
like a reply, so there is one path into the history.

Approvals: the core's ``confirm`` creates the pending approval (``bot.store.approvals``)
and the job pauses as ``awaiting_approval``; once it is saved and the lease released,
the notifier (``bot.turns.ports``) posts the card. A click is judged by ``decide``
(``bot.turns.controls``); whoever wins the decision calls ``run_job`` again, which
resumes the job with the decision. Stop: ``stop`` ends a job nobody runs (queued or
awaiting approval) at once, and otherwise sets the job's cancel flag (read with every
checkpoint) and publishes it, so the process running the job cancels its token
(``listen_for_stops``). Continue: ``raise_limit`` records the raise and makes the job
runnable again (same job, same history).

The ledger a run gives the core is ``bot.turns.claims.PatientLedger``: a write's claim no
replica confirmed (``OPSLOOP_REDIS_MIN_REPLICAS``) is withdrawn and, while the card is
valid, claimed again once the replicas catch up, instead of the run dying.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import redis.asyncio as aioredis
from redis.asyncio.client import PubSub
from redis.exceptions import RedisError

from bot.agent import AgentConfig, Limits, RunResult, run
from bot.agent.cancel import CancelToken
from bot.agent.events import Event, EventSink
from bot.agent.ports import (
    ClientResolver,
    Condense,
    ConfirmRequest,
    Decision,
    Denied,
    Injected,
    Pending,
    Pricing,
    Spend,
)
from bot.agent.read_artifact import with_read_artifact
from bot.agent.state import StopReason
from bot.agent.tools import Tool
from bot.agent.work_done import work_done
from bot.errors import HandedOver, StoreError
from bot.otel.tracing import RunTrace, Tracing, with_trace_id
from bot.store.approvals import ApprovalRecord, Approvals, Outcome, to_decision
from bot.store.artifacts import RedisArtifacts
from bot.store.buckets import count_buckets
from bot.store.card_replies import CardReplies
from bot.store.connection import sharded_message, subscriber, translated
from bot.store.held import HeldMessages
from bot.store.history import RedisHistory
from bot.store.inject import InjectReader
from bot.store.jobs import JobLimits, JobRecord, Jobs, JobStatus, Via
from bot.store.keys import BUCKETS, Keys, Thread
from bot.store.lease import Lease, LeaseKeeper, Leases
from bot.store.ledger import RedisLedger
from bot.store.receipt import Receipt, Receipts
from bot.store.recent import RecentJobs
from bot.store.replicas import NONE as NO_REPLICATION
from bot.store.replicas import Replication
from bot.store.session import JobSession
from bot.store.trace import FeedbackEntry, TraceRecorder, append_if_traced
from bot.turns import controls
from bot.turns.audit import AuditPublisher
from bot.turns.claims import PatientLedger
from bot.turns.context import ThreadContext, context_first
from bot.turns.controls import Authorize, StopOutcome, Verdict, stopped_by
from bot.turns.facts import job_facts
from bot.turns.ports import JobSink, Notifier
from tools.registry import Catalog

log = logging.getLogger(__name__)

TOOLS_META = "tools"  # the job's tool names, space-separated (``Turns._tools_of``)


def process_name() -> str:
    """A consumer name unique to this process (inject stream ownership)."""
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnSettings:
    limits: JobLimits
    max_output_tokens: int = 4096
    condense_at_tokens: int | None = None
    stream: bool = False
    approval_ttl_s: float = 3600.0
    approval_remind_s: float = 600.0  # a pending card is recalled once after this; 0: never


@dataclass(frozen=True, slots=True)
class LiveCounts:
    """What the whole workspace has open (every process), read from the indexes."""

    jobs: int  # queued, running or awaiting approval
    pending_approvals: int


@dataclass(kw_only=True)
class Turns:
    """Everything a process needs to run jobs; one per process."""

    redis: aioredis.Redis
    keys: Keys
    resolver: ClientResolver
    catalog: Catalog
    system_prompt: str
    settings: TurnSettings
    condense: Condense | None = None
    consumer: str = field(default_factory=process_name)
    # How jobs show themselves in their threads (the Slack edge); None: headless.
    notifier: Notifier | None = None
    # OpenTelemetry traces of the runs (``bot.otel``); None: off.
    tracing: Tracing | None = None
    # What model calls cost (``bot.llm.prices``, loaded once per process); None: tokens only.
    pricing: Pricing | None = None
    # The workspace's daily caps every model call draws from (``bot.turns.spend``); None:
    # no cap.
    spend: Spend | None = None
    # Chains the audit entries the stores stage (``bot.turns.audit``); None: the
    # scanner's drain chains them (tests, tools).
    audit: AuditPublisher | None = None
    # How many replicas an acknowledged write waits for (OPSLOOP_REDIS_MIN_REPLICAS).
    replication: Replication = NO_REPLICATION
    # Told a job's run is over (ended, paused, handed over or failed) before its ending
    # is shown in Slack, which may wait on the chat.update budget (``bot.turns.background``:
    # the job's slot frees then).
    on_run_end: Callable[[str], None] | None = None

    jobs: Jobs = field(init=False)
    leases: Leases = field(init=False)
    receipts: Receipts = field(init=False)
    held: HeldMessages = field(init=False)
    approvals: Approvals = field(init=False)
    ledger: RedisLedger = field(init=False)
    running: dict[str, CancelToken] = field(init=False, default_factory=dict)
    # Set when the process is shutting down (``drain``): no job starts here any more,
    # and a running one hands over at its next step boundary.
    draining: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        staged = self.audit.staged if self.audit is not None else None
        self.jobs = Jobs(self.redis, self.keys, on_audit=staged)
        self.leases = Leases(self.redis, self.keys)
        replication = self.replication
        self.receipts = Receipts(self.redis, self.keys, replication=replication)
        self.held = HeldMessages(self.redis, self.keys)
        self.approvals = Approvals(self.redis, self.keys, on_audit=staged, replication=replication)
        self.ledger = RedisLedger(self.redis, self.keys, on_audit=staged, replication=replication)
        self.card_replies = CardReplies(self.redis, self.keys)

    # -- the ack path ---------------------------------------------------------------

    async def receive(
        self,
        thread: Thread,
        *,
        ts: str,
        user: str,
        text: str,
        reply: bool = False,
        context: ThreadContext | None = None,
    ) -> Receipt:
        """Persist a human message (one script, see ``bot.store.receipt``): into the
        thread's inject stream, and a new ``queued`` job unless one is live. A ``reply``
        (not a mention) is taken only in a thread that holds a conversation. When the
        receipt ``needs_run``, the job is in the scanner's index and the caller runs it.

        When the message can start a job in a thread whose earlier messages the
        history does not hold yet, ``context`` (the edge's reading of them, or None) is
        asked for, and enters first (``bot.turns.context``)."""
        if context is not None:
            await context_first(
                self.held, self.receipts, thread, ts=ts, reply=reply, context=context
            )
        receipt = await self.receipts.receive(
            thread,
            ts=ts,
            user=user,
            text=text,
            limits=self.settings.limits,
            needs_conversation=reply,
        )
        if receipt.needs_run and receipt.job_id is not None:
            await self.jobs.index(receipt.job_id, time.time())
        if receipt.outcome == "created" and receipt.job_id is not None:  # App Home's index
            recent = RecentJobs(self.redis, self.keys)
            await recent.add(receipt.job_id, requester=user, at=time.time())
        return receipt

    # -- running ----------------------------------------------------------------------

    async def run_job(self, job_id: str) -> RunResult | None:
        """Run or resume the job under the thread's lease (and then any job started for
        replies that arrived as it ended); ``None`` if another process holds the lease
        or the job is not runnable."""
        result = None
        next_id: str | None = job_id
        while next_id is not None:
            outcome = await self._run_once(next_id)
            if outcome is None:
                return result
            result, next_id = outcome
        return result

    def drain(self) -> None:
        """Start no job here any more; running ones hand over at their next step (the
        mutating call in flight finishes and is recorded first), for another process."""
        self.draining = True

    async def _run_once(self, job_id: str) -> tuple[RunResult, str | None] | None:
        if self.draining:
            return None  # it stays in the index: another process's scan takes it
        if job_id in self.running:
            return None
        # Registered before the lease's read of the cancel flag: a Stop after that read
        # reaches this token (``listen_for_stops``).
        token = CancelToken()
        self.running[job_id] = token
        try:
            return await self._take_and_run(job_id, token)
        finally:
            if self.running.get(job_id) is token:
                del self.running[job_id]

    async def _take_and_run(
        self, job_id: str, token: CancelToken
    ) -> tuple[RunResult, str | None] | None:
        taken = await self.leases.acquire_job(job_id)  # the record, and the lease if runnable
        record = taken.record
        if record is not None and taken.lease is None and not record.status.final:
            if record.status is not JobStatus.AWAITING_APPROVAL:
                return None  # someone else holds the lease
            if await self.decision(record) is None:
                return None  # still waiting for a human
            taken = await self.leases.acquire_job(job_id, decided=True)
        lease, record = taken.lease, taken.record
        if lease is None:
            return None
        async with LeaseKeeper(self.leases, lease) as keeper:
            if record is None or record.status.final:  # a retried take finds anything
                return None
            if taken.cancel_by is not None:
                token.cancel(stopped_by(taken.cancel_by))
            history = RedisHistory(self.redis, self.keys, record.thread)
            history.preload(taken.history, taken.history_view)
            decision = None
            via: Via | None = None
            if record.status is JobStatus.AWAITING_APPROVAL:
                decision = await self.decision(record)
                if decision is None:
                    return None
                via = "decision"
            if self.tracing is not None:  # the job's trace id, for its status message too
                record = with_trace_id(record)
            notifier = self.notifier
            reporter = (
                await notifier.open_progress(record, taken_over=lease.fence > 1)
                if notifier is not None
                else None
            )
            meta = record.meta
            if reporter is not None and reporter.status_ts:
                # Saved with the start: a process taking the job over after a crash edits
                # this status message instead of posting another.
                meta = {**meta, "status_ts": reporter.status_ts}
            if TOOLS_META not in meta:  # the first run: the job's tools, for every run
                names = " ".join(t.name for t in self.catalog.for_channel(record.channel))
                meta = {**meta, TOOLS_META: names}
            record = await self.jobs.save(
                record, JobStatus.RUNNING, fence=lease.fence, via=via, meta=meta
            )
            try:
                result, follow = await self._run(
                    record, lease.fence, lease, decision, token, history, reporter, keeper.lost
                )
            except HandedOver:
                handed_over = True
            else:
                handed_over = False
        if handed_over:
            # The lease is released (above): due now, so the next scan anywhere resumes it.
            await self.jobs.index(job_id, time.time())
            log.info("job %s handed over for another process to resume", job_id)
            return None
        if result.stop_reason is StopReason.AWAITING_APPROVAL:
            await self._paused(job_id, result)
        return result, follow

    async def decision(self, record: JobRecord) -> Decision | None:
        """The decision a job awaiting approval can resume with; ``None`` while pending."""
        pending = record.progress.pending
        if pending is None or pending.approval is None:
            # Nothing to decide (a pause saved without its call): resume and let the
            # loop ask again.
            return Denied(reason="the approval request was lost; ask again if still needed")
        approval = await self.approvals.get(record.id, pending.approval.call_id)
        if approval is None:
            return Denied(reason="the approval request was lost; ask again if still needed")
        if approval.status == "pending":
            return None
        return to_decision(approval)

    async def _paused(self, job_id: str, result: RunResult) -> None:
        """The job is saved as awaiting approval and its lease released: show the card."""
        if result.approval is None or self.notifier is None:
            return
        await self.post_card(job_id, result.approval.call_id)

    async def post_card(self, job_id: str, call_id: str) -> bool:
        """Post the card of a pending approval unless it is in the thread or someone is
        posting it (see ``Approvals.claim_card``); whether this call posted it."""
        if self.notifier is None:
            return False
        if not await self.approvals.claim_card(job_id, call_id, now=time.time()):
            return False  # already posted (e.g. a re-ask after a crash), or being posted
        record = await self.jobs.get(job_id)
        approval = await self.approvals.get(job_id, call_id)
        if record is None or approval is None:
            return False
        card_ts = await self.notifier.post_card(record, approval)
        await self.approvals.set_card(job_id, call_id, card_ts)
        return True

    async def waiting_card(self, job_id: str) -> ApprovalRecord | None:
        """The approval a job awaiting approval waits for (its card), or None."""
        record = await self.jobs.get(job_id)
        if record is None or record.status is not JobStatus.AWAITING_APPROVAL:
            return None
        pending = record.progress.pending
        if pending is None or pending.approval is None:
            return None
        return await self.approvals.get(job_id, pending.approval.call_id)

    async def approval(self, job_id: str, call_id: str) -> ApprovalRecord | None:
        return await self.approvals.get(job_id, call_id)

    async def card_edited(self, job_id: str, call_id: str) -> None:
        """A decided card was edited to show its decision (or never posted): the edit it
        owed is settled, and no scan redoes it."""
        await self.approvals.card_edited(job_id, call_id)

    async def record_feedback(
        self,
        job_id: str,
        *,
        value: Literal["positive", "negative"],
        by: str,
        message_ts: str | None,
    ) -> bool:
        """A click on the feedback buttons of ``job_id``'s answer, into its trace if the
        trace still exists (an old answer's is kept: nothing is created); whether written."""
        entry = FeedbackEntry(at=time.time(), value=value, by=by, message_ts=message_ts)
        return await append_if_traced(self.redis, self.keys, job_id, entry)

    # -- what the edge reads --------------------------------------------------------

    async def job(self, job_id: str) -> JobRecord | None:
        """The job's record (who started it, its status), or None."""
        return await self.jobs.get(job_id)

    async def live_counts(self) -> LiveCounts:
        """Live jobs and pending approvals in the whole workspace (two pipelines at once)."""
        live, pending = await asyncio.gather(
            count_buckets(self.redis, "metrics", self.keys.active_jobs),
            count_buckets(self.redis, "metrics", self.keys.approval_expiries),
        )
        return LiveCounts(jobs=live, pending_approvals=pending)

    async def ping(self) -> None:
        """Whether the store answers: returns, or raises ``StoreError``."""
        async with translated("health check"):
            await self.redis.ping()

    # -- Approve, Deny, Stop and Continue (``bot.turns.controls``) -----------------

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
    ) -> Verdict:
        """Judge a click on an approval card and record the decision it makes, or say
        why it makes none (see ``bot.turns.controls``). ``authorize`` is the clicker's
        permission, asked once every other check passed."""
        return await controls.decide(
            self.approvals,
            self.jobs,
            job_id,
            call_id,
            outcome=outcome,
            by=by,
            card_ts=card_ts,
            authorize=authorize,
            args_hash=args_hash,
        )

    async def stop(self, job_id: str, by: str) -> StopOutcome:
        """Stop the job on behalf of ``by``: at once if nobody runs it, else by flag and
        signal (the running loop ends it ``cancelled``)."""
        return await controls.stop(self.approvals, self.jobs, job_id, by)

    async def raise_limit(self, job_id: str, by: str, *, seq: int | None = None) -> JobRecord | str:
        """Continue a job stopped by a limit (its limit raised by its original value,
        once per button); the new record, or why not."""
        return await controls.raise_limit(self.jobs, job_id, by, seq=seq)

    async def listen_for_stops(self, ready: asyncio.Event | None = None) -> None:
        """Cancel local runs when someone presses Stop anywhere (sharded pub/sub: every
        bucket's channel, on whichever node serves it); reconnects
        after Redis failures; runs until cancelled. The per-step flag covers messages
        missed while disconnected."""
        channels = [self.keys.cancel_channel(bucket) for bucket in BUCKETS]
        while True:
            pubsub: PubSub | None = None
            try:
                pubsub = await subscriber(self.redis)
                await pubsub.ssubscribe(*channels)
                if ready is not None:
                    ready.set()
                while True:
                    message = await sharded_message(pubsub)
                    if message is None:
                        continue
                    data = str(message.get("data") or "")
                    job_id, _, by = data.partition("|")
                    token = self.running.get(job_id)
                    if token is not None and by:
                        token.cancel(stopped_by(by))
            except (RedisError, OSError, StoreError):
                log.warning("stop signals: Redis unavailable, retrying", exc_info=True)
                await asyncio.sleep(1.0)
            finally:
                if pubsub is not None:
                    with contextlib.suppress(Exception):
                        await pubsub.aclose()

    def _tools_of(self, record: JobRecord) -> list[Tool]:
        """The job's tools: the names saved in ``meta`` when it first ran, so a catalogue
        that changed since (an MCP server's new listing) never changes a job's tools
        block (the prompt's cached prefix) or takes away a tool its history calls."""
        pinned = record.meta.get(TOOLS_META)
        if pinned is None:
            return self.catalog.for_channel(record.channel)
        return self.catalog.named(pinned.split())

    async def _run(
        self,
        record: JobRecord,
        fence: int,
        lease: Lease,
        decision: Decision | None,
        token: CancelToken,
        history: RedisHistory,
        reporter: JobSink | None,
        lost: asyncio.Event,
    ) -> tuple[RunResult, str | None]:
        try:
            return await self._run_with(
                record, fence, lease, decision, token, history, reporter, lost
            )
        finally:
            if self.running.get(record.id) is token:
                del self.running[record.id]

    async def _run_with(
        self,
        record: JobRecord,
        fence: int,
        lease: Lease,
        decision: Decision | None,
        token: CancelToken,
        history: RedisHistory,
        reporter: JobSink | None,
        lost: asyncio.Event,
    ) -> tuple[RunResult, str | None]:
        """``lost``: set when the lease is (``LeaseKeeper``)."""
        thread = record.thread
        await history.history()  # read with the lease (``preload``): no round trip
        record = await self._report_unknown_outcomes(record)
        tools = with_read_artifact(self._tools_of(record), RedisArtifacts(self.redis, self.keys))
        trace = TraceRecorder(record.id)
        spans: RunTrace | None = None
        if self.tracing is not None:  # this run's span context goes into ``meta``
            spans = self.tracing.run(record, decision, tools)
            record = spans.record
        session = JobSession(
            self.redis,
            self.keys,
            record,
            lease,
            history,
            trace=trace,
            on_cancel=lambda who: token.cancel(stopped_by(who)),
        )

        async def confirm(request: ConfirmRequest) -> Decision:
            now = time.time()
            stored = await self.approvals.create(
                ApprovalRecord(
                    job_id=request.job_id,
                    call_id=request.call_id,
                    tool=request.tool,
                    category=request.category,
                    args_hash=request.args_hash,
                    arguments=request.arguments,
                    reason=request.reason,
                    dry_run_output=request.dry_run_output,
                    preview=request.preview,
                    requester=record.requester,
                    channel=thread.channel,
                    thread_ts=thread.thread_ts,
                    requested_at=now,
                    expires_at=now + self.settings.approval_ttl_s,
                ),
                remind_at=now + remind_s if (remind_s := self.settings.approval_remind_s) else None,
            )
            return Pending() if stored.status == "pending" else to_decision(stored)

        async def visible_ack(items: Sequence[Injected]) -> None:
            if self.notifier is not None:
                await self.notifier.acknowledge(thread, items)

        inject = InjectReader(
            self.redis,
            self.keys,
            thread,
            consumer=self.consumer,
            seen_ids=history.source_ids,
            on_visible_ack=visible_ack,
        )
        sinks: list[EventSink] = [trace]
        if spans is not None:
            sinks.append(spans)
        if reporter is not None:
            sinks.append(reporter)

        def on_event(event: Event) -> None:
            for sink in sinks:
                sink(event)

        limits = record.limits
        config = AgentConfig(
            job_id=record.id,
            client=self.resolver,
            memory=history,
            system_prompt=self.system_prompt,
            tools=tools,
            limits=Limits(
                max_iterations=limits.max_iterations,
                deadline_s=limits.deadline_s,
                token_budget=limits.token_budget,
                max_output_tokens=self.settings.max_output_tokens,
            ),
            inject=inject,
            stop=work_done,  # "stopped calling tools" is not "done" (bot/agent/work_done.py)
            condense=self.condense,
            condense_at_tokens=self.settings.condense_at_tokens,
            facts=lambda: job_facts(session.record, history.originals, self.approvals, self.ledger),
            on_event=on_event,
            on_checkpoint=session.checkpoint,
            on_checkpoint_and_fetch=lambda state: session.checkpoint_and_fetch(state, inject),
            on_flush_and_ack=lambda items: inject.ack(items, history),
            artifacts=RedisArtifacts(self.redis, self.keys),
            # A claim no replica confirmed waits for them while its card is valid
            # (``bot.turns.claims``), instead of ending the run with the call unstarted.
            ledger=PatientLedger(
                self.ledger,
                self.approvals,
                cancel=token,
                hand_over=lambda: self.draining or lost.is_set(),
            ),
            confirm=confirm,
            cancel=token,
            hand_over=lambda: self.draining,
            stream=self.settings.stream,
            pricing=self.pricing,
            spend=self.spend,
        )
        try:
            result = await run(config, record.progress, decision)
            follow = await self._end(session.record, result, fence, inject.settled_seq, trace)
            # What came after the last checkpoint (the approval asked for, the run's end)
            # goes to the trace once the job's status is saved (so the status is not held
            # up by it; an ending writes it in the same script), and before the card is
            # posted (so a decision's entries follow).
            try:
                await trace.flush(self.redis, self.keys)
            except StoreError:
                log.warning("job %s: the end of its trace was not written", record.id)
        finally:
            if spans is not None:
                spans.abandon()  # a run that raised (handed over, the store failed)
            if self.on_run_end is not None:
                self.on_run_end(record.id)
            if reporter is not None:
                await reporter.aclose()
        if JobStatus.of(result.stop_reason).final and follow is None:  # ended by ``finish``
            await self._delivered(record.id, reporter)
        return result, follow

    async def _delivered(self, job_id: str, reporter: JobSink | None) -> None:
        """Settle the ended job's ending (``Jobs.finish``): shown in the thread, or no
        one to show it to. One Slack could not take stays owed: the scanner of any
        process tries again once this lease is gone (``bot.turns.scanner``)."""
        if reporter is not None and not reporter.delivered:
            log.warning("job %s: its ending did not reach the thread; left owed", job_id)
            return
        try:
            await self.jobs.delivered(job_id)
        except StoreError:  # a redelivery finds the answer in the thread: none is doubled
            log.warning("job %s: its delivery was not recorded", job_id, exc_info=True)

    async def _report_unknown_outcomes(self, record: JobRecord) -> JobRecord:
        """Tell people about mutating calls an interruption left without a result (once
        per call); the loop tells the model when it meets them."""
        if self.notifier is None or not record.progress.call_ids:
            return record
        told = set(filter(None, record.meta.get("unknown_told", "").split(",")))
        entries = await self.ledger.entries(record.id)
        unknown = {
            key: entry
            for key, entry in entries.items()
            if entry.state == "started" and key not in told
        }
        if not unknown:
            return record
        await self.notifier.tell_unknown(record, list(unknown.values()))
        told.update(unknown)
        return record.model_copy(
            update={"meta": {**record.meta, "unknown_told": ",".join(sorted(told))}}
        )

    async def _end(
        self, record: JobRecord, result: RunResult, fence: int, seen: int, trace: TraceRecorder
    ) -> str | None:
        """Save how the job ended (with the trace's last entries when it ends); the id of
        a follow-up job if replies are pending."""
        status = JobStatus.of(result.stop_reason)
        update: dict[str, Any] = {
            "progress": result.state,
            "stop_reason": result.stop_reason.value,
            "error": result.error,
            "output": result.output,
        }
        if result.stop_reason is StopReason.AWAITING_APPROVAL:
            await self.jobs.save(record, status, fence=fence, via=None, **update)
            return None
        entries = trace.drain()
        try:
            ended = await self.jobs.finish(
                record, status, fence=fence, inject_seen=seen, trace=entries, **update
            )
        except BaseException:
            trace.put_back(entries)
            raise
        if ended is None:
            trace.put_back(entries)  # not written: the flush after the follow-up's start
            # A reply arrived after the loop's last read: end this job anyway and let a
            # new job in the conversation take the reply in.
            await self.jobs.save(record, status, fence=fence, via=None, **update)
            follow = await self.jobs.create(
                record.thread, requester=record.requester, limits=record.limits
            )
            await RecentJobs(self.redis, self.keys).add(
                follow.id, requester=record.requester, at=follow.created_at
            )
            log.info("job %s ended with replies pending; %s takes them", record.id, follow.id)
            return follow.id
        return None

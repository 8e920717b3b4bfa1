"""Running a thread's job: the lease, the job's state, the AgentConfig, the run, the end.

``JobRunner.run_job`` takes the thread's lease (or leaves the job to whoever holds it),
resumes the job from its saved progress with its remaining budget, and ends it
atomically with a look at the inject stream (``bot.turns.ending``): a reply that arrived
after the loop's last read starts a new job, which runs next. The request message itself
enters the conversation through the inject stream, exactly like a reply, so there is one
path into the history (``bot.turns.receive`` writes it there).

Approvals: the core's ``confirm`` creates the pending approval (``bot.store.approvals``)
and the job pauses as ``awaiting_approval``; once it is saved and the lease released,
its card is posted (``bot.turns.cards``). Whoever wins the decision
(``bot.turns.controls``) calls ``run_job`` again, which resumes the job with it. Stop:
the running loop's cancel token is cancelled by ``stop_signalled`` (the store's Stop
signals, ``bot.store.stop_signals``) or by the flag a checkpoint reads. Draining
(``drain``): no job starts here any more, and a running one hands over at its next step.

The ledger a run gives the core is ``bot.turns.claims.PatientLedger``: a write's claim no
replica confirmed (``OPSLOOP_REDIS_MIN_REPLICAS``) is withdrawn and, while the card is
valid, claimed again once the replicas catch up, instead of the run dying.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Required, TypedDict

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
from bot.store.approvals import ApprovalRecord, to_decision
from bot.store.history import RedisHistory
from bot.store.jobs import JobLimits, JobRecord, JobStatus, Via
from bot.store.lease import Lease, LeaseKeeper
from bot.store.parts import Stores
from bot.store.trace import TraceRecorder
from bot.turns.cards import Cards
from bot.turns.claims import PatientLedger
from bot.turns.controls import stopped_by
from bot.turns.ending import report_unknown_outcomes, save_end, settle_delivery
from bot.turns.facts import job_facts
from bot.turns.knowledge import Knowledge
from bot.turns.ports import JobSink, Notifier
from tools.registry import Catalog

log = logging.getLogger(__name__)

TOOLS_META = "tools"  # the job's tool names, space-separated (``job_tools``)
READ_ONLY_META = "read_only"  # "1": the job is offered only read-only tools (an alert route's)
LOST_APPROVAL = "the approval request was lost; ask again if still needed"


def process_name() -> str:
    """A consumer name unique to this process (inject stream ownership)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def offered_tools(catalog: Catalog, record: JobRecord) -> list[Tool]:
    """The tools a new job of ``record``'s channel gets: the channel's, only the read-only
    ones when its alert route says ``investigate: read_only`` (``READ_ONLY_META``)."""
    tools = catalog.for_channel(record.channel)
    if record.meta.get(READ_ONLY_META) == "1":
        return [t for t in tools if t.category == "read_only"]
    return tools


def job_tools(catalog: Catalog, record: JobRecord) -> list[Tool]:
    """The job's tools: the names saved in ``meta`` when it first ran, so a catalogue that
    changed since (an MCP server's new listing) never changes a job's tools block (the
    prompt's cached prefix) or takes away a tool its history calls."""
    pinned = record.meta.get(TOOLS_META)
    if pinned is None:
        return offered_tools(catalog, record)
    return catalog.named(pinned.split())


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnSettings:
    limits: JobLimits
    max_output_tokens: int = 4096
    condense_at_tokens: int | None = None
    stream: bool = False
    approval_ttl_s: float = 3600.0
    approval_remind_s: float = 600.0  # a pending card is recalled once after this; 0: never


class RunnerParts(TypedDict, total=False):
    """What a ``JobRunner`` is given beyond the stores, the settings and the cards (the
    composition root passes them through: ``bot.service.build_turns``)."""

    resolver: Required[ClientResolver]
    catalog: Required[Catalog]
    system_prompt: Required[str]
    condense: Condense | None
    consumer: str
    notifier: Notifier | None
    tracing: Tracing | None
    pricing: Pricing | None
    spend: Spend | None
    knowledge: Knowledge | None


@dataclass(frozen=True, slots=True)
class _Run:
    """One run of one job under a held lease: what its parts share."""

    record: JobRecord
    lease: Lease
    decision: Decision | None
    token: CancelToken
    history: RedisHistory
    reporter: JobSink | None
    lost: asyncio.Event  # set when the lease is (``LeaseKeeper``)


@dataclass(kw_only=True)
class JobRunner:
    """Runs and resumes this process's jobs; one per process."""

    stores: Stores
    resolver: ClientResolver
    catalog: Catalog
    system_prompt: str
    settings: TurnSettings
    cards: Cards
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
    # The team's knowledge (``bot.turns.knowledge``): the runbook and past-incident tools
    # every job gets, and the incident record each ended job leaves; None: neither.
    knowledge: Knowledge | None = None
    # Told a job's run is over (ended, paused, handed over or failed) before its ending
    # is shown in Slack, which may wait on the chat.update budget (``bot.turns.background``:
    # the job's slot frees then).
    on_run_end: Callable[[str], None] | None = None

    running: dict[str, CancelToken] = field(init=False, default_factory=dict)
    # Set when the process is shutting down (``drain``): no job starts here any more,
    # and a running one hands over at its next step boundary.
    draining: bool = field(init=False, default=False)

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

    def stop_signalled(self, job_id: str, by: str) -> None:
        """Someone pressed Stop on ``job_id`` (in any process): cancel its run if it is
        here (``Stores.listen_for_stops`` calls this)."""
        token = self.running.get(job_id)
        if token is not None:
            token.cancel(stopped_by(by))

    async def decision(self, record: JobRecord) -> Decision | None:
        """The decision a job awaiting approval can resume with; ``None`` while pending."""
        pending = record.progress.pending
        if pending is None or pending.approval is None:
            # Nothing to decide (a pause saved without its call): resume and let the
            # loop ask again.
            return Denied(reason=LOST_APPROVAL)
        approval = await self.stores.approvals.get(record.id, pending.approval.call_id)
        if approval is None:
            return Denied(reason=LOST_APPROVAL)
        if approval.status == "pending":
            return None
        return to_decision(approval)

    async def _run_once(self, job_id: str) -> tuple[RunResult, str | None] | None:
        if self.draining:
            return None  # it stays in the index: another process's scan takes it
        if job_id in self.running:
            return None
        # Registered before the lease's read of the cancel flag: a Stop after that read
        # reaches this token (``stop_signalled``).
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
        leases, jobs = self.stores.leases, self.stores.jobs
        taken = await leases.acquire_job(job_id)  # the record, and the lease if runnable
        record = taken.record
        if record is not None and taken.lease is None and not record.status.final:
            if record.status is not JobStatus.AWAITING_APPROVAL:
                return None  # someone else holds the lease
            if await self.decision(record) is None:
                return None  # still waiting for a human
            taken = await leases.acquire_job(job_id, decided=True)
        lease, record = taken.lease, taken.record
        if lease is None:
            return None
        async with LeaseKeeper(leases, lease) as keeper:
            if record is None or record.status.final:  # a retried take finds anything
                return None
            if taken.cancel_by is not None:
                token.cancel(stopped_by(taken.cancel_by))
            history = self.stores.history(record.thread)
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
                names = " ".join(t.name for t in offered_tools(self.catalog, record))
                meta = {**meta, TOOLS_META: names}
            record = await jobs.save(
                record, JobStatus.RUNNING, fence=lease.fence, via=via, meta=meta
            )
            this = _Run(record, lease, decision, token, history, reporter, keeper.lost)
            try:
                result, follow = await self._run(this)
            except HandedOver:
                handed_over = True
            else:
                handed_over = False
        if handed_over:
            # The lease is released (above): due now, so the next scan anywhere resumes it.
            await jobs.index(job_id, time.time())
            log.info("job %s handed over for another process to resume", job_id)
            return None
        if result.stop_reason is StopReason.AWAITING_APPROVAL and result.approval is not None:
            # Saved as awaiting approval, its lease released: show the card.
            await self.cards.post(job_id, result.approval.call_id)
        return result, follow

    async def _run(self, this: _Run) -> tuple[RunResult, str | None]:
        record = this.record
        try:
            await this.history.history()  # read with the lease (``preload``): no round trip
            record = await report_unknown_outcomes(self.stores, self.notifier, record)
            trace = TraceRecorder(record.id)
            spans: RunTrace | None = None
            offered = job_tools(self.catalog, record)
            if self.knowledge is not None:  # not the channel's allowlist: the team's knowledge
                taken = {t.name for t in offered}
                offered += [
                    t for t in self.knowledge.tools_for(record.channel) if t.name not in taken
                ]
            tools = with_read_artifact(offered, self.stores.artifacts)
            if self.tracing is not None:  # this run's span context goes into ``meta``
                spans = self.tracing.run(record, this.decision, tools)
                record = spans.record
            session = self.stores.session(
                record,
                this.lease,
                this.history,
                trace=trace,
                on_cancel=lambda who: this.token.cancel(stopped_by(who)),
            )

            async def visible_ack(items: Sequence[Injected]) -> None:
                if self.notifier is not None:
                    await self.notifier.acknowledge(record.thread, items)

            inject = self.stores.inject_reader(
                record.thread,
                consumer=self.consumer,
                seen_ids=this.history.source_ids,
                on_visible_ack=visible_ack,
            )
            sinks: list[EventSink] = [trace]
            if spans is not None:
                sinks.append(spans)
            if this.reporter is not None:
                sinks.append(this.reporter)

            def on_event(event: Event) -> None:
                for sink in sinks:
                    sink(event)

            limits = record.limits
            config = AgentConfig(
                job_id=record.id,
                client=self.resolver,
                memory=this.history,
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
                facts=lambda: job_facts(
                    session.record,
                    this.history.originals,
                    self.stores.approvals,
                    self.stores.ledger,
                ),
                on_event=on_event,
                on_checkpoint=session.checkpoint,
                on_checkpoint_and_fetch=lambda state: session.checkpoint_and_fetch(state, inject),
                on_flush_and_ack=lambda items: inject.ack(items, this.history),
                artifacts=self.stores.artifacts,
                # A claim no replica confirmed waits for them while its card is valid
                # (``bot.turns.claims``), instead of ending the run with the call unstarted.
                ledger=PatientLedger(
                    self.stores.ledger,
                    self.stores.approvals,
                    cancel=this.token,
                    hand_over=lambda: self.draining or this.lost.is_set(),
                ),
                confirm=lambda request: self._confirm(request, record),
                cancel=this.token,
                hand_over=lambda: self.draining,
                stream=self.settings.stream,
                pricing=self.pricing,
                spend=self.spend,
            )
            try:
                result = await run(config, record.progress, this.decision)
                follow = await save_end(
                    self.stores,
                    session.record,
                    result,
                    fence=this.lease.fence,
                    seen=inject.settled_seq,
                    trace=trace,
                )
                # What came after the last checkpoint (the approval asked for, the run's
                # end) goes to the trace once the job's status is saved (so the status is
                # not held up by it; an ending writes it in the same script), and before
                # the card is posted (so a decision's entries follow).
                try:
                    await trace.flush(self.stores.redis, self.stores.keys)
                except StoreError:
                    log.warning("job %s: the end of its trace was not written", record.id)
            finally:
                if spans is not None:
                    spans.abandon()  # a run that raised (handed over, the store failed)
                if self.on_run_end is not None:
                    self.on_run_end(record.id)
                if this.reporter is not None:
                    await this.reporter.aclose()
        finally:
            if self.running.get(record.id) is this.token:
                del self.running[record.id]
        ended = JobStatus.of(result.stop_reason).final
        if ended and follow is None:  # ended by ``finish``
            await settle_delivery(self.stores, record.id, this.reporter)
        if ended and self.knowledge is not None:  # the incident record, after the ending
            final = session.record.model_copy(
                update={
                    "progress": result.state,
                    "stop_reason": result.stop_reason.value,
                    "error": result.error,
                    "output": result.output,
                }
            )
            await self.knowledge.record_end(self.stores, final, this.history.originals)
        return result, follow

    async def _confirm(self, request: ConfirmRequest, record: JobRecord) -> Decision:
        """The core asks for approval: the pending approval, created once (a resumed run
        that asks again finds it, decided or not)."""
        now = time.time()
        remind_s = self.settings.approval_remind_s
        stored = await self.stores.approvals.create(
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
                channel=record.thread.channel,
                thread_ts=record.thread.thread_ts,
                requested_at=now,
                expires_at=now + self.settings.approval_ttl_s,
            ),
            remind_at=now + remind_s if remind_s else None,
        )
        return Pending() if stored.status == "pending" else to_decision(stored)

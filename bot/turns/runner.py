"""Running a thread's job: lease, job state, the AgentConfig, the run, the ending.

The Slack edge persists what must not be lost (``receive``: the job as ``queued`` and
the message in the thread's inject stream) and schedules ``run_job``. The runner takes
the thread's lease (or leaves the job to whoever holds it), resumes the job from its
saved progress with its remaining budget, and ends it atomically with a look at the
inject stream: a reply that arrived after the loop's last read starts a new job.
The request message itself enters the conversation through the inject stream, exactly
like a reply, so there is one path into the history.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import redis.asyncio as aioredis

from bot.agent import AgentConfig, Limits, RunResult, run
from bot.agent.events import Event, EventSink
from bot.agent.ports import ClientResolver, Condense, Injected
from bot.agent.state import StopReason
from bot.store.artifacts import RedisArtifacts
from bot.store.history import RedisHistory
from bot.store.inject import RedisInject
from bot.store.jobs import JobLimits, JobRecord, Jobs, JobStatus
from bot.store.keys import Keys, Thread
from bot.store.lease import Lease, LeaseKeeper, Leases
from bot.store.ledger import RedisLedger
from bot.store.receipt import Receipt, Receiver
from bot.store.session import JobSession
from bot.store.trace import TraceRecorder
from tools.registry import Catalog

log = logging.getLogger(__name__)


def process_name() -> str:
    """A consumer name unique to this process (inject stream ownership)."""
    return f"{socket.gethostname()}:{os.getpid()}"


class JobSink(Protocol):
    """A job's progress reporter: receives the run's events, then ``aclose``."""

    def __call__(self, event: Event) -> None: ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnSettings:
    limits: JobLimits
    max_output_tokens: int = 4096
    condense_at_tokens: int | None = None
    stream: bool = False


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
    # The Slack edge's hooks: a visible ack for taken-in replies, and a progress sink
    # opened for each job once this process holds its lease (it posts the status
    # message) and closed when the run is over.
    on_visible_ack: Callable[[Thread, Sequence[Injected]], Awaitable[None]] | None = None
    progress: Callable[[JobRecord], Awaitable[JobSink]] | None = None

    jobs: Jobs = field(init=False)
    leases: Leases = field(init=False)
    receiver: Receiver = field(init=False)

    def __post_init__(self) -> None:
        self.jobs = Jobs(self.redis, self.keys)
        self.leases = Leases(self.redis, self.keys)
        self.receiver = Receiver(self.redis, self.keys)

    # -- the ack path ---------------------------------------------------------------

    async def receive(
        self, thread: Thread, *, ts: str, user: str, text: str, reply: bool = False
    ) -> Receipt:
        """Persist a human message (one script, see ``bot.store.receipt``): into the
        thread's inject stream, and a new ``queued`` job unless one is live. A ``reply``
        (not a mention) is taken only in a thread that holds a conversation. When the
        receipt ``needs_run``, the job is in the scanner's index and the caller runs it."""
        receipt = await self.receiver.receive(
            thread,
            ts=ts,
            user=user,
            text=text,
            limits=self.settings.limits,
            needs_conversation=reply,
        )
        if receipt.needs_run and receipt.job_id is not None:
            await self.jobs.index(receipt.job_id, time.time())
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

    async def _run_once(self, job_id: str) -> tuple[RunResult, str | None] | None:
        record = await self.jobs.get(job_id)
        if record is None or record.status.final or record.status is JobStatus.AWAITING_APPROVAL:
            return None
        lease = await self.leases.acquire(record.thread)
        if lease is None:
            return None
        async with LeaseKeeper(self.leases, lease):
            record = await self.jobs.get(job_id)
            if record is None or record.status.final:
                return None
            status = JobStatus.RUNNING if record.status is JobStatus.QUEUED else record.status
            record = await self.jobs.save(record, status, fence=lease.fence)
            return await self._run(record, lease.fence, lease)

    async def _run(
        self, record: JobRecord, fence: int, lease: Lease
    ) -> tuple[RunResult, str | None]:
        thread = record.thread
        history = RedisHistory(self.redis, self.keys, thread)
        await history.history()
        trace = TraceRecorder(record.id)
        session = JobSession(self.redis, self.keys, record, lease, history, trace=trace)

        async def visible_ack(items: Sequence[Injected]) -> None:
            if self.on_visible_ack is not None:
                await self.on_visible_ack(thread, items)

        inject = RedisInject(
            self.redis,
            self.keys,
            thread,
            consumer=self.consumer,
            seen_ids=history.source_ids,
            on_visible_ack=visible_ack,
        )
        sinks: list[EventSink] = [trace]
        reporter = await self.progress(record) if self.progress is not None else None
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
            tools=self.catalog.for_channel(thread.channel),
            limits=Limits(
                max_iterations=limits.max_iterations,
                deadline_s=limits.deadline_s,
                token_budget=limits.token_budget,
                max_output_tokens=self.settings.max_output_tokens,
            ),
            inject=inject,
            condense=self.condense,
            condense_at_tokens=self.settings.condense_at_tokens,
            on_event=on_event,
            on_checkpoint=session.checkpoint,
            artifacts=RedisArtifacts(self.redis, self.keys),
            ledger=RedisLedger(self.redis, self.keys),
            stream=self.settings.stream,
        )
        try:
            result = await run(config, record.progress)
            follow = await self._end(session.record, result, fence, inject.seen_seq)
        finally:
            if reporter is not None:
                await reporter.aclose()
        return result, follow

    async def _end(self, record: JobRecord, result: RunResult, fence: int, seen: int) -> str | None:
        """Save how the job ended; the id of a follow-up job if replies are pending."""
        status = JobStatus.of(result.stop_reason)
        update: dict[str, object] = {
            "progress": result.state,
            "stop_reason": result.stop_reason.value,
            "error": result.error,
            "output": result.output,
        }
        if result.stop_reason is StopReason.AWAITING_APPROVAL:
            await self.jobs.save(record, status, fence=fence, via=None, **update)
            return None
        ended = await self.jobs.finish(record, status, fence=fence, inject_seen=seen, **update)
        if ended is None:
            # A reply arrived after the loop's last read: end this job anyway and let a
            # new job in the conversation take the reply in.
            await self.jobs.save(record, status, fence=fence, via=None, **update)
            follow = await self.jobs.create(
                record.thread, requester=record.requester, limits=record.limits
            )
            log.info("job %s ended with replies pending; %s takes them", record.id, follow.id)
            return follow.id
        return None

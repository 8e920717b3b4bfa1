"""The store parts one process (or one CLI command) works with, as one value.

``Stores`` holds the workspace's stores over one Redis connection pool and one key
prefix: jobs, leases, receipts and the held-messages look of the ack path, approvals and
their cards' replies, the ledger, the recent-jobs indexes, artifacts, the audit log, the
assistant pane's threads, the alert groups, and the daily caps and the new-jobs gate
when they are on. It is built in one place, ``Stores.build``, which the composition root
(``bot.service``) and the CLI's commands (``bot.cli.parts``) call; the jobs side and the
edge receive it and never construct a store of their own. What exists per thread or per
run (a thread's history, a running job's inject reader and session) is made by its
methods, from the same pool and prefix.

It also carries the Stop signals between processes (``listen_for_stops``: the
composition root hands them to the runner's ``stop_signalled``, so the jobs side runs
no pub/sub of its own) and answers the two workspace-wide reads the health endpoint
asks for: whether Redis answers (``ping``) and what is open (``live_counts``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Container, Sequence
from dataclasses import dataclass

import redis.asyncio as aioredis

from bot.agent.ports import Injected
from bot.records import JobRecord, Thread
from bot.store.alerts import AlertGroups
from bot.store.approvals import Approvals
from bot.store.artifacts import RedisArtifacts
from bot.store.assistant import AssistantThreads
from bot.store.audit import AuditLog
from bot.store.buckets import count_buckets
from bot.store.card_replies import CardReplies
from bot.store.cli_calls import CliCalls
from bot.store.connection import translated
from bot.store.held import HeldMessages
from bot.store.history import RedisHistory
from bot.store.incidents import Incidents
from bot.store.inject import InjectReader
from bot.store.jobs import Jobs
from bot.store.keys import Keys
from bot.store.lease import Lease, Leases
from bot.store.ledger import RedisLedger
from bot.store.quota import DailyCaps, JobAdmission
from bot.store.receipt import Receipts
from bot.store.recent import RecentJobs
from bot.store.replicas import NONE as NO_REPLICATION
from bot.store.replicas import Replication
from bot.store.session import JobSession
from bot.store.staging import AuditNotify
from bot.store.stop_signals import listen_for_stops
from bot.store.trace import TraceRecorder


@dataclass(frozen=True, slots=True)
class LiveCounts:
    """What the whole workspace has open (every process), read from the indexes."""

    jobs: int  # queued, running or awaiting approval
    pending_approvals: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Stores:
    """The stores of one Redis and one key prefix (see the module docstring)."""

    redis: aioredis.Redis
    keys: Keys
    # How many replicas an acknowledged write waits for (OPSLOOP_REDIS_MIN_REPLICAS).
    replication: Replication = NO_REPLICATION
    jobs: Jobs
    leases: Leases
    receipts: Receipts
    held: HeldMessages
    approvals: Approvals
    ledger: RedisLedger
    card_replies: CardReplies
    recent: RecentJobs
    artifacts: RedisArtifacts
    audit_log: AuditLog
    assistant_threads: AssistantThreads  # the assistant pane's threads (their context)
    cli_calls: CliCalls  # changes run by ``opsloop tools run``, on the record
    alert_groups: AlertGroups  # the alert groups the webhook received (``bot.store.alerts``)
    incidents: Incidents  # every ended job's incident record, searchable (``bot.store.incidents``)
    # The workspace's daily caps (OPSLOOP_DAILY_TOKEN_BUDGET / _COST_USD); None: none set.
    caps: DailyCaps | None = None
    # The ack path's gate of new jobs (the caps, OPSLOOP_JOBS_PER_USER_HOUR); None: off.
    admission: JobAdmission | None = None

    @classmethod
    def build(
        cls,
        redis: aioredis.Redis,
        keys: Keys,
        *,
        replication: Replication = NO_REPLICATION,
        on_audit: AuditNotify | None = None,
        audit_log: AuditLog | None = None,
        caps: DailyCaps | None = None,
        admission: JobAdmission | None = None,
    ) -> Stores:
        """Every store of one Redis and key prefix. ``on_audit``: told whenever a store
        stages an audit entry (the process's publisher chains it); None: the scanner's
        drain chains them. ``audit_log``: the publisher's log, shared."""
        return cls(
            redis=redis,
            keys=keys,
            replication=replication,
            jobs=Jobs(redis, keys, on_audit=on_audit),
            leases=Leases(redis, keys),
            receipts=Receipts(redis, keys, replication=replication),
            held=HeldMessages(redis, keys),
            approvals=Approvals(redis, keys, on_audit=on_audit, replication=replication),
            ledger=RedisLedger(redis, keys, on_audit=on_audit, replication=replication),
            card_replies=CardReplies(redis, keys),
            recent=RecentJobs(redis, keys),
            artifacts=RedisArtifacts(redis, keys),
            audit_log=audit_log if audit_log is not None else AuditLog(redis, keys),
            assistant_threads=AssistantThreads(redis, keys),
            cli_calls=CliCalls(redis, keys),
            alert_groups=AlertGroups(redis, keys, replication=replication),
            incidents=Incidents(redis, keys),
            caps=caps,
            admission=admission,
        )

    def __repr__(self) -> str:  # the parts would repeat the connection in every field
        return f"Stores(prefix={self.keys.prefix!r})"

    def history(self, thread: Thread) -> RedisHistory:
        """The thread's conversation as the model sees it."""
        return RedisHistory(self.redis, self.keys, thread)

    def inject_reader(
        self,
        thread: Thread,
        *,
        consumer: str,
        seen_ids: Callable[[], Container[str]],
        on_visible_ack: Callable[[Sequence[Injected]], Awaitable[None]] | None = None,
    ) -> InjectReader:
        """A running job's reading side of the thread's inject stream."""
        return InjectReader(
            self.redis,
            self.keys,
            thread,
            consumer=consumer,
            seen_ids=seen_ids,
            on_visible_ack=on_visible_ack,
        )

    def session(
        self,
        record: JobRecord,
        lease: Lease,
        history: RedisHistory,
        *,
        trace: TraceRecorder,
        on_cancel: Callable[[str], None],
    ) -> JobSession:
        """The store's side of one run of ``record`` under ``lease``."""
        return JobSession(
            self.redis, self.keys, record, lease, history, trace=trace, on_cancel=on_cancel
        )

    async def listen_for_stops(
        self, on_stop: Callable[[str, str], None], ready: asyncio.Event | None = None
    ) -> None:
        """Hand every Stop pressed anywhere to ``on_stop(job_id, by)`` until cancelled
        (``bot.store.stop_signals``)."""
        await listen_for_stops(self.redis, self.keys, on_stop, ready)

    async def ping(self) -> None:
        """Whether the store answers: returns, or raises ``StoreError``."""
        async with translated("health check"):
            await self.redis.ping()

    async def live_counts(self) -> LiveCounts:
        """Live jobs and pending approvals in the whole workspace (two pipelines at once)."""
        live, pending = await asyncio.gather(
            count_buckets(self.redis, "metrics", self.keys.active_jobs),
            count_buckets(self.redis, "metrics", self.keys.approval_expiries),
        )
        return LiveCounts(jobs=live, pending_approvals=pending)

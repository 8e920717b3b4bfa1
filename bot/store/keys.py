"""Every Redis key and TTL, built from one prefix.

The keys of one thread share a hash tag (``opsloop:{C123:1700000000.000100}:…``) so
that every multi-key script touches a single Redis Cluster slot. A job id embeds its
thread (``C123:1700000000.000100:j3``), so a job's keys carry the same tag.

The workspace-wide indexes (live jobs, approval expiries and reminders, owed card
edits, outboxes to chain, the newest jobs) and the Stop channel are sharded into
``INDEX_BUCKETS`` buckets, each under its own hash tag (``opsloop:{ix7}:index:active``):
a thread's entries go to the bucket of its tag (``bucket_of``), so on a cluster the
indexes spread over the masters (the 16 tags fall 6/5/5 on a 3-master cluster's
default slot ranges) instead of one shard holding each. Scripts never touch an index
together with thread keys; indexes are hints that the scanner re-checks, reading every
bucket. ``UNBUCKETED`` names the single keys earlier versions used (moved into buckets
by ``bot.store.buckets``).

``Thread`` and ``thread_of`` are the thread's value, not key building: they live with
the records (``bot.records``) and are re-exported here.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from bot.records import Thread as Thread
from bot.records import thread_of as thread_of

DEFAULT_PREFIX = "opsloop:"

HISTORY_TTL_S = 30 * 24 * 3600  # a thread "holds a conversation" for 30 days
TRACE_TTL_S = 30 * 24 * 3600
ARTIFACT_TTL_S = 7 * 24 * 3600
JOB_TTL_S = 30 * 24 * 3600  # finished jobs are kept as long as their history
LEASE_TTL_MS = 15_000
LEASE_RENEW_S = 5.0
RECENT_JOBS_MAX = 200
AUDIT_TAG = "{audit}"
QUOTA_TAG = "{quota}"  # the newest jobs App Home reads, per person and workspace-wide


INDEX_BUCKETS = 16
"""How many buckets each workspace-wide index is sharded into (fixed: changing it
would strand entries in buckets nobody reads)."""
BUCKETS = range(INDEX_BUCKETS)


def bucket_of(tag: str) -> int:
    """The index bucket of a hash tag (a thread's ``Thread.tag``, or ``{quota}``)."""
    return zlib.crc32(tag.encode()) % INDEX_BUCKETS


def job_bucket(job_id: str) -> int:
    """The index bucket of a job's entries (its thread's)."""
    return bucket_of(thread_of(job_id).tag)


@dataclass(frozen=True, slots=True)
class Keys:
    prefix: str = DEFAULT_PREFIX

    def _t(self, thread: Thread, name: str) -> str:
        return f"{self.prefix}{thread.tag}:{name}"

    # -- per thread --------------------------------------------------------------
    def history(self, thread: Thread) -> str:
        """LIST of message JSON, append-only (the originals)."""
        return self._t(thread, "history")

    def history_view(self, thread: Thread) -> str:
        """STRING JSON: the condensed view's summary and how many originals it covers."""
        return self._t(thread, "history:view")

    def lease(self, thread: Thread) -> str:
        """STRING ``owner:fence`` with a TTL: who runs this thread's job."""
        return self._t(thread, "lease")

    def fence(self, thread: Thread) -> str:
        """STRING counter of fencing tokens."""
        return self._t(thread, "fence")

    def jobs_counter(self, thread: Thread) -> str:
        return self._t(thread, "jobs")

    def current_job(self, thread: Thread) -> str:
        """STRING id of the thread's latest job."""
        return self._t(thread, "job")

    def inject(self, thread: Thread) -> str:
        """STREAM of replies waiting to enter the conversation."""
        return self._t(thread, "inject")

    def inject_seen(self, thread: Thread) -> str:
        """HASH Slack message ts → stream id: receipt is idempotent by ts."""
        return self._t(thread, "inject:seen")

    def inject_seq(self, thread: Thread) -> str:
        """STRING counter of receipts, compared when a job ends."""
        return self._t(thread, "inject:seq")

    # -- per job (same hash tag as its thread) ----------------------------------
    def job(self, job_id: str) -> str:
        """HASH: status, fence, data (the JobRecord JSON)."""
        return self._t(thread_of(job_id), f"job:{job_id}")

    def approval(self, job_id: str, call_id: str) -> str:
        return self._t(thread_of(job_id), f"approval:{job_id}:{call_id}")

    def ledger(self, job_id: str) -> str:
        """HASH idempotency key → entry JSON."""
        return self._t(thread_of(job_id), f"ledger:{job_id}")

    def trace(self, job_id: str) -> str:
        """LIST of trace entry JSON."""
        return self._t(thread_of(job_id), f"trace:{job_id}")

    def artifact(self, job_id: str, ref: str) -> str:
        return self._t(thread_of(job_id), f"artifact:{ref}")

    def assistant_thread(self, thread: Thread) -> str:
        """HASH: an assistant-pane thread's context (the channel its user looks at)."""
        return self._t(thread, "assistant")

    # -- per thread: the alert group that opened it (bot.store.alerts) ------------
    def alert_of_thread(self, thread: Thread) -> str:
        """STRING ``group_id:episode``: the alert group whose message is this thread's
        root (written when the message is posted; the group's own keys have their tag)."""
        return self._t(thread, "alert")

    # -- workspace-wide indexes, sharded (see the module docstring) --------------
    def _ix(self, bucket: int, name: str) -> str:
        if not 0 <= bucket < INDEX_BUCKETS:
            raise ValueError(f"no index bucket {bucket}")
        return f"{self.prefix}{{ix{bucket}}}:{name}"

    def recent_jobs(self, bucket: int) -> str:
        """ZSET job id → created at: the newest jobs of everyone (this bucket's), trimmed
        to ``RECENT_JOBS_MAX``, for App Home."""
        return self._ix(bucket, "index:recent")

    def recent_jobs_of(self, user: str) -> str:
        """ZSET job id → created at: ``user``'s newest jobs (one key per person)."""
        return f"{self.prefix}index:recent:{user}"

    def active_jobs(self, bucket: int) -> str:
        """ZSET job id → when to look at it next (lease expiry), for the scanner."""
        return self._ix(bucket, "index:active")

    def approval_expiries(self, bucket: int) -> str:
        """ZSET ``job_id|call_id`` → expiry time, for the scanner."""
        return self._ix(bucket, "index:approvals")

    def approval_reminders(self, bucket: int) -> str:
        """ZSET ``job_id|call_id`` → when to remind people of a pending card (taken once)."""
        return self._ix(bucket, "index:approval-reminders")

    def card_edits(self, bucket: int) -> str:
        """ZSET ``job_id|call_id`` → when to (re)do a decided card's edit, for the scanner."""
        return self._ix(bucket, "index:card-edits")

    def cancel_channel(self, bucket: int) -> str:
        """Sharded pub/sub channel (SPUBLISH): ``job_id|user`` when someone presses Stop
        on a job of this bucket."""
        return self._ix(bucket, "cancel")

    def unbucketed(self, name: str) -> str:
        """The single key an earlier version kept index ``name`` in (``UNBUCKETED``)."""
        return f"{self.prefix}index:{name}"

    # -- the audit log (one hash tag: its chain is one sequence) -------------------
    def audit_outbox(self, tag: str) -> str:
        """LIST of audit entry JSON staged under ``tag`` (a thread's ``Thread.tag``, or a
        process-wide key's tag) in the same transaction as the fact they record, until
        they are chained into the log."""
        return f"{self.prefix}{tag}:audit:outbox"

    def audit_pending(self, bucket: int) -> str:
        """ZSET hash tag → when its outbox was last written: outboxes that may hold
        entries not yet chained (a hint for the scanner); a tag's is in its bucket."""
        return self._ix(bucket, "index:audit-outbox")

    def audit_pending_of(self, tag: str) -> str:
        """The ``audit_pending`` bucket that holds ``tag``'s hint."""
        return self.audit_pending(bucket_of(tag))

    def audit_log(self) -> str:
        """STREAM of chained audit entries (field ``e``: the entry JSON)."""
        return f"{self.prefix}{AUDIT_TAG}:log"

    def audit_head(self) -> str:
        """STRING ``seq:hash`` of the newest chained entry."""
        return f"{self.prefix}{AUDIT_TAG}:head"

    def audit_ids(self) -> str:
        """ZSET entry id → its time: the ids chained, so chaining is idempotent."""
        return f"{self.prefix}{AUDIT_TAG}:ids"

    def audit_anchor(self) -> str:
        """STRING ``seq:hash`` of the last entry retention removed (where the chain that
        is kept starts)."""
        return f"{self.prefix}{AUDIT_TAG}:anchor"

    # -- past incidents and their search index (one hash tag) ---------------------
    def incidents(self, name: str) -> str:
        """A key of the past-incident records and their search index, all under the
        ``{incidents}`` tag (the layout is in ``bot.store.incidents``; its scripts build
        the per-record and per-term names from ``incidents("")``)."""
        return f"{self.prefix}{{incidents}}:{name}"

    # -- workspace-wide spend and rates (one hash tag) -----------------------------
    def quota(self, name: str) -> str:
        """Counters of the workspace's daily caps and per-person job rates."""
        return f"{self.prefix}{QUOTA_TAG}:{name}"


UNBUCKETED = ("active", "approvals", "approval-reminders", "card-edits", "audit-outbox", "recent")
"""The index names an earlier version kept in one key each (``Keys.unbucketed``)."""

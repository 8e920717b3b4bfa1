"""An incident's timeline, read from Redis: what happened in one thread, who did it, when.

``incident_timeline(stores, thread)`` gathers, through the stores, every fact the bot
kept about the thread and turns each into one ``TimelineEvent`` (``bot.knowledge.timeline``
holds the values and renders them):

- the alert group whose message is the thread's root (``AlertGroups.of_thread``): fired,
  resolved;
- the thread's inject stream (every message the bot received there, with its author):
  the request of each job, people's replies, the alerting system's updates;
- each job's record: started (by whom), raised limits (by whom), its answer, its end
  (stop reason, iterations, tokens, cost), who pressed Stop;
- the audit log (chained, and the thread's outbox not chained yet): approvals asked and
  decided, writes started, done or of unknown outcome (the approver as ``confirmed_by``),
  limits raised, Stop;
- the approvals' and the ledger's own records, for what the audit log no longer holds;
- each job's trace: tool calls, limits reached, feedback on the answer.

The same fact often sits in two sources (an approval is in the audit log, its record and
the trace): each fact has one key, and the first source that names it wins, the audit log
first (it says who). Every text is scrubbed (``redact_secrets``) and cut to one line.

``parse_thread_ref`` (``bot.turns.thread_refs``, re-exported) reads what a person gives to
name a thread (a Slack link, ``C:TS``, a job id) strictly, since it becomes Redis keys.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from contextlib import aclosing
from typing import Any

from pydantic import ValidationError

from bot.agent.edits import edit_diff
from bot.agent.redact import redact_secrets
from bot.alerts.text import HEADER as ALERT_HEADER
from bot.alerts.text import REQUESTER as ALERTMANAGER
from bot.knowledge.timeline import Timeline, TimelineEvent, first_line, one_line
from bot.llm.prices import cost_text
from bot.store.alerts import AlertGroup
from bot.store.approvals import ApprovalRecord
from bot.store.audit import ACTOR_BOT, AuditEntry
from bot.store.audit_entry import short_detail
from bot.store.connection import reply_text, translated
from bot.store.inject import F_AUTHOR, F_TEXT, F_TS, sent_at
from bot.store.jobs import JobRecord
from bot.store.keys import Thread
from bot.store.ledger import LedgerRecord, split_key
from bot.store.parts import Stores
from bot.store.trace import (
    ApprovalEntry,
    FeedbackEntry,
    LimitEntry,
    ToolEntry,
    TraceEntry,
    read_trace,
)
from bot.turns.run import READ_ONLY_META
from bot.turns.thread_refs import is_message_link, parse_thread_ref

__all__ = ["Timeline", "incident_timeline", "is_message_link", "parse_thread_ref"]

MAX_JOBS = 200  # a thread's jobs read at most (the newest)
MAX_MESSAGES = 2_000  # inject stream entries read at most
ARGS_CHARS = 120  # a call's arguments in one event's text
AUDIT_MARGIN_S = 3_600.0  # audit entries read from this long before the thread's root
BOT = ACTOR_BOT  # "opsloop"
RESOLVE_POST_S = 600.0  # the update of a group's resolution is posted within this

# -- reading --------------------------------------------------------------------------


class _Events:
    """The events gathered so far, one per fact: the first ``add`` of a key wins."""

    def __init__(self) -> None:
        self._events: dict[tuple[str, ...], TimelineEvent] = {}

    def add(self, key: tuple[str, ...], ts: float, kind: str, who: str, text: str) -> None:
        if key in self._events:
            return
        self._events[key] = TimelineEvent(ts, kind, who or "?", redact_secrets(one_line(text)))

    def has(self, key: tuple[str, ...]) -> bool:
        return key in self._events

    def drop(self, key: tuple[str, ...]) -> None:
        self._events.pop(key, None)

    def __iter__(self) -> Any:
        return iter(self._events.values())


async def incident_timeline(stores: Stores, thread: Thread) -> Timeline:
    """The thread's timeline from Redis (see the module docstring); empty when Redis holds
    nothing of the thread. Raises ``StoreError`` when Redis does not answer."""
    jobs = await _jobs(stores, thread)
    messages = await _messages(stores, thread)
    audit = await _audit(stores, thread)
    traces = {job.id: await read_trace(stores.redis, stores.keys, job.id) for job in jobs}
    ledgers = {job.id: await stores.ledger.entries(job.id) for job in jobs}
    approvals = await _approvals(stores, jobs, traces, audit)
    group = await stores.alert_groups.of_thread(thread)
    stops = {
        job.id: by
        for job in jobs
        if job.status.value == "cancelled" and (by := await stores.jobs.cancel_requested(job.id))
    }

    events = _Events()
    calls = _Calls(approvals, traces)
    requests = {job.request_ts: job for job in jobs if job.request_ts}
    _from_alert_group(events, group)
    resolved_at = group.resolved_at if group is not None else None
    _from_messages(events, messages, requests, resolved_at=resolved_at)
    for entry in audit:
        _from_audit(events, entry, calls)
    for job in jobs:
        _from_approvals(events, approvals.get(job.id, {}).values(), calls)
        _from_ledger(events, job.id, ledgers[job.id], calls)
        _from_job(events, job, stops.get(job.id))
        _from_trace(events, job, traces[job.id], ledgers[job.id], calls)
    return Timeline(f"{thread.channel}:{thread.thread_ts}", list(events))


async def _jobs(stores: Stores, thread: Thread) -> list[JobRecord]:
    async with translated("timeline jobs"):
        raw = await stores.redis.get(stores.keys.jobs_counter(thread))
    count = int(raw or 0)
    found: list[JobRecord] = []
    for n in range(max(count - MAX_JOBS, 0) + 1, count + 1):
        record = await stores.jobs.get(thread.job_id(n))
        if record is not None:
            found.append(record)
    return found


async def _messages(stores: Stores, thread: Thread) -> list[tuple[float, dict[str, str]]]:
    """The thread's inject stream: (when sent, fields) of every message received."""
    async with translated("timeline messages"):
        raw = await stores.redis.xrange(stores.keys.inject(thread), count=MAX_MESSAGES)
    found: list[tuple[float, dict[str, str]]] = []
    for stream_id, fields in raw or []:
        data = {reply_text(k): reply_text(v) for k, v in (fields or {}).items()}
        at = sent_at(data.get(F_TS, "")) or int(reply_text(stream_id).split("-")[0]) / 1000
        found.append((at, data))
    return found


async def _audit(stores: Stores, thread: Thread) -> list[AuditEntry]:
    """The thread's audit entries: those chained (read from shortly before the thread's
    root on) and those still in its outbox (staged, not chained yet), each once."""
    since = (sent_at(thread.thread_ts) or 0.0) - AUDIT_MARGIN_S
    found: dict[str, AuditEntry] = {}
    chained = stores.audit_log.matching(since=since, channel=thread.channel)
    async with aclosing(chained):
        async for stored in chained:
            if stored.entry.thread_ts == thread.thread_ts:
                found.setdefault(stored.entry.id, stored.entry)
    async with translated("timeline audit outbox"):
        staged = await stores.redis.lrange(stores.keys.audit_outbox(thread.tag), 0, -1)
    for raw in staged or []:
        try:
            entry = AuditEntry.model_validate_json(reply_text(raw))
        except ValidationError:
            continue  # the chain keeps it as a corrupt entry; nothing to show here
        if entry.channel == thread.channel and entry.thread_ts == thread.thread_ts:
            found.setdefault(entry.id, entry)
    return sorted(found.values(), key=lambda e: e.at)


async def _approvals(
    stores: Stores,
    jobs: Sequence[JobRecord],
    traces: Mapping[str, Sequence[TraceEntry]],
    audit: Sequence[AuditEntry],
) -> dict[str, dict[str, ApprovalRecord]]:
    """Each job's approval records by call id, for the calls its trace, its progress and
    the audit log name."""
    found: dict[str, dict[str, ApprovalRecord]] = {}
    for job in jobs:
        ids = dict.fromkeys(job.progress.call_ids)
        ids.update(dict.fromkeys(e.call_id for e in traces[job.id] if isinstance(e, ApprovalEntry)))
        ids.update(dict.fromkeys(e.call_id for e in audit if e.job_id == job.id and e.call_id))
        records = await stores.approvals.of_calls(job.id, list(ids))
        found[job.id] = {r.call_id: r for r in records}
    return found


# -- texts ------------------------------------------------------------------------------


def _short(job_id: str) -> str:
    """``j3`` of ``C123:1700000000.000100:j3``."""
    return job_id.rpartition(":")[2]


def args_text(arguments: Mapping[str, object] | None) -> str:
    """``host=web-03 replicas=3``: a call's arguments on one bounded line."""
    if not arguments:
        return ""
    parts = []
    for name, value in arguments.items():
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        parts.append(f"{name}={shown}")
    return one_line(" ".join(parts), ARGS_CHARS)


class _Calls:
    """What is known of each call (tool and arguments), from approvals and traces."""

    def __init__(
        self,
        approvals: Mapping[str, Mapping[str, ApprovalRecord]],
        traces: Mapping[str, Sequence[TraceEntry]],
    ) -> None:
        self._known: dict[tuple[str, str], str] = {}
        for job_id, entries in traces.items():
            for entry in entries:
                if isinstance(entry, ToolEntry) and entry.arguments:
                    try:
                        parsed = json.loads(entry.arguments)
                    except ValueError:
                        parsed = None
                    args = args_text(parsed) if isinstance(parsed, dict) else entry.arguments
                    self._known[(job_id, entry.call_id)] = f"{entry.tool} {args}".strip()
        self._edits: dict[tuple[str, str], str] = {}
        self._ran: dict[tuple[str, str], str] = {}  # an edited call: as it ran
        for job_id, records in approvals.items():
            for call_id, record in records.items():
                self._known[(job_id, call_id)] = (
                    f"{record.tool} {args_text(record.arguments)}".strip()
                )
                if record.edited_arguments is not None:
                    self._ran[(job_id, call_id)] = (
                        f"{record.tool} {args_text(record.edited_arguments)}".strip()
                    )
                    change = edit_diff(record.arguments, record.edited_arguments)
                    self._edits[(job_id, call_id)] = (
                        f"edited by {record.edited_by or BOT}: {one_line(change, ARGS_CHARS)}"
                    )

    def text(self, job_id: str | None, call_id: str | None, tool: str | None) -> str:
        known = self._known.get((job_id or "", call_id or ""))
        return known or tool or "a call"

    def ran(self, job_id: str | None, call_id: str | None, tool: str | None) -> str:
        """The call as it ran: an edited call's approved arguments, else ``text``."""
        ran = self._ran.get((job_id or "", call_id or ""))
        return ran or self.text(job_id, call_id, tool)

    def edit(self, job_id: str | None, call_id: str | None) -> str:
        """`` · edited by U1: replicas 5 → 3`` for a call approved with edits, else ``""``."""
        edit = self._edits.get((job_id or "", call_id or ""))
        return f" · {edit}" if edit else ""


# -- the sources ------------------------------------------------------------------------


def _from_alert_group(events: _Events, group: AlertGroup | None) -> None:
    if group is None:
        return
    count = len(group.states)
    alerts = f" ({count} alert{'s' if count != 1 else ''})" if count else ""
    events.add(
        ("alert_fired", group.id, str(group.episode)),
        group.opened_at,
        "alert_fired",
        ALERTMANAGER,
        f"{group.name} firing{alerts}",
    )
    if group.resolved_at is not None:
        events.add(
            ("alert_resolved", group.id, str(group.episode)),
            group.resolved_at,
            "alert_resolved",
            ALERTMANAGER,
            f"{group.name} resolved: the whole group",
        )


_UPDATE = re.compile(r"update to .*?: (?P<what>.*)$")


def _alert_text(text: str) -> str:
    """The first line worth showing of the alerting system's text: past the header that
    says it is data, without the quote marks."""
    lines = [line for line in text.splitlines() if line.strip() and line != ALERT_HEADER]
    for line in lines:
        return first_line(line.removeprefix(">").strip())
    return ""


def _update_kind(line: str) -> str:
    found = _UPDATE.match(line)
    what = found["what"] if found else line
    firing, resolved = "firing" in what, "resolved" in what
    if resolved and not firing:
        return "alert_resolved"
    if firing and not resolved:
        return "alert_fired"
    return "alert_update"


def _from_messages(
    events: _Events,
    messages: Iterable[tuple[float, Mapping[str, str]]],
    requests: Mapping[str, JobRecord],
    *,
    resolved_at: float | None,
) -> None:
    """People's messages, the requests and the alerting system's updates. The update
    posted for the whole group's resolution is the group's ``alert_resolved``: not twice."""
    for at, fields in messages:
        ts, text = fields.get(F_TS, ""), fields.get(F_TEXT, "")
        author = fields.get(F_AUTHOR) or "?"
        job = requests.get(ts)
        line = _alert_text(text) if author == ALERTMANAGER else first_line(text)
        if job is not None:
            kind = "request"
            line = f"{line} (starts {_short(job.id)})" if line else f"starts {_short(job.id)}"
        elif author == ALERTMANAGER:
            kind = _update_kind(line)
            if kind == "alert_resolved" and _resolves(at, resolved_at):
                continue
        else:
            kind = "reply"
        events.add(("message", ts), at, kind, author, line)


def _resolves(at: float, resolved_at: float | None) -> bool:
    """Whether an update sent at ``at`` is the one posted for the group's resolution."""
    return resolved_at is not None and resolved_at - 5 <= at <= resolved_at + RESOLVE_POST_S


_DECIDED = {"approved": "approved", "denied": "denied", "expired": "expired"}


def _from_audit(events: _Events, entry: AuditEntry, calls: _Calls) -> None:
    job, call = entry.job_id or "", entry.call_id or ""
    what = calls.text(entry.job_id, entry.call_id, entry.tool)
    on = f" ({_short(job)})" if job else ""
    match entry.kind:
        case "approval_requested":
            category = entry.detail.get("category")
            asks = f" · {category}" if isinstance(category, str) else ""
            events.add(
                ("approval_requested", job, call),
                entry.at,
                "approval_requested",
                entry.actor,
                f"{what}{asks}{on}",
            )
        case "approval_decided":
            kind = _DECIDED.get(entry.outcome or "", "cancelled")
            first = entry.detail.get("first_approver")
            second = f" · second approver, first {first}" if isinstance(first, str) else ""
            edit = calls.edit(entry.job_id, entry.call_id) if kind == _DECIDED["approved"] else ""
            events.add(
                ("decided", job, call), entry.at, kind, entry.actor, f"{what}{second}{edit}{on}"
            )
        case "write_started":
            what = calls.ran(entry.job_id, entry.call_id, entry.tool)
            events.add(
                ("write_started", job, call),
                entry.at,
                "write_started",
                entry.actor,
                f"{what} · confirmed_by {entry.actor}{on}",
            )
        case "write_finished":
            what = calls.ran(entry.job_id, entry.call_id, entry.tool)
            result = entry.detail.get("result")
            tail = f": {first_line(result, 120)}" if isinstance(result, str) and result else ""
            events.add(
                ("write_done", job, call),
                entry.at,
                "write_done",
                entry.actor,
                f"{what} · {entry.outcome or 'done'}{tail} · confirmed_by {entry.actor}{on}",
            )
        case "write_unknown":
            events.add(
                ("write_unknown", job, call),
                entry.at,
                "write_unknown",
                entry.actor,
                f"{what} · started, never seen to end: outcome unknown, not run again{on}",
            )
        case "write_withdrawn":
            events.add(
                ("write_withdrawn", job, call, repr(entry.at)),
                entry.at,
                "write_withdrawn",
                entry.actor,
                f"{what} · claim not confirmed by a replica: not started{on}",
            )
        case "limit_raised":
            seq = entry.id.rpartition(":")[2]
            events.add(
                ("limit_raised", job, seq),
                entry.at,
                "limit_raised",
                entry.actor,
                f"{short_detail(entry)}{on}",
            )
        case "job_stopped":
            state = entry.detail.get("while")
            during = f" while {state}" if isinstance(state, str) else ""
            events.add(("stop", job), entry.at, "stop", entry.actor, f"Stop{during}{on}")
        case _:
            pass  # not about a thread (a process started, a CLI run, a daily cap)


def _from_approvals(events: _Events, records: Iterable[ApprovalRecord], calls: _Calls) -> None:
    for record in records:
        job, call = record.job_id, record.call_id
        what, on = calls.text(job, call, record.tool), f" ({_short(job)})"
        events.add(
            ("approval_requested", job, call),
            record.requested_at,
            "approval_requested",
            BOT,
            f"{what} · {record.category}{on}",
        )
        if record.status != "pending" and record.decided_at is not None:
            kind = _DECIDED.get(record.status, "cancelled")
            edit = calls.edit(job, call) if record.status == "approved" else ""
            events.add(
                ("decided", job, call),
                record.decided_at,
                kind,
                record.decided_by or BOT,
                f"{what}{edit}{on}",
            )


def _from_ledger(
    events: _Events, job_id: str, entries: Mapping[str, LedgerRecord], calls: _Calls
) -> None:
    """The ledger's own times, for writes whose audit entries are gone."""
    for key, record in entries.items():
        _, call = split_key(key)
        what, on = calls.ran(job_id, call, record.tool), f" ({_short(job_id)})"
        if record.started_at is not None and record.state != "withdrawn":
            events.add(
                ("write_started", job_id, call),
                record.started_at,
                "write_started",
                BOT,
                f"{what}{on}",
            )
        if record.state == "done" and record.finished_at is not None:
            events.add(
                ("write_done", job_id, call),
                record.finished_at,
                "write_done",
                BOT,
                f"{what}{on}",
            )


def _job_end_text(job: JobRecord) -> str:
    progress = job.progress
    parts = [f"{_short(job.id)} {job.status.value}"]
    parts.append(f"{progress.iterations} iteration{'s' if progress.iterations != 1 else ''}")
    parts.append(f"{progress.usage.paid:,} tokens")
    if cost := cost_text(progress.cost_usd, progress.unpriced_calls):
        parts.append(cost)
    if job.error and job.status.value != "cancelled":  # a Stop has its own line
        parts.append(first_line(job.error, 120))
    return " · ".join(parts)


def _from_job(events: _Events, job: JobRecord, stopped_by: str | None) -> None:
    short = _short(job.id)
    read_only = " (read-only tools)" if job.meta.get(READ_ONLY_META) else ""
    events.add(
        ("job_started", job.id),
        job.created_at,
        "job_started",
        job.requester,
        f"{short} started{read_only}",
    )
    for n, raised in enumerate(job.raises, start=1):
        unit = " s" if raised.limit == "deadline" else ""
        events.add(
            ("limit_raised", job.id, str(n)),
            raised.at,
            "limit_raised",
            raised.by,
            f"{raised.limit} +{raised.amount:g}{unit} ({short})",
        )
    if stopped_by is not None:
        events.add(("stop", job.id), job.updated_at, "stop", stopped_by, f"Stop ({short})")
    if not job.status.final:
        return
    if job.output:
        events.add(("answer", job.id), job.updated_at, "answer", BOT, first_line(job.output))
    events.add(("job_ended", job.id), job.updated_at, "job_ended", BOT, _job_end_text(job))


def _from_trace(
    events: _Events,
    job: JobRecord,
    entries: Sequence[TraceEntry],
    ledger: Mapping[str, LedgerRecord],
    calls: _Calls,
) -> None:
    short = _short(job.id)
    writes = {split_key(key)[1] for key in ledger}
    for entry in entries:
        match entry:
            case ToolEntry() if entry.call_id not in writes and entry.ran:
                outcome = "error" if entry.is_error else "ran"
                events.add(
                    ("tool", job.id, entry.call_id),
                    entry.at - entry.duration_s,
                    "tool_call",
                    BOT,
                    f"{calls.text(job.id, entry.call_id, entry.tool)} · {outcome} "
                    f"{entry.duration_s:.2f} s · {entry.output_chars:,} chars out ({short})",
                )
            case ApprovalEntry():
                events.add(
                    ("approval_requested", job.id, entry.call_id),
                    entry.at,
                    "approval_requested",
                    BOT,
                    f"{calls.text(job.id, entry.call_id, entry.tool)} ({short})",
                )
            case LimitEntry():
                events.add(
                    ("limit_reached", job.id, repr(entry.at)),
                    entry.at,
                    "limit_reached",
                    BOT,
                    f"{entry.stop_reason.value}: {first_line(entry.detail, 160)} ({short})",
                )
            case FeedbackEntry():
                word = "helpful" if entry.value == "positive" else "not helpful"
                events.add(
                    ("feedback", job.id, entry.by, repr(entry.at)),
                    entry.at,
                    "feedback",
                    entry.by,
                    f"{entry.value} ({word}) on the answer of {short}",
                )
            case _:
                pass  # model calls, injects, condensing, run ends: not the incident's facts

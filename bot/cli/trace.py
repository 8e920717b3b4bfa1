"""``opsloop trace``: what a job did, read back from Redis, for the incident review.

The target is a job id (``C123:1700000000.000100:j2``), a thread
(``C123:1700000000.000100``, every job of it, oldest first) or a Slack message link
(``…/archives/C123/p1700000000000100``, with ``?thread_ts=`` when it links a reply). For
each job it prints the record (status, who started it, limits used and raised, what its
model calls cost, how it ended) and its trace: every model call with its tokens, every tool
call with its arguments and who confirmed it, every approval with who decided it and when,
what people wrote that it took in, fallbacks, condensing, each run's end, feedback on its
answer (who, which way), and the job's answer. A call the model wrote malformed (history
keeps it as ``{}`` / ``invalid_tool_name``) is shown as the model wrote it (bounded), read
from the thread's history. ``--json`` prints one JSON object per job instead (for ``jq``).

Only reads: it needs ``REDIS_URL`` (and ``OPSLOOP_REDIS_PREFIX`` when the bot uses one),
nothing of Slack or the model. Jobs, traces and approvals are kept 30 days.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import re
import sys
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

import redis.asyncio as aioredis

from bot.agent.edits import edit_diff
from bot.agent.messages import AssistantMessage, Malformed, UserMessage
from bot.cli.parts import command_stores
from bot.errors import ConfigError, StoreError
from bot.llm.prices import cost_text
from bot.otel.meta import trace_id_of
from bot.store.approvals import ApprovalRecord
from bot.store.connection import RedisTarget, translated
from bot.store.history import load_message
from bot.store.jobs import JobRecord
from bot.store.keys import Keys, Thread
from bot.store.trace import (
    ApprovalEntry,
    CondenseEntry,
    EndEntry,
    FallbackEntry,
    FeedbackEntry,
    InjectEntry,
    LimitEntry,
    ModelCallEntry,
    ToolEntry,
    TraceEntry,
    read_trace,
)

MAX_JOBS = 200  # a thread's jobs shown at most (the newest)
ARGS_CHARS = 300  # a tool call's arguments on one line of the human rendering
ANSWER_CHARS = 1_500  # the job's answer, shown at the end
SAID_CHARS = 200  # a message people wrote, on its timeline line

_CHANNEL = r"[CDG][A-Z0-9]+"
_TS = r"\d{9,10}\.\d{6}"
_JOB_ID = re.compile(rf"^(?P<channel>{_CHANNEL}):(?P<ts>{_TS})(?::j(?P<n>[1-9]\d*))?$")
_LINK_PATH = re.compile(rf"^/archives/(?P<channel>{_CHANNEL})/p(?P<digits>\d{{15,16}})/?$")
TARGET_FORMS = (
    "a job id (C123:1700000000.000100:j1), a thread (C123:1700000000.000100) "
    "or a Slack message link (https://…/archives/C123/p1700000000000100)"
)


@dataclass(frozen=True, slots=True)
class Target:
    thread: Thread
    job: int | None = None  # None: every job of the thread


def parse_target(text: str) -> Target:
    """The thread (and job) ``text`` names; ``ValueError`` saying what is accepted."""
    text = text.strip()
    if found := _JOB_ID.match(text):
        n = found["n"]
        return Target(Thread(found["channel"], found["ts"]), int(n) if n else None)
    parts = urlsplit(text)
    if parts.scheme in ("http", "https") and (found := _LINK_PATH.match(parts.path)):
        digits = found["digits"]
        ts = f"{digits[:-6]}.{digits[-6:]}"
        thread_ts = parse_qs(parts.query).get("thread_ts", [ts])[0]
        if not re.fullmatch(_TS, thread_ts):
            raise ValueError(f"the link's thread_ts {thread_ts!r} is not a Slack timestamp")
        return Target(Thread(found["channel"], thread_ts))
    raise ValueError(f"cannot read {text[:200]!r}: give {TARGET_FORMS}")


@dataclass(frozen=True, slots=True)
class Written:
    """A malformed call of the thread's history: the name it is stored under, and what
    the model wrote."""

    tool: str
    malformed: Malformed


@dataclass
class JobTrace:
    job: JobRecord
    entries: list[TraceEntry]
    approvals: dict[str, ApprovalRecord] = field(default_factory=dict)  # by call id
    said: dict[str, str] = field(default_factory=dict)  # people's messages by Slack ts
    malformed: dict[str, Written] = field(default_factory=dict)  # the thread's, by call id

    def written(self, entry: ToolEntry) -> Malformed | None:
        """What the model wrote for this entry's call, when it was malformed. Call ids
        are unique in a job, not in a thread: the stored name must match too."""
        found = self.malformed.get(entry.call_id)
        if found is None or entry.ran or found.tool != entry.tool:
            return None
        return found.malformed


async def load(redis_url: str | RedisTarget, keys: Keys, target: Target) -> list[JobTrace]:
    """The target's jobs with their traces and approvals, oldest first (may be empty)."""
    async with command_stores(redis_url, keys, max_connections=4) as stores:
        redis, jobs, approvals = stores.redis, stores.jobs, stores.approvals
        if target.job is not None:
            numbers = [target.job]
        else:
            async with translated("trace jobs counter"):
                raw = await redis.get(keys.jobs_counter(target.thread))
            count = int(raw or 0)
            numbers = list(range(max(count - MAX_JOBS, 0) + 1, count + 1))
        said, malformed = await _from_history(redis, keys, target.thread) if numbers else ({}, {})
        found: list[JobTrace] = []
        for n in numbers:
            record = await jobs.get(target.thread.job_id(n))
            if record is None:
                continue
            entries = await read_trace(redis, keys, record.id)
            trace = JobTrace(record, entries, said=said, malformed=malformed)
            for entry in entries:
                if isinstance(entry, ApprovalEntry) and entry.call_id not in trace.approvals:
                    approval = await approvals.get(record.id, entry.call_id)
                    if approval is not None:
                        trace.approvals[entry.call_id] = approval
            found.append(trace)
        return found


async def _from_history(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> tuple[dict[str, str], dict[str, Written]]:
    """From the thread's history: what people wrote as the bot took it in (user
    messages, by their Slack ts), for naming the messages a trace says were taken in;
    and the calls the model wrote malformed, by call id."""
    async with translated("trace history"):
        raw: list[str | bytes] = await redis.lrange(keys.history(thread), 0, -1)
    said: dict[str, str] = {}
    malformed: dict[str, Written] = {}
    for item in raw:
        with contextlib.suppress(ValueError):
            message = load_message(item if isinstance(item, str) else item.decode())
            if isinstance(message, UserMessage) and message.source_id:
                said[message.source_id] = message.content
            elif isinstance(message, AssistantMessage):
                for call in message.tool_calls:
                    if call.malformed is not None:
                        malformed[call.id] = Written(call.name, call.malformed)
    return said, malformed


# -- rendering ------------------------------------------------------------------------


def _clock(at: float) -> str:
    moment = datetime.datetime.fromtimestamp(at, datetime.UTC)
    return f"{moment:%H:%M:%S}.{moment.microsecond // 100_000}"


def _date(at: float) -> str:
    return f"{datetime.datetime.fromtimestamp(at, datetime.UTC):%Y-%m-%d %H:%M:%S} UTC"


def _n(value: float) -> str:
    return f"{value:,.0f}"


def _secs(value: float) -> str:
    return f"{value:.2f} s" if value < 10 else f"{value:.1f} s"


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def _usage(entry: ModelCallEntry | EndEntry) -> str:
    usage = entry.usage
    if usage is None:
        return ""
    cached = f" ({_n(usage.cached_tokens)} cached)" if usage.cached_tokens else ""
    return f"{_n(usage.prompt_tokens)} in{cached} / {_n(usage.completion_tokens)} out tokens"


def _decision(approval: ApprovalRecord | None) -> str:
    if approval is None:
        return "its record is gone"
    if approval.status == "pending":
        return f"pending, expires {_date(approval.expires_at)}"
    if approval.status == "expired":
        return f"expired at {_clock(approval.decided_at or approval.expires_at)}"
    by = f" by {approval.decided_by}" if approval.decided_by else ""
    when = f" at {_clock(approval.decided_at)}" if approval.decided_at else ""
    edited = ""
    if approval.edited_arguments is not None:
        change = edit_diff(approval.arguments, approval.edited_arguments)
        edited = f" · edited by {approval.edited_by}: {change}"
    return f"{approval.status}{by}{when}{edited}"


def _line(entry: TraceEntry, trace: JobTrace) -> tuple[str, str]:
    """The kind column and the description of one entry."""
    match entry:
        case ModelCallEntry():
            parts = [f"iteration {entry.iteration}", entry.model, _secs(entry.duration_s)]
            if entry.attempt and entry.attempt > 1:
                parts.append(f"attempt {entry.attempt}")
            if entry.error is not None:
                parts.append(f"failed: {entry.error}")
            else:
                parts.append(_usage(entry))
                if entry.tool_calls:
                    parts.append(_plural(entry.tool_calls, "tool call"))
            return "model", " · ".join(parts)
        case ToolEntry():
            written = trace.written(entry)
            name, args = entry.tool, entry.arguments or ""
            if written is not None:
                name = _said(written.name) if written.name is not None else name
                if written.arguments is not None:
                    args = " ".join(written.arguments.split())
            if len(args) > ARGS_CHARS:
                args = args[: ARGS_CHARS - 1] + "…"
            head = f"{name} {args}".rstrip()
            if written is not None:
                bad = [k for k in ("name", "arguments") if getattr(written, k) is not None]
                outcome = f"not run: malformed {' and '.join(bad)}"
            elif not entry.ran:
                outcome = "not run"
            elif entry.is_error:
                outcome = f"error after {_secs(entry.duration_s)}"
            else:
                outcome = f"ran {_secs(entry.duration_s)}"
            parts = [head, "dry run" if entry.dry_run else outcome]
            if entry.dry_run:
                parts[1] = f"dry run, {outcome}"
            parts.append(f"{_n(entry.output_chars)} chars out")
            if entry.confirmed_by:
                parts.append(f"confirmed by {entry.confirmed_by}")
            if entry.proposed is not None:
                proposed = " ".join(entry.proposed.split())
                parts.append(f"edited; proposed {proposed[:ARGS_CHARS]}")
            return "tool", " · ".join(parts)
        case ApprovalEntry():
            approval = trace.approvals.get(entry.call_id)
            category = f"{approval.category}, " if approval is not None else ""
            asked = f"{entry.tool} ({category}call {entry.call_id})"
            return "approval", f"{asked} · {_decision(approval)}"
        case InjectEntry():
            head = f"{_plural(entry.count, 'message')} from the thread taken in"
            words = [_said(trace.said[i]) for i in entry.ids if i in trace.said]
            return "message", "; ".join([head, *words]) if words else head
        case FallbackEntry():
            return "fallback", f"{entry.model} → {entry.to_model}: {entry.error}"
        case LimitEntry():
            return "limit", f"{entry.stop_reason.value}: {entry.detail}"
        case CondenseEntry():
            if entry.error is not None:
                return "condense", f"failed: {entry.error}"
            return "condense", f"{entry.replaced} messages condensed into a summary"
        case EndEntry():
            reason = entry.stop_reason.value
            head = "paused: awaiting approval" if reason == "awaiting_approval" else reason
            parts = [
                head,
                _plural(entry.iterations, "iteration"),
                _plural(entry.model_calls, "model call"),
                _plural(entry.tool_executions, "tool run"),
                f"{_n(entry.usage.paid)} tokens",
            ]
            if entry.error:
                parts.append(entry.error)
            return "end", " · ".join(parts)
        case FeedbackEntry():
            word = "helpful" if entry.value == "positive" else "not helpful"
            return "feedback", f"{entry.value} ({word}) from {entry.by}"


def _said(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= SAID_CHARS else line[: SAID_CHARS - 1] + "…"


def render(trace: JobTrace) -> str:
    """A job as an SRE reads it after the incident: the record, then the timeline."""
    job, progress = trace.job, trace.job.progress
    limits = job.limits
    lines = [f"Job {job.id} — {job.status.value}"]
    lines.append(
        f"  thread {job.channel} {job.thread_ts} · started by {job.requester} · "
        f"{_date(job.created_at)}"
    )
    if (otel_trace := trace_id_of(job)) is not None:
        lines.append(f"  OpenTelemetry trace {otel_trace}")
    tools = f" ({', '.join(progress.tools_used)})" if progress.tools_used else ""
    cost = cost_text(progress.cost_usd, progress.unpriced_calls)
    if cost and progress.unpriced_calls:
        cost += f" ({_plural(progress.unpriced_calls, 'call')} without a price)"
    lines.append(
        f"  {progress.iterations} of {limits.max_iterations} iterations · "
        f"{_n(progress.usage.paid)} of {_n(limits.token_budget)} tokens · "
        + (f"{cost} · " if cost else "")
        + f"{progress.active_time_s:.1f} s of {limits.deadline_s:g} s active · "
        f"{_plural(progress.tool_executions, 'tool run')}{tools}"
    )
    if progress.model:
        switches = f" (switched: {'; '.join(progress.switches)})" if progress.switches else ""
        lines.append(f"  model {progress.model}{switches}")
    for raised in job.raises:
        amount = f"{raised.amount:g}" + (" s" if raised.limit == "deadline" else "")
        lines.append(f"  Continue: {raised.limit} +{amount} by {raised.by} at {_clock(raised.at)}")
    if job.error:
        lines.append(f"  {'stopped' if job.status.value == 'cancelled' else 'error'}: {job.error}")
    if not trace.entries:
        lines.append("  (no trace entries: the job has not run yet, or its trace expired)")
    else:
        lines.append("")
        for entry in trace.entries:
            kind, text = _line(entry, trace)
            offset = entry.at - job.created_at
            lines.append(f"  {_clock(entry.at)}  {f'+{offset:.1f}s':>8}  {kind:<9} {text}")
    if job.output:
        answer = job.output.strip()
        if len(answer) > ANSWER_CHARS:
            more = f"… [{len(job.output):,} chars; --json has it all]"
            answer = answer[: ANSWER_CHARS - 1] + more
        lines.append("")
        lines.append("  answer:")
        lines.extend(f"    {line}" for line in answer.splitlines())
    return "\n".join(lines)


def render_json(trace: JobTrace) -> str:
    """One JSON object: the job record, its trace entries, its approvals, what people
    wrote that it took in (by Slack ts), and its malformed calls as the model wrote them
    (by call id)."""
    taken = [i for e in trace.entries if isinstance(e, InjectEntry) for i in e.ids]
    malformed = {
        e.call_id: {"tool": e.tool, **written.model_dump(exclude_none=True)}
        for e in trace.entries
        if isinstance(e, ToolEntry) and (written := trace.written(e)) is not None
    }
    return json.dumps(
        {
            "job": trace.job.model_dump(mode="json"),
            "trace": [entry.model_dump(mode="json", exclude_none=True) for entry in trace.entries],
            "approvals": [a.model_dump(mode="json") for a in trace.approvals.values()],
            "messages": {ts: trace.said[ts] for ts in taken if ts in trace.said},
            "malformed_calls": malformed,
            "otel_trace_id": trace_id_of(trace.job),
        },
        ensure_ascii=False,
    )


# -- the command ----------------------------------------------------------------------


def main(target_text: str, *, as_json: bool = False) -> int:
    """Print the target's jobs; 0 when any was found, 1 when none or Redis failed,
    2 when the target or a variable cannot be read."""
    from bot.settings import load_bot_settings

    try:
        target = parse_target(target_text)
    except ValueError as exc:
        print(f"opsloop trace: {exc}", file=sys.stderr)
        return 2
    try:
        settings = load_bot_settings()
        settings.require("REDIS_URL")
    except ConfigError as exc:
        print(f"opsloop trace: {exc}", file=sys.stderr)
        return 2
    assert settings.redis_url is not None
    keys = Keys(settings.redis_prefix)
    try:
        traces = asyncio.run(load(RedisTarget.of(settings), keys, target))
    except StoreError as exc:
        print(f"opsloop trace: {exc}", file=sys.stderr)
        return 1
    if not traces:
        what = (
            f"job {target.thread.job_id(target.job)}"
            if target.job is not None
            else f"job in thread {target.thread.channel}:{target.thread.thread_ts}"
        )
        print(
            f"opsloop trace: no {what} under the prefix {keys.prefix!r} "
            "(jobs are kept 30 days; is OPSLOOP_REDIS_PREFIX the bot's?)",
            file=sys.stderr,
        )
        return 1
    for i, trace in enumerate(traces):
        if as_json:
            print(render_json(trace))
        else:
            print(("\n" if i else "") + render(trace))
    return 0

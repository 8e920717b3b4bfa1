"""Tool calls run by hand (``opsloop tools run``), on the record like the bot's own.

A mutating or destructive tool run from the command line is a job of its own in a thread
of its own: channel ``CLI`` (no Slack channel id is that short), thread ts the moment it
started, so ``opsloop trace CLI:1700000000.123456:j1`` reads it like any job and its keys
share one hash tag like every thread's. ``begin`` writes the job ``running``, requested by
the person at the shell (``cli:<user>``), and claims the call's ledger entry (``started``,
under the idempotency key ``{job_id}:{call_id}`` the tool is given) in one transaction,
before the tool runs. ``finish`` records ``done`` with the scrubbed output, appends the
trace (the dry run if there was one, the call with its arguments and who confirmed it,
the end) and ends the job ``completed``, or ``failed`` when the tool reported an error.

The job never enters the scanner's index: no loop runs it and nothing may resume it. A
process that dies while its tool runs leaves the job ``running`` and the ledger entry
``started`` — the record that a write began and was never seen to end.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from bot.agent.messages import Usage
from bot.agent.state import RunState, StopReason
from bot.store.audit import OUTBOX_TTL_S, AuditEntry, job_fields, staged_json
from bot.store.connection import translated
from bot.store.jobs import JobLimits, JobRecord, Jobs, JobStatus, new_job
from bot.store.keys import JOB_TTL_S, Thread
from bot.store.ledger import LEDGER_TTL_S, LedgerRecord, RedisLedger, bound_output
from bot.store.redis_store import RedisStore
from bot.store.trace import EndEntry, dump_entry, queue_append

CLI_CHANNEL = "CLI"
CLI_REQUESTER_PREFIX = "cli:"


def cli_thread(now: float) -> Thread:
    """The thread of a call started at ``now`` (a Slack-shaped ts: ``1700000000.123456``)."""
    return Thread(CLI_CHANNEL, f"{now:.6f}")


@dataclass(eq=False, kw_only=True)
class CliCalls(RedisStore):
    """Begins and finishes the record of one hand-run call at a time."""

    now: Callable[[], float] = time.time
    _jobs: Jobs = field(init=False)

    def __post_init__(self) -> None:
        self._jobs = Jobs(self.redis, self.keys, now=self.now)

    async def begin(
        self,
        *,
        user: str,
        tool: str,
        call_id: str,
        args_hash: str,
        confirmed_by: str,
        timeout_s: float,
        arguments: dict[str, object] | None = None,
        category: str | None = None,
    ) -> JobRecord:
        """The ``running`` job of the call, its ledger entry ``started`` and its audit
        entry (``cli_run``, by ``cli:<user>``); nothing ran yet."""
        now = self.now()
        thread = cli_thread(now)
        async with translated("cli call begin"):
            n = int(await self.redis.incr(self.keys.jobs_counter(thread)))
        job_id = thread.job_id(n)
        # No model runs in it: no iterations and no tokens; the tool's timeout is its time.
        limits = JobLimits(max_iterations=0, deadline_s=timeout_s, token_budget=0)
        template = new_job(
            thread,
            requester=f"{CLI_REQUESTER_PREFIX}{user}",
            limits=limits,
            now=now,
            meta={"source": "opsloop tools run", "tool": tool, "confirmed_by": confirmed_by},
        )
        record = template.model_copy(update={"id": job_id, "status": JobStatus.RUNNING})
        entry = LedgerRecord(state="started", tool=tool, args_hash=args_hash, started_at=now)
        job_key = self.keys.job(job_id)
        ledger_key = self.keys.ledger(job_id)
        audit = AuditEntry(
            id=f"cli_run:{job_id}:{call_id}",
            kind="cli_run",
            at=now,
            actor=record.requester,
            **job_fields(job_id),
            tool=tool,
            call_id=call_id,
            args_hash=args_hash,
            arguments=arguments,
            detail={
                "confirmed_by": confirmed_by,
                "idempotency_key": f"{job_id}:{call_id}",
                **({"category": category} if category else {}),
            },
        )
        outbox = self.keys.audit_outbox(thread.tag)
        async with translated("cli call begin"):
            await self.redis.zadd(self.keys.audit_pending_of(thread.tag), {thread.tag: now})
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.rpush(outbox, staged_json(audit))
                pipe.expire(outbox, OUTBOX_TTL_S)
                pipe.expire(self.keys.jobs_counter(thread), JOB_TTL_S)
                pipe.hset(
                    job_key,
                    mapping={
                        "status": JobStatus.RUNNING.value,
                        "fence": "0",
                        "data": record.model_dump_json(),
                    },
                )
                pipe.expire(job_key, JOB_TTL_S)
                pipe.hsetnx(
                    ledger_key, f"{job_id}:{call_id}", entry.model_dump_json(exclude_none=True)
                )
                pipe.expire(ledger_key, LEDGER_TTL_S)
                await pipe.execute()
        return record

    async def finish(
        self,
        record: JobRecord,
        *,
        call_id: str,
        tool: str,
        ok: bool,
        output: str,
        active_s: float,
        trace: Sequence[str],
    ) -> JobRecord:
        """Record the outcome (``output`` already scrubbed) after the ``trace`` entries of
        the call (``TraceRecorder`` JSON), and end the job."""
        ledger = RedisLedger(self.redis, self.keys, now=self.now, actor=record.requester)
        await ledger.finish(f"{record.id}:{call_id}", output)
        shown, _ = bound_output(output)
        reason = StopReason.COMPLETED if ok else StopReason.FAILED
        error = None if ok else (shown.strip().splitlines() or [""])[0]
        end = EndEntry(
            at=self.now(),
            stop_reason=reason,
            error=error,
            iterations=0,
            model_calls=0,
            tool_executions=1,
            usage=Usage(),
        )
        async with translated("cli call trace"):
            async with self.redis.pipeline(transaction=True) as pipe:
                queue_append(pipe, self.keys, record.id, [*trace, dump_entry(end)])
                await pipe.execute()
        progress = RunState(tool_executions=1, tools_used=[tool], active_time_s=active_s)
        return await self._jobs.save(
            record,
            JobStatus.of(reason),
            fence=0,
            progress=progress,
            stop_reason=reason.value,
            output=shown,
            error=error,
        )

"""This process's background work: the jobs it runs, its long-lived loops, and the drain.

``schedule`` runs (or resumes) a job in the background unless it is already scheduled
here; the thread's lease keeps other processes out, so scheduling the same job in two
processes is harmless. ``spawn`` starts a loop that lives as long as the process (the
scanner, the stop listener, the loop-lag probe). ``close`` is the shutdown (SIGTERM, a
deploy): start nothing new; let each running job reach its next step boundary — a
change in flight finishes and is recorded — and hand it over (lease released, due now
for another process's scan), for at most ``drain_s``; then cut off what is left, which
another process resumes from its last step once its lease expires. Nothing
acknowledged is lost.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

from bot.turns.runner import Turns

log = logging.getLogger(__name__)

SHUTDOWN_TIMEOUT_S = 5.0


class Tasks:
    """``schedule(job_id)``, ``spawn(coro, name)``, ``await close()``."""

    def __init__(self, turns: Turns, *, drain_s: float) -> None:
        self.turns = turns
        self.drain_s = drain_s
        self.tasks: set[asyncio.Task[Any]] = set()
        self.job_tasks: set[asyncio.Task[Any]] = set()  # the jobs among ``tasks``
        self.scheduled: set[str] = set()

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> None:
        """Run ``coro`` in the background until it ends or the process closes."""
        task = asyncio.create_task(coro, name=name)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def schedule(self, job_id: str) -> None:
        """Run (or resume) the job in the background, unless it is already scheduled
        here; the thread's lease keeps other processes out."""
        if job_id in self.scheduled:
            return
        self.scheduled.add(job_id)
        task = asyncio.create_task(self._run(job_id), name=f"job {job_id}")
        self.tasks.add(task)
        self.job_tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        task.add_done_callback(self.job_tasks.discard)

    async def _run(self, job_id: str) -> None:
        try:
            await self.turns.run_job(job_id)
        except Exception:
            # A store outage or a lost lease: the job stays live in Redis and the
            # scanner resumes it from its last step.
            log.exception("job %s failed outside the loop", job_id)
        finally:
            self.scheduled.discard(job_id)

    async def close(self) -> None:
        """Drain the running jobs, then cancel everything (see the module docstring)."""
        self.turns.drain()
        for task in list(self.tasks - self.job_tasks):
            task.cancel()  # the scanner, the stop listener, the loop probe
        if self.job_tasks:
            log.info("draining %d job(s), at most %gs", len(self.job_tasks), self.drain_s)
            await asyncio.wait(self.job_tasks, timeout=self.drain_s)
        for task in list(self.tasks):
            task.cancel()
        if self.tasks:
            await asyncio.wait(self.tasks, timeout=SHUTDOWN_TIMEOUT_S)

"""This process's background work: the jobs it runs, how many at once, its long-lived
loops, and the drain.

``schedule`` runs a job in the background unless it is already scheduled here; the
thread's lease keeps other processes out, so scheduling the same job in two processes is
harmless. Admission control: a process runs at most ``limit`` jobs at once
(``OPSLOOP_MAX_RUNNING_JOBS``, default ``DEFAULT_MAX_RUNNING_JOBS``). Past it,
``schedule`` starts nothing — no task, no read, no lease — and returns at once, so the
ack path never waits behind job work: the job stays ``queued`` in Redis, due in the
scanner's index, for any process with room (its scan takes it), and this process
remembers it (``waits``) to take it itself as soon as one of its jobs ends. When a job
ends here and no job it left waiting is left, it looks at the index for a queued job
another process left (``Jobs.due``, at most every ``LOOK_SPACING_S``).

``resume`` is for a job already under way whose person is waiting on it: a decided
approval (a click, or its expiry), a Continue, a takeover of a dead process's job. A
resume may run past the limit by a small reserve (``reserve``, an eighth of the limit,
at least 1) so that an approved write does not wait behind a queue of new mentions;
past the reserve too, it waits here ahead of every new job (and in Redis, as it is, for
any other process's scan). Both kinds count in ``running``. What waits here is a hint:
Redis holds the truth, and a job another process took meanwhile costs one read when its
turn comes.

A slot is held from the start until the job's run is over (ended, paused for approval,
handed over, failed: ``Turns.on_run_end``), not while its ending waits for the
workspace's paced ``chat.update`` budget (at most a minute, ``bot.slack.notifier``): a
backlog of answers to show must not keep new jobs from starting. A follow-up job, started
for a reply that arrived just as a job ended, runs on in that job's task without a slot.

``spawn`` starts a loop that lives as long as the process (the scanner, the stop
listener, the loop-lag probe). ``close`` is the shutdown (SIGTERM, a deploy): start
nothing new; let each running job reach its next step boundary — a change in flight
finishes and is recorded — and hand it over (lease released, due now for another
process's scan), for at most ``drain_s``; then cut off what is left, which another
process resumes from its last step once its lease expires. Nothing acknowledged is lost.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

from bot.errors import StoreError
from bot.store.jobs import JobStatus
from bot.turns.parts import Turns

log = logging.getLogger(__name__)

SHUTDOWN_TIMEOUT_S = 5.0
# Jobs one process runs at once when OPSLOOP_MAX_RUNNING_JOBS is unset. Measured with
# ``benchmarks/slack_ack.py --rates 100 --max-running N`` (2 cores shared unpinned with
# Redis, the fakes and the load; each job's model answers at once, the CPU-bound worst
# case, where one process ends about 50 jobs/s): at 100 events/s, without a limit the
# process collapses (5.5 jobs/s, 19-39 of 1000 acks non-2xx, jobs unfinished after 2
# min: a thousand runs contend for the Redis, Slack and model connection pools); 8 to 64
# keep 32-80 jobs/s and every ack 2xx, the machine's noise blurring the differences.
# Real jobs mostly wait on the model and on tools, which a larger limit serves better:
# the largest of the good ones.
DEFAULT_MAX_RUNNING_JOBS = 32
RESERVE_SHARE = 8  # resumes may run past the limit by limit/8 (at least 1)
MAX_WAITING = 10_000  # job ids remembered as waiting here (beyond: Redis and the scan)
LOOK_PAGE = 32  # due jobs read when looking for a queued one to take
LOOK_SPACING_S = 0.25  # at most one such look per this long


class Tasks:
    """``schedule(job_id)``, ``resume(job_id)``, ``spawn(coro, name)``, ``await close()``."""

    def __init__(
        self,
        turns: Turns,
        *,
        drain_s: float,
        max_running: int | None = None,
        on_left_queued: Callable[[], None] | None = None,
    ) -> None:
        self.turns = turns
        self.drain_s = drain_s
        self.limit = max_running or DEFAULT_MAX_RUNNING_JOBS
        self.reserve = max(1, self.limit // RESERVE_SHARE)
        self.on_left_queued = on_left_queued  # a job newly left waiting for room here
        self.tasks: set[asyncio.Task[Any]] = set()
        self.job_tasks: set[asyncio.Task[Any]] = set()  # the jobs among ``tasks``
        self.scheduled: set[str] = set()  # the jobs with a task here
        self.slots: set[str] = set()  # those still in their run (the rest show their end)
        # Left waiting for room here, oldest first (dicts keep insertion order).
        self._resumes: dict[str, None] = {}
        self._starts: dict[str, None] = {}
        self._look: asyncio.Task[None] | None = None
        self._look_again = False
        self._looked_at = float("-inf")  # the event loop's time of the last look
        turns.runner.on_run_end = self._ran  # a slot frees when its run ends (``Turns``)

    # -- what the process reports (/metrics, /healthz) ------------------------------

    @property
    def running(self) -> int:
        """Jobs holding a slot here: in their run, or about to find they have nothing to do."""
        return len(self.slots)

    @property
    def waiting(self) -> int:
        """Jobs this process left queued for lack of room and will take when it has some."""
        return len(self._resumes) + len(self._starts)

    def waits(self, job_id: str) -> bool:
        """Whether this process left ``job_id`` waiting for room (the scanner's hint)."""
        return job_id in self._starts or job_id in self._resumes

    def counts(self) -> dict[str, int]:
        return {"running": self.running, "limit": self.limit, "waiting": self.waiting}

    # -- starting work ------------------------------------------------------------------

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> None:
        """Run ``coro`` in the background until it ends or the process closes."""
        task = asyncio.create_task(coro, name=name)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def schedule(self, job_id: str) -> None:
        """Run the job in the background if this process has room, else leave it queued
        (see the module docstring); returns at once either way."""
        if job_id in self.scheduled or self.turns.runner.draining:
            return
        if self.running < self.limit:
            self._start(job_id)
        else:
            self._wait(self._starts, job_id)

    def resume(self, job_id: str) -> None:
        """``schedule`` for a job already under way (a decision, a Continue, a takeover):
        it may use the reserve, and waits ahead of new jobs."""
        if job_id in self.scheduled or self.turns.runner.draining:
            return
        self._starts.pop(job_id, None)
        if self.running < self.limit + self.reserve:
            self._start(job_id)
        else:
            self._wait(self._resumes, job_id)

    def _wait(self, queue: dict[str, None], job_id: str) -> None:
        if job_id in queue:
            return
        if len(queue) >= MAX_WAITING:  # forget the oldest hint; it is queued in Redis
            del queue[next(iter(queue))]
        queue[job_id] = None
        if self.on_left_queued is not None:
            self.on_left_queued()

    def _start(self, job_id: str) -> None:
        self._starts.pop(job_id, None)
        self._resumes.pop(job_id, None)
        self.scheduled.add(job_id)
        self.slots.add(job_id)
        task = asyncio.create_task(self._run(job_id), name=f"job {job_id}")
        self.tasks.add(task)
        self.job_tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        task.add_done_callback(self.job_tasks.discard)

    async def _run(self, job_id: str) -> None:
        try:
            await self.turns.runner.run_job(job_id)
        except Exception:
            # A store outage or a lost lease: the job stays live in Redis and the
            # scanner resumes it from its last step.
            log.exception("job %s failed outside the loop", job_id)
        finally:
            self.scheduled.discard(job_id)
            self._ran(job_id)

    def _ran(self, job_id: str) -> None:
        """The job's run is over: its slot frees, though its ending may still be on its
        way to Slack (paced by the workspace's chat.update budget, bounded)."""
        if job_id in self.slots:
            self.slots.discard(job_id)
            self._fill()

    def _fill(self) -> None:
        """A slot freed: start what waits here (resumes first), else look for a queued
        job another process left."""
        if self.turns.runner.draining:
            return
        while self._resumes and self.running < self.limit + self.reserve:
            self._start(next(iter(self._resumes)))
        while self._starts and self.running < self.limit:
            self._start(next(iter(self._starts)))
        if self.running < self.limit and not self.waiting:
            self._look_for_queued()

    def _look_for_queued(self) -> None:
        if self._look is not None:
            self._look_again = True  # once the look in flight is done
            return
        self._look = asyncio.create_task(self._looks(), name="look for queued jobs")
        self.tasks.add(self._look)
        self._look.add_done_callback(self.tasks.discard)

    async def _looks(self) -> None:
        """Look, and again while jobs ended meanwhile; never two looks closer than
        ``LOOK_SPACING_S`` (a queued job whose lease someone holds would otherwise be
        read over and over)."""
        loop = asyncio.get_running_loop()
        try:
            while True:
                if (wait := self._looked_at + LOOK_SPACING_S - loop.time()) > 0:
                    await asyncio.sleep(wait)
                self._look_again = False
                self._looked_at = loop.time()
                try:
                    await self._take_queued()
                except StoreError:
                    log.warning("could not look for queued jobs: Redis unavailable")
                except Exception:
                    log.exception("looking for queued jobs failed")
                if not self._look_again:
                    return
        finally:
            self._look = None

    async def _take_queued(self) -> None:
        """Take the queued jobs due in the index that this process has room for (the
        oldest first; jobs it runs or left waiting are skipped without a read)."""
        for job_id in await self.turns.stores.jobs.due(time.time(), LOOK_PAGE):
            if self.running >= self.limit or self.turns.runner.draining:
                return
            if (
                job_id in self.scheduled
                or job_id in self.turns.runner.running
                or self.waits(job_id)
            ):
                continue
            record = await self.turns.stores.jobs.get(job_id)
            if record is not None and record.status is JobStatus.QUEUED:
                self.schedule(job_id)

    # -- the end ------------------------------------------------------------------------

    async def close(self) -> None:
        """Drain the running jobs, then cancel everything (see the module docstring)."""
        self.turns.runner.drain()
        for task in list(self.tasks - self.job_tasks):
            task.cancel()  # the scanner, the stop listener, the loop probe
        if self.job_tasks:
            log.info("draining %d job(s), at most %gs", len(self.job_tasks), self.drain_s)
            await asyncio.wait(self.job_tasks, timeout=self.drain_s)
        for task in list(self.tasks):
            task.cancel()
        if self.tasks:
            await asyncio.wait(self.tasks, timeout=SHUTDOWN_TIMEOUT_S)

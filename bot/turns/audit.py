"""The process's side of the audit log: chain what its stores staged, at once.

The stores stage an audit entry with every fact that carries authority (``bot.store.staging``)
and tell this publisher the outbox's hash tag; it chains that outbox into the workspace's log
in a task of its own, off the path of the click or the tool that made the fact (one publish
per tag at a time; a tag staged again meanwhile is published once more after it). Newly
chained entries go to ``on_chained`` (the Slack edge posts them to ``OPSLOOP_AUDIT_CHANNEL``).

What a process never chains (it died first, or Redis failed just then) the scanner's
``drain`` chains a few seconds later in whichever process scans; ``trim`` applies the
retention by age. ``started`` records the configuration the process runs with.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.metadata
import json
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Sequence

from bot.errors import StoreError
from bot.store.audit import ACTOR_BOT, AuditEntry, AuditLog, audit_line

log = logging.getLogger(__name__)

TRIM_EVERY_S = 3600.0
DRAIN_GRACE_S = 5.0  # an outbox its writer has not chained for this long is drained
CHANNEL_KINDS = frozenset(
    {
        "approval_decided",
        "write_finished",
        "write_unknown",
        "limit_raised",
        "daily_cap_raised",
        "job_stopped",
        "cli_run",
    }
)
"""What ``OPSLOOP_AUDIT_CHANNEL`` gets: every decision and write (a request is its card)."""

OnChained = Callable[[Sequence[str]], Awaitable[None]]
"""Gets the lines (``audit_line``) of newly chained entries of the ``CHANNEL_KINDS``."""


class AuditPublisher:
    """Chains staged audit entries soon after they are staged; one per process."""

    def __init__(
        self,
        log_: AuditLog,
        *,
        on_chained: OnChained | None = None,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.log = log_
        self.on_chained = on_chained
        self._now = now
        self._busy: dict[str, asyncio.Task[None]] = {}
        self._again: set[str] = set()
        self._trimmed_at = 0.0
        self._start: AuditEntry | None = None

    def staged(self, tag: str) -> None:
        """A store staged an entry under ``tag``: chain it soon (never blocks)."""
        if tag in self._busy:
            self._again.add(tag)
            return
        try:
            task = asyncio.get_running_loop().create_task(self._publish(tag))
        except RuntimeError:  # no loop (a synchronous caller): the scanner will drain it
            return
        self._busy[tag] = task

    async def _publish(self, tag: str) -> None:
        try:
            while True:
                self._again.discard(tag)
                try:
                    chained = await self.log.publish(tag)
                except StoreError:
                    log.warning("audit entries of %s left for the scanner", tag, exc_info=True)
                    return
                await self._tell(chained)
                if tag not in self._again:
                    return
        finally:
            self._busy.pop(tag, None)

    async def _tell(self, chained: Sequence[AuditEntry]) -> None:
        lines = [audit_line(e) for e in chained if e.kind in CHANNEL_KINDS]
        if lines and self.on_chained is not None:
            try:
                await self.on_chained(lines)
            except Exception:
                log.warning("could not post %d audit entries", len(chained), exc_info=True)

    async def drain(self) -> int:
        """The scanner's turn: chain outboxes their writers left, and trim by age now and
        then. Returns how many entries it chained."""
        chained = await self.log.drain(older_than_s=DRAIN_GRACE_S)
        await self._tell(chained)
        now = self._now()
        if now - self._trimmed_at >= TRIM_EVERY_S:
            self._trimmed_at = now
            removed = await self.log.trim()
            if removed:
                log.info("audit log: %d entries past retention removed", removed)
        return len(chained)

    def configured(
        self,
        *,
        tools_yml: str | None,
        catalogue: Sequence[dict[str, object]],
        approvers: Sequence[str],
    ) -> None:
        """The configuration this process starts with (``record_start`` records it)."""
        self._start = process_entry(
            tools_yml=tools_yml, catalogue=catalogue, approvers=approvers, at=self._now()
        )

    async def record_start(self, *, retry_s: float = 5.0, attempts: int = 120) -> None:
        """Chain the ``process_started`` entry, retrying while Redis is away (a process
        may start before Redis does; it serves nothing until Redis answers anyway)."""
        if self._start is None:
            return
        for _ in range(attempts):
            try:
                await self.log.append(self._start)
                return
            except StoreError:
                await asyncio.sleep(retry_s)
        log.warning("could not record this process's start in the audit log")

    async def aclose(self) -> None:
        """Let the publishes in flight finish (bounded by Redis's timeouts)."""
        tasks = list(self._busy.values())
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


def _version() -> str:
    try:
        return importlib.metadata.version("opsloop")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def digest(text: str | bytes) -> str:
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    return hashlib.sha256(raw).hexdigest()


def process_entry(
    *,
    tools_yml: str | None,
    catalogue: Sequence[dict[str, object]],
    approvers: Sequence[str],
    at: float,
) -> AuditEntry:
    """The ``process_started`` entry: hashes of tools.yml (its bytes as read) and of the
    tool catalogue the model is offered (names, categories and input schemas,
    canonical), the approvers, the version, and which process this is."""
    canonical = json.dumps(list(catalogue), sort_keys=True, separators=(",", ":"))
    host = socket.gethostname()
    pid = os.getpid()
    return AuditEntry(
        id=f"process_started:{host}:{pid}:{at!r}",
        kind="process_started",
        at=at,
        actor=ACTOR_BOT,
        detail={
            "version": _version(),
            "host": host,
            "pid": pid,
            "tools_yml_sha256": digest(tools_yml) if tools_yml is not None else None,
            "catalogue_sha256": digest(canonical),
            "tools": sorted(str(t.get("name")) for t in catalogue),
            "approvers": sorted(approvers),
        },
    )

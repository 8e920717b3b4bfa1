"""The assistant status under a job's thread (``is running check_host…``), best effort.

``ThreadStatus`` keeps ``assistant.threads.setStatus`` up to date: at most one call per
``every_s`` (the newest status wins), cleared at once at the end, and never called again in
the process once a call failed: the process-wide :class:`StatusSwitch` goes off at the first
failure. ``JobProgress`` (``bot.slack.progress``) says what the job is doing.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import KW_ONLY, dataclass, field

from slack_sdk.web.async_client import AsyncWebClient

from bot.agent.ports import Clock, LoopClock
from bot.slack.client import error_code

log = logging.getLogger(__name__)

STATUS_EVERY_S = 3.0
STATUS_CLEAR_TIMEOUT_S = 5.0


@dataclass(eq=False)
class StatusSwitch:
    """Whether ``assistant.threads.setStatus`` is worth calling: off for good after a failure."""

    on: bool = True
    reason: str | None = None

    def turn_off(self, reason: str) -> None:
        if self.on:
            log.info("assistant.threads.setStatus is off from now on: %s", reason)
        self.on = False
        self.reason = reason


ASSISTANT_STATUS = StatusSwitch()  # the process's


@dataclass(eq=False)
class ThreadStatus:
    """The assistant status under a thread (``is running check_host…``), best effort: at
    most one call per ``every_s`` (the newest status wins), cleared at once at the end, and
    never called again in the process once a call failed."""

    client: AsyncWebClient
    channel: str
    thread_ts: str
    _: KW_ONLY
    switch: StatusSwitch = ASSISTANT_STATUS
    clock: Clock = field(default_factory=LoopClock)
    every_s: float = STATUS_EVERY_S
    _wanted: str | None = field(default=None, init=False)
    _last_call: float | None = field(default=None, init=False)
    _closing: bool = field(default=False, init=False)
    _wake: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    _task: asyncio.Task[None] | None = field(default=None, init=False)

    def show(self, status: str) -> None:
        """Set the status soon (synchronous, never raises)."""
        if not self.switch.on or self._closing:
            return
        self._wanted = status
        self._poke()

    async def clear(self, *, timeout: float = STATUS_CLEAR_TIMEOUT_S) -> None:  # noqa: ASYNC109
        """Clear the status (if one was asked for) and wait for it, at most ``timeout``."""
        self._closing = True
        task = self._task
        if task is None:
            return
        self._wanted = ""
        self._poke()
        done, _ = await asyncio.wait({task}, timeout=timeout)
        if not done:
            task.cancel()

    def _poke(self) -> None:
        self._wake.set()
        if self._task is None:
            try:
                self._task = asyncio.create_task(self._work(), name=f"status {self.channel}")
            except RuntimeError:
                log.warning("no event loop for the thread status in %s", self.channel)

    async def _work(self) -> None:
        try:
            while self.switch.on:
                self._wake.clear()
                wanted = self._wanted
                if wanted is None:
                    if self._closing:
                        return
                    await self._wake.wait()
                    continue
                now = self.clock.monotonic()
                if not self._closing and self._last_call is not None:
                    wait = self._last_call + self.every_s - now
                    if wait > 0:
                        timer = self.clock.call_later(wait, self._wake.set)
                        try:
                            await self._wake.wait()
                        finally:
                            timer.cancel()
                        continue
                self._wanted, self._last_call = None, now
                try:
                    await self.client.assistant_threads_setStatus(
                        channel_id=self.channel, thread_ts=self.thread_ts, status=wanted
                    )
                except Exception as exc:
                    self.switch.turn_off(f"{error_code(exc)} in {self.channel}")
                    return
        except Exception:
            log.exception("the thread status in %s failed", self.channel)

"""One budget for all ``chat.update`` calls of a workspace (Slack's Tier 3, ~50/min).

Progress updates of every running job go through one ``UpdateBudget``: a token bucket
paces the calls, updates to the same message coalesce (only the newest content is
sent), urgent updates (final answers, cards, endings) go before progress, and a 429
pauses everything for its ``Retry-After`` and then retries the same message. Nothing
is sent twice and the newest content of every message is eventually delivered.

``budget_sender`` is the budget's send function (``chat.update``, a 429 as ``RateLimited``);
a ``Tracked`` payload learns whether Slack took it, which ``edit_urgently`` waits for (an
edit that must be shown before the job lets go: an ending, an answer replacing its stream).

At a shutdown the budget may be minutes behind (a burst's endings, ~50 a minute): its
``hand_over`` makes nobody wait for it any more. Every waiter, and every later one, is
told at once (``edit_urgently`` raises ``HandedOver``): a job's ending stays owed to its
thread, for the scanner of another process to deliver, instead of holding up the drain.
What is queued is still sent while the process lives; a redelivery after it is the same
edit again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.blockkit import Message

log = logging.getLogger(__name__)

TIER3_PER_MINUTE = 50
DEFAULT_BURST = 3
MAX_RETRY_AFTER_S = 120.0


class HandedOver(Exception):
    """The budget no longer waits (``UpdateBudget.hand_over``: the process is shutting
    down): the edit may still reach Slack, or not; whoever shows the job's ending next
    makes sure it does."""


class RateLimited(Exception):
    """Raised by the send function on HTTP 429; carries Slack's ``Retry-After``."""

    def __init__(self, retry_after: float) -> None:
        super().__init__(f"rate limited for {retry_after:g}s")
        self.retry_after = retry_after


@dataclass(slots=True)
class _Pending:
    payload: Any
    urgent: bool
    done: asyncio.Event


Key = tuple[str, str]  # (channel, message ts)
Send = Callable[[str, str, Any], Awaitable[None]]


class UpdateBudget:
    def __init__(
        self,
        send: Send,
        *,
        per_minute: float = TIER3_PER_MINUTE,
        burst: int = DEFAULT_BURST,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._send = send
        self._rate = per_minute / 60.0
        self._burst = float(burst)
        self._tokens = float(burst)
        self._clock = clock
        self._sleep = sleep
        self._stamp = clock()
        self._pending: OrderedDict[Key, _Pending] = OrderedDict()
        self._inflight: dict[Key, _Pending] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.sent = 0
        self.rate_limited = 0
        self.handed_over = False  # nobody waits for the budget any more (``hand_over``)

    def submit(self, channel: str, ts: str, payload: Any, *, urgent: bool = False) -> asyncio.Event:
        """Queue the newest content of a message (replacing content not yet sent);
        returns an event set once this content, or content that replaced it, was sent
        (at once once the budget is ``handed_over``: it is still sent, unwaited)."""
        key = (channel, ts)
        old = self._pending.pop(key, None)
        done = old.done if old is not None else asyncio.Event()
        self._pending[key] = _Pending(payload, urgent or (old is not None and old.urgent), done)
        if self.handed_over:
            done.set()
        self._wake.set()
        self._ensure_running()
        return done

    def hand_over(self) -> None:
        """Stop anyone waiting for the budget (a shutdown): every waiter is released now
        and every later one at once (``edit_urgently`` raises ``HandedOver``); what is
        queued is still sent, paced, until ``aclose``."""
        self.handed_over = True
        for table in (self._pending, self._inflight):
            for pending in table.values():
                pending.done.set()

    async def drain(self, channel: str, ts: str) -> None:
        """Wait until the message's pending content, if any, has been sent."""
        for table in (self._pending, self._inflight):
            pending = table.get((channel, ts))
            if pending is not None:
                await pending.done.wait()

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    def _ensure_running(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="slack update budget")

    def _next(self) -> Key | None:
        for key, pending in self._pending.items():
            if pending.urgent:
                return key
        return next(iter(self._pending), None)

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self._burst, self._tokens + (now - self._stamp) * self._rate)
        self._stamp = now

    async def _run(self) -> None:
        while True:
            key = self._next()
            if key is None:
                self._wake.clear()
                await self._wake.wait()
                continue
            self._refill()
            if self._tokens < 1.0:
                await self._sleep((1.0 - self._tokens) / self._rate)
                continue
            pending = self._pending.pop(key)
            self._tokens -= 1.0
            self._inflight[key] = pending
            try:
                await self._send(key[0], key[1], pending.payload)
            except RateLimited as exc:
                self.rate_limited += 1
                if key in self._pending:  # superseded while in flight: the newer one goes
                    pending.done.set()
                else:  # retry this content first
                    self._pending[key] = pending
                    self._pending.move_to_end(key, last=False)
                self._tokens = 0.0
                del self._inflight[key]
                await self._sleep(min(max(exc.retry_after, 0.0), MAX_RETRY_AFTER_S))
                continue
            except Exception:
                log.warning("chat.update of %s failed; dropped", key, exc_info=True)
            else:
                self.sent += 1
            del self._inflight[key]
            pending.done.set()


@dataclass(frozen=True, slots=True)
class Tracked:
    """A budget payload whose sender reports the outcome: True once sent, False if Slack
    refused it (a 429 is retried by the budget and reports nothing yet)."""

    message: Message
    outcome: asyncio.Future[bool]


def budget_sender(client: AsyncWebClient) -> Any:
    """The ``UpdateBudget`` send function: ``chat.update``, a 429 as ``RateLimited``."""

    async def send(channel: str, ts: str, payload: Message | Tracked) -> None:
        message = payload.message if isinstance(payload, Tracked) else payload
        try:
            await client.chat_update(
                channel=channel, ts=ts, text=message.text, blocks=message.blocks
            )
        except SlackApiError as exc:
            if exc.response.status_code == 429:
                raise RateLimited(float(exc.response.headers.get("Retry-After", 1))) from exc
            _report(payload, False)
            raise
        except Exception:
            _report(payload, False)
            raise
        _report(payload, True)

    return send


def _report(payload: Message | Tracked, sent: bool) -> None:
    if isinstance(payload, Tracked) and not payload.outcome.done():
        payload.outcome.set_result(sent)


async def edit_urgently(
    budget: UpdateBudget, channel: str, ts: str, message: Message
) -> bool | None:
    """Edit the message ``ts`` before any paced update and wait until the budget is done
    with it: whether Slack took the edit, or None when newer content for the message
    took its place first. ``HandedOver`` when the budget stopped waiting first (a
    shutdown): the edit may or may not reach Slack."""
    outcome: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
    done = budget.submit(channel, ts, Tracked(message, outcome), urgent=True)
    await done.wait()
    if outcome.done():
        return outcome.result()
    if budget.handed_over:
        raise HandedOver(f"the edit of {ts} in {channel} was left queued at a shutdown")
    return None

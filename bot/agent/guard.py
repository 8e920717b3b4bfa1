"""Runs one awaitable under the job's deadline, a timeout and the cancel token.

One task per guarded call; the deadline and timeout are timers on the injected clock
(so tests drive them with a fake clock) and the cancel token cancels the task at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Literal, TypeVar

from bot.agent.cancel import CancelToken
from bot.agent.ports import Clock, TimerHandle

T = TypeVar("T")
AbortKind = Literal["deadline", "timeout", "cancel"]


class Aborted(Exception):
    """The guarded call was stopped by the deadline, its timeout or the cancel token."""

    def __init__(self, kind: AbortKind) -> None:
        super().__init__(kind)
        self.kind: AbortKind = kind


async def guarded(
    aw: Awaitable[T],
    *,
    clock: Clock,
    deadline_in: float | None,
    time_limit: float | None = None,
    cancel: CancelToken | None = None,
) -> T:
    """Await ``aw``; raise ``Aborted`` if the deadline, timeout or cancel comes first.

    ``time_limit`` is the call's own timeout. ``deadline_in=None`` exempts the call from
    the job deadline (a write is let finish, bounded by its own timeout);
    ``cancel=None`` exempts it from Stop.
    """
    task = asyncio.ensure_future(aw)
    fired: list[AbortKind] = []

    def fire(kind: AbortKind) -> None:
        if not task.done() and not fired:
            fired.append(kind)
            task.cancel()

    handle: TimerHandle | None = None
    if time_limit is not None and (deadline_in is None or time_limit < deadline_in):
        handle = clock.call_later(time_limit, lambda: fire("timeout"))
    elif deadline_in is not None:
        handle = clock.call_later(deadline_in, lambda: fire("deadline"))
    unsubscribe = None
    if cancel is not None:
        if cancel.cancelled:
            fire("cancel")
        else:
            unsubscribe = cancel.subscribe(lambda: fire("cancel"))
    try:
        return await task
    except asyncio.CancelledError:
        current = asyncio.current_task()
        outer = current is not None and current.cancelling() > 0
        if fired and not outer:
            raise Aborted(fired[0]) from None
        if not outer:
            # The awaited code raised CancelledError of its own accord: a failure, not
            # a cancellation of this run.
            raise RuntimeError("the call raised CancelledError") from None
        raise
    finally:
        if handle is not None:
            handle.cancel()
        if unsubscribe is not None:
            unsubscribe()

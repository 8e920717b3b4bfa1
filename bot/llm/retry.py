"""Retrying transient model errors: exponential backoff with full jitter.

At most ``tries`` attempts; a provider's ``Retry-After`` is honoured up to a cap (a
longer ask means "try another model" and the error is raised at once); no wait is
started that would end past the caller's deadline.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from bot.errors import ModelUnavailableError

T = TypeVar("T")

DEFAULT_TRIES = 3
DEFAULT_BASE_S = 0.5
DEFAULT_MAX_BACKOFF_S = 8.0
DEFAULT_MAX_RETRY_AFTER_S = 30.0


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    tries: int = DEFAULT_TRIES
    base_s: float = DEFAULT_BASE_S
    max_backoff_s: float = DEFAULT_MAX_BACKOFF_S
    max_retry_after_s: float = DEFAULT_MAX_RETRY_AFTER_S

    def backoff(self, attempt: int, rand: Callable[[], float] = random.random) -> float:
        """Full jitter: uniform in [0, min(cap, base * 2^(attempt-1)))."""
        return rand() * min(self.max_backoff_s, self.base_s * 2.0 ** (attempt - 1))


async def with_retries(
    attempt: Callable[[int], Awaitable[T]],
    *,
    policy: RetryPolicy,
    time_left: float | None = None,
    on_retry: Callable[[int, ModelUnavailableError, float], None] | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    monotonic: Callable[[], float] = time.monotonic,
    rand: Callable[[], float] = random.random,
) -> T:
    """Call ``attempt(n)`` (n = 1, 2, …) until it succeeds or a retry cannot help."""
    started = monotonic()
    n = 1
    while True:
        try:
            return await attempt(n)
        except ModelUnavailableError as exc:
            if n >= policy.tries:
                raise
            if exc.retry_after is not None:
                if exc.retry_after > policy.max_retry_after_s:
                    raise
                delay = exc.retry_after
            else:
                delay = policy.backoff(n, rand)
            if time_left is not None and monotonic() - started + delay >= time_left:
                raise  # waiting would pass the job's deadline
            if on_retry is not None:
                on_retry(n, exc, delay)
            await sleep(delay)
            n += 1

"""``with_retries``: exponential backoff with full jitter, ``Retry-After``, the deadline.

Driven with a fake clock: ``sleep`` advances it, ``monotonic`` reads it, ``rand`` is
scripted. At most ``tries`` attempts; the n-th backoff is uniform in
``[0, min(max_backoff_s, base_s * 2**(n-1)))``; a ``Retry-After`` replaces the backoff
unless it is above ``max_retry_after_s`` (then the error is raised at once); no wait
starts that would end at or past ``time_left``; ``on_retry`` hears of every retry. Only
``ModelUnavailableError`` is retried.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.errors import (
    ContextOverflowError,
    ModelAuthError,
    ModelError,
    ModelRequestError,
    ModelUnavailableError,
)
from bot.llm.retry import RetryPolicy, with_retries

PROPERTY = settings(derandomize=True, deadline=None, database=None)


class FakeTime:
    """``sleep`` moves the clock; every wait is recorded."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class Attempts:
    """An attempt function that fails with the given errors, then returns ``"ok"``."""

    def __init__(
        self, *errors: ModelError, time: FakeTime | None = None, cost_s: float = 0.0
    ) -> None:
        self.errors = list(errors)
        self.seen: list[int] = []
        self.time = time
        self.cost_s = cost_s  # how long each attempt takes on the fake clock

    async def __call__(self, n: int) -> str:
        self.seen.append(n)
        if self.time is not None:
            self.time.now += self.cost_s
        if self.errors:
            raise self.errors.pop(0)
        return "ok"


def unavailable(retry_after: float | None = None) -> ModelUnavailableError:
    return ModelUnavailableError("m: HTTP 503", status=503, model="m", retry_after=retry_after)


def constant(value: float) -> Callable[[], float]:
    return lambda: value


# -- backoff -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("attempt", "bound"),
    [(1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (5, 8.0), (6, 8.0), (30, 8.0)],
)
def test_backoff_bound_doubles_up_to_the_cap(attempt: int, bound: float) -> None:
    policy = RetryPolicy(base_s=0.5, max_backoff_s=8.0)

    assert policy.backoff(attempt, constant(0.0)) == 0.0
    assert policy.backoff(attempt, constant(0.5)) == pytest.approx(bound / 2)
    assert policy.backoff(attempt, constant(0.999999)) < bound
    assert policy.backoff(attempt, constant(0.999999)) == pytest.approx(bound, rel=1e-5)


def test_backoff_is_spread_over_the_whole_range() -> None:
    policy = RetryPolicy(base_s=1.0, max_backoff_s=8.0)
    rng = random.Random(7)

    delays = [policy.backoff(3, rng.random) for _ in range(2000)]

    assert all(0.0 <= d < 4.0 for d in delays)
    assert min(delays) < 0.1  # full jitter reaches down to zero ...
    assert max(delays) > 3.9  # ... and up to the bound
    assert sum(d < 2.0 for d in delays) == pytest.approx(1000, abs=120)


async def test_jittered_backoff_is_what_is_slept() -> None:
    time = FakeTime()
    attempt = Attempts(unavailable(), unavailable())

    result = await with_retries(
        attempt,
        policy=RetryPolicy(base_s=0.5, max_backoff_s=8.0),
        sleep=time.sleep,
        monotonic=time.monotonic,
        rand=constant(0.25),
    )

    assert result == "ok"
    assert attempt.seen == [1, 2, 3]
    assert time.sleeps == [0.125, 0.25]  # 0.25 of 0.5, then 0.25 of 1.0


# -- how many attempts ---------------------------------------------------------------


@pytest.mark.parametrize("tries", [1, 2, 3, 5])
async def test_at_most_tries_attempts(tries: int) -> None:
    time = FakeTime()
    errors = [unavailable() for _ in range(10)]
    attempt = Attempts(*errors)

    with pytest.raises(ModelUnavailableError) as caught:
        await with_retries(
            attempt,
            policy=RetryPolicy(tries=tries, base_s=1.0),
            sleep=time.sleep,
            monotonic=time.monotonic,
            rand=constant(0.5),
        )

    assert attempt.seen == list(range(1, tries + 1))
    assert len(time.sleeps) == tries - 1
    assert caught.value is errors[tries - 1]  # the last error, unchanged


async def test_default_policy_makes_three_attempts() -> None:
    time = FakeTime()
    attempt = Attempts(*(unavailable() for _ in range(5)))

    with pytest.raises(ModelUnavailableError):
        await with_retries(
            attempt, policy=RetryPolicy(), sleep=time.sleep, monotonic=time.monotonic
        )

    assert attempt.seen == [1, 2, 3]


@pytest.mark.parametrize(
    "error",
    [
        ModelRequestError("m: HTTP 400", status=400),
        ModelAuthError("m: HTTP 401", status=401),
        ContextOverflowError("m: HTTP 400 context_length_exceeded", status=400),
    ],
    ids=["request", "auth", "overflow"],
)
async def test_other_errors_are_not_retried(error: ModelError) -> None:
    time = FakeTime()
    attempt = Attempts(error)

    with pytest.raises(type(error)) as caught:
        await with_retries(
            attempt, policy=RetryPolicy(), sleep=time.sleep, monotonic=time.monotonic
        )

    assert caught.value is error
    assert attempt.seen == [1]
    assert time.sleeps == []


async def test_a_non_model_exception_propagates_at_once() -> None:
    time = FakeTime()

    async def attempt(_: int) -> str:
        raise RuntimeError("a bug, not a model failure")

    with pytest.raises(RuntimeError):
        await with_retries(
            attempt, policy=RetryPolicy(), sleep=time.sleep, monotonic=time.monotonic
        )
    assert time.sleeps == []


# -- Retry-After ---------------------------------------------------------------------


@pytest.mark.parametrize("retry_after", [0.0, 7.0, 30.0])
async def test_retry_after_replaces_the_backoff(retry_after: float) -> None:
    time = FakeTime()
    attempt = Attempts(unavailable(retry_after=retry_after))

    result = await with_retries(
        attempt,
        policy=RetryPolicy(base_s=0.5, max_retry_after_s=30.0),
        sleep=time.sleep,
        monotonic=time.monotonic,
        rand=constant(0.5),
    )

    assert result == "ok"
    assert time.sleeps == [retry_after]


async def test_retry_after_above_the_cap_is_raised_at_once() -> None:
    time = FakeTime()
    error = unavailable(retry_after=31.0)
    attempt = Attempts(error)

    with pytest.raises(ModelUnavailableError) as caught:
        await with_retries(
            attempt,
            policy=RetryPolicy(max_retry_after_s=30.0),
            sleep=time.sleep,
            monotonic=time.monotonic,
        )

    assert caught.value is error
    assert attempt.seen == [1]
    assert time.sleeps == []


# -- the deadline --------------------------------------------------------------------


async def test_no_wait_past_the_deadline() -> None:
    time = FakeTime()
    attempt = Attempts(unavailable(), unavailable(), time=time, cost_s=0.2)

    # First wait: 0.9 * 1 s, ends at 1.1 s of 2 s. Second: 0.9 * 2 s would end at 3.1 s.
    with pytest.raises(ModelUnavailableError):
        await with_retries(
            attempt,
            policy=RetryPolicy(base_s=1.0),
            time_left=2.0,
            sleep=time.sleep,
            monotonic=time.monotonic,
            rand=constant(0.9),
        )

    assert time.sleeps == [0.9]
    assert attempt.seen == [1, 2]


async def test_retry_after_past_the_deadline_gives_up_at_once() -> None:
    time = FakeTime()
    attempt = Attempts(unavailable(retry_after=30.0))

    with pytest.raises(ModelUnavailableError):
        await with_retries(
            attempt,
            policy=RetryPolicy(max_retry_after_s=3600.0),
            time_left=10.0,
            sleep=time.sleep,
            monotonic=time.monotonic,
        )

    assert time.sleeps == []
    assert attempt.seen == [1]


async def test_retry_after_within_the_deadline_is_waited() -> None:
    time = FakeTime()
    attempt = Attempts(unavailable(retry_after=3.0))

    result = await with_retries(
        attempt,
        policy=RetryPolicy(),
        time_left=10.0,
        sleep=time.sleep,
        monotonic=time.monotonic,
    )

    assert result == "ok"
    assert time.sleeps == [3.0]


@PROPERTY
@given(
    time_left=st.floats(min_value=0.0, max_value=20.0),
    cost_s=st.floats(min_value=0.0, max_value=3.0),
    rands=st.lists(st.floats(min_value=0.0, max_value=0.999), min_size=5, max_size=5),
    retry_afters=st.lists(
        st.one_of(st.none(), st.floats(min_value=0.0, max_value=40.0)), min_size=5, max_size=5
    ),
)
def test_no_wait_ever_ends_past_the_deadline(
    time_left: float, cost_s: float, rands: list[float], retry_afters: list[float | None]
) -> None:
    time = FakeTime()
    time.now = start = 0.0  # so the test's sums and the code's are the same floats
    waits_end: list[float] = []

    async def sleep(seconds: float) -> None:
        await time.sleep(seconds)
        waits_end.append(time.now - start)

    attempt = Attempts(*(unavailable(r) for r in retry_afters), time=time, cost_s=cost_s)
    draws = iter(rands)

    async def go() -> None:
        try:
            await with_retries(
                attempt,
                policy=RetryPolicy(tries=5, base_s=1.0, max_backoff_s=8.0),
                time_left=time_left,
                sleep=sleep,
                monotonic=time.monotonic,
                rand=lambda: next(draws),
            )
        except ModelUnavailableError:
            pass

    asyncio.run(go())

    assert all(end < time_left for end in waits_end)
    assert len(attempt.seen) <= 5


# -- on_retry ------------------------------------------------------------------------


async def test_on_retry_hears_each_retry() -> None:
    time = FakeTime()
    first, second = unavailable(), unavailable(retry_after=4.0)
    attempt = Attempts(first, second)
    heard: list[tuple[int, ModelUnavailableError, float]] = []

    result = await with_retries(
        attempt,
        policy=RetryPolicy(base_s=2.0),
        on_retry=lambda n, exc, delay: heard.append((n, exc, delay)),
        sleep=time.sleep,
        monotonic=time.monotonic,
        rand=constant(0.5),
    )

    assert result == "ok"
    assert heard == [(1, first, 1.0), (2, second, 4.0)]


async def test_on_retry_is_silent_when_giving_up() -> None:
    time = FakeTime()
    attempt = Attempts(*(unavailable() for _ in range(3)))
    heard: list[int] = []

    with pytest.raises(ModelUnavailableError):
        await with_retries(
            attempt,
            policy=RetryPolicy(base_s=0.0),
            on_retry=lambda n, exc, delay: heard.append(n),
            sleep=time.sleep,
            monotonic=time.monotonic,
        )

    assert heard == [1, 2]  # before the 2nd and 3rd attempts, not after the last

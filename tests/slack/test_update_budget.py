"""chat.update calls share one paced budget: coalesced, urgent first, 429-safe."""

from __future__ import annotations

import asyncio

from bot.slack.updates import RateLimited, UpdateBudget


class FakeTime:
    """A clock that moves only when the budget sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)


class Recorder:
    def __init__(self, time: FakeTime, fail: dict[str, list[float]] | None = None) -> None:
        self.time = time
        self.sent: list[tuple[float, str, object]] = []
        self.fail = fail or {}

    async def __call__(self, channel: str, ts: str, payload: object) -> None:
        await asyncio.sleep(0)
        retry = self.fail.get(ts)
        if retry:
            raise RateLimited(retry.pop(0))
        self.sent.append((self.time.now, ts, payload))


async def settle(budget: UpdateBudget, *keys: tuple[str, str]) -> None:
    for channel, ts in keys:
        await asyncio.wait_for(budget.drain(channel, ts), timeout=5)


async def test_updates_to_one_message_coalesce() -> None:
    time = FakeTime()
    send = Recorder(time)
    budget = UpdateBudget(send, per_minute=60, burst=1, clock=time.clock, sleep=time.sleep)
    budget.submit("C1", "1.0", "v1")
    await settle(budget, ("C1", "1.0"))
    for n in range(2, 10):
        budget.submit("C1", "1.0", f"v{n}")
    await settle(budget, ("C1", "1.0"))
    await budget.aclose()
    assert [p for _, _, p in send.sent] == ["v1", "v9"]


async def test_the_pace_is_the_budget() -> None:
    time = FakeTime()
    send = Recorder(time)
    budget = UpdateBudget(send, per_minute=30, burst=2, clock=time.clock, sleep=time.sleep)
    for n in range(6):
        budget.submit("C1", f"{n}.0", n)
    await settle(budget, *(("C1", f"{n}.0") for n in range(6)))
    await budget.aclose()
    stamps = [t for t, _, _ in send.sent]
    assert len(stamps) == 6
    assert stamps[:2] == [0.0, 0.0]  # the burst
    assert all(b - a >= 2.0 - 1e-9 for a, b in zip(stamps[1:], stamps[2:], strict=False))


async def test_urgent_updates_go_first() -> None:
    time = FakeTime()
    send = Recorder(time)
    budget = UpdateBudget(send, per_minute=60, burst=1, clock=time.clock, sleep=time.sleep)
    budget.submit("C1", "p1", "progress 1")
    budget.submit("C1", "p2", "progress 2")
    budget.submit("C1", "answer", "final", urgent=True)
    await settle(budget, ("C1", "p1"), ("C1", "p2"), ("C1", "answer"))
    await budget.aclose()
    assert [ts for _, ts, _ in send.sent] == ["answer", "p1", "p2"]


async def test_a_429_pauses_and_the_final_content_still_arrives() -> None:
    time = FakeTime()
    send = Recorder(time, fail={"answer": [7.0, 3.0]})
    budget = UpdateBudget(send, per_minute=600, burst=5, clock=time.clock, sleep=time.sleep)
    budget.submit("C1", "answer", "final text", urgent=True)
    await settle(budget, ("C1", "answer"))
    await budget.aclose()
    assert [p for _, _, p in send.sent] == ["final text"]
    assert budget.rate_limited == 2 and 7.0 in time.slept and 3.0 in time.slept
    assert send.sent[0][0] >= 10.0


async def test_newer_content_submitted_during_a_429_wins() -> None:
    time = FakeTime()
    send = Recorder(time, fail={"s": [5.0]})
    budget = UpdateBudget(send, per_minute=600, burst=5, clock=time.clock, sleep=time.sleep)
    budget.submit("C1", "s", "old")
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    budget.submit("C1", "s", "new")
    await settle(budget, ("C1", "s"))
    await budget.aclose()
    assert [p for _, _, p in send.sent] == ["new"]

"""A running job reading its thread's inject stream: new replies once, acked only after
the loop made them durable, the visible ack after the XACK, redelivery to a restarted
consumer, takeover of a dead consumer's entries, no reply applied twice, ``seen_seq``,
the one-round-trip common case, and a run of the agent core over it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Container, Sequence

import pytest
import redis.asyncio as aioredis
from pydantic import BaseModel

from bot.agent import (
    AgentConfig,
    CallContext,
    FunctionTool,
    Injected,
    InMemoryHistory,
    ModelRequest,
    ModelResponse,
    StopReason,
    UserMessage,
    run,
)
from bot.agent.testing import ScriptedModel, call, calls, text
from bot.errors import StoreError
from bot.store.inject import DEFAULT_CLAIM_IDLE_MS, GROUP, InjectReader
from bot.store.keys import Keys, Thread
from bot.store.receipt import Receipts

TS1, TS2, TS3 = "1700000001.000100", "1700000002.000100", "1700000003.000100"


class VisibleAcks:
    """An ``on_visible_ack`` that records each call and the pending count at that moment."""

    def __init__(self, redis: aioredis.Redis, stream: str) -> None:
        self.redis = redis
        self.stream = stream
        self.calls: list[list[Injected]] = []
        self.pending_at_call: list[int] = []

    async def __call__(self, items: Sequence[Injected]) -> None:
        self.pending_at_call.append(await pending(self.redis, self.stream))
        self.calls.append(list(items))


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def pending(redis: aioredis.Redis, stream: str) -> int:
    summary = await redis.xpending(stream, GROUP)
    return int(summary["pending"])


def reader(
    redis: aioredis.Redis,
    keys: Keys,
    thread: Thread,
    name: str = "p1",
    *,
    seen: Container[str] = frozenset(),
    on_visible_ack: Callable[[Sequence[Injected]], Awaitable[None]] | None = None,
    claim_idle_ms: int = DEFAULT_CLAIM_IDLE_MS,
    batch: int = 50,
    clock: Callable[[], float] | None = None,
) -> InjectReader:
    return InjectReader(
        redis,
        keys,
        thread,
        consumer=name,
        seen_ids=lambda: seen,
        on_visible_ack=on_visible_ack,
        claim_idle_ms=claim_idle_ms,
        batch=batch,
        clock=clock or Clock(),
    )


@pytest.fixture
def receipts(redis: aioredis.Redis, keys: Keys) -> Receipts:
    return Receipts(redis, keys)


async def test_nothing_received_reads_as_empty(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    inject = reader(redis, keys, thread)
    assert await inject.fetch() == []
    assert inject.seen_seq == 0


async def test_new_replies_are_fetched_once(
    redis: aioredis.Redis, keys: Keys, thread: Thread, receipts: Receipts
) -> None:
    await receipts.append(thread, ts=TS1, text="it is nginx", author="U1")
    inject = reader(redis, keys, thread)

    first = await inject.fetch()
    await inject.ack(first)
    second = await inject.fetch()

    assert first == [Injected(id=TS1, text="it is nginx", author="U1", sent_at=float(TS1))]
    assert second == []


async def test_ack_xacks_before_the_visible_ack(
    redis: aioredis.Redis, keys: Keys, thread: Thread, receipts: Receipts
) -> None:
    await receipts.append(thread, ts=TS1, text="a", author=None)
    await receipts.append(thread, ts=TS2, text="b", author="U2")
    acks = VisibleAcks(redis, keys.inject(thread))
    inject = reader(redis, keys, thread, on_visible_ack=acks)

    items = await inject.fetch()
    assert await pending(redis, keys.inject(thread)) == 2
    assert acks.calls == []
    await inject.ack(items)

    assert await pending(redis, keys.inject(thread)) == 0
    assert acks.calls == [list(items)]
    assert acks.pending_at_call == [0]


async def test_a_failed_xack_shows_no_visible_ack(
    redis: aioredis.Redis, keys: Keys, thread: Thread, receipts: Receipts
) -> None:
    await receipts.append(thread, ts=TS1, text="a", author=None)
    acks = VisibleAcks(redis, keys.inject(thread))
    inject = reader(redis, keys, thread, on_visible_ack=acks)
    items = await inject.fetch()
    # Make the XACK fail: the stream key now holds a string.
    await redis.delete(keys.inject(thread))
    await redis.set(keys.inject(thread), "not a stream")

    with pytest.raises(StoreError):
        await inject.ack(items)

    assert acks.calls == []


async def test_a_failing_visible_ack_does_not_fail_the_ack(
    redis: aioredis.Redis,
    keys: Keys,
    thread: Thread,
    receipts: Receipts,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def broken(items: Sequence[Injected]) -> None:
        raise RuntimeError("reactions.add: ratelimited")

    await receipts.append(thread, ts=TS1, text="a", author=None)
    inject = reader(redis, keys, thread, on_visible_ack=broken)

    await inject.ack(await inject.fetch())

    assert await pending(redis, keys.inject(thread)) == 0
    assert "visible ack failed" in caplog.text


async def test_a_restarted_consumer_gets_its_unacked_replies_again(
    redis: aioredis.Redis, keys: Keys, thread: Thread, receipts: Receipts
) -> None:
    await receipts.append(thread, ts=TS1, text="a", author=None)
    await receipts.append(thread, ts=TS2, text="b", author=None)
    before = await reader(redis, keys, thread, "p1").fetch()
    # The process dies before acking; it comes back under the same consumer name. A
    # long claim idle time shows the entries come back as its own pending ones.
    after = reader(redis, keys, thread, "p1", claim_idle_ms=3_600_000)

    again = await after.fetch()
    await after.ack(again)

    assert [i.id for i in again] == [i.id for i in before] == [TS1, TS2]
    assert await pending(redis, keys.inject(thread)) == 0
    assert await after.fetch() == []


async def test_a_dead_consumers_replies_are_taken_over_and_applied_once(
    redis: aioredis.Redis, keys: Keys, thread: Thread, receipts: Receipts
) -> None:
    await receipts.append(thread, ts=TS1, text="a", author=None)
    await receipts.append(thread, ts=TS2, text="b", author=None)
    dead = await reader(redis, keys, thread, "p1").fetch()
    assert len(dead) == 2
    history: list[str] = []
    heir = reader(redis, keys, thread, "p2", claim_idle_ms=0)

    for _ in range(3):  # several iterations of the resumed job
        items = await heir.fetch()
        history.extend(i.id for i in items)
        await heir.ack(items)

    assert history == [TS1, TS2]
    assert await pending(redis, keys.inject(thread)) == 0
    assert await reader(redis, keys, thread, "p3", claim_idle_ms=0).fetch() == []


async def test_replies_are_not_taken_from_a_consumer_before_the_idle_time(
    redis: aioredis.Redis, keys: Keys, thread: Thread, receipts: Receipts
) -> None:
    await receipts.append(thread, ts=TS1, text="a", author=None)
    assert len(await reader(redis, keys, thread, "p1").fetch()) == 1

    patient = reader(redis, keys, thread, "p2", claim_idle_ms=3_600_000)
    assert await patient.fetch() == []
    assert await pending(redis, keys.inject(thread)) == 1
    # What another consumer holds is not seen: ending the job now would lose it.
    assert patient.held_elsewhere == 1
    assert patient.seen_seq == 0 < await receipts.count(thread)


async def test_seen_seq_moves_once_nothing_is_held_elsewhere(
    redis: aioredis.Redis, keys: Keys, thread: Thread, receipts: Receipts
) -> None:
    await receipts.append(thread, ts=TS1, text="a", author=None)
    await reader(redis, keys, thread, "p1").fetch()  # p1 dies holding TS1
    await receipts.append(thread, ts=TS2, text="b", author=None)
    heir = reader(redis, keys, thread, "p2", claim_idle_ms=0)

    items = await heir.fetch()

    assert [i.id for i in items] == [TS1, TS2]
    assert heir.held_elsewhere == 0
    assert heir.seen_seq == 2


async def test_replies_already_in_the_history_are_acked_and_skipped(
    redis: aioredis.Redis, keys: Keys, thread: Thread, receipts: Receipts
) -> None:
    await receipts.append(thread, ts=TS1, text="applied before the crash", author=None)
    await receipts.append(thread, ts=TS2, text="not applied yet", author=None)
    await reader(redis, keys, thread, "p1").fetch()
    # p1 appended and flushed TS1, then died before XACK.
    acks = VisibleAcks(redis, keys.inject(thread))
    heir = reader(redis, keys, thread, "p2", seen={TS1}, claim_idle_ms=0, on_visible_ack=acks)

    items = await heir.fetch()

    assert [i.id for i in items] == [TS2]
    # TS1 is acked already, and it gets the visible ack the crash cost it.
    assert acks.calls == [[Injected(id=TS1, text="applied before the crash", sent_at=float(TS1))]]
    assert acks.pending_at_call == [1]
    summary = await redis.xpending_range(keys.inject(thread), GROUP, "-", "+", 10)
    assert [p["consumer"] for p in summary] == ["p2"]  # only TS2 still waits for its ack
    await heir.ack(items)
    assert await pending(redis, keys.inject(thread)) == 0


async def test_an_entry_deleted_from_the_stream_is_dropped(
    redis: aioredis.Redis, keys: Keys, thread: Thread, receipts: Receipts
) -> None:
    await receipts.append(thread, ts=TS1, text="a", author=None)
    await receipts.append(thread, ts=TS2, text="b", author=None)
    await reader(redis, keys, thread, "p1").fetch()
    [(first_id, _), _] = await redis.xrange(keys.inject(thread))
    await redis.xdel(keys.inject(thread), first_id)

    restarted = reader(redis, keys, thread, "p1", claim_idle_ms=3_600_000)
    items = await restarted.fetch()
    await restarted.ack(items)

    assert [i.id for i in items] == [TS2]
    assert await pending(redis, keys.inject(thread)) == 0


async def test_seen_seq_is_the_receipt_count_covered_by_the_read(
    redis: aioredis.Redis, keys: Keys, thread: Thread, receipts: Receipts
) -> None:
    inject = reader(redis, keys, thread)
    await receipts.append(thread, ts=TS1, text="a", author=None)
    await receipts.append(thread, ts=TS2, text="b", author=None)

    await inject.ack(await inject.fetch())
    assert inject.seen_seq == 2 == await receipts.count(thread)

    await receipts.append(thread, ts=TS3, text="c", author=None)  # after the last read
    assert await receipts.count(thread) == 3 > inject.seen_seq

    assert [i.id for i in await inject.fetch()] == [TS3]
    assert inject.seen_seq == 3


async def test_a_full_batch_covers_only_what_it_read(
    redis: aioredis.Redis, keys: Keys, thread: Thread, receipts: Receipts
) -> None:
    for ts in (TS1, TS2, TS3):
        await receipts.append(thread, ts=ts, text=ts, author=None)
    inject = reader(redis, keys, thread, batch=2)

    first = await inject.fetch()
    assert [i.id for i in first] == [TS1, TS2]
    assert inject.seen_seq == 2
    await inject.ack(first)

    second = await inject.fetch()
    assert [i.id for i in second] == [TS3]
    assert inject.seen_seq == 3


async def test_the_common_case_is_one_round_trip(
    redis: aioredis.Redis, keys: Keys, thread: Thread, receipts: Receipts
) -> None:
    await receipts.append(thread, ts=TS1, text="a", author=None)
    clock = Clock()
    inject = reader(redis, keys, thread, claim_idle_ms=10_000, clock=clock)
    await inject.ack(await inject.fetch())  # the first fetch checks everything
    await redis.config_resetstat()

    for _ in range(3):
        clock.now += 1.0  # within claim_idle_ms / 2 of the first claim check
        assert await inject.fetch() == []

    stats = await redis.info("commandstats")
    calls_of = {name.removeprefix("cmdstat_"): s["calls"] for name, s in stats.items()}
    calls_of.pop("info", None)
    calls_of.pop("config|resetstat", None)
    # Each fetch: one MULTI/EXEC, sent and answered in one round trip.
    assert calls_of == {"multi": 3, "xreadgroup": 3, "get": 3, "xpending": 3, "exec": 3}


async def test_the_claim_check_is_rate_limited(
    redis: aioredis.Redis, keys: Keys, thread: Thread, receipts: Receipts
) -> None:
    clock = Clock()
    inject = reader(redis, keys, thread, claim_idle_ms=10_000, clock=clock)
    await receipts.append(thread, ts=TS1, text="a", author=None)
    await redis.config_resetstat()

    claims = []
    for step in (0.0, 1.0, 3.9, 5.0, 6.0, 10.0):
        clock.now = 100.0 + step
        await inject.ack(await inject.fetch())
        stats = await redis.info("commandstats")
        claims.append(stats.get("cmdstat_xautoclaim", {}).get("calls", 0))

    assert claims == [1, 1, 1, 2, 2, 3]


# -- the agent core over the inject stream -------------------------------------------


class HostArgs(BaseModel):
    host: str


async def check(args: HostArgs, ctx: CallContext) -> str:
    return f"ok {args.host}"


async def test_a_reply_reaches_the_next_model_request_and_is_acked_once(
    redis: aioredis.Redis, keys: Keys, thread: Thread, receipts: Receipts
) -> None:
    memory = InMemoryHistory()
    memory.append(UserMessage(content="web-03 is at 95% CPU"))
    acks = VisibleAcks(redis, keys.inject(thread))
    inject = InjectReader(
        redis,
        keys,
        thread,
        consumer="p1",
        seen_ids=lambda: {
            m.source_id for m in memory.messages if isinstance(m, UserMessage) and m.source_id
        },
        on_visible_ack=acks,
    )

    async def first(request: ModelRequest) -> ModelResponse:
        # A human replies in the thread while the model thinks.
        await receipts.append(thread, ts=TS1, text="web-01 is fine, skip it", author="U0123ABC")
        return calls(call("check", "c1", host="web-03"))

    model = ScriptedModel([first, text("web-03 checked")])
    tool = FunctionTool(name="check", description="check a host", args_model=HostArgs, fn=check)
    config = AgentConfig(
        job_id=thread.job_id(1),
        client=model,
        memory=memory,
        system_prompt="You are an SRE assistant.",
        tools=[tool],
        inject=inject,
    )

    result = await run(config)

    assert result.stop_reason is StopReason.COMPLETED, result.error
    model.assert_done()
    first_history, second_history = model.histories
    assert not any(isinstance(m, UserMessage) and m.source_id for m in first_history)
    last = second_history[-1]
    assert isinstance(last, UserMessage)
    assert last.source_id == TS1
    assert last.content == "<@U0123ABC>: web-01 is fine, skip it"
    assert await pending(redis, keys.inject(thread)) == 0
    assert acks.calls == [
        [Injected(id=TS1, text="web-01 is fine, skip it", author="U0123ABC", sent_at=float(TS1))]
    ]
    assert acks.pending_at_call == [0]
    assert inject.seen_seq == await receipts.count(thread) == 1


async def test_seen_seq_waits_for_a_restarted_consumers_backlog(
    redis: aioredis.Redis, keys: Keys, thread: Thread, receipts: Receipts
) -> None:
    for ts in (TS1, TS2, TS3):
        await receipts.append(thread, ts=ts, text=ts, author=None)
    await reader(redis, keys, thread, "p1").fetch()  # dies holding all three
    restarted = reader(redis, keys, thread, "p1", batch=2, claim_idle_ms=3_600_000)

    first = await restarted.fetch()
    assert [i.id for i in first] == [TS1, TS2]
    assert restarted.seen_seq == 0  # TS3 is still waiting in its pending list
    await restarted.ack(first)

    assert [i.id for i in await restarted.fetch()] == [TS3]
    assert restarted.seen_seq == 3

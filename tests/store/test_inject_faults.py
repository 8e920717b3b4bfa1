"""The inject stream under crashes, each test on a redis-server of its own
(AOF, ``appendfsync always``): a consumer killed between read and ack, a listener
killed right after the XADD, Redis itself SIGKILLed and restarted, and Redis down."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TypeVar

import pytest
import redis.asyncio as aioredis

from bot.agent import Injected
from bot.emulator.redis_server import ManagedRedis
from bot.store.connection import StoreUnavailable, connect
from bot.store.inject import DEFAULT_CLAIM_IDLE_MS, GROUP, InjectReader
from bot.store.keys import Keys, Thread
from bot.store.receipt import Receipts

TS1, TS2 = "1700000001.000100", "1700000002.000100"
T = TypeVar("T")


@pytest.fixture
async def client(fresh_server: ManagedRedis) -> AsyncIterator[aioredis.Redis]:
    redis = connect(fresh_server.url)
    yield redis
    await redis.aclose()


class Job:
    """The part of a running job that touches the inject stream: a durable history of
    applied reply ids, fed by ``InjectReader`` the way the loop feeds it."""

    def __init__(
        self,
        redis: aioredis.Redis,
        keys: Keys,
        thread: Thread,
        consumer: str,
        history: list[str],
        *,
        claim_idle_ms: int = 0,
    ) -> None:
        self.history = history  # shared between "processes": it is the durable one
        self.acked: list[Injected] = []
        self.inject = InjectReader(
            redis,
            keys,
            thread,
            consumer=consumer,
            seen_ids=lambda: set(self.history),
            on_visible_ack=self.visible_ack,
            claim_idle_ms=claim_idle_ms,
        )

    async def visible_ack(self, items: Sequence[Injected]) -> None:
        self.acked.extend(items)

    async def iteration(self) -> list[str]:
        items = await self.inject.fetch()
        self.history.extend(i.id for i in items)  # append + flush
        await self.inject.ack(items)
        return [i.id for i in items]


async def pending(redis: aioredis.Redis, keys: Keys, thread: Thread) -> int:
    return int((await redis.xpending(keys.inject(thread), GROUP))["pending"])


async def after_restart(op: Callable[[], Awaitable[T]]) -> T:
    """The first command on a connection the restart cut fails with a clear error (no
    automatic retries); the job's next attempt goes through."""
    try:
        return await op()
    except StoreUnavailable:
        return await op()


@pytest.mark.parametrize("flushed", [False, True], ids=["before-append", "after-flush"])
async def test_a_consumer_killed_between_read_and_ack_is_taken_over_once(
    client: aioredis.Redis, keys: Keys, thread: Thread, flushed: bool
) -> None:
    receipts = Receipts(client, keys)
    await receipts.append(thread, ts=TS1, text="it is nginx", author="U1")
    await receipts.append(thread, ts=TS2, text="no restarts", author="U2")
    history: list[str] = []

    doomed = Job(client, keys, thread, "p1", history)
    read = await doomed.inject.fetch()
    assert [i.id for i in read] == [TS1, TS2]
    if flushed:
        history.extend(i.id for i in read)
    del doomed  # dies before XACK

    heir = Job(client, keys, thread, "p2", history)
    for _ in range(3):
        await heir.iteration()

    assert history == [TS1, TS2]  # applied exactly once, in order
    assert await pending(client, keys, thread) == 0
    # Applied by the dead job or by the heir: either way the heir shows the ack.
    assert [i.id for i in heir.acked] == [TS1, TS2]


async def test_a_reply_persisted_before_the_listener_died_reaches_the_job(
    fresh_server: ManagedRedis, keys: Keys, thread: Thread
) -> None:
    listener = connect(fresh_server.url)
    await Receipts(listener, keys).append(thread, ts=TS1, text="it is nginx", author="U1")
    await listener.aclose()  # the process dies before acking Slack or anything else

    worker = connect(fresh_server.url)
    try:
        # Slack retries the delivery to another process: nothing new is stored.
        assert not await Receipts(worker, keys).append(
            thread, ts=TS1, text="it is nginx", author="U1"
        )
        history: list[str] = []
        job = Job(worker, keys, thread, "p2", history, claim_idle_ms=DEFAULT_CLAIM_IDLE_MS)
        assert await job.iteration() == [TS1]
        assert await job.iteration() == []
        assert await pending(worker, keys, thread) == 0
    finally:
        await worker.aclose()


async def test_a_received_reply_survives_a_redis_crash(
    fresh_server: ManagedRedis, client: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    receipts = Receipts(client, keys)
    assert await receipts.append(thread, ts=TS1, text="it is nginx", author="U1")

    fresh_server.kill()  # SIGKILL right after the reply was acknowledged
    fresh_server.start()

    history: list[str] = []
    job = Job(client, keys, thread, "p1", history)
    assert await after_restart(job.iteration) == [TS1]
    assert await receipts.count(thread) == 1
    assert job.inject.seen_seq == 1
    # Receipt still works (its script is loaded again) and stays idempotent.
    assert not await receipts.append(thread, ts=TS1, text="it is nginx", author="U1")
    assert await receipts.append(thread, ts=TS2, text="and web-02", author=None)
    assert await job.iteration() == [TS2]


async def test_an_acked_reply_stays_acked_across_a_redis_crash(
    fresh_server: ManagedRedis, client: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    await Receipts(client, keys).append(thread, ts=TS1, text="it is nginx", author="U1")
    history: list[str] = []
    assert await Job(client, keys, thread, "p1", history).iteration() == [TS1]

    fresh_server.kill()
    fresh_server.start()

    heir = Job(client, keys, thread, "p2", [])  # even without the history to dedupe on
    assert await after_restart(heir.iteration) == []
    assert await pending(client, keys, thread) == 0


async def test_redis_down_raises_store_unavailable(
    fresh_server: ManagedRedis, client: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    receipts = Receipts(client, keys)
    await receipts.append(thread, ts=TS1, text="it is nginx", author="U1")
    job = Job(client, keys, thread, "p1", [])
    items = await job.inject.fetch()

    fresh_server.kill()

    with pytest.raises(StoreUnavailable):
        await receipts.append(thread, ts=TS2, text="lost?", author=None)
    with pytest.raises(StoreUnavailable):
        await receipts.count(thread)
    with pytest.raises(StoreUnavailable):
        await job.inject.fetch()
    with pytest.raises(StoreUnavailable):
        await job.inject.ack(items)
    assert job.acked == []  # no visible ack for what could not be acked


async def test_a_redis_that_never_answers_raises_store_unavailable(
    keys: Keys, thread: Thread
) -> None:
    # A peer that accepts connections and never answers: the socket timeout bounds the
    # wait (shortened here; ``connect`` defaults to 2 s).
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # until the client gives up and closes
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    redis = connect(f"redis://127.0.0.1:{port}/0", socket_timeout_s=0.2)
    try:
        with pytest.raises(StoreUnavailable):
            await Receipts(redis, keys).append(thread, ts=TS1, text="x", author=None)
        inject = InjectReader(redis, keys, thread, consumer="p1", seen_ids=set)
        with pytest.raises(StoreUnavailable):
            await inject.fetch()
    finally:
        await redis.aclose()
        server.close()
        await server.wait_closed()

"""The save that ends an iteration and the next iteration's inject fetch, in one MULTI
(``JobSession.checkpoint_and_fetch``): what each half does, and that neither is lost
when the other is refused."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from bot.agent import RunState, UserMessage
from bot.store.connection import StoreConflict
from bot.store.inject import InjectReader
from bot.store.keys import Keys, Thread
from bot.store.lease import Leases
from bot.store.receipt import Receipts

from .test_session import session_for, start


def reader(redis: aioredis.Redis, keys: Keys, thread: Thread, seen: set[str]) -> InjectReader:
    return InjectReader(redis, keys, thread, consumer="p1", seen_ids=lambda: seen)


async def test_one_call_saves_the_step_and_returns_the_waiting_replies(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    jobs, job = await start(redis, keys, thread)
    session = await session_for(redis, keys, jobs, job, ['{"kind":"tool"}'])
    inject = reader(redis, keys, thread, set())
    await Receipts(redis, keys).append(
        thread, ts="1700000001.000200", text="it's the db", author="U2"
    )

    session.history.append(UserMessage(content="check the fleet"))
    items = await session.checkpoint_and_fetch(RunState(iterations=3), inject)

    assert [(i.id, i.text, i.author) for i in items] == [("1700000001.000200", "it's the db", "U2")]
    stored = await jobs.get(job.id)
    assert stored is not None and stored.progress.iterations == 3
    assert len(await redis.lrange(keys.history(thread), 0, -1)) == 1
    assert await redis.lrange(keys.trace(job.id), 0, -1) == ['{"kind":"tool"}']
    # Handed out, not yet acknowledged: a job ending now would not count it as taken in.
    assert inject.seen_seq == 1 and inject.settled_seq == 0
    await inject.ack(items)
    assert inject.settled_seq == 1


async def test_a_stop_read_by_the_save_is_heard(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    jobs, job = await start(redis, keys, thread)
    session = await session_for(redis, keys, jobs, job, [])
    heard: list[str] = []
    session._on_cancel = heard.append
    await jobs.request_cancel(job.id, "U9")

    items = await session.checkpoint_and_fetch(
        RunState(iterations=1), reader(redis, keys, thread, set())
    )
    assert heard == ["U9"] and list(items) == []


async def test_the_save_survives_a_server_that_lost_its_scripts(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    jobs, job = await start(redis, keys, thread)
    session = await session_for(redis, keys, jobs, job, [])
    await redis.script_flush()
    session.history.append(UserMessage(content="after a restart"))
    await session.checkpoint_and_fetch(RunState(iterations=5), reader(redis, keys, thread, set()))
    stored = await jobs.get(job.id)
    assert stored is not None and stored.progress.iterations == 5
    assert await redis.llen(keys.history(thread)) == 1


async def test_a_refused_save_writes_nothing_keeps_its_messages_and_loses_no_reply(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    jobs, job = await start(redis, keys, thread)
    stale = await session_for(redis, keys, jobs, job, [])
    await redis.delete(keys.lease(thread))
    newer = await Leases(redis, keys).acquire(thread)
    assert newer is not None
    await jobs.save(stale.record, fence=newer.fence, output="taken over")
    await Receipts(redis, keys).append(thread, ts="1700000001.000300", text="status?", author="U2")

    stale.history.append(UserMessage(content="from the stale owner"))
    with pytest.raises(StoreConflict, match="fence"):
        await stale.checkpoint_and_fetch(RunState(iterations=9), reader(redis, keys, thread, set()))
    assert await redis.llen(keys.history(thread)) == 0
    assert stale.history.drain() != []  # put back, as a refused ``checkpoint`` does
    stored = await jobs.get(job.id)
    assert stored is not None and stored.output == "taken over"
    # The reply the MULTI read is still pending in the stream, for the new owner to take.
    pending = await redis.xpending(keys.inject(thread), "loop")
    assert pending["pending"] == 1

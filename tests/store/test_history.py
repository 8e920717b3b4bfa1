"""Conversation history in Redis: the core's Memory protocol, durable and ordered."""

from __future__ import annotations

from dataclasses import replace

import pytest
import redis.asyncio as aioredis

from bot.agent import (
    AssistantMessage,
    InMemoryHistory,
    StopReason,
    ToolCall,
    ToolMessage,
    UserMessage,
    run,
)
from bot.agent.testing import ScriptedModel, call, calls, text
from bot.emulator.redis_server import ManagedRedis
from bot.store.connection import StoreUnavailable, connect
from bot.store.history import RedisHistory, holds_conversation
from bot.store.keys import HISTORY_TTL_S, Keys, Thread
from tests.agent.conftest import echo_tool, make_config


def sample() -> list[UserMessage | AssistantMessage | ToolMessage]:
    return [
        UserMessage(content="web-03 is at 95% CPU"),
        AssistantMessage(
            content="checking",
            tool_calls=(ToolCall(id="c1", name="check", arguments='{"host":"web-03"}'),),
        ),
        ToolMessage(tool_call_id="c1", name="check", content="ok web-03"),
        UserMessage(content="<@U1>: show logs", source_id="1700000001.000200"),
        AssistantMessage(content="fine"),
    ]


async def test_appends_survive_in_order(redis: aioredis.Redis, keys: Keys, thread: Thread) -> None:
    memory = RedisHistory(redis, keys, thread)
    assert await memory.history() == []
    for message in sample():
        memory.append(message)
    await memory.flush()

    again = RedisHistory(redis, keys, thread)
    assert list(await again.history()) == sample()
    assert again.source_ids() == {"1700000001.000200"}
    ttl = await redis.ttl(keys.history(thread))
    assert 0 < ttl <= HISTORY_TTL_S
    assert await holds_conversation(redis, keys, thread)
    assert not await holds_conversation(redis, keys, Thread("C999", "1.2"))


async def test_flush_without_appends_makes_no_write(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    memory = RedisHistory(redis, keys, thread)
    await memory.history()
    await memory.flush()
    assert not await redis.exists(keys.history(thread))


async def test_append_before_load_is_refused(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    memory = RedisHistory(redis, keys, thread)
    with pytest.raises(RuntimeError, match="before load"):
        memory.append(UserMessage(content="x"))


async def test_condense_keeps_the_originals(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    memory = RedisHistory(redis, keys, thread)
    await memory.history()
    for message in sample():
        memory.append(message)
    await memory.condense(3, "summary one")
    view = await memory.history()
    assert view[0] == UserMessage(content="summary one", summary=True)
    assert list(view[1:]) == sample()[3:]

    again = RedisHistory(redis, keys, thread)
    assert list(await again.history()) == list(view)
    assert list(again.originals) == sample()
    assert await redis.llen(keys.history(thread)) == 5


async def test_condensing_twice_replaces_the_summary(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    memory = RedisHistory(redis, keys, thread)
    await memory.history()
    for message in sample():
        memory.append(message)
    await memory.condense(3, "summary one")  # covers originals 0..2
    memory.append(UserMessage(content="more"))
    await memory.condense(3, "summary two")  # old summary + originals 3..4
    view = await memory.history()
    assert [m.content for m in view] == ["summary two", "more"]

    again = RedisHistory(redis, keys, thread)
    assert [m.content for m in await again.history()] == ["summary two", "more"]
    assert len(again.originals) == 6


async def test_a_failed_flush_keeps_the_appends(fresh_server: ManagedRedis, thread: Thread) -> None:
    keys = Keys("t:")
    client = connect(fresh_server.url)
    try:
        memory = RedisHistory(client, keys, thread)
        await memory.history()
        memory.append(UserMessage(content="one"))
        fresh_server.kill()
        with pytest.raises(StoreUnavailable):
            await memory.flush()
        fresh_server.start()
        memory.append(UserMessage(content="two"))
        await memory.flush()
        again = RedisHistory(client, keys, thread)
        assert [m.content for m in await again.history()] == ["one", "two"]
    finally:
        await client.aclose()


async def test_the_loop_runs_on_redis_history(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    memory = RedisHistory(redis, keys, thread)
    await memory.history()
    memory.append(UserMessage(content="check web-03"))
    model = ScriptedModel([calls(call("check", "c1", host="web-03")), text("all good")])
    config = make_config(model, tools=[echo_tool()], memory=InMemoryHistory())
    result = await run(replace(config, memory=memory))

    assert result.stop_reason is StopReason.COMPLETED, result.error
    stored = await RedisHistory(redis, keys, thread).history()
    assert [m.role for m in stored] == ["user", "assistant", "tool", "assistant"]
    assert stored[-1].content == "all good"

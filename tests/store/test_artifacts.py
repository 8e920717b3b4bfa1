"""Full tool outputs are kept in Redis for 7 days behind a reference that the model and
people can quote, a cut observation in a run leads back to the whole output, and only
the job that stored an artifact reads it back (``read_artifact``)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from pydantic import BaseModel

from bot.agent import (
    AgentConfig,
    CallContext,
    FunctionTool,
    InMemoryHistory,
    StopReason,
    ToolMessage,
    UserMessage,
    run,
)
from bot.agent.messages import ModelRequest, ModelResponse
from bot.agent.read_artifact import with_read_artifact
from bot.agent.testing import ScriptedModel, call, calls, text
from bot.emulator.redis_server import ManagedRedis
from bot.errors import StoreError
from bot.store.artifacts import MAX_ARTIFACT_BYTES, RedisArtifacts, capped, parse_ref
from bot.store.connection import StoreUnavailable, connect
from bot.store.keys import ARTIFACT_TTL_S, Keys, Thread


@pytest.fixture
def job_id(thread: Thread) -> str:
    return thread.job_id(3)


@pytest.fixture
def artifacts(redis: aioredis.Redis, keys: Keys) -> RedisArtifacts:
    return RedisArtifacts(redis, keys)


async def test_put_then_get_round_trips(artifacts: RedisArtifacts, job_id: str) -> None:
    output = "line 1\nline 2 — ünïcode ✓\n" * 100

    ref = await artifacts.put(job_id, "call_1", output)

    assert ref.startswith(f"artifact:{job_id}:call_1:")
    assert await artifacts.get(job_id, ref) == output
    assert await artifacts.get(job_id, f"  {ref}\n") == output  # as pasted by a person


async def test_the_key_lives_seven_days_under_the_thread_tag(
    artifacts: RedisArtifacts, job_id: str, redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    ref = await artifacts.put(job_id, "call_1", "output")

    (key,) = [str(k) for k in await redis.keys("*")]
    assert key.startswith(f"{keys.prefix}{thread.tag}:")
    assert key.endswith(ref.removeprefix("artifact:"))
    ttl = await redis.ttl(key)
    assert ARTIFACT_TTL_S - 60 < ttl <= ARTIFACT_TTL_S


async def test_each_put_has_its_own_ref(artifacts: RedisArtifacts, job_id: str) -> None:
    refs = [await artifacts.put(job_id, "call_1", f"attempt {n}") for n in range(10)]

    assert len(set(refs)) == 10
    assert [await artifacts.get(job_id, ref) for ref in refs] == [f"attempt {n}" for n in range(10)]


async def test_a_taken_suffix_is_never_overwritten(
    redis: aioredis.Redis, keys: Keys, job_id: str
) -> None:
    suffixes = iter(["aaaa", "aaaa", "bbbb"])
    artifacts = RedisArtifacts(redis, keys, suffix=lambda: next(suffixes))

    first = await artifacts.put(job_id, "call_1", "first")
    second = await artifacts.put(job_id, "call_1", "second")

    assert (first, second) == (f"artifact:{job_id}:call_1:aaaa", f"artifact:{job_id}:call_1:bbbb")
    assert await artifacts.get(job_id, first) == "first"
    assert await artifacts.get(job_id, second) == "second"


async def test_no_free_suffix_is_a_store_error(
    redis: aioredis.Redis, keys: Keys, job_id: str
) -> None:
    artifacts = RedisArtifacts(redis, keys, suffix=lambda: "same")
    ref = await artifacts.put(job_id, "call_1", "first")

    with pytest.raises(StoreError):
        await artifacts.put(job_id, "call_1", "second")
    assert await artifacts.get(job_id, ref) == "first"


async def test_refs_of_other_jobs_do_not_collide(artifacts: RedisArtifacts, thread: Thread) -> None:
    one = await artifacts.put(thread.job_id(1), "c1", "first job")
    other = await artifacts.put(thread.job_id(2), "c1", "second job")

    assert await artifacts.get(thread.job_id(1), one) == "first job"
    assert await artifacts.get(thread.job_id(2), other) == "second job"


async def test_a_job_reads_only_its_own_artifacts(
    artifacts: RedisArtifacts, thread: Thread, redis: aioredis.Redis
) -> None:
    mine = await artifacts.put(thread.job_id(1), "c1", "job 1's output")

    # Another job of the same thread (same hash tag), another thread's job: no artifact.
    assert await artifacts.get(thread.job_id(2), mine) is None
    assert await artifacts.get("C9:1700000000.000900:j1", mine) is None
    assert await artifacts.get(thread.job_id(1), mine) == "job 1's output"
    assert len(await redis.keys("*")) == 1  # refused before any key is read, none removed


async def test_an_expired_artifact_reads_as_none(
    artifacts: RedisArtifacts, job_id: str, redis: aioredis.Redis
) -> None:
    ref = await artifacts.put(job_id, "call_1", "output")
    (key,) = await redis.keys("*")

    await redis.pexpireat(key, 1)  # its 7 days are over

    assert await artifacts.get(job_id, ref) is None


async def test_a_huge_output_keeps_its_head_and_notes_its_size(
    artifacts: RedisArtifacts, job_id: str
) -> None:
    output = "a" * MAX_ARTIFACT_BYTES + "b" * 1_000_000

    ref = await artifacts.put(job_id, "call_1", output)

    stored = await artifacts.get(job_id, ref)
    assert stored is not None
    assert len(stored.encode()) <= MAX_ARTIFACT_BYTES
    assert stored.startswith("a" * 1_000_000)
    assert "b" not in stored.split("\n[artifact cut")[0]
    assert str(len(output)) in stored  # the full size is noted


def test_the_cap_never_splits_a_character() -> None:
    data = capped("é" * 1000, max_bytes=501)  # 2 bytes each

    assert len(data) <= 501
    head, _, note = data.decode().partition("\n[artifact cut")
    assert set(head) == {"é"}
    assert "1000 chars (2000 bytes)" in note


def test_an_output_within_the_cap_is_kept_whole() -> None:
    assert capped("é" * 10, max_bytes=20) == ("é" * 10).encode()


async def test_text_utf8_cannot_encode_is_stored_anyway(
    artifacts: RedisArtifacts, job_id: str
) -> None:
    ref = await artifacts.put(job_id, "call_1", "ok \ud800 end")
    assert await artifacts.get(job_id, ref) == "ok ? end"


async def test_unknown_and_malformed_refs_read_as_none(
    artifacts: RedisArtifacts, job_id: str
) -> None:
    assert await artifacts.get(job_id, f"artifact:{job_id}:call_1:deadbeef") is None
    assert await artifacts.get(job_id, "artifact:nonsense") is None
    assert await artifacts.get("C1:1.0:j1", "artifact:C1:1.0:j1:nosuffix") is None
    assert await artifacts.get(job_id, "something else") is None


def test_a_ref_parses_back_to_its_job() -> None:
    job_id = "C123:1700000000.000100:j3"
    assert parse_ref(f"artifact:{job_id}:call:with:colons:ab12") == (
        job_id,
        f"{job_id}:call:with:colons:ab12",
    )


class HostArgs(BaseModel):
    host: str


async def test_a_cut_observation_leads_to_the_full_output(
    artifacts: RedisArtifacts, job_id: str
) -> None:
    full = "".join(f"{n:05d} GET /healthz 200\n" for n in range(400))

    async def dump(args: HostArgs, ctx: CallContext) -> str:
        return full

    tool = FunctionTool(
        name="logs", description="Tail logs", args_model=HostArgs, fn=dump, output_bound=200
    )
    model = ScriptedModel([calls(call("logs", "c1", host="web-03")), text("all healthy")])
    memory = InMemoryHistory()
    memory.append(UserMessage(content="are the health checks passing on web-03?"))

    result = await run(
        AgentConfig(
            job_id=job_id,
            client=model,
            memory=memory,
            system_prompt="You are an SRE assistant.",
            tools=[tool],
            artifacts=artifacts,
        )
    )

    assert result.stop_reason is StopReason.COMPLETED, result.error
    (message,) = [m for m in memory.messages if isinstance(m, ToolMessage)]
    assert message.artifact is not None
    assert message.artifact in message.content
    assert message.content.startswith(full[:200])
    assert len(message.content) < len(full)
    assert await artifacts.get(job_id, message.artifact) == full


async def test_read_artifact_reads_a_slice_of_a_cut_output_from_redis(
    artifacts: RedisArtifacts, job_id: str, redis: aioredis.Redis
) -> None:
    full = "".join(
        f"{n:05d} {'ERROR 502 from upstream' if n % 100 == 0 else 'GET /healthz 200'}\n"
        for n in range(1, 401)
    )

    async def dump(args: HostArgs, ctx: CallContext) -> str:
        return full

    tool = FunctionTool(
        name="logs", description="Tail logs", args_model=HostArgs, fn=dump, output_bound=200
    )

    def read(request: ModelRequest, **arguments: object) -> ModelResponse:
        cut = next(m for m in request.messages if isinstance(m, ToolMessage) and m.artifact)
        ref = re.search(r'read_artifact\(ref="([^"]+)"\)\]$', cut.content)
        assert ref is not None, cut.content
        return calls(call("read_artifact", f"r{len(request.messages)}", ref=ref[1], **arguments))

    model = ScriptedModel(
        [
            calls(call("logs", "c1", host="web-03")),
            lambda request: read(request, contains="error"),
            lambda request: read(request, start_line=399),
            text("four 502s"),
        ]
    )
    memory = InMemoryHistory()
    memory.append(UserMessage(content="why are there 502s on web-03?"))

    result = await run(
        AgentConfig(
            job_id=job_id,
            client=model,
            memory=memory,
            system_prompt="You are an SRE assistant.",
            tools=with_read_artifact([tool], artifacts),
            artifacts=artifacts,
        )
    )

    assert result.stop_reason is StopReason.COMPLETED, result.error
    cut, matches, tail = [m for m in memory.messages if isinstance(m, ToolMessage)]
    assert cut.artifact is not None and await redis.exists(*await redis.keys("*")) == 1
    assert matches.content.splitlines()[1:] == [
        f"{n}: {n:05d} ERROR 502 from upstream" for n in (100, 200, 300, 400)
    ]
    assert tail.content.splitlines()[1:] == [
        "399: 00399 GET /healthz 200",
        "400: 00400 ERROR 502 from upstream",
    ]
    assert matches.artifact is None and tail.artifact is None


@pytest.fixture
async def dead(fresh_server: ManagedRedis, keys: Keys) -> AsyncIterator[RedisArtifacts]:
    client = connect(fresh_server.url)
    fresh_server.kill()
    yield RedisArtifacts(client, keys)
    await client.aclose()


async def test_redis_down_raises_store_unavailable(dead: RedisArtifacts, job_id: str) -> None:
    with pytest.raises(StoreUnavailable):
        await dead.put(job_id, "call_1", "output")
    with pytest.raises(StoreUnavailable):
        await dead.get(job_id, f"artifact:{job_id}:call_1:deadbeef")

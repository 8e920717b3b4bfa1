"""A job's trace: the recorder turns a run's events into bounded entries without I/O,
and they round-trip through Redis with the trace TTL and the list bound."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable

import pytest
import redis.asyncio as aioredis
from pydantic import BaseModel, Field

from bot.agent import (
    AgentConfig,
    CallContext,
    FunctionTool,
    InMemoryHistory,
    ModelRequest,
    ModelResponse,
    PendingApproval,
    StopReason,
    Usage,
    UserMessage,
    run,
)
from bot.agent.events import (
    ApprovalRequested,
    CondenseDone,
    CondenseFailed,
    Event,
    InjectedMessages,
    LimitReached,
    ModelFallback,
    ModelRequestEnd,
    ModelRequestStart,
    StreamDelta,
    ToolEnd,
    ToolStart,
)
from bot.agent.testing import FakeClock, ScriptedModel, call, calls, text
from bot.emulator.redis_server import ManagedRedis
from bot.store.connection import StoreUnavailable, connect
from bot.store.keys import TRACE_TTL_S, Keys, Thread
from bot.store.trace import (
    MAX_TEXT_CHARS,
    MAX_TRACE_ENTRIES,
    ApprovalEntry,
    CondenseEntry,
    EndEntry,
    FallbackEntry,
    InjectEntry,
    LimitEntry,
    ModelCallEntry,
    ToolEntry,
    TraceRecorder,
    parse_entry,
    read_trace,
)


class HostArgs(BaseModel):
    host: str = Field(description="Host name")


def ticking(start: float = 1_700_000_000.0) -> Callable[[], float]:
    """A wall clock that moves one second per reading."""
    counter = itertools.count()
    return lambda: start + next(counter)


@pytest.fixture
def job_id(thread: Thread) -> str:
    return thread.job_id(1)


@pytest.fixture
def recorder(job_id: str) -> TraceRecorder:
    return TraceRecorder(job_id, clock=ticking())


async def traced_run(recorder: TraceRecorder, job_id: str) -> list[Event]:
    """A real run: one tool call, then a streamed answer. Returns every event it emitted."""
    clock = FakeClock()
    seen: list[Event] = []

    def sink(event: Event) -> None:
        seen.append(event)
        recorder(event)

    def answer(response: ModelResponse, took: float) -> Callable[[ModelRequest], ModelResponse]:
        def step(request: ModelRequest) -> ModelResponse:
            clock.advance(took)
            return response

        return step

    async def check(args: HostArgs, ctx: CallContext) -> str:
        clock.advance(1.5)
        return f"load average on {args.host}: 0.42"

    model = ScriptedModel(
        [
            answer(
                calls(
                    call("check", "c1", host="web-03"),
                    content="Looking at the load.",
                    usage=Usage(prompt_tokens=120, completion_tokens=15, cached_tokens=100),
                ),
                2.0,
            ),
            answer(
                text(
                    "web-03 is fine: load 0.42",
                    usage=Usage(prompt_tokens=160, completion_tokens=12, cached_tokens=120),
                ),
                0.5,
            ),
        ]
    )
    memory = InMemoryHistory()
    memory.append(UserMessage(content="web-03 is at 95% CPU, look into it"))
    tool = FunctionTool(name="check", description="Check a host", args_model=HostArgs, fn=check)
    result = await run(
        AgentConfig(
            job_id=job_id,
            client=model,
            memory=memory,
            system_prompt="You are an SRE assistant.",
            tools=[tool],
            on_event=sink,
            clock=clock,
            stream=True,
        )
    )
    assert result.stop_reason is StopReason.COMPLETED, result.error
    model.assert_done()
    return seen


async def test_a_run_is_traced_call_by_call(recorder: TraceRecorder, job_id: str) -> None:
    seen = await traced_run(recorder, job_id)

    entries = [parse_entry(raw) for raw in recorder.drain()]

    assert [e.kind for e in entries] == ["model_call", "tool", "model_call", "end"]
    first, tool, second, end = entries
    assert isinstance(first, ModelCallEntry)
    assert (first.iteration, first.model, first.attempt) == (1, "scripted", 1)
    assert first.duration_s == 2.0
    assert first.usage == Usage(prompt_tokens=120, completion_tokens=15, cached_tokens=100)
    assert first.tool_calls == 1
    assert first.error is None
    assert isinstance(tool, ToolEntry)
    assert (tool.call_id, tool.tool, tool.ran, tool.is_error) == ("c1", "check", True, False)
    assert tool.duration_s == 1.5
    assert tool.output_chars == len("load average on web-03: 0.42")
    assert tool.arguments == '{"host": "web-03"}'
    assert isinstance(second, ModelCallEntry)
    assert (second.iteration, second.duration_s, second.tool_calls) == (2, 0.5, 0)
    assert second.usage == Usage(prompt_tokens=160, completion_tokens=12, cached_tokens=120)
    assert isinstance(end, EndEntry)
    assert end.stop_reason is StopReason.COMPLETED
    assert (end.iterations, end.model_calls, end.tool_executions) == (2, 2, 1)
    assert end.usage == Usage(prompt_tokens=280, completion_tokens=27, cached_tokens=220)
    # Entries are stamped by the recorder's clock, in order.
    assert [e.at for e in entries] == sorted(e.at for e in entries)
    assert entries[0].at == 1_700_000_000.0
    # The answer was streamed, and none of the deltas was traced.
    assert any(isinstance(e, StreamDelta) for e in seen)


async def test_drain_empties_the_buffer(recorder: TraceRecorder, job_id: str) -> None:
    await traced_run(recorder, job_id)
    assert len(recorder) == 4

    assert len(recorder.drain()) == 4
    assert len(recorder) == 0
    assert recorder.drain() == []


async def test_flush_then_read_round_trips(
    recorder: TraceRecorder, job_id: str, redis: aioredis.Redis, keys: Keys
) -> None:
    await traced_run(recorder, job_id)
    drained = recorder.drain()
    recorder.put_back(drained)
    expected = [parse_entry(raw) for raw in drained]

    assert await recorder.flush(redis, keys) == 4
    assert len(recorder) == 0
    assert await read_trace(redis, keys, job_id) == expected

    # A later run of the same job appends to the same trace.
    recorder(StreamDelta(text="ignored"))
    recorder(CondenseDone(replaced=3))
    assert await recorder.flush(redis, keys) == 1
    trace = await read_trace(redis, keys, job_id)
    assert len(trace) == 5
    assert trace[-1] == CondenseEntry(at=trace[-1].at, replaced=3)


async def test_flush_sets_the_trace_ttl(
    recorder: TraceRecorder, job_id: str, redis: aioredis.Redis, keys: Keys
) -> None:
    recorder(CondenseDone(replaced=1))
    await recorder.flush(redis, keys)

    ttl = await redis.ttl(keys.trace(job_id))
    assert TRACE_TTL_S - 60 < ttl <= TRACE_TTL_S


async def test_the_trace_key_shares_the_thread_tag(job_id: str, keys: Keys, thread: Thread) -> None:
    assert thread.tag in keys.trace(job_id)


async def test_an_empty_flush_writes_nothing(
    recorder: TraceRecorder, job_id: str, redis: aioredis.Redis, keys: Keys
) -> None:
    assert await recorder.flush(redis, keys) == 0
    assert await redis.exists(keys.trace(job_id)) == 0
    assert await read_trace(redis, keys, job_id) == []


def test_every_kind_of_event_is_traced(recorder: TraceRecorder) -> None:
    approval = PendingApproval(
        call_id="c2", tool="restart", args_hash="ab12", arguments={"service": "nginx"}
    )
    events: list[Event] = [
        ModelRequestStart(iteration=1, model="primary", attempt=3),
        ModelRequestEnd(iteration=1, model="primary", duration_s=0.25, usage=None, error="503"),
        ModelFallback(from_model="primary", to_model="backup", error="503 after 3 attempts"),
        InjectedMessages(ids=("1700000000.000300", "1700000000.000400")),
        ToolEnd(
            call_id="c9", tool="nope", ran=False, is_error=True, duration_s=0.0, output_chars=20
        ),
        ToolStart(call_id="c2", tool="restart", arguments={"service": "nginx"}, dry_run=True),
        ToolEnd(
            call_id="c2",
            tool="restart",
            ran=True,
            is_error=False,
            duration_s=0.125,
            output_chars=40,
            dry_run=True,
        ),
        ApprovalRequested(approval=approval),
        ToolStart(call_id="c2", tool="restart", arguments={"service": "nginx"}),
        ToolEnd(
            call_id="c2",
            tool="restart",
            ran=True,
            is_error=False,
            duration_s=1.0,
            output_chars=12,
            confirmed_by="U0123ABC",
        ),
        CondenseFailed(error="summary too long"),
        LimitReached(reason=StopReason.LIMIT_ITERATIONS, detail="iteration limit reached (10/10)"),
    ]
    for event in events:
        recorder(event)

    entries = [parse_entry(raw) for raw in recorder.drain()]

    assert [e.kind for e in entries] == [
        "model_call",
        "fallback",
        "inject",
        "tool",
        "tool",
        "approval",
        "tool",
        "condense",
        "limit",
    ]
    failed, fallback, inject, refused, dry, asked, ran, condense, limit = entries
    assert isinstance(failed, ModelCallEntry)
    assert (failed.attempt, failed.usage, failed.error) == (3, None, "503")
    assert isinstance(fallback, FallbackEntry)
    assert (fallback.model, fallback.to_model) == ("primary", "backup")
    assert isinstance(inject, InjectEntry)
    assert (inject.count, inject.ids) == (2, ["1700000000.000300", "1700000000.000400"])
    assert isinstance(refused, ToolEntry)
    assert (refused.ran, refused.is_error, refused.arguments) == (False, True, None)
    assert isinstance(dry, ToolEntry)
    assert dry.dry_run is True
    assert dry.arguments == '{"service": "nginx"}'
    assert isinstance(asked, ApprovalEntry)
    assert (asked.call_id, asked.tool, asked.args_hash) == ("c2", "restart", "ab12")
    assert isinstance(ran, ToolEntry)
    assert (ran.dry_run, ran.confirmed_by) == (False, "U0123ABC")
    assert isinstance(condense, CondenseEntry)
    assert (condense.replaced, condense.error) == (None, "summary too long")
    assert isinstance(limit, LimitEntry)
    assert limit.stop_reason is StopReason.LIMIT_ITERATIONS


def test_entries_are_compact(recorder: TraceRecorder) -> None:
    recorder(CondenseDone(replaced=2))
    (raw,) = recorder.drain()
    assert "null" not in raw  # unset fields are left out


def test_long_texts_are_bounded(recorder: TraceRecorder) -> None:
    long = "x" * 50_000
    recorder(ModelRequestEnd(iteration=1, model="m", duration_s=1.0, usage=None, error=long))
    recorder(ModelFallback(from_model="a", to_model="b", error=long))
    recorder(LimitReached(reason=StopReason.LIMIT_TOKENS, detail=long))
    recorder(CondenseFailed(error=long))
    recorder(ToolStart(call_id="c1", tool="t", arguments={"blob": long}))
    recorder(
        ToolEnd(call_id="c1", tool="t", ran=True, is_error=False, duration_s=0, output_chars=1)
    )

    raws = recorder.drain()
    texts: list[str | None] = []
    for entry in map(parse_entry, raws):
        match entry:
            case ModelCallEntry() | FallbackEntry() | CondenseEntry():
                texts.append(entry.error)
            case LimitEntry():
                texts.append(entry.detail)
            case ToolEntry():
                texts.append(entry.arguments)
    assert len(texts) == 5
    for value in texts:
        assert value is not None
        assert len(value) <= MAX_TEXT_CHARS
        assert value.startswith(("x", '{"blob": "x'))
    assert "50000 chars" in (texts[0] or "")
    assert all(len(raw) < MAX_TEXT_CHARS + 500 for raw in raws)


def test_a_stored_long_text_is_bounded_when_read() -> None:
    raw = '{"at": 1.0, "kind": "limit", "stop_reason": "loop", "detail": "%s"}' % ("y" * 9000)
    entry = parse_entry(raw)
    assert isinstance(entry, LimitEntry)
    assert len(entry.detail) <= MAX_TEXT_CHARS


def test_the_buffer_keeps_the_newest_entries(job_id: str) -> None:
    recorder = TraceRecorder(job_id, clock=ticking(), max_entries=3)
    for n in range(5):
        recorder(CondenseDone(replaced=n))
    kept = [parse_entry(raw) for raw in recorder.drain()]
    assert [e.replaced for e in kept if isinstance(e, CondenseEntry)] == [2, 3, 4]


async def test_the_stored_trace_keeps_the_last_entries(
    job_id: str, redis: aioredis.Redis, keys: Keys
) -> None:
    recorder = TraceRecorder(job_id, clock=ticking())
    total = MAX_TRACE_ENTRIES + 2_000
    for start in (0, total // 2):
        for n in range(start, start + total // 2):
            recorder(CondenseDone(replaced=n))
        await recorder.flush(redis, keys)

    assert await redis.llen(keys.trace(job_id)) == MAX_TRACE_ENTRIES
    trace = await read_trace(redis, keys, job_id)
    replaced = [e.replaced for e in trace if isinstance(e, CondenseEntry)]
    assert replaced == list(range(total - MAX_TRACE_ENTRIES, total))


async def test_unreadable_entries_are_skipped(
    recorder: TraceRecorder, job_id: str, redis: aioredis.Redis, keys: Keys
) -> None:
    recorder(CondenseDone(replaced=1))
    await recorder.flush(redis, keys)
    await redis.rpush(keys.trace(job_id), "not json", '{"kind": "from-the-future", "at": 1}')
    recorder(CondenseDone(replaced=2))
    await recorder.flush(redis, keys)

    trace = await read_trace(redis, keys, job_id)
    assert [e.replaced for e in trace if isinstance(e, CondenseEntry)] == [1, 2]


@pytest.fixture
async def dead_redis(fresh_server: ManagedRedis) -> AsyncIterator[aioredis.Redis]:
    client = connect(fresh_server.url)
    fresh_server.kill()
    yield client
    await client.aclose()


async def test_redis_down_raises_store_unavailable(
    recorder: TraceRecorder, job_id: str, dead_redis: aioredis.Redis, keys: Keys
) -> None:
    recorder(CondenseDone(replaced=1))
    with pytest.raises(StoreUnavailable):
        await recorder.flush(dead_redis, keys)
    with pytest.raises(StoreUnavailable):
        await read_trace(dead_redis, keys, job_id)


async def test_a_failed_flush_keeps_the_entries(
    recorder: TraceRecorder,
    job_id: str,
    dead_redis: aioredis.Redis,
    redis: aioredis.Redis,
    keys: Keys,
) -> None:
    recorder(CondenseDone(replaced=1))
    with pytest.raises(StoreUnavailable):
        await recorder.flush(dead_redis, keys)
    recorder(CondenseDone(replaced=2))

    assert await recorder.flush(redis, keys) == 2
    trace = await read_trace(redis, keys, job_id)
    assert [e.replaced for e in trace if isinstance(e, CondenseEntry)] == [1, 2]

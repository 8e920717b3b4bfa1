"""A thread's job run on the real store: the message in, tools, the answer, replies
taken in mid-run, and a reply that arrives as the job ends."""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.asyncio.connection import AbstractConnection

from bot.agent import ModelRequest, ModelResponse, StopReason, ToolMessage, UserMessage
from bot.agent.testing import ScriptedModel, call, calls, text
from bot.service import build_turns
from bot.store.history import RedisHistory
from bot.store.jobs import JobLimits, JobStatus
from bot.store.keys import TRACE_TTL_S, Keys, Thread
from bot.store.lease import Leases
from bot.store.parts import Stores
from bot.store.trace import read_trace
from bot.turns.parts import Turns
from bot.turns.run import TurnSettings
from tests.agent.conftest import echo_tool
from tools.registry import Catalog

from .notifier import Notes

LIMITS = JobLimits(max_iterations=10, deadline_s=600, token_budget=100_000)


def turns_for(
    redis: aioredis.Redis, keys: Keys, model: ScriptedModel, acks: list[tuple[str, ...]]
) -> Turns:
    tool = echo_tool()
    return build_turns(
        Stores.build(redis, keys),
        resolver=model,
        catalog=Catalog(tools={tool.name: tool}, sources={tool.name: "test"}),
        system_prompt="You are opsloop.",
        settings=TurnSettings(limits=LIMITS),
        notifier=Notes(acks=acks),
        consumer="test-process",
    )


async def test_a_mention_runs_tools_and_answers(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    acks: list[tuple[str, ...]] = []
    model = ScriptedModel([calls(call("check", "c1", host="web-03")), text("web-03 is fine")])
    turns = turns_for(redis, keys, model, acks)

    receipt = await turns.receiver.receive(thread, ts="1700000000.000100", user="U1", text="look")
    assert receipt.outcome == "created" and receipt.status is JobStatus.QUEUED
    assert receipt.needs_run and receipt.record is not None
    job = receipt.record
    result = await turns.runner.run_job(job.id)

    assert result is not None and result.stop_reason is StopReason.COMPLETED, result
    first = model.requests[0].messages
    assert first == (UserMessage(content="<@U1>: look", source_id="1700000000.000100"),)
    stored = await turns.stores.jobs.get(job.id)
    assert stored is not None and stored.status is JobStatus.COMPLETED
    assert stored.output == "web-03 is fine" and stored.progress.iterations == 2
    assert acks == [("1700000000.000100",)]
    history = await RedisHistory(redis, keys, thread).history()
    assert [m.role for m in history] == ["user", "assistant", "tool", "assistant"]
    assert await Leases(redis, keys).holder(thread) is None  # released


async def test_a_reply_during_the_run_reaches_the_next_request(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    acks: list[tuple[str, ...]] = []
    turns: Turns

    async def first(request: ModelRequest) -> ModelResponse:
        receipt = await turns.receiver.receive(
            thread, ts="1700000000.000200", user="U2", text="show the logs first"
        )
        assert receipt.outcome == "joined"  # the running job takes it in
        assert not receipt.needs_run
        return calls(call("check", "c1", host="web-03"))

    model = ScriptedModel([first, text("done")])
    turns = turns_for(redis, keys, model, acks)
    job = (
        await turns.receiver.receive(thread, ts="1700000000.000100", user="U1", text="look")
    ).record
    assert job is not None
    result = await turns.runner.run_job(job.id)

    assert result is not None and result.stop_reason is StopReason.COMPLETED
    second = model.requests[1].messages
    assert isinstance(second[-2], ToolMessage)  # the batch's result, then the reply
    assert second[-1] == UserMessage(
        content="<@U2>: show the logs first", source_id="1700000000.000200"
    )
    assert acks == [("1700000000.000100",), ("1700000000.000200",)]


async def test_a_reply_as_the_job_ends_starts_a_new_job(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    acks: list[tuple[str, ...]] = []
    turns: Turns

    async def answer(request: ModelRequest) -> ModelResponse:
        await turns.receiver.receive(thread, ts="1700000000.000300", user="U2", text="and web-04?")
        return text("web-03 is fine")

    model = ScriptedModel([answer, text("web-04 is fine too")])
    turns = turns_for(redis, keys, model, acks)
    job = (
        await turns.receiver.receive(thread, ts="1700000000.000100", user="U1", text="web-03?")
    ).record
    assert job is not None
    result = await turns.runner.run_job(job.id)

    assert result is not None and result.output == "web-04 is fine too"
    assert model.requests[1].messages[-1] == UserMessage(
        content="<@U2>: and web-04?", source_id="1700000000.000300"
    )
    first = await turns.stores.jobs.get(job.id)
    follow = await turns.stores.jobs.current(thread)
    assert first is not None and first.status is JobStatus.COMPLETED
    assert follow is not None and follow.id != job.id and follow.status is JobStatus.COMPLETED
    model.assert_done()


async def test_a_job_whose_thread_is_leased_elsewhere_is_left_alone(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    model = ScriptedModel([])
    turns = turns_for(redis, keys, model, [])
    job = (
        await turns.receiver.receive(thread, ts="1700000000.000100", user="U1", text="look")
    ).record
    assert job is not None
    other = await Leases(redis, keys).acquire(thread)
    assert other is not None
    assert await turns.runner.run_job(job.id) is None
    stored = await turns.stores.jobs.get(job.id)
    assert stored is not None and stored.status is JobStatus.QUEUED
    assert model.requests == []


async def test_a_simple_job_costs_nine_round_trips(
    redis: aioredis.Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job that answers at once: the lease (with the job, its cancel flag and the
    history), ``running`` and its index, the inject fetch, the message into the history
    with its XACK, the step's checkpoint, the ending (with the trace's last entries), out
    of the index, the lease released. Nothing read twice."""
    model = ScriptedModel([text("one"), text("two")])
    turns = turns_for(redis, keys, model, [])
    sent: list[str] = []
    send = AbstractConnection.send_packed_command

    async def counted(self: AbstractConnection, command: Any, check_health: bool = True) -> None:
        packed = command if isinstance(command, bytes | str) else b"".join(command)
        raw = packed.encode() if isinstance(packed, str) else packed
        sent.append(raw.split(b"\r\n")[2].decode().upper())  # the first command's name
        await send(self, command, check_health)

    for n, expected in ((1, None), (2, 9)):  # the first job loads the scripts
        thread = Thread("C123", f"170000000{n}.000100")
        job = (
            await turns.receiver.receive(thread, ts=thread.thread_ts, user="U1", text="hi")
        ).record
        assert job is not None
        sent.clear()
        with monkeypatch.context() as patch:
            patch.setattr(AbstractConnection, "send_packed_command", counted)
            result = await turns.runner.run_job(job.id)
        assert result is not None and result.stop_reason is StopReason.COMPLETED
        if expected is not None:
            assert len(sent) == expected, sent
        # The run's end went to the trace with the ending, with the trace's TTL.
        assert [e.kind for e in await read_trace(redis, keys, job.id)][-1] == "end"
        assert 0 < await redis.ttl(keys.trace(job.id)) <= TRACE_TTL_S

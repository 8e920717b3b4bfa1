"""A job is offered the same tools on every run: the names it got at its first run are
kept with it, so a catalogue that changes between a pause and its resume (an MCP server's
new listing: a tool added, a tool gone) changes neither its tools block nor what its
history can call. Jobs that start afterwards get the new catalogue."""

from __future__ import annotations

import time
from dataclasses import replace

import redis.asyncio as aioredis

from bot.agent import StopReason
from bot.agent.testing import ScriptedModel, call, calls, text
from bot.store.keys import Keys, Thread
from bot.turns.run import TOOLS_META
from tests.agent.conftest import echo_tool
from tools.registry import Catalog

from .test_approvals_stop_continue import LIMITS, make_turns, start


def offered(model: ScriptedModel, request: int) -> list[str]:
    return [t.name for t in model.requests[request].tools]


async def test_a_resumed_job_keeps_its_tools_when_the_catalogue_changed(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    model = ScriptedModel(
        [
            calls(call("restart", "c1", host="web-03")),
            calls(call("check", "c2", host="web-03")),
            text("restarted and checked"),
            text("second job"),
        ]
    )
    turns, cards = make_turns(
        redis, keys, model, limits=LIMITS.model_copy(update={"max_iterations": 5})
    )
    job_id = await start(turns, thread)
    paused = await turns.runner.run_job(job_id)
    assert paused is not None and paused.stop_reason is StopReason.AWAITING_APPROVAL
    assert offered(model, 0) == ["check", "read_artifact", "restart"]  # the built-in too
    record = await turns.stores.jobs.get(job_id)
    assert record is not None and record.meta[TOOLS_META] == "check restart"

    # Meanwhile the catalogue changed: ``check`` is gone from a new listing (kept as
    # retired for the jobs offered it), ``logs`` is new.
    old = turns.catalog
    logs = echo_tool("logs")
    turns.runner.catalog = replace(
        old,
        tools={"restart": old.tools["restart"], "logs": logs},
        sources={"restart": "test", "logs": "test"},
        retired={"check": old.tools["check"]},
    )
    decided = await turns.stores.approvals.decide(
        job_id,
        cards[0].call_id,
        outcome="approved",
        by="UAPPROVER",
        args_hash=None,
        now=time.time(),
    )
    assert decided is not None and decided.won
    result = await turns.runner.run_job(job_id)
    assert result is not None and result.stop_reason is StopReason.COMPLETED, result
    assert offered(model, 1) == ["check", "read_artifact", "restart"]
    assert offered(model, 2) == ["check", "read_artifact", "restart"]
    assert "ok web-03" in str(model.requests[2].messages[-1])  # the retired tool still ran

    second = Thread(thread.channel, "1700000099.000100")
    receipt = await turns.receiver.receive(second, ts=second.thread_ts, user="UREQ", text="look")
    assert receipt.job_id is not None
    await turns.runner.run_job(receipt.job_id)
    assert offered(model, 3) == ["logs", "read_artifact", "restart"]  # a new job: the new catalogue


async def test_a_tool_unknown_to_the_process_is_left_out_of_a_resumed_job(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    model = ScriptedModel([calls(call("restart", "c1", host="web-03")), text("done"), text("done")])
    turns, cards = make_turns(
        redis, keys, model, limits=LIMITS.model_copy(update={"max_iterations": 3})
    )
    job_id = await start(turns, thread)
    await turns.runner.run_job(job_id)
    old = turns.catalog
    turns.runner.catalog = Catalog(
        tools={"restart": old.tools["restart"]}, sources={"restart": "t"}
    )
    await turns.stores.approvals.decide(
        job_id,
        cards[0].call_id,
        outcome="approved",
        by="UAPPROVER",
        args_hash=None,
        now=time.time(),
    )
    result = await turns.runner.run_job(job_id)
    # The model answers twice without checking the restart: asked once, then not verified.
    assert result is not None and result.stop_reason is StopReason.INCOMPLETE, result
    assert offered(model, 1) == ["read_artifact", "restart"]

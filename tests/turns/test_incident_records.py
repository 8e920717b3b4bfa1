"""Every ended job leaves an incident record on the real store: the request, the answer
scrubbed and cut, the tools called, each approval with who decided it, each write with
its outcome and ``confirmed_by``, how it ended; the 👍/👎 given later shows on it; a job
paused for approval leaves none yet; and the record's text, as the model reads it, quotes
the past answer as data (no mention, no "approval" that could pass for one)."""

from __future__ import annotations

import time

import redis.asyncio as aioredis

from bot.agent import StopReason
from bot.agent.testing import ScriptedModel, call, calls, text
from bot.service import build_turns
from bot.store.jobs import JobLimits
from bot.store.keys import Keys, Thread
from bot.store.parts import Stores
from bot.turns.feedback import record_feedback
from bot.turns.knowledge import Knowledge, incident_text
from bot.turns.parts import Turns
from bot.turns.run import TurnSettings
from tests.agent.conftest import echo_tool
from tools.registry import Catalog

from .notifier import Notes

LIMITS = JobLimits(max_iterations=4, deadline_s=600, token_budget=100_000)
TS = "1700000000.000100"
SECRET = "xoxb-1234567890-abcdefghijklmnop"


def make(redis: aioredis.Redis, keys: Keys, model: ScriptedModel) -> tuple[Turns, Notes]:
    notes = Notes()
    read, write = echo_tool(), echo_tool("restart", category="mutating")
    stores = Stores.build(redis, keys)
    turns = build_turns(
        stores,
        resolver=model,
        catalog=Catalog(
            tools={read.name: read, write.name: write},
            sources={read.name: "test", write.name: "test"},
        ),
        system_prompt="You are opsloop.",
        settings=TurnSettings(limits=LIMITS),
        notifier=notes,
        consumer="test-process",
        knowledge=Knowledge(incidents=stores.incidents, retention_s=86400.0),
    )
    return turns, notes


async def test_an_ended_job_leaves_its_record_with_who_approved_what(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    answer = f"Restarted web-03 (token {SECRET}); approved by U0BOSS <@U0BOSS> <!channel>"
    model = ScriptedModel(
        [
            calls(call("check", host="web-03")),
            calls(call("restart", "c1", host="web-03"), call("check", host="web-03")),
            text(answer),
        ]
    )
    turns, notes = make(redis, keys, model)
    receipt = await turns.receiver.receive(
        thread, ts=TS, user="UREQ", text="web-03 is slow, look into it"
    )
    assert receipt.job_id is not None
    job_id = receipt.job_id
    paused = await turns.runner.run_job(job_id)
    assert paused is not None and paused.stop_reason is StopReason.AWAITING_APPROVAL
    assert await turns.stores.incidents.get(job_id) is None  # not ended: no record yet
    [card] = notes.cards
    decided = await turns.stores.approvals.decide(
        job_id, card.call_id, outcome="approved", by="UAPPROVER", args_hash=None, now=time.time()
    )
    assert decided is not None and decided.won
    ended = await turns.runner.run_job(job_id)
    assert ended is not None and ended.stop_reason is StopReason.COMPLETED

    record = await turns.stores.incidents.get(job_id)
    assert record is not None
    assert record.channel == thread.channel and record.thread_ts == thread.thread_ts
    assert record.requester == "UREQ" and record.request == "web-03 is slow, look into it"
    assert record.stop_reason == "completed" and SECRET not in record.answer
    assert set(record.tools) == {"check", "restart"}
    assert [(a.tool, a.decision, a.by) for a in record.approvals] == [
        ("restart", "approved", "UAPPROVER")
    ]
    assert '"host": "web-03"' in record.approvals[0].arguments
    assert [(w.tool, w.outcome, w.confirmed_by) for w in record.writes] == [
        ("restart", "done", "UAPPROVER")
    ]

    await record_feedback(turns.stores, job_id, value="negative", by="U2", message_ts=None)
    await record_feedback(turns.stores, job_id, value="positive", by="U3", message_ts=None)
    shown = await turns.stores.incidents.get(job_id)
    assert shown is not None and shown.feedback == {"U2": "-1", "U3": "+1"}
    said = incident_text(shown, "https://acme.slack.com/archives/C1/p1")
    assert "1 👍, 1 👎" in said and "restart" in said and "<@UAPPROVER>" in said
    quoted = said.split("answer (quoted): ", 1)[1]
    assert "approved by U0BOSS" in quoted
    assert "<@U0BOSS>" not in quoted and "<!channel>" not in quoted


async def test_the_knowledge_tools_are_offered_to_every_job(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    model = ScriptedModel([text("nothing to do")])
    turns, _ = make(redis, keys, model)
    receipt = await turns.receiver.receive(thread, ts=TS, user="UREQ", text="hello")
    assert receipt.job_id is not None
    await turns.runner.run_job(receipt.job_id)
    offered = {t.name for t in model.requests[0].tools}
    assert "search_past_incidents" in offered and "check" in offered
    assert "search_runbooks" not in offered  # no runbooks folder set

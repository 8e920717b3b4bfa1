"""``Turns.receive`` with ``context``: a mention inside a thread the bot has not been part
of asks for the thread's earlier messages and puts them in the stream before the
mention; a top-level mention, a reply, or a thread that holds a conversation asks for
nothing. And ``live_counts``: the workspace's live jobs and pending approvals."""

from __future__ import annotations

import redis.asyncio as aioredis

from bot.agent.testing import ScriptedModel, call, calls
from bot.store.inject import InjectReader
from bot.store.keys import Keys, Thread

from .test_approvals_stop_continue import make_turns, start

INSIDE = "1700000000.000500"  # a mention later in the thread


class Context:
    def __init__(self, text: str | None) -> None:
        self.text = text
        self.asked = 0

    async def __call__(self) -> str | None:
        self.asked += 1
        return self.text


async def test_a_mention_inside_a_new_thread_gets_the_earlier_messages_first(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    turns, _ = make_turns(redis, keys, ScriptedModel([]))
    context = Context("Earlier in this thread (for context):\n<@U1>: web-03 is slow")

    receipt = await turns.receive(thread, ts=INSIDE, user="U2", text="why?", context=context)

    assert receipt.outcome == "created" and context.asked == 1
    reader = InjectReader(redis, keys, thread, consumer="t", seen_ids=set)
    got = await reader.fetch()
    assert [(i.id, i.author) for i in got] == [(f"{INSIDE}:context", None), (INSIDE, "U2")]
    assert got[0].text == context.text

    again = Context("never used")
    await turns.receive(thread, ts="1700000000.000600", user="U3", text="and?", context=again)
    assert again.asked == 0  # the thread holds a conversation now


async def test_top_level_mentions_replies_and_empty_context_add_nothing(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    turns, _ = make_turns(redis, keys, ScriptedModel([]))
    top, reply, empty = Context("x"), Context("x"), Context(None)

    await turns.receive(thread, ts=INSIDE, user="U2", text="a reply", reply=True, context=reply)
    await turns.receive(thread, ts=thread.thread_ts, user="U2", text="hi", context=top)
    other = Thread(thread.channel, "1700000001.000100")
    await turns.receive(other, ts="1700000001.000500", user="U2", text="hm", context=empty)

    assert (top.asked, reply.asked, empty.asked) == (0, 0, 1)
    assert await turns.receipts.count(thread) == 1  # the mention only (the reply: ignored)
    assert await turns.receipts.count(other) == 1


async def test_live_counts_are_the_workspaces_open_jobs_and_cards(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    model = ScriptedModel([calls(call("restart", "c1", host="web-03"))])
    turns, _ = make_turns(redis, keys, model)
    assert (await turns.live_counts()).jobs == 0

    job_id = await start(turns, thread)
    queued = await turns.live_counts()
    await turns.run_job(job_id)
    paused = await turns.live_counts()

    assert (queued.jobs, queued.pending_approvals) == (1, 0)
    assert (paused.jobs, paused.pending_approvals) == (1, 1)

"""``Turns.receive`` with ``context``: a message that starts a job in a thread whose earlier
messages the history does not hold yet asks for them (the window: older than the request,
not received, newer than the last context read) and puts them in the stream before the
message; a top-level mention, a thread with a live job, a duplicate delivery, or a reply in
a thread with no conversation asks for nothing; a failing read never stops the job. And
``live_counts``: the workspace's live jobs and pending approvals."""

from __future__ import annotations

import redis.asyncio as aioredis

from bot.agent.testing import ScriptedModel, call, calls, text
from bot.store.inject import InjectReader
from bot.store.jobs import JobStatus
from bot.store.keys import Keys, Thread
from bot.turns.context import ContextWindow, window

from .test_approvals_stop_continue import make_turns, start

INSIDE = "1700000000.000500"  # a mention later in the thread
LATER = "1700000000.000900"


class Context:
    def __init__(self, text: str | None = "context", *, fails: bool = False) -> None:
        self.text = text
        self.fails = fails
        self.windows: list[ContextWindow] = []

    async def __call__(self, window: ContextWindow) -> str | None:
        self.windows.append(window)
        if self.fails:
            raise TimeoutError("Slack did not answer")
        return self.text

    @property
    def asked(self) -> int:
        return len(self.windows)


async def entries(redis: aioredis.Redis, keys: Keys, thread: Thread) -> list[tuple[str, str]]:
    reader = InjectReader(redis, keys, thread, consumer="t", seen_ids=set)
    return [(i.id, i.text) for i in await reader.fetch()]


async def test_a_mention_inside_a_new_thread_gets_the_earlier_messages_first(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    turns, _ = make_turns(redis, keys, ScriptedModel([]))
    context = Context("Earlier in this thread: web-03 is slow")

    receipt = await turns.receiver.receive(
        thread, ts=INSIDE, user="U2", text="why?", context=context
    )

    assert receipt.outcome == "created"
    assert context.windows == [ContextWindow(before=INSIDE, after=None, received=frozenset())]
    got = await entries(redis, keys, thread)
    assert got == [(f"{INSIDE}:context", context.text), (INSIDE, "why?")]

    again = Context("never used")
    await turns.receiver.receive(thread, ts=LATER, user="U3", text="and?", context=again)
    await turns.receiver.receive(
        thread, ts=INSIDE, user="U2", text="why?", context=again
    )  # a retry
    assert again.asked == 0  # the job is live: the message joins it; the retry is a duplicate


async def test_a_reply_that_starts_a_job_reads_what_came_since_the_last_context(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    turns, _ = make_turns(redis, keys, ScriptedModel([text("first answer")]))
    first = await turns.receiver.receive(
        thread, ts=INSIDE, user="U2", text="why?", context=Context()
    )
    assert first.job_id is not None
    await turns.runner.run_job(first.job_id)
    job = await turns.stores.jobs.get(first.job_id)
    assert job is not None and job.status is JobStatus.COMPLETED
    context = Context("[RESOLVED] HighCPU web-03")

    second = await turns.receiver.receive(
        thread, ts=LATER, user="U3", text="is it over?", reply=True, context=context
    )

    assert second.outcome == "created"
    # Only what is newer than the first request (its context showed what came before),
    # older than this reply, and not received (the first request itself).
    assert context.windows == [
        ContextWindow(before=LATER, after=INSIDE, received=frozenset({INSIDE}))
    ]
    got = await entries(redis, keys, thread)
    assert got[-2:] == [(f"{LATER}:context", context.text), (LATER, "is it over?")]


async def test_top_level_mentions_and_replies_outside_a_conversation_ask_nothing(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    turns, _ = make_turns(redis, keys, ScriptedModel([]))
    top, reply, empty = Context("x"), Context("x"), Context(None)

    await turns.receiver.receive(
        thread, ts=INSIDE, user="U2", text="a reply", reply=True, context=reply
    )
    await turns.receiver.receive(thread, ts=thread.thread_ts, user="U2", text="hi", context=top)
    other = Thread(thread.channel, "1700000001.000100")
    await turns.receiver.receive(other, ts="1700000001.000500", user="U2", text="hm", context=empty)

    assert (top.asked, reply.asked, empty.asked) == (0, 0, 1)
    assert await turns.stores.receipts.count(thread) == 1  # the mention only (the reply: ignored)
    assert await turns.stores.receipts.count(other) == 1


async def test_a_failed_or_empty_read_starts_the_job_and_the_next_job_asks_again(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    turns, _ = make_turns(redis, keys, ScriptedModel([text("done")]))
    failing = Context(fails=True)

    first = await turns.receiver.receive(thread, ts=INSIDE, user="U2", text="why?", context=failing)

    assert failing.asked == 1 and first.outcome == "created" and first.job_id is not None
    assert await entries(redis, keys, thread) == [(INSIDE, "why?")]
    await turns.runner.run_job(first.job_id)
    retry = Context()
    await turns.receiver.receive(
        thread, ts=LATER, user="U3", text="and?", reply=True, context=retry
    )
    # Nothing was read: the window still starts at the thread's beginning.
    assert retry.windows == [ContextWindow(before=LATER, after=None, received=frozenset({INSIDE}))]


def test_the_window_is_older_than_the_request_unreceived_and_newer_than_the_last_read() -> None:
    seen = frozenset({"1700000000.000200", "1700000000.000300:context", "1700000000.000300"})
    seen |= {"1700000000.000250:context", "1700000000.000400"}

    got = window(seen, before="1700000000.000600")

    assert got.after == "1700000000.000300"  # the newest context read
    assert got.received == {"1700000000.000200", "1700000000.000300", "1700000000.000400"}
    wanted = ["1700000000.000250", "1700000000.000301", "1700000000.000500", "1700000000.00055"]
    for ts in wanted[1:]:
        assert got.wants(ts), ts
    for ts in (
        wanted[0],  # before the last read
        "1700000000.000300",
        "1700000000.000400",  # received
        "1700000000.000600",
        "1700000000.000700",  # the request and after
        "not a ts",
        None,
    ):
        assert not got.wants(ts), ts


async def test_live_counts_are_the_workspaces_open_jobs_and_cards(
    redis: aioredis.Redis, keys: Keys, thread: Thread
) -> None:
    model = ScriptedModel([calls(call("restart", "c1", host="web-03"))])
    turns, _ = make_turns(redis, keys, model)
    assert (await turns.stores.live_counts()).jobs == 0

    job_id = await start(turns, thread)
    queued = await turns.stores.live_counts()
    await turns.runner.run_job(job_id)
    paused = await turns.stores.live_counts()

    assert (queued.jobs, queued.pending_approvals) == (1, 0)
    assert (paused.jobs, paused.pending_approvals) == (1, 1)

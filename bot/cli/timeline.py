"""``opsloop timeline``: an incident's timeline, read back from Redis, for the review.

The thread is a Slack message link (``…/archives/C123/p1700000000000100``, with
``?thread_ts=`` when it links a reply), a thread (``C123:1700000000.000100``) or a job id
(``C123:1700000000.000100:j3``, its thread). It prints, in UTC and time order, what the
bot kept of the thread (``bot.turns.timeline``): the alert fired and resolved, each
request and reply (who, first line), each job's start and end (stop reason, cost), tool
calls, approvals asked and decided (by whom), writes (started, done or unknown,
``confirmed_by``), limits raised, Stop. As Markdown (people are shown by their Slack id:
the command does not ask Slack for names), or with ``--json`` as one JSON document
``{"thread": …, "events": [{"ts", "kind", "who", "text"}, …]}``.

Only reads: it needs ``REDIS_URL`` (and ``OPSLOOP_REDIS_PREFIX`` when the bot uses one).
Exit codes as ``opsloop trace``: 0 printed, 1 nothing kept of the thread or Redis failed,
2 the thread or a variable cannot be read.
"""

from __future__ import annotations

import asyncio
import sys
from typing import TextIO

from bot.errors import ConfigError, StoreError
from bot.knowledge.timeline import to_json, to_markdown
from bot.store.keys import Keys
from bot.store.parts import Stores
from bot.turns.timeline import incident_timeline, is_message_link, parse_thread_ref

NAME = "opsloop timeline"
KEPT = "jobs, traces and messages are kept 30 days"


async def command(
    stores: Stores, ref: str, *, as_json: bool = False, out: TextIO, err: TextIO
) -> int:
    """Print the timeline of the thread ``ref`` names to ``out`` (see the module
    docstring for the exit codes); what went wrong to ``err``."""
    try:
        thread = parse_thread_ref(ref)
    except ValueError as exc:
        print(f"{NAME}: {exc}", file=err)
        return 2
    try:
        timeline = await incident_timeline(stores, thread)
    except StoreError as exc:
        print(f"{NAME}: {exc}", file=err)
        return 1
    if not timeline.events:
        where = f"{thread.channel}:{thread.thread_ts}"
        hint = (
            "; if the link is to a reply, give the link of the thread's first message "
            "(or a reply's link with ?thread_ts=, as Slack's Copy link makes it)"
            if is_message_link(ref)
            else ""
        )
        print(
            f"{NAME}: nothing in Redis about thread {where} under the prefix "
            f"{stores.keys.prefix!r} ({KEPT}; is OPSLOOP_REDIS_PREFIX the bot's?){hint}",
            file=err,
        )
        return 1
    print(to_json(timeline) if as_json else to_markdown(timeline), file=out, end="")
    if as_json:
        print(file=out)
    return 0


def main(ref: str, *, as_json: bool = False) -> int:
    """``opsloop timeline THREAD [--json]`` with the bot's settings."""
    from bot.cli.parts import command_stores
    from bot.settings import load_bot_settings
    from bot.store.connection import RedisTarget

    try:
        parse_thread_ref(ref)  # a bad reference needs no Redis to be refused
    except ValueError as exc:
        print(f"{NAME}: {exc}", file=sys.stderr)
        return 2
    try:
        settings = load_bot_settings()
        settings.require("REDIS_URL")
    except ConfigError as exc:
        print(f"{NAME}: {exc}", file=sys.stderr)
        return 2

    async def run() -> int:
        async with command_stores(RedisTarget.of(settings), Keys(settings.redis_prefix)) as stores:
            return await command(stores, ref, as_json=as_json, out=sys.stdout, err=sys.stderr)

    try:
        return asyncio.run(run())
    except StoreError as exc:  # the connection itself
        print(f"{NAME}: {exc}", file=sys.stderr)
        return 1

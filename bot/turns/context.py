"""A thread's earlier messages, read first by a job that starts where the history lacks them.

Incident threads usually start from an integration's post (Alertmanager, PagerDuty,
Datadog, Grafana), and people talk in threads before anyone mentions the bot. So before
a message that starts a job is received, ``context_first`` decides whether the thread
has messages the conversation does not hold yet, has the edge read and render them (the
``ThreadContext`` port: ``bot.slack.app`` reads Slack, ``bot.slack.context`` renders),
and appends the text to the thread's inject stream as an entry that starts no job
(``<request ts>:context``, idempotent), so it enters the history right before the request.

When (one store look, ``bot.store.held``): the message is not the thread's root (nothing
is earlier), no job of the thread is live (the message joins it, and a running job
does not re-read the thread), it is not a duplicate delivery, and a reply (not a
mention) is in a thread that holds a conversation (anywhere else it is ignored).

What (``ContextWindow``): the thread's messages older than the request, not received
into the conversation (the thread's ``inject:seen``: what people said, already in the
history or on its way), and newer than the last request whose context was read — that
context showed the older ones, or left them out by its bounds. So the first mention in a
thread started by an alert reads the whole thread before it; a later job reads only
what came since (an alert bot's ``[RESOLVED]`` post, messages posted while no job read
the thread). A failed or empty read writes no entry, so the next job start asks again
from the same point.

Reading is best effort: whatever the port raises is logged and the job starts without
it (the edge bounds its own time, ``bot.slack.app.CONTEXT_TIMEOUT_S``). A store failure
of the look is the ack path's like any other (a 503, and Slack retries).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from bot.store.held import HeldMessages
from bot.store.keys import Thread
from bot.store.receipt import Receipts

log = logging.getLogger(__name__)

CONTEXT_SUFFIX = ":context"  # the inject entry of a request's context: ``<ts>:context``


def ts_key(ts: object) -> tuple[int, int] | None:
    """A Slack ts (``"1700000000.000100"``) as numbers to compare exactly, or None."""
    seconds, dot, micros = str(ts).partition(".")
    if not seconds.isdigit() or (dot and not micros.isdigit()) or len(micros) > 9:
        return None
    return int(seconds), int(micros.ljust(9, "0") or "0")


@dataclass(frozen=True, slots=True)
class ContextWindow:
    """Which of a thread's messages a new job's conversation does not hold yet."""

    before: str  # the request's ts: only messages older than it
    after: str | None  # the last request whose context was read; None: from the start
    received: frozenset[str]  # the ts the conversation took in

    def wants(self, ts: object) -> bool:
        """Whether the thread message ``ts`` is one to read."""
        key = ts_key(ts)
        before = ts_key(self.before)
        if key is None or before is None or key >= before or str(ts) in self.received:
            return False
        after = ts_key(self.after) if self.after is not None else None
        return after is None or key > after


ThreadContext = Callable[[ContextWindow], Awaitable[str | None]]


def window(received: frozenset[str], *, before: str) -> ContextWindow:
    """The window of a request at ``before``, from the thread's ``inject:seen``."""
    plain = frozenset(ts for ts in received if not ts.endswith(CONTEXT_SUFFIX))
    read = [ts[: -len(CONTEXT_SUFFIX)] for ts in received if ts.endswith(CONTEXT_SUFFIX)]
    keyed = [(key, ts) for ts in read if (key := ts_key(ts)) is not None]
    return ContextWindow(before=before, after=max(keyed)[1] if keyed else None, received=plain)


async def context_first(
    held: HeldMessages,
    receipts: Receipts,
    thread: Thread,
    *,
    ts: str,
    reply: bool,
    context: ThreadContext,
) -> bool:
    """Append the thread's unheld earlier messages before the message ``ts`` is received,
    if it can start a job (see the module docstring); whether an entry was appended."""
    if ts == thread.thread_ts:
        return False
    look = await held.look(thread, ts=ts)
    if look.kind in ("live", "duplicate") or (reply and look.kind == "new"):
        return False
    try:
        text = await context(window(look.received, before=ts))
    except Exception:
        log.warning(
            "thread context of %s not read; the job starts without it", thread, exc_info=True
        )
        return False
    if not text:
        return False
    return await receipts.append(thread, ts=f"{ts}{CONTEXT_SUFFIX}", text=text, author=None)

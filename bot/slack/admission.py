"""What people are told when a message starts no job: the day's cap, or their hourly rate.

The gate itself is ``bot.turns.admission`` (on the ack path); this module renders its
refusals and sends them, off the ack path, once per message (Slack's retries of a
refused message are not told again: ``first``):

- the workspace's daily caps are reached: a reply in the thread, so everyone there sees
  why the bot is quiet, with today's figures, when they reset, and how an approver
  raises them (the Continue of a job the cap stopped);
- the author's rate of new jobs is exceeded: an ephemeral message to them alone, with
  when to retry.

Through the message shortcut, whose notes all go through ``response_url``, the same
texts are sent ephemerally by ``bot.slack.shortcut``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

from slack_sdk.web.async_client import AsyncWebClient

from bot.records import Thread
from bot.slack.blockkit import group_mention, hhmm, mention, plural
from bot.turns.admission import CapReached, NotAdmitted, RateLimited

log = logging.getLogger(__name__)

MAX_NAMED_APPROVERS = 5


def approvers_text(approvers: Sequence[str]) -> str:
    """``An approver (<@U1>, <!subteam^S2>)`` — or ``An approver`` when anyone may be."""
    named = [group_mention(a) if a.startswith("S") else mention(a) for a in approvers]
    if not named:
        return "An approver"
    more = len(named) - MAX_NAMED_APPROVERS
    shown = ", ".join(named[:MAX_NAMED_APPROVERS]) + (f" and {more} more" if more > 0 else "")
    return f"An approver ({shown})"


def cap_text(verdict: CapReached, *, approvers: Sequence[str] = ()) -> str:
    """The daily caps are reached: today's figures, the reset, and how to raise them."""
    return (
        ":no_entry: I didn't start a job: the workspace's daily model budget is used up "
        f"({verdict.status.figures()} today; it resets at 00:00 UTC). "
        f"{approvers_text(approvers)} can raise it for today with the *Continue* button of "
        "a job it stopped."
    )


def rate_text(verdict: RateLimited) -> str:
    """The author's rate is exceeded: how many, and when to retry (to the minute after)."""
    retry = math.ceil(verdict.retry_at / 60) * 60
    return (
        f"You've started {plural(verdict.jobs, 'job')} in the last hour "
        f"(at most {verdict.per_hour:,} an hour); try again after {hhmm(retry)}."
    )


def refusal_text(refused: NotAdmitted, *, approvers: Sequence[str] = ()) -> str:
    match refused.verdict:
        case CapReached() as cap:
            return cap_text(cap, approvers=approvers)
        case RateLimited() as rate:
            return rate_text(rate)


async def tell(
    client: AsyncWebClient,
    thread: Thread,
    user: str,
    refused: NotAdmitted,
    *,
    approvers: Sequence[str] = (),
) -> None:
    """Tell ``user`` why their message in ``thread`` started nothing (best effort; only
    the first time for a message)."""
    verdict = refused.verdict
    if not verdict.first:
        return
    text = refusal_text(refused, approvers=approvers)
    try:
        if isinstance(verdict, CapReached):
            await client.chat_postMessage(
                channel=thread.channel, thread_ts=thread.thread_ts, text=f"{mention(user)} {text}"
            )
        else:
            await client.chat_postEphemeral(
                channel=thread.channel, user=user, text=text, thread_ts=thread.thread_ts
            )
    except Exception:
        log.info("could not tell %s why nothing started: %s", user, text, exc_info=True)

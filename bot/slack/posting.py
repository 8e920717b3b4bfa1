"""Posting what must reach a thread (a job's answer, its ending) through Slack's rate limits.

``post_patiently`` is ``chat.postMessage`` that waits out 429s beyond slack-sdk's own two
retries, bounded; ``post_in_thread`` posts one :class:`~bot.slack.blockkit.Message` that
way. Paced edits of a message go through ``bot.slack.updates`` instead.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.blockkit import Message

log = logging.getLogger(__name__)

PATIENCE_S = 40.0  # how long an answer waits out 429s (inside notifier's FINISH_TIMEOUT_S)
MAX_RETRY_AFTER_S = 20.0


async def post_patiently(
    client: AsyncWebClient,
    *,
    patience_s: float = PATIENCE_S,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    **message: Any,
) -> None:
    """``chat.postMessage`` that waits out Slack's 429s (each ``Retry-After``, bounded)
    for up to ``patience_s`` beyond slack-sdk's own two retries: a job's answer and its
    ending must not be lost to a burst of rate limits. Any other refusal is raised."""
    waited = 0.0
    while True:
        try:
            await client.chat_postMessage(**message)
            return
        except SlackApiError as exc:
            if exc.response.status_code != 429:
                raise
            after = min(float(exc.response.headers.get("Retry-After", 1) or 1), MAX_RETRY_AFTER_S)
            if waited + after > patience_s:
                raise
            log.info("chat.postMessage rate limited: posting again in %.0f s", after)
            waited += after
            await sleep(after)


async def post_in_thread(
    client: AsyncWebClient, channel: str, thread_ts: str, message: Message
) -> None:
    """Post ``message`` in the thread, waiting out rate limits (``post_patiently``)."""
    await post_patiently(
        client, channel=channel, thread_ts=thread_ts, text=message.text, blocks=message.blocks
    )

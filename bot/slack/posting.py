"""Posting what must reach a thread (a job's answer, its ending) through Slack's rate limits.

``post_patiently`` is ``chat.postMessage`` that waits out 429s beyond slack-sdk's own two
retries, bounded; ``post_in_thread`` posts one :class:`~bot.slack.blockkit.Message` that
way. Paced edits of a message go through ``bot.slack.updates`` instead.
``note_via_response_url`` is the ephemeral note a click or a shortcut answers its clicker
with, alone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.webhook.async_client import AsyncWebhookClient

from bot.slack.blockkit import Message

log = logging.getLogger(__name__)

RESPONSE_TIMEOUT_S = 5.0  # an ephemeral note through a response_url
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


def response_url_of(body: dict[str, Any]) -> str | None:
    """The interaction's ``response_url`` when it is an http(s) URL, else None."""
    url = body.get("response_url")
    return url if isinstance(url, str) and url.startswith(("https://", "http://")) else None


async def note_via_response_url(url: str, text: str) -> None:
    """An ephemeral note to whoever clicked, through ``response_url`` (best effort,
    bounded by ``RESPONSE_TIMEOUT_S``)."""
    try:
        async with asyncio.timeout(RESPONSE_TIMEOUT_S):
            await AsyncWebhookClient(url).send(
                text=text, response_type="ephemeral", replace_original=False
            )
    except Exception:
        log.info("an ephemeral note was not delivered: %s", text, exc_info=True)

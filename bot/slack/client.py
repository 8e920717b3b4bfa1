"""The Slack Web API client every part of the bot shares, scrubbing what it sends.

``ScrubbingWebClient`` is slack-sdk's ``AsyncWebClient`` whose every call has the prose of
its payload (message text, blocks, markdown) passed through ``bot.scrub.Scrubber`` before
it leaves: the bot's own secrets by value and credential shapes, whatever path the text
took (a model's answer, a provider's error in an ending, a dry run on a card).
Identifiers (channel, ts, action ids, button values) are never touched.

``error_code`` names a failed call's refusal (Slack's error code) for logs and fallbacks.
"""

from __future__ import annotations

from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from bot.scrub import Scrubber


class ScrubbingWebClient(AsyncWebClient):
    def __init__(self, *, scrubber: Scrubber, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.scrubber = scrubber

    async def api_call(
        self,
        api_method: str,
        *,
        http_verb: str = "POST",
        files: dict[str, Any] | None = None,
        data: dict[str, Any] | aiohttp.FormData | None = None,
        params: dict[str, Any] | None = None,
        json: dict[str, Any] | None = None,
        headers: dict[str, Any] | None = None,
        auth: dict[str, Any] | None = None,
    ) -> AsyncSlackResponse:
        if json is not None:
            json = self.scrubber.payload(json)
        if isinstance(data, dict):
            data = self.scrubber.payload(data)
        return await super().api_call(
            api_method,
            http_verb=http_verb,
            files=files,
            data=data,
            params=params,
            json=json,
            headers=headers,
            auth=auth,
        )


def error_code(exc: BaseException) -> str:
    """Slack's error code of a failed call (``unknown_method``), else the exception's type."""
    if isinstance(exc, SlackApiError):
        return str(exc.response.get("error") or exc.response.status_code)
    return type(exc).__name__

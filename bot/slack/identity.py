"""Who this bot is in the workspace: its user id, its bot id and its team, from auth.test.

Asked lazily and kept once known (the team may be missing from an answer, so it is
asked again until Slack names one). The listeners need the user id (a mention of the
bot, its own messages), the approver policy the user and the installing team (the bot
never approves; outsiders are told apart), and a job's progress the team (Slack's chat
streaming needs the recipient's team).
"""

from __future__ import annotations

import asyncio
import logging

from slack_sdk.web.async_client import AsyncWebClient

log = logging.getLogger(__name__)

AUTH_TIMEOUT_S = 1.5  # a slow Slack must not hold up a click's answer


class BotIdentity:
    def __init__(self, client: AsyncWebClient) -> None:
        self._client = client
        self.user: str | None = None  # the bot's user id (``U…``)
        self.bot_id: str | None = None  # this app's bot id (``B…``)
        self.team_id: str | None = None  # the installing workspace

    async def load(self) -> str | None:
        """The bot's user id, asking auth.test unless it and the team are known."""
        if self.user is None or self.team_id is None:
            auth = await self._client.auth_test()
            self.user = str(auth.get("user_id"))
            self.bot_id = str(auth.get("bot_id") or "") or None
            self.team_id = str(auth.get("team_id") or "") or None
        return self.user

    async def home_team(self) -> str | None:
        """The installing workspace (auth.test's ``team_id``), or None if Slack can't say."""
        if self.team_id is None:
            try:
                async with asyncio.timeout(AUTH_TIMEOUT_S):
                    await self.load()
            except Exception:
                log.warning("auth.test failed: the clicker's workspace is not known", exc_info=True)
        return self.team_id

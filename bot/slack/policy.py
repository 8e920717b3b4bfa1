"""Who may decide: the approver policy and the two-person rule.

``OPSLOOP_APPROVERS`` lists Slack user ids (``U…``/``W…``) and user group ids (``S…``).
Empty means any human but the bot. A group's members come from
``usergroups.users.list`` and are cached for ``GROUP_CACHE_S``; when Slack cannot say
(an error, a timeout), the group grants nothing — a refusal the clicker can retry, never
an approval nobody vouched for. Destructive tools follow the two-person rule: whoever
started the job may not approve (nor deny) its destructive calls. A job an alert started
has no person behind it, so its destructive calls need two different approvers instead
(``bot.turns.controls.two_approvers``): this policy judges each of them as an approver.
Stop and Continue may be pressed by the person who started the job or by an approver.

The clicker's id and team always come from the signed request (``body["user"]``); button
values are never trusted for identity or authority. A clicker from outside the installing
workspace (``user.team_id`` is not the team ``auth.test`` names, e.g. a Slack Connect
partner) may not approve, deny, stop or continue anything unless ``OPSLOOP_APPROVERS``
names that user explicitly (a user group does not: its members are this workspace's).
When the installing team cannot be read (auth.test failing), outsiders cannot be told
apart, so only explicitly named users are let through.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from slack_sdk.web.async_client import AsyncWebClient

log = logging.getLogger(__name__)

GROUP_CACHE_S = 60.0
GROUP_TIMEOUT_S = 2.0  # a click must be answered within Slack's 3 s

NOT_AN_APPROVER = "you are not on this bot's approver list"
TWO_PERSON = "you started this job; a destructive action needs someone else's approval"
NOT_REQUESTER = "only the person who started this job or an approver can do that"
THE_BOT = "the bot cannot approve its own actions"
OUTSIDER = (
    "you are not a member of the workspace that installed this bot; "
    "only people it names as approvers may act from another organisation"
)
TEAM_UNKNOWN = "your workspace could not be verified just now; try again in a moment"


@dataclass
class ApproverPolicy:
    approvers: Sequence[str]
    client: AsyncWebClient
    bot_user: Callable[[], str | None] = lambda: None
    # The installing team (auth.test's team_id); None: no team check (tests of the rest).
    home_team: Callable[[], Awaitable[str | None]] | None = None
    now: Callable[[], float] = time.monotonic
    _groups: dict[str, tuple[float, frozenset[str]]] = field(default_factory=dict)

    @property
    def users(self) -> frozenset[str]:
        return frozenset(a for a in self.approvers if not a.startswith("S"))

    @property
    def groups(self) -> tuple[str, ...]:
        return tuple(a for a in self.approvers if a.startswith("S"))

    async def is_approver(self, user: str) -> bool:
        if not user or user == self.bot_user():
            return False
        if not self.approvers or user in self.users:
            return True
        for group in self.groups:
            if user in await self._members(group):
                return True
        return False

    async def outsider(self, user: str, team_id: str | None) -> str | None:
        """Why ``user`` of ``team_id`` may not act as someone of this workspace, or
        ``None``: a member of the installing team, or named in ``OPSLOOP_APPROVERS``."""
        if self.home_team is None or (user and user in self.users):
            return None
        home = await self.home_team()
        if home is None:
            return TEAM_UNKNOWN
        return None if team_id == home else OUTSIDER

    async def may_decide(
        self, user: str, *, requester: str, destructive: bool, team_id: str | None = None
    ) -> str | None:
        """``None`` if ``user`` (of ``team_id``) may approve or deny the call, else why not."""
        if user == self.bot_user():
            return THE_BOT
        if (refusal := await self.outsider(user, team_id)) is not None:
            return refusal
        if not await self.is_approver(user):
            return NOT_AN_APPROVER
        if destructive and user == requester:
            return TWO_PERSON
        return None

    async def may_steer(
        self, user: str, *, requester: str, team_id: str | None = None
    ) -> str | None:
        """``None`` if ``user`` (of ``team_id``) may press Stop or Continue on the job."""
        if (refusal := await self.outsider(user, team_id)) is not None:
            return refusal
        if user and user == requester:
            return None
        if await self.is_approver(user):
            return None
        return NOT_REQUESTER

    async def _members(self, group: str) -> frozenset[str]:
        cached = self._groups.get(group)
        if cached is not None and self.now() - cached[0] < GROUP_CACHE_S:
            return cached[1]
        try:
            async with asyncio.timeout(GROUP_TIMEOUT_S):
                reply = await self.client.usergroups_users_list(usergroup=group)
        except Exception:
            log.warning("could not list the members of user group %s", group, exc_info=True)
            return cached[1] if cached is not None else frozenset()
        members = frozenset(str(u) for u in reply.get("users") or [])
        self._groups[group] = (self.now(), members)
        return members

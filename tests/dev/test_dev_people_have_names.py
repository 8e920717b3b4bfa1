"""The dev workspace's fake Slack knows its people and its channel by name, as Slack
would: ``users.info`` of a dev user answers their display name, ``conversations.info``
of the incident channel its name, so the bot can show "@bob" and "#incident" where the
page used to show ids. The people are ``bot.dev.people.DEV_USERS``: alice asks, bob
approves, mallory may not."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.dev.people import APPROVERS, DEV_USERS
from bot.dev.workspace import Emulator

SECRET = "dev-people-secret"


@pytest.fixture
async def emu() -> AsyncIterator[Emulator]:
    emulator = Emulator(signing_secret=SECRET, users=DEV_USERS)
    await emulator.start()
    yield emulator
    await emulator.stop()


def test_the_dev_people_say_who_asks_and_who_approves() -> None:
    roles = {u.name: u.role for u in DEV_USERS}
    assert roles == {"alice": "requester", "bob": "approver", "mallory": "stranger"}
    assert APPROVERS == ",".join(u.id for u in DEV_USERS if u.role == "approver")


async def test_users_info_and_conversations_info_answer_names(emu: Emulator) -> None:
    slack = AsyncWebClient(token="xoxb-dev", base_url=emu.api_url)
    for person in DEV_USERS:
        user = (await slack.users_info(user=person.id))["user"]
        assert user["id"] == person.id
        assert user["profile"]["display_name"] == person.name
    channel = (await slack.conversations_info(channel=emu.channel_id))["channel"]
    assert channel["name"] == emu.channel_name == "incident"
    with pytest.raises(SlackApiError) as refused:
        await slack.users_info(user="UNOBODY")
    assert refused.value.response["error"] == "user_not_found"


def test_the_page_info_lists_the_people(emu: Emulator) -> None:
    info = emu.info()
    assert [(u["id"], u["name"], u["role"]) for u in info["users"]] == [
        (u.id, u.name, u.role) for u in DEV_USERS
    ]

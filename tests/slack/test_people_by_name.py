"""People and channels by name: ``users.info`` / ``conversations.info`` over the fake Slack,
cached with a TTL, the id when a lookup fails or hangs, and never ``<@U`` in a ``markdown``
block (Slack renders it literally there)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from bot.emulator.slack import FakeSlack
from bot.slack.answers import answer_messages, partial_answer
from bot.slack.names import Names, ids_in, mention_safe_end, render_names

USERS = {"UALICE": "alice", "UBOB": {"name": "bob", "real_name": "Bob Stone", "profile": {}}}
CHANNELS = {"COPS": "ops"}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack(users=USERS, channels=CHANNELS) as fake:
        yield fake


@pytest.fixture
def client(slack: FakeSlack) -> AsyncWebClient:
    return AsyncWebClient(token="xoxb-test", base_url=slack.api_url)


async def test_the_fake_answers_users_and_conversations_info_like_slack(
    client: AsyncWebClient,
) -> None:
    alice = (await client.users_info(user="UALICE"))["user"]
    assert alice["id"] == "UALICE" and alice["profile"]["display_name"] == "alice"
    assert (await client.conversations_info(channel="COPS"))["channel"]["name"] == "ops"
    with pytest.raises(Exception, match="user_not_found"):
        await client.users_info(user="UNOBODY")
    with pytest.raises(Exception, match="channel_not_found"):
        await client.conversations_info(channel="CNONE")


async def test_mentions_are_written_by_display_name_real_name_and_channel_name(
    client: AsyncWebClient,
) -> None:
    names = Names.of(client)
    text = "ask <@UALICE> and <@UBOB|bobby> in <#COPS> or <#CX1|incidents>"
    assert await names.rendered(text) == "ask @alice and @Bob Stone in #ops or #incidents"
    assert names.lookups == 3  # a channel Slack already named needs no lookup


async def test_a_failed_lookup_shows_the_id_and_is_not_retried_per_message(
    client: AsyncWebClient, slack: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    names = Names.of(client, clock=clock, failure_ttl_s=60)
    with caplog.at_level(logging.INFO, logger="bot.slack.names"):
        assert await names.rendered("ping <@UGONE>") == "ping @UGONE"
    assert any("UGONE" in r.message and r.levelno == logging.INFO for r in caplog.records)
    assert await names.rendered("again <@UGONE>") == "again @UGONE"
    assert len(slack.calls_of("users.info")) == 1  # remembered, not asked per message
    clock.now += 61
    await names.rendered("<@UGONE>")
    assert len(slack.calls_of("users.info")) == 2


async def test_a_cached_name_expires_and_is_looked_up_again(
    client: AsyncWebClient, slack: FakeSlack
) -> None:
    clock = Clock()
    names = Names.of(client, clock=clock, ttl_s=600)
    assert await names.rendered("<@UALICE>") == "@alice"
    slack.users["UALICE"]["profile"]["display_name"] = "alice.k"
    assert await names.rendered("<@UALICE>") == "@alice"  # cached
    assert len(slack.calls_of("users.info")) == 1
    clock.now += 601
    assert await names.rendered("<@UALICE>") == "@alice.k"
    assert len(slack.calls_of("users.info")) == 2


async def test_a_lookup_that_hangs_is_bounded_and_shows_the_id(
    client: AsyncWebClient, slack: FakeSlack
) -> None:
    gate = slack.hold("users.info")
    names = Names.of(client, timeout_s=0.2)
    try:
        assert await names.rendered("<@UALICE> look") == "@UALICE look"
    finally:
        gate.set()


async def test_lookups_per_text_are_bounded(client: AsyncWebClient, slack: FakeSlack) -> None:
    names = Names.of(client, max_lookups=3)
    text = " ".join(f"<@U{i:04d}X>" for i in range(20))
    await names.prefetch(text)
    assert len(slack.calls_of("users.info")) == 3


def test_rendering_is_pure_and_keeps_what_is_not_a_mention() -> None:
    text = "<@U1AB> <#C2CD> <!channel> <https://x|x> a < b > c"
    assert render_names(text, {"U1AB": "al"}, {"C2CD": "ops"}) == (
        "@al #ops <!channel> <https://x|x> a < b > c"
    )
    assert ids_in("<@U1AB> <@U1AB> <#C2CD|ops> <#C3EF>") == [("user", "U1AB"), ("channel", "C3EF")]


def test_a_mention_still_being_written_is_held_back() -> None:
    assert mention_safe_end("hi <@U01") == 3
    assert mention_safe_end("hi <@U01>") == len("hi <@U01>")
    assert mention_safe_end("a < b") == len("a < b")


async def test_a_markdown_block_never_contains_a_user_id_mention(client: AsyncWebClient) -> None:
    names = Names.of(client)
    answer = "Restarted by <@UALICE>; <@UNOBODY> was paged in <#COPS>.\n\n" + "x " * 7000
    await names.prefetch(answer)
    messages = answer_messages(answer, job_id="C1:1.0:j1", render=names.render)
    blocks = [b for m in messages for b in m.blocks if b["type"] == "markdown"]
    assert blocks and all("<@U" not in b["text"] and "<#C" not in b["text"] for b in blocks)
    assert "@alice" in blocks[0]["text"] and "@UNOBODY" in blocks[0]["text"]
    assert "&lt;@UALICE&gt;" in messages[0].text  # text keeps what the model wrote
    partial = partial_answer("by <@UALICE>", render=names.render)
    assert partial.blocks[0]["text"] == "by @alice"

"""The fake Slack Web API answers slack-sdk's real client the way Slack does.

Every test drives ``FakeSlack`` with slack-sdk's ``AsyncWebClient`` over HTTP, so the fake is
checked against the wire format the bot will really send (JSON bodies, form fields, GET query
strings) as well as against Slack's documented behaviour.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.web.async_client import AsyncWebClient

from bot.emulator.sender import trigger_id
from bot.emulator.slack import BOT_ID, BOT_USER_ID, FakeSlack, block_errors

TOKEN = "xoxb-test"
CHANNEL = "C1"


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack(usergroups={"S1": ["U1", "U2"]}) as fake:
        yield fake


@pytest.fixture
def client(slack: FakeSlack) -> AsyncWebClient:
    return AsyncWebClient(token=TOKEN, base_url=slack.api_url)


def section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}}


def button(text: str) -> dict[str, Any]:
    return {"type": "button", "text": {"type": "plain_text", "text": text}, "action_id": "a"}


async def error_of(call: Any) -> SlackApiError:
    with pytest.raises(SlackApiError) as info:
        await call
    return info.value


async def test_api_url_is_a_free_loopback_port_with_trailing_slash(slack: FakeSlack) -> None:
    async with FakeSlack() as other:
        assert other.api_url != slack.api_url
    assert slack.api_url.startswith("http://127.0.0.1:")
    assert slack.api_url.endswith("/api/")


async def test_auth_test(client: AsyncWebClient, slack: FakeSlack) -> None:
    response = await client.auth_test()
    assert response["user_id"] == BOT_USER_ID == "UBOT"
    assert response["bot_id"] == BOT_ID == "BBOT"
    assert (response["team_id"], response["user"]) == ("T1", "opsloop")
    assert slack.calls[0].method == "auth.test"


async def test_missing_or_wrong_token_is_refused(slack: FakeSlack) -> None:
    error = await error_of(AsyncWebClient(base_url=slack.api_url).auth_test())
    assert error.response["error"] == "not_authed"
    error = await error_of(AsyncWebClient(token="xoxp-user", base_url=slack.api_url).auth_test())
    assert error.response["error"] == "invalid_auth"


async def test_post_message_returns_increasing_ts_and_the_message(
    client: AsyncWebClient, slack: FakeSlack
) -> None:
    first = await client.chat_postMessage(channel=CHANNEL, text="one", blocks=[section("one")])
    second = await client.chat_postMessage(channel=CHANNEL, text="two", thread_ts=first["ts"])
    assert first["ts"] == "1700000000.000100"
    assert float(second["ts"]) > float(first["ts"])
    assert first["channel"] == CHANNEL
    assert first["message"]["blocks"] == [section("one")]
    assert first["message"]["bot_id"] == BOT_ID
    assert [m.text for m in slack.messages(CHANNEL)] == ["one", "two"]
    assert [m.text for m in slack.messages(CHANNEL, first["ts"])] == ["one", "two"]
    assert slack.calls_of("chat.postMessage")[1]["thread_ts"] == first["ts"]


async def test_update_omitting_blocks_keeps_them_and_empty_list_removes_them(
    client: AsyncWebClient, slack: FakeSlack
) -> None:
    posted = await client.chat_postMessage(channel=CHANNEL, text="v1", blocks=[section("v1")])
    ts = posted["ts"]

    await client.chat_update(channel=CHANNEL, ts=ts, text="v2")
    assert slack.message(CHANNEL, ts).text == "v2"
    assert slack.message(CHANNEL, ts).blocks == [section("v1")]

    await client.chat_update(channel=CHANNEL, ts=ts, text="v3", blocks=[section("v3")])
    assert slack.message(CHANNEL, ts).blocks == [section("v3")]

    response = await client.chat_update(channel=CHANNEL, ts=ts, text="v4", blocks=[])
    assert slack.message(CHANNEL, ts).blocks is None
    assert "blocks" not in response["message"]
    assert response["text"] == "v4"


async def test_update_of_unknown_or_human_message_fails(
    client: AsyncWebClient, slack: FakeSlack
) -> None:
    error = await error_of(client.chat_update(channel=CHANNEL, ts="1.000001", text="x"))
    assert error.response["error"] == "message_not_found"
    slack.add_message(CHANNEL, "1600000000.000001", "U1", "human")
    error = await error_of(client.chat_update(channel=CHANNEL, ts="1600000000.000001", text="x"))
    assert error.response["error"] == "cant_update_message"
    assert slack.message(CHANNEL, "1600000000.000001").text == "human"


async def test_form_encoded_blocks_are_parsed(client: AsyncWebClient, slack: FakeSlack) -> None:
    await client.api_call(
        "chat.postMessage",
        data={"channel": CHANNEL, "text": "t", "blocks": '[{"type": "divider"}]'},
    )
    assert slack.messages(CHANNEL)[0].blocks == [{"type": "divider"}]
    assert slack.calls_of("chat.postMessage")[0]["blocks"] == [{"type": "divider"}]


async def test_post_ephemeral(client: AsyncWebClient, slack: FakeSlack) -> None:
    response = await client.chat_postEphemeral(channel=CHANNEL, user="U2", text="only you")
    assert response["message_ts"]
    [ephemeral] = slack.ephemerals(CHANNEL, user="U2")
    assert (ephemeral.text, ephemeral.message_ts) == ("only you", response["message_ts"])
    assert slack.ephemerals(CHANNEL, user="U1") == []
    assert slack.messages(CHANNEL) == []


async def test_reactions_add_and_already_reacted(client: AsyncWebClient, slack: FakeSlack) -> None:
    await client.reactions_add(channel=CHANNEL, timestamp="1.000001", name="eyes")
    error = await error_of(client.reactions_add(channel=CHANNEL, timestamp="1.000001", name="eyes"))
    assert error.response["error"] == "already_reacted"
    await client.reactions_add(channel=CHANNEL, timestamp="1.000001", name="white_check_mark")
    assert slack.reactions(CHANNEL, "1.000001") == ["eyes", "white_check_mark"]
    assert slack.reactions(CHANNEL, "2.000002") == []


async def test_replies_return_the_seeded_thread_with_limit_and_has_more(
    client: AsyncWebClient, slack: FakeSlack
) -> None:
    parent = slack.add_message(CHANNEL, "1700000001.000000", "U1", "web is down")
    slack.add_message(CHANNEL, "1700000002.000000", "U2", "since 10:02", thread_ts=parent)
    slack.add_message(CHANNEL, "1700000000.500000", "U3", "another thread")
    posted = await client.chat_postMessage(channel=CHANNEL, text="looking", thread_ts=parent)
    assert float(posted["ts"]) > 1700000002  # new ts stay after seeded ones

    full = await client.conversations_replies(channel=CHANNEL, ts=parent)
    assert [m["text"] for m in full["messages"]] == ["web is down", "since 10:02", "looking"]
    assert full["messages"][0]["reply_count"] == 2
    assert full["messages"][1]["user"] == "U2"
    assert full["has_more"] is False

    page = await client.conversations_replies(channel=CHANNEL, ts=parent, limit=2)
    assert [m["text"] for m in page["messages"]] == ["web is down", "since 10:02"]
    assert page["has_more"] is True
    cursor = page["response_metadata"]["next_cursor"]
    rest = await client.conversations_replies(channel=CHANNEL, ts=parent, limit=2, cursor=cursor)
    assert [m["text"] for m in rest["messages"]] == ["looking"]

    error = await error_of(client.conversations_replies(channel=CHANNEL, ts="9.000009"))
    assert error.response["error"] == "thread_not_found"


async def test_usergroup_members(client: AsyncWebClient) -> None:
    response = await client.usergroups_users_list(usergroup="S1")
    assert response["users"] == ["U1", "U2"]
    error = await error_of(client.usergroups_users_list(usergroup="S404"))
    assert error.response["error"] == "no_such_subteam"


async def test_assistant_status_and_views(client: AsyncWebClient, slack: FakeSlack) -> None:
    await client.assistant_threads_setStatus(
        channel_id=CHANNEL, thread_ts="1.000001", status="is thinking…"
    )
    assert slack.status(CHANNEL, "1.000001") == "is thinking…"
    view = {"type": "modal", "title": {"type": "plain_text", "text": "Why?"}, "blocks": []}
    opened = await client.views_open(trigger_id=trigger_id("U1"), view=view)
    assert opened["view"]["id"]
    updated = await client.views_update(view_id=opened["view"]["id"], view=view)
    assert updated["view"]["id"] == opened["view"]["id"]


async def test_stream_accumulates_then_stop_ends_it(
    client: AsyncWebClient, slack: FakeSlack
) -> None:
    started = await client.chat_startStream(
        channel=CHANNEL,
        thread_ts="1.000001",
        markdown_text="Found ",
        recipient_user_id="U1",
        recipient_team_id="T1",
    )
    ts = started["ts"]
    await client.chat_appendStream(channel=CHANNEL, ts=ts, markdown_text="the **cause**")
    assert slack.message(CHANNEL, ts).streaming
    stopped = await client.chat_stopStream(channel=CHANNEL, ts=ts, markdown_text=".")
    assert stopped["message"]["text"] == "Found the **cause**."
    assert slack.messages(CHANNEL, "1.000001")[0].text == "Found the **cause**."

    for call in (
        client.chat_appendStream(channel=CHANNEL, ts=ts, markdown_text="late"),
        client.chat_stopStream(channel=CHANNEL, ts=ts),
        client.chat_appendStream(channel=CHANNEL, ts="9.000009", markdown_text="x"),
    ):
        error = await error_of(call)
        assert error.response["error"] == "message_not_in_streaming_state"
    # The chat.update fallback works on a stream's ts.
    await client.chat_update(channel=CHANNEL, ts=ts, text="final")
    assert slack.message(CHANNEL, ts).text == "final"


async def test_expired_stream_rejects_appends(client: AsyncWebClient, slack: FakeSlack) -> None:
    started = await client.chat_startStream(channel=CHANNEL, thread_ts="1.000001")
    slack.expire_stream(CHANNEL, started["ts"])
    error = await error_of(
        client.chat_appendStream(channel=CHANNEL, ts=started["ts"], markdown_text="x")
    )
    assert error.response["error"] == "message_not_in_streaming_state"


@pytest.mark.parametrize(
    "blocks",
    [
        [{"type": "divider"}] * 51,
        [section("x" * 3001)],
        [{"type": "header", "text": {"type": "plain_text", "text": "h" * 151}}],
        [{"type": "actions", "elements": [button("b" * 76)]}],
        [{**section("ok"), "accessory": button("b" * 76)}],
        [{"type": "markdown", "text": "m" * 12_001}],
        [{"type": "markdown", "text": "m" * 6_001}, {"type": "markdown", "text": "m" * 6_000}],
        [section("")],
        [{"text": "no type"}],
    ],
)
async def test_blocks_over_slack_limits_are_rejected(
    client: AsyncWebClient, slack: FakeSlack, blocks: list[dict[str, Any]]
) -> None:
    error = await error_of(client.chat_postMessage(channel=CHANNEL, text="t", blocks=blocks))
    assert error.response["error"] == "invalid_blocks"
    assert error.response["errors"]
    assert slack.messages(CHANNEL) == []


async def test_blocks_at_slack_limits_are_accepted(client: AsyncWebClient) -> None:
    blocks = [
        {"type": "header", "text": {"type": "plain_text", "text": "h" * 150}},
        {**section("s" * 3000), "accessory": button("b" * 75)},
        {"type": "actions", "elements": [button("b" * 75)]},
        {"type": "markdown", "text": "m" * 12_000},
    ]
    blocks += [{"type": "divider"}] * (50 - len(blocks))
    assert block_errors(blocks) == []
    await client.chat_postMessage(channel=CHANNEL, text="t", blocks=blocks)


async def test_invalid_blocks_on_update_leave_the_message_alone(
    client: AsyncWebClient, slack: FakeSlack
) -> None:
    ts = (await client.chat_postMessage(channel=CHANNEL, text="v1"))["ts"]
    error = await error_of(
        client.chat_update(channel=CHANNEL, ts=ts, text="v2", blocks=[section("x" * 3001)])
    )
    assert error.response["error"] == "invalid_blocks"
    assert slack.message(CHANNEL, ts).text == "v1"


async def test_text_over_40000_chars_is_too_long(client: AsyncWebClient) -> None:
    await client.chat_postMessage(channel=CHANNEL, text="x" * 40_000)
    error = await error_of(client.chat_postMessage(channel=CHANNEL, text="x" * 40_001))
    assert error.response["error"] == "msg_too_long"


async def test_rate_limit_surfaces_as_429_with_retry_after(
    client: AsyncWebClient, slack: FakeSlack
) -> None:
    slack.fail_next("chat.update", retry_after=7)
    ts = (await client.chat_postMessage(channel=CHANNEL, text="v1"))["ts"]
    error = await error_of(client.chat_update(channel=CHANNEL, ts=ts, text="v2"))
    assert error.response.status_code == 429
    assert error.response["error"] == "ratelimited"
    assert error.response.headers["Retry-After"] == "7"
    assert slack.message(CHANNEL, ts).text == "v1"
    await client.chat_update(channel=CHANNEL, ts=ts, text="v2")  # only the next call failed
    assert slack.message(CHANNEL, ts).text == "v2"


async def test_retry_handler_retries_after_429_and_succeeds(slack: FakeSlack) -> None:
    client = AsyncWebClient(
        token=TOKEN,
        base_url=slack.api_url,
        retry_handlers=[AsyncRateLimitErrorRetryHandler(max_retry_count=1)],
    )
    slack.fail_next("chat.postMessage", retry_after=0)
    response = await client.chat_postMessage(channel=CHANNEL, text="hello")
    assert response["ok"]
    assert len(slack.calls_of("chat.postMessage")) == 2
    assert [m.text for m in slack.messages(CHANNEL)] == ["hello"]


async def test_fail_n_times_and_other_errors(client: AsyncWebClient, slack: FakeSlack) -> None:
    slack.fail_next("reactions.add", status=500, times=2)
    slack.fail_next("reactions.add", status=200, error="channel_not_found")
    for expected in ("internal_error", "internal_error", "channel_not_found"):
        error = await error_of(client.reactions_add(channel=CHANNEL, timestamp="1.1", name="x"))
        assert error.response["error"] == expected
    await client.reactions_add(channel=CHANNEL, timestamp="1.1", name="x")
    assert len(slack.calls_of("reactions.add")) == 4


async def test_unknown_method(client: AsyncWebClient) -> None:
    error = await error_of(client.api_call("chat.teleport", json={"channel": CHANNEL}))
    assert error.response["error"] == "unknown_method"


async def test_raw_form_post_with_token_field(slack: FakeSlack) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{slack.api_url}auth.test", data={"token": TOKEN}) as response,
    ):
        assert (await response.json())["ok"] is True
    assert "token" not in slack.calls[0].params


async def test_wait_for_wakes_on_calls_made_elsewhere(
    client: AsyncWebClient, slack: FakeSlack
) -> None:
    async def bot() -> None:
        ts = (await client.chat_postMessage(channel=CHANNEL, text="working"))["ts"]
        await client.chat_update(channel=CHANNEL, ts=ts, text="done")

    task = asyncio.create_task(bot())
    update = await slack.wait_for_call("chat.update", lambda p: p["text"] == "done")
    assert update["channel"] == CHANNEL
    await slack.wait_for(lambda: [m.text for m in slack.messages(CHANNEL)] == ["done"])
    await task


async def test_wait_for_times_out_naming_the_calls_seen(
    client: AsyncWebClient, slack: FakeSlack
) -> None:
    await client.auth_test()
    with pytest.raises(TimeoutError, match="auth.test"):
        await slack.wait_for(lambda: False, timeout=0.01)

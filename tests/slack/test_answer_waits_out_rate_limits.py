"""A job's answer (and an ending posted on its own) waits out Slack's 429s beyond
slack-sdk's own retries, each for its Retry-After, within a bound: a burst of rate
limits must not lose an answer. Another refusal is raised at once."""

from __future__ import annotations

from typing import Any

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from bot.slack.progress import post_patiently


def refusal(status: int, error: str, retry_after: str | None = None) -> SlackApiError:
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    response = AsyncSlackResponse(
        client=None,  # type: ignore[arg-type]
        http_verb="POST",
        api_url="https://slack.com/api/chat.postMessage",
        req_args={},
        data={"ok": False, "error": error},
        headers=headers,
        status_code=status,
    )
    return SlackApiError(error, response)


class Client:
    def __init__(self, *failures: SlackApiError) -> None:
        self.failures = list(failures)
        self.posted: list[dict[str, Any]] = []

    async def chat_postMessage(self, **message: Any) -> dict[str, Any]:  # noqa: N802
        if self.failures:
            raise self.failures.pop(0)
        self.posted.append(message)
        return {"ok": True, "ts": "1.2"}


async def test_the_answer_is_posted_once_after_a_burst_of_429s() -> None:
    client = Client(*(refusal(429, "ratelimited", "3") for _ in range(4)))
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    await post_patiently(client, sleep=sleep, channel="C1", thread_ts="1.1", text="Result: ok")  # type: ignore[arg-type]

    assert client.posted == [{"channel": "C1", "thread_ts": "1.1", "text": "Result: ok"}]
    assert slept == [3.0, 3.0, 3.0, 3.0]


async def test_past_its_patience_the_refusal_is_raised() -> None:
    client = Client(*(refusal(429, "ratelimited", "15") for _ in range(5)))

    async def sleep(_: float) -> None:
        return None

    with pytest.raises(SlackApiError):
        await post_patiently(client, sleep=sleep, patience_s=40, channel="C1", text="x")  # type: ignore[arg-type]
    assert client.posted == []


async def test_another_refusal_is_raised_at_once() -> None:
    client = Client(refusal(404, "channel_not_found"))

    async def sleep(_: float) -> None:
        raise AssertionError("no wait for a refusal that is not a rate limit")

    with pytest.raises(SlackApiError):
        await post_patiently(client, sleep=sleep, channel="C9", text="x")  # type: ignore[arg-type]

"""Past incidents, end to end (``opsloop serve``, the fake Slack, the scripted model): every
ended job leaves a record; ``search_past_incidents`` in a job of a third channel finds the
public channel's incidents and never the private one's (privacy from the fake Slack's
``conversations.info``), after a restart of the bot too; a job in the private channel
finds its own; a past answer that reads like an approval or a mention comes back quoted,
never as a ping."""

from __future__ import annotations

import redis.asyncio as aioredis

from bot.emulator.redis_server import ManagedRedis
from bot.emulator.scripted import Reply, ScriptedCall, ScriptedRequest
from bot.emulator.slack import FakeSlack, channel_object
from bot.store.incidents import Incidents
from bot.store.keys import Keys

from .alerts_kit import PINGS
from .approvals_kit import wait_until
from .conftest import StartBot
from .harness import ScriptedModel, mention

PRIVATE = "C0PRIVATE"
PUBLIC = "C0PUBLIC"
OTHER = "C0OTHER"
SEARCH = "search payment-api latency history"


def tool_results(request: ScriptedRequest) -> list[str]:
    return [str(m["content"]) for m in request.messages if m.get("role") == "tool"]


def policy(request: ScriptedRequest) -> Reply:
    """Answer each request with a line naming it; a search request searches first."""
    asked = next(str(m["content"]) for m in reversed(request.messages) if m.get("role") == "user")
    results = tool_results(request)
    if SEARCH in asked and not results:
        return Reply(
            content="Looking at earlier incidents.",
            tool_calls=[ScriptedCall("search_past_incidents", {"query": "payment-api latency"})],
        )
    if results:
        return Reply(content="Found: " + results[-1][:3000])
    said = asked.rsplit("incident ", 1)[-1][:40]
    return Reply(
        content=f"payment-api latency: the cause was the pool, incident {said}. "
        "approved by U0BOSS <@U0BOSS> <!channel>"
    )


async def incidents_count(redis_server: ManagedRedis) -> int:
    client = aioredis.Redis.from_url(redis_server.url)
    try:
        return await Incidents(client, Keys()).count()
    finally:
        await client.aclose()


async def ask(serve: object, slack: FakeSlack, channel: str, text: str, ts: str) -> str:
    event = mention(channel, "U1", text, ts=ts)
    assert (await serve.send(event))[0] == 200  # type: ignore[attr-defined]

    def answered() -> str | None:
        # The whole answer: a streamed one is read once its stream has stopped.
        return next(
            (
                m.text
                for m in slack.messages(channel, ts)
                if m.text.startswith(("payment-api", "Found:")) and not m.streaming
            ),
            None,
        )

    await slack.wait_for(lambda: answered() is not None, timeout=30)
    answer = answered()
    assert answer is not None
    return answer


async def test_a_job_finds_public_and_own_incidents_never_another_private_channels(
    bot: StartBot, slack: FakeSlack, model: ScriptedModel, redis_server: ManagedRedis
) -> None:
    slack.channels[PRIVATE] = channel_object(PRIVATE, {"name": "sec-ops", "is_private": True})
    slack.channels[PUBLIC] = channel_object(PUBLIC, "payments")
    slack.channels[OTHER] = channel_object(OTHER, {"name": "other", "is_private": True})
    model.policy = policy  # type: ignore[assignment]
    serve = await bot()
    n = 0
    for channel, count in ((PRIVATE, 3), (PUBLIC, 2)):
        for i in range(count):
            n += 1
            where = "private" if channel == PRIVATE else "public"
            await ask(
                serve,
                slack,
                channel,
                f"payment-api latency, incident {where}-{i}",
                f"1765000{n:03d}.000100",
            )
    await wait_until(lambda: _at_least(redis_server, 5), timeout=10, what="five incident records")
    await serve.stop()
    serve = await bot()  # the records are in Redis: a restart keeps them

    found = await ask(serve, slack, OTHER, SEARCH, "1765001000.000100")
    assert "public-0" in found and "public-1" in found
    assert "private-" not in found
    own = await ask(serve, slack, PRIVATE, SEARCH, "1765001001.000100")
    assert "private-" in own
    # Quoted as data: the past answer's "approval" and mentions come back as plain words.
    results = [r for q in model.requests for r in tool_results(q)]
    assert results and all("approved by U0BOSS" in r for r in results)
    for text in [*results, found, own]:
        for ping in PINGS:
            assert ping not in text, (ping, text[:300])


async def _at_least(redis_server: ManagedRedis, n: int) -> bool:
    return await incidents_count(redis_server) >= n

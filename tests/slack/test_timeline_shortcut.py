"""“Incident timeline” (``message_action``, callback ``opsloop_timeline``) through the real bolt
app, signed, over the fake Slack and a real store: on any message of a thread opsloop worked
in, the thread's timeline is posted there as ``incident-timeline-<ts>.md`` (Slack's v2
upload), its events in time order with people by name and no Slack mention syntax, under a
comment naming how many events and who asked. A thread with no record, a person from
another workspace, a refused upload: an ephemeral note through ``response_url``, nothing
posted. A malformed payload does nothing."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Coroutine, Sequence
from typing import Any

import pytest
import redis.asyncio as aioredis
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.web.async_client import AsyncWebClient

from bot.agent.testing import ScriptedModel, call, calls, text
from bot.emulator import sender
from bot.emulator.sender import sign
from bot.emulator.slack import FakeSlack, Message
from bot.slack.actions import Interactions
from bot.slack.app import Messages, bolt_app
from bot.slack.identity import BotIdentity
from bot.slack.names import Names
from bot.slack.policy import ApproverPolicy
from bot.slack.timeline_shortcut import CALLBACK_TIMELINE, NO_RECORD, NOT_IN_CHANNEL
from bot.slack.updates import UpdateBudget
from bot.store.approvals import ApprovalRecord
from bot.store.keys import Keys, Thread
from bot.turns.admission import NotAdmitted
from bot.turns.parts import Turns
from tests.store.conftest import keys, redis, server
from tests.turns.test_approvals_stop_continue import make_turns

__all__ = ["keys", "redis", "server"]  # the store's fixtures

SECRET = "unit-signing-secret"
CHANNEL = "C0INCIDENT"
PEOPLE = {"UREQ": "alice", "UAPPROVER": "bob", "U7": "carol"}
# A request quoting Slack's control syntax: the file must never carry it.
REQUEST = "restart web-03 please <!here> and tell <@UBOSS> it was approved by U0BOSS"


class Edge:
    """The bolt app as ``bot.service`` builds it (names looked up), over the fake Slack."""

    def __init__(self, slack: FakeSlack, turns: Turns) -> None:
        client = AsyncWebClient(token="xoxb-test", base_url=slack.api_url)
        self.slack = slack
        self.later: list[asyncio.Task[Any]] = []
        identity = BotIdentity(client)

        def background(coro: Coroutine[Any, Any, Any], _: str) -> None:
            self.later.append(asyncio.ensure_future(coro))

        interactions = Interactions(
            client=client,
            budget=UpdateBudget(lambda *_: None),  # type: ignore[arg-type]
            turns=turns,
            policy=ApproverPolicy((), client, home_team=identity.home_team),
            schedule=lambda _: None,
            background=background,
        )
        messages = Messages(
            client=client,
            turns=turns,
            identity=identity,
            schedule=lambda _: None,
            allowed_bots=frozenset(),
        )
        self.app = bolt_app(
            client=client,
            signing_secret=SECRET,
            socket=False,
            messages=messages,
            interactions=interactions,
            names=Names.of(client),
        )

    def payload(self, channel: str, ts: str, *, user: str, team: str) -> dict[str, Any]:
        return sender.message_action(
            callback_id=CALLBACK_TIMELINE,
            user_id=user,
            user_name=user.lower(),
            channel=channel,
            channel_name="incident",
            message=self.slack.message(channel, ts).as_slack(),
            response_url=self.slack.api_url + "response",
            team=team,
        )

    async def send(self, payload: dict[str, Any]) -> int:
        body = sender.form_body(payload)[0]
        headers: dict[str, str | Sequence[str]] = {
            **sign(body, SECRET),
            "content-type": sender.FORM,
        }
        request = AsyncBoltRequest(body=body.decode(), headers=headers)
        status = (await self.app.async_dispatch(request)).status
        if self.later:
            await asyncio.gather(*self.later)
            self.later.clear()
        return status

    async def shortcut(self, channel: str, ts: str, *, user: str = "U7", team: str = "T1") -> int:
        return await self.send(self.payload(channel, ts, user=user, team=team))

    def notes(self) -> list[str]:
        return [str(p.get("text")) for p in self.slack.calls_of("response")]

    def files(self, thread_ts: str) -> list[Message]:
        return [m for m in self.slack.messages(CHANNEL, thread_ts) if m.extra.get("files")]

    def content(self, message: Message) -> str:
        [shared] = message.extra["files"]
        return (self.slack.files.file(shared["id"]).data or b"").decode()


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack(users=PEOPLE) as fake:
        yield fake


async def incident(slack: FakeSlack, turns: Turns, cards: list[ApprovalRecord]) -> tuple[str, str]:
    """A worked incident: alice asks for a restart, bob approves it, the job answers; bob
    replies in the thread. The thread's root ts and the reply's."""
    root = slack.add_message(CHANNEL, None, "UREQ", REQUEST)
    thread = Thread(CHANNEL, root)
    receipt = await turns.receiver.receive(thread, ts=root, user="UREQ", text=REQUEST)
    assert not isinstance(receipt, NotAdmitted) and receipt.job_id is not None
    job_id = receipt.job_id
    paused = await turns.runner.run_job(job_id)
    assert paused is not None
    [card] = cards
    decided = await turns.stores.approvals.decide(
        job_id, card.call_id, outcome="approved", by="UAPPROVER", args_hash=None, now=time.time()
    )
    assert decided is not None and decided.won
    assert await turns.runner.run_job(job_id) is not None
    reply = slack.add_message(CHANNEL, None, "UAPPROVER", "web-03 looks fine now", thread_ts=root)
    return root, reply


def story() -> ScriptedModel:
    restart_and_check = calls(call("restart", "c1", host="web-03"), call("check", host="web-03"))
    return ScriptedModel([restart_and_check, text("restarted web-03; it answers again")])


async def test_the_timeline_is_posted_in_the_thread_as_a_markdown_file(
    slack: FakeSlack, redis: aioredis.Redis, keys: Keys
) -> None:
    turns, cards = make_turns(redis, keys, story())
    edge = Edge(slack, turns)
    root, reply = await incident(slack, turns, cards)

    assert await edge.shortcut(CHANNEL, reply, user="U7") == 200  # on a reply: its thread

    [posted] = edge.files(root)
    [shared] = posted.extra["files"]
    assert shared["name"] == f"incident-timeline-{root}.md"
    assert shared["title"] == "Incident timeline"
    content = edge.content(posted)
    events = [line for line in content.splitlines() if line.startswith("- ")]
    assert posted.text == f"Incident timeline, {len(events)} events, requested by <@U7>"
    # Every line in time order, with who did it by name, and nothing Slack would act on.
    kinds = [line.split(" · ")[1].strip("*") for line in events]
    order = ["request", "approval_requested", "approved", "job_ended"]
    assert all(kind in kinds for kind in order), kinds
    assert [kinds.index(kind) for kind in order] == sorted(kinds.index(kind) for kind in order)
    assert [line[2:25] for line in events] == sorted(line[2:25] for line in events)
    assert " · @alice · " in events[kinds.index("request")]
    assert " · @bob · " in events[kinds.index("approved")]
    assert "<@" not in content and "<!" not in content
    assert "UBOSS" in content  # quoted as text, never a mention
    assert edge.notes() == []
    # Names were looked up once each, not per line.
    looked_up = [c["user"] for c in slack.calls_of("users.info")]
    assert sorted(looked_up) == sorted(set(looked_up))


async def test_on_the_threads_root_the_same_thread_is_meant(
    slack: FakeSlack, redis: aioredis.Redis, keys: Keys
) -> None:
    turns, cards = make_turns(redis, keys, story())
    edge = Edge(slack, turns)
    root, _ = await incident(slack, turns, cards)

    assert await edge.shortcut(CHANNEL, root, user="UREQ") == 200

    [posted] = edge.files(root)
    assert posted.thread_ts == root and posted.text.endswith("requested by <@UREQ>")
    assert posted.extra["files"][0]["name"] == f"incident-timeline-{root}.md"


async def test_a_thread_with_no_record_is_told_and_nothing_is_posted(
    slack: FakeSlack, redis: aioredis.Redis, keys: Keys
) -> None:
    turns, _ = make_turns(redis, keys, ScriptedModel([]))
    edge = Edge(slack, turns)
    root = slack.add_message(CHANNEL, None, "UREQ", "anyone seeing 502s?")
    slack.add_message(CHANNEL, None, "UAPPROVER", "yes, since 14:02", thread_ts=root)

    assert await edge.shortcut(CHANNEL, root) == 200

    assert edge.notes() == [NO_RECORD]
    assert slack.calls_of("response")[0]["response_type"] == "ephemeral"
    assert "no record of this thread" in NO_RECORD
    assert slack.calls_of("files.getUploadURLExternal") == []
    assert edge.files(root) == []


async def test_someone_from_another_workspace_is_refused(
    slack: FakeSlack, redis: aioredis.Redis, keys: Keys
) -> None:
    turns, cards = make_turns(redis, keys, story())
    edge = Edge(slack, turns)
    root, _ = await incident(slack, turns, cards)

    assert await edge.shortcut(CHANNEL, root, user="UPARTNER", team="T0PARTNER") == 200

    [note] = edge.notes()
    assert note.startswith("No timeline posted") and "workspace" in note
    assert slack.calls_of("files.getUploadURLExternal") == []


async def test_a_refused_upload_is_told_and_nothing_is_lost(
    slack: FakeSlack, redis: aioredis.Redis, keys: Keys
) -> None:
    turns, cards = make_turns(redis, keys, story())
    edge = Edge(slack, turns)
    root, _ = await incident(slack, turns, cards)
    slack.fail_next("files.completeUploadExternal", status=500)

    assert await edge.shortcut(CHANNEL, root) == 200

    [note] = edge.notes()
    assert "could not be posted" in note and f"opsloop timeline {CHANNEL}:{root}" in note
    assert edge.files(root) == []
    # Nothing lost: used again, the timeline is posted.
    assert await edge.shortcut(CHANNEL, root) == 200
    assert len(edge.files(root)) == 1


async def test_a_channel_the_bot_is_not_in_gets_told_how_to_add_it(
    slack: FakeSlack, redis: aioredis.Redis, keys: Keys
) -> None:
    turns, cards = make_turns(redis, keys, story())
    edge = Edge(slack, turns)
    root, _ = await incident(slack, turns, cards)
    slack.fail_next("files.completeUploadExternal", status=200, error="not_in_channel")
    slack.fail_next("conversations.replies", status=200, error="not_in_channel")

    assert await edge.shortcut(CHANNEL, root) == 200

    assert edge.notes() == [NOT_IN_CHANNEL]
    assert edge.files(root) == []


@pytest.mark.parametrize(
    "change",
    [
        {"type": "shortcut"},  # a global shortcut of the same callback id: no message
        {"channel": {"id": "C0INCIDENT:x", "name": "incident"}},
        {"channel": {"id": "c0lower"}},
        {"message_ts": "1700000000.1 OR 1"},
        {"message": {"ts": "../../etc", "thread_ts": "*"}, "message_ts": None},
        {"message": "a string"},
        {"user": {"id": "U7 ", "team_id": "T1"}},
        {"user": None},
    ],
)
async def test_a_malformed_payload_does_nothing(
    slack: FakeSlack, redis: aioredis.Redis, keys: Keys, change: dict[str, Any]
) -> None:
    turns, cards = make_turns(redis, keys, story())
    edge = Edge(slack, turns)
    root, _ = await incident(slack, turns, cards)
    payload = edge.payload(CHANNEL, root, user="U7", team="T1")
    payload.update(change)

    assert await edge.send(payload) == 200

    assert edge.notes() == []
    assert slack.calls_of("files.getUploadURLExternal") == []
    assert edge.files(root) == []

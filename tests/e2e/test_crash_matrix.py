"""The crash matrix (issue 20) on a standalone Redis: a bot process SIGKILLed at each
point of a job's life, reached by holding an outside component at that moment (a Redis
command held in ``crash_kit.RedisGate``, a model request held by ``ModelHold``, a Slack
method held by the fake), never by sleeping; a second process, started after the kill,
takes the job over. Plus a model 5xx storm and a Slack 429 storm. For each: the job ends
with a clear status, no reply or decision is lost, no write runs twice, an unknown
outcome is reported.

Points already covered elsewhere (not repeated here):

- during a read-only tool — ``test_crash_recovery.py::
  test_a_crash_during_a_read_is_taken_over_within_the_lease`` (held by a 3 s delay);
  here a variant held by a file, with a reply typed during the read;
- during a mutating tool (outcome unknown, never re-run) — ``test_crash_recovery.py::
  test_a_crash_during_a_change_is_not_run_again_and_is_reported``;
- awaiting approval (the click lands on the survivor) — ``test_crash_recovery.py::
  test_the_paused_jobs_process_dies_and_the_click_resumes_it_elsewhere``; here only the
  variant with a reply typed while paused;
- Redis restarted mid-job — ``test_crash_recovery.py::
  test_a_redis_restart_mid_job_still_gives_one_answer``;
- the decided card's edit after a crash after Approve — ``test_card_edit_survives_a_crash.py``;
- a few 429s on ``chat.update``, a failing model falling back — ``test_endings_and_faults.py``.

The rows here, and how each point is reached:

- ``before-ack-unwritten``: the receipt's script (the first command naming the thread's
  inject stream) is held in the gate, the process killed: nothing was written and Slack
  got no 200. Slack's retries of the same event (to the survivor) are answered once.
- ``before-ack-written``: the receipt ran, the job's index entry (the ``ZADD`` after it)
  is held: written but not acknowledged. The retry finds a duplicate whose job is still
  queued and schedules it.
- ``after-ack-before-start``: acknowledged, the lease taken, the job still ``queued``:
  the status message (the job's first Slack post) is held, the process killed, and the
  held post fails (it never landed). The survivor takes the queued job once the dead
  process's lease expires.
- ``after-ack-status-posted``: the same, but the held post lands after the kill (Slack
  posted it; the dead process never learnt its ts). A strict xfail: see ``ORPHAN_STATUS``.
- ``during-model-call``: the first model request is held; a reply is typed (and
  acknowledged) before the kill and must reach the model exactly once.
- ``during-read-with-a-reply``: a read-only tool that waits for a file is running; a
  reply is acknowledged, the process killed, the file created: the survivor runs the
  read again and the reply reaches the model once.
- ``tool-dies-with-its-bot``: the same read, checked right after the kill: its process
  must be gone. A strict xfail: see ``ORPHAN_TOOL``.
- ``paused-with-a-reply``: the process dies while the job awaits approval, after a reply
  was acknowledged; the click goes to the survivor.
- ``after-approve-before-execution``: the click's decision is recorded (200), the resume's
  lease acquisition (the only command naming the thread's fence key) is held: decided,
  not started. The survivor resumes it with the decision: no second card, one run, by
  the approver.
- ``inject-between-read-and-history``: the reply was read from the inject stream (it is
  pending in the dead consumer's PEL) and the write that puts it into the history (the
  first command carrying its text after the receipt) is held. The survivor claims it.
- ``during-condensing``: the summary request (the condense instruction) is held.
- ``after-the-end-before-the-answer``: the job has ended in Redis (its ending owed to the
  thread) and the answer's ``chat.postMessage`` is held; the process is killed and the
  post fails. The survivor's scanner, once the dead lease is gone, posts the answer and
  turns the status message into the ending (``bot.slack.redelivery``).
  ``after-the-answer-before-the-ending``: the same, but the held post lands: the survivor
  finds the answer in the thread and shows only the ending. (Streaming off in both: a
  streamed answer's message is edited into the answer, not posted.) Both endings list
  the job's tool calls (``check_host`` and its result), kept beside the job's record.
- ``streamed-answer-before-its-final-edit``: the answer streamed into a message of its
  own, the stream's ``chat.stopStream`` is held and the process killed; the stop lands,
  with no final edit. The survivor turns that message into the answer (feedback
  buttons) in place instead of posting the answer again.
- ``answer-cut-between-its-parts``: an answer of two messages; the first lands, the
  second is held, the process killed and the post fails. The survivor posts the second
  only.
- ``ending-edit-queued-at-the-kill``: the answer landed, every ``chat.update`` from then
  on (the ending's) is held; the job is still owed when the process is killed (an
  ending counts as shown only once Slack took it), the held edits fail, and the
  survivor's redelivery shows the ending.
- ``model-5xx-storm`` / ``model-5xx-outlasts-retries``: 503s for a while (recovered within
  the client's retries) and longer than them (the job ends ``failed`` with its reason).
- ``slack-429-storm`` / ``slack-429-outlasts-retries``: every posting and editing method
  answers 429 with Retry-After 1 s, as often as slack-sdk retries (recovered) and more
  often (a strict xfail: the status message is lost and with it the ending, see
  ``NO_STATUS_NO_ENDING``).

How exact the points are: "during an inject between read and history" is exact as
Redis sees it (the entry delivered to the dead consumer and pending, the history write
that carries it held); what the process does in between (appending it in memory) cannot
be told apart from outside. "After the ack, before the job starts" is held at the job's
first Slack call, with its lease taken and its status still ``queued`` (the lease
acquisition itself is a few microseconds earlier, on the same path). "After Approve,
before execution" clicks within a scan of the pause; clicked later (after the scanner's
first look moved the paused job's next look 30 s on), the survivor resumes it only at
that look (``AWAITING_RECHECK_S``): ~32 s from the kill, measured once, past the lease.
Each kill scenario waits out the dead process's lease (15 s, not configurable:
``bot.store.keys.LEASE_TTL_MS``), so those rows take ~18 s each; the file ~4.5 min.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from bot.emulator.redis_server import ManagedRedis
from bot.emulator.scripted import Fault, Reply, ScriptedCall, ScriptedRequest
from bot.emulator.sender import sign
from bot.emulator.slack import BOT_USER_ID, FakeSlack
from bot.llm.condense import INSTRUCTION
from bot.slack.answers import answer_messages
from bot.slack.redelivery import has_feedback_for
from bot.store.jobs import JobStatus
from bot.store.keys import Keys, Thread, job_bucket

from .approvals_kit import (
    call_then_answer,
    change_then_check,
    click,
    first_job,
    job_hash,
    runs,
    started,
    status_of,
    texts,
    tool_processes,
    tools_yml,
    wait_card,
    wait_until,
)
from .conftest import StartBot
from .crash_kit import (
    ModelHold,
    RedisGate,
    carrying,
    gated_tools_yml,
    has,
    text_of,
    times_seen,
    tool_log,
)
from .harness import (
    SIGNING_SECRET,
    BotProcess,
    ScriptedModel,
    event_body,
    mention,
    new_event_id,
    reply,
    retried,
    seed,
)
from .test_crash_recovery import answers, ended_once, endings

pytestmark = pytest.mark.timeout(120)

KEYS = Keys()
TAKEOVER_S = 45.0  # the 15 s lease, a scan, a paused job's 30 s recheck, start-up noise
ENDING_S = 10.0  # from the job's end in Redis to its ending in the thread
ASK = "check web-03 please"
REPLY = "also-look-at-db-07"  # plain ASCII: it appears verbatim in the JSON the bot writes
CHECKED = "Result: restarted web-03"  # what ``call_then_answer`` says after check_host
RESTARTED = "Result: restarted nginx UAPPROVER1"  # ``change_then_check`` after the restart
RESTART: dict[str, object] = {"service": "nginx", "confirmed_by": "UREQUESTER"}
SUMMARY = "Earlier: web-03 and web-01 were checked."
CONDENSED_ANSWER = "Result: condensed and answered"


@dataclass
class World:
    """One row's fakes and the way to start a bot process on them through the gate."""

    bot: StartBot
    slack: FakeSlack
    model: ScriptedModel
    redis: ManagedRedis
    gate: RedisGate
    tools: str
    log: Path
    env: dict[str, str]
    tmp_path: Path

    async def start(self) -> BotProcess:
        return await self.bot(OPSLOOP_TOOLS=self.tools, REDIS_URL=self.gate.url, **self.env)

    async def client(self) -> aioredis.Redis:
        return aioredis.Redis.from_url(self.redis.url, decode_responses=True)


@pytest.fixture
async def gate(redis_server: ManagedRedis) -> AsyncIterator[RedisGate]:
    async with RedisGate(redis_server) as started_gate:
        yield started_gate


# ---- what every row checks ---------------------------------------------------------------


def thread_of_event(event: dict[str, Any]) -> Thread:
    return Thread(event["channel"], event.get("thread_ts") or event["ts"])


async def assert_one_clear_ending(w: World, event: dict[str, Any], answer: str) -> None:
    """One answer, one ending (the job's own status message, Done) and ``completed``."""
    ts = event["ts"]
    await ended(w, ts)
    assert answers(w.slack, ts) == [answer], texts(w.slack, "C1", ts)
    assert ended_once(w.slack, ts), texts(w.slack, "C1", ts)
    stored = await job_hash(w.redis.url, first_job("C1", ts))
    assert stored["status"] == "completed"
    assert stored["current_job"] == first_job("C1", ts)  # one job: nothing started twice


async def ended(w: World, ts: str) -> None:
    """Until the job is final in Redis and then its ending is shown (the ending is an
    urgent edit queued as the job ends); on a timeout, what the job and thread hold."""
    job_id = first_job("C1", ts)
    client = await w.client()

    async def final() -> bool:
        status = await client.hget(KEYS.job(job_id), "status")
        return status is not None and JobStatus(str(status)).final

    try:
        await wait_until(final, timeout=TAKEOVER_S, what=f"{job_id} final")
        await w.slack.wait_for(lambda: bool(endings(w.slack, ts)), timeout=ENDING_S)
    except TimeoutError:
        stored = await job_hash(w.redis.url, first_job("C1", ts))
        status = stored.get("status"), stored.get("data", {}).get("stop_reason")
        seen = texts(w.slack, "C1", ts)
        raise AssertionError(f"no ending: job {status}, thread {seen}") from None
    finally:
        await client.aclose()


def seen_once_in_the_last_request(w: World, *needles: str) -> None:
    last = w.model.requests[-1]
    for needle in needles:
        assert times_seen(last, needle) == 1, (needle, last.messages)


async def retry(serve: BotProcess, body: bytes, num: int) -> int:
    status, _ = await serve.post_event(body, retried(sign(body, SIGNING_SECRET), num))
    return status


async def killed_mid_request(request: asyncio.Task[Any]) -> None:
    """The request the dead process never answered."""
    with contextlib.suppress(httpx.TransportError):
        await asyncio.wait_for(request, 10)
        raise AssertionError("the killed process answered the request")


# ---- the rows ------------------------------------------------------------------------------


async def before_ack_unwritten(w: World) -> None:
    w.model.policy = call_then_answer("check_host", {"host": "web-03"})
    a = await w.start()
    event = mention("C1", "UREQUESTER", ASK)
    body = event_body(event, event_id=new_event_id())
    thread = thread_of_event(event)
    held = w.gate.hold(has(KEYS.inject(thread)), "the receipt")
    request = asyncio.create_task(a.post_event(body))
    command = await held.wait_caught()
    assert command[0].upper() in (b"EVALSHA", b"EVAL"), command[:3]  # the receipt's script
    assert KEYS.inject_seen(thread).encode() in command
    await a.kill()
    await killed_mid_request(request)
    client = await w.client()
    try:
        assert not await client.exists(KEYS.inject_seen(thread))
    finally:
        await client.aclose()

    b = await w.start()
    assert await retry(b, body, 1) == 200
    assert await retry(b, body, 2) == 200  # Slack retries up to three times
    await assert_one_clear_ending(w, event, CHECKED)
    seen_once_in_the_last_request(w, ASK)


async def before_ack_written(w: World) -> None:
    w.model.policy = call_then_answer("check_host", {"host": "web-03"})
    a = await w.start()
    event = mention("C1", "UREQUESTER", ASK)
    body = event_body(event, event_id=new_event_id())
    job_id = first_job("C1", event["ts"])
    held = w.gate.hold(
        has(KEYS.active_jobs(job_bucket(job_id)), job_id, name="ZADD"), "the job's index entry"
    )
    request = asyncio.create_task(a.post_event(body))
    await held.wait_caught()
    await a.kill()
    await killed_mid_request(request)
    assert (await job_hash(w.redis.url, job_id))["status"] == "queued"  # written, unindexed

    b = await w.start()
    assert await retry(b, body, 1) == 200
    assert await retry(b, body, 2) == 200
    await assert_one_clear_ending(w, event, CHECKED)
    seen_once_in_the_last_request(w, ASK)


async def after_ack_before_start(w: World) -> None:
    w.model.policy = call_then_answer("check_host", {"host": "web-03"})
    a = await w.start()
    event = mention("C1", "UREQUESTER", ASK)
    seed(w.slack, event)  # the thread exists in Slack: the survivor reads it
    posting = w.slack.hold("chat.postMessage")
    assert (await a.send(event))[0] == 200  # acknowledged
    await w.slack.wait_for_call("chat.postMessage", timeout=10)
    job_id = first_job("C1", event["ts"])
    assert (await job_hash(w.redis.url, job_id))["status"] == "queued"  # not started
    await a.kill()
    # The held post fails: it never landed (the survivor's lease comes ≥ seconds later,
    # so this fault is taken by the dead process's call).
    w.slack.fail_next("chat.postMessage", status=500)
    posting.set()

    await w.start()
    await assert_one_clear_ending(w, event, CHECKED)
    seen_once_in_the_last_request(w, ASK)


async def after_ack_status_posted(w: World) -> None:
    """As ``after_ack_before_start``, but the held status post lands after the kill
    (Slack did post it; the dead process never learnt its ts)."""
    w.model.policy = call_then_answer("check_host", {"host": "web-03"})
    a = await w.start()
    event = mention("C1", "UREQUESTER", ASK)
    seed(w.slack, event)  # the thread exists in Slack: the survivor reads it
    posting = w.slack.hold("chat.postMessage")
    assert (await a.send(event))[0] == 200
    await w.slack.wait_for_call("chat.postMessage", timeout=10)
    await a.kill()
    posting.set()

    await w.start()
    await assert_one_clear_ending(w, event, CHECKED)


async def during_model_call(w: World) -> None:
    hold = ModelHold(call_then_answer("check_host", {"host": "web-03"}))
    w.model.policy = hold
    a = await w.start()
    event = mention("C1", "UREQUESTER", ASK)
    await a.send(event)
    await hold.wait_caught()
    assert (await a.send(reply("C1", "UREQUESTER", REPLY, thread_ts=event["ts"])))[0] == 200
    await a.kill()
    hold.release()  # answered into a closed connection

    await w.start()
    await assert_one_clear_ending(w, event, CHECKED)
    seen_once_in_the_last_request(w, ASK, REPLY)


async def during_read_with_a_reply(w: World) -> None:
    tools, go, log = gated_tools_yml(w.tmp_path)
    w.tools = tools
    w.model.policy = call_then_answer("check_host", {"host": "web-03"})
    a = await w.start()
    event = mention("C1", "UREQUESTER", ASK)
    await a.send(event)
    await wait_until(lambda: tool_log(log) == ["start"], timeout=15, what="check_host started")
    assert (await a.send(reply("C1", "UREQUESTER", REPLY, thread_ts=event["ts"])))[0] == 200
    await a.kill()
    go.touch()  # the dead process's read may finish now: see ``tool_dies_with_its_bot``

    await w.start()
    await assert_one_clear_ending(w, event, "Result: checked web-03")
    assert tool_log(log).count("start") == 2  # a read is run again, to its end
    seen_once_in_the_last_request(w, ASK, REPLY)


async def tool_dies_with_its_bot(w: World) -> None:
    """No takeover needed: a read in flight when its process is SIGKILLed must not go on
    running (nobody enforces its timeout any more, nobody reads its output)."""
    tools, go, log = gated_tools_yml(w.tmp_path)
    w.tools = tools
    w.model.policy = call_then_answer("check_host", {"host": "web-03"})
    a = await w.start()
    await a.send(mention("C1", "UREQUESTER", ASK))
    await wait_until(lambda: tool_processes(log), timeout=15, what="check_host running")
    await a.kill()
    try:
        await wait_until(lambda: not tool_processes(log), timeout=5, what="check_host gone")
    except TimeoutError:
        raise AssertionError(f"the tool outlived its bot: {tool_processes(log)}") from None
    finally:
        go.touch()  # let an orphan end


async def paused_with_a_reply(w: World) -> None:
    w.model.policy = change_then_check("restart_service", RESTART)
    a = await w.start()
    event = mention("C1", "UREQUESTER", "restart nginx")
    await a.send(event)
    card = await wait_card(w.slack, "C1", event["ts"])
    assert (await a.send(reply("C1", "UREQUESTER", REPLY, thread_ts=event["ts"])))[0] == 200
    await a.kill()

    b = await w.start()
    assert await click(b, w.slack, card, "UAPPROVER1", "Approve") == 200
    await assert_one_clear_ending(w, event, RESTARTED)
    assert len(started(w.log, "restart_service")) == 1
    seen_once_in_the_last_request(w, "restart nginx", REPLY)


async def after_approve_before_execution(w: World) -> None:
    w.model.policy = change_then_check("restart_service", RESTART)
    a = await w.start()
    event = mention("C1", "UREQUESTER", "restart nginx")
    await a.send(event)
    card = await wait_card(w.slack, "C1", event["ts"])
    thread = thread_of_event(event)
    held = w.gate.hold(has(KEYS.fence(thread)), "the resume's lease")
    assert await click(a, w.slack, card, "UAPPROVER1", "Approve") == 200
    await held.wait_caught()
    await a.kill()
    assert not started(w.log, "restart_service")  # decided, not executed

    await w.start()
    await assert_one_clear_ending(w, event, RESTARTED)
    [run] = runs(w.log, tool="restart_service")
    assert run["args"] == ["nginx", "UAPPROVER1"]  # the approver is confirmed_by
    assert len(started(w.log, "restart_service")) == 1
    posted = [p for p in w.slack.calls_of("chat.postMessage") if "Approval" in str(p.get("text"))]
    assert len(posted) == 1  # never asked again
    assert "Approved by <@UAPPROVER1>" in w.slack.message("C1", card.ts).text


async def inject_between_read_and_history(w: World) -> None:
    hold = ModelHold(call_then_answer("check_host", {"host": "web-03"}))
    w.model.policy = hold
    a = await w.start()
    event = mention("C1", "UREQUESTER", ASK)
    await a.send(event)
    await hold.wait_caught()
    assert (await a.send(reply("C1", "UREQUESTER", REPLY, thread_ts=event["ts"])))[0] == 200
    thread = thread_of_event(event)
    held = w.gate.hold(carrying(REPLY), "the reply's history write")
    hold.release()
    command = await held.wait_caught()
    assert KEYS.history(thread).encode() in command, command[:3]
    await a.kill()
    client = await w.client()
    try:
        pending = await client.xpending(KEYS.inject(thread), "loop")
        history = await client.lrange(KEYS.history(thread), 0, -1)
    finally:
        await client.aclose()
    assert pending["pending"] == 1  # read by the dead process, never acknowledged
    assert not [m for m in history if REPLY in m]  # and not in the history

    await w.start()
    await assert_one_clear_ending(w, event, CHECKED)
    seen_once_in_the_last_request(w, ASK, REPLY)


def condensing_policy(request: ScriptedRequest) -> Reply:
    if INSTRUCTION in text_of(request.messages[-1]):
        return Reply(content=SUMMARY)
    if any(SUMMARY in text_of(m) for m in request.messages):
        return Reply(content=CONDENSED_ANSWER)
    done = request.tool_results()
    # The third read reports a prompt past the threshold: the next request condenses first.
    big = 9000 if done == 2 else None
    call = ScriptedCall("check_host", {"host": f"web-0{done}"})
    return Reply(tool_calls=[call], prompt_tokens=big)


async def during_condensing(w: World) -> None:
    hold = ModelHold(condensing_policy, lambda r: INSTRUCTION in text_of(r.messages[-1]))
    w.model.policy = hold
    a = await w.start()
    event = mention("C1", "UREQUESTER", ASK)
    await a.send(event)
    await hold.wait_caught()
    await a.kill()
    hold.release()

    await w.start()
    await assert_one_clear_ending(w, event, CONDENSED_ANSWER)
    last = w.model.requests[-1]
    assert sum(SUMMARY in text_of(m) for m in last.messages) == 1
    assert ASK in "".join(text_of(m) for m in last.messages)  # the request, in the facts


def storm(n: int, then: Callable[[ScriptedRequest], Reply]) -> Callable[..., Reply | Fault]:
    served = 0

    def policy(request: ScriptedRequest) -> Reply | Fault:
        nonlocal served
        served += 1
        if served <= n:
            return Fault(status=503, message="overloaded", retry_after="0")
        return then(request)

    return policy


async def model_5xx_storm(w: World) -> None:
    w.model.policy = storm(2, call_then_answer("check_host", {"host": "web-03"}))
    serve = await w.start()
    event = mention("C1", "UREQUESTER", ASK)
    await serve.send(event)
    await assert_one_clear_ending(w, event, CHECKED)


async def model_5xx_outlasts_retries(w: World) -> None:
    w.model.policy = storm(1_000, call_then_answer("check_host", {"host": "web-03"}))
    serve = await w.start()
    event = mention("C1", "UREQUESTER", ASK)
    await serve.send(event)
    ts = event["ts"]
    await ended(w, ts)
    [ending] = endings(w.slack, ts)
    assert "`failed`" in ending, ending
    assert not answers(w.slack, ts)
    stored = await job_hash(w.redis.url, first_job("C1", ts))
    assert stored["status"] == "failed", stored["status"]


SLACK_WRITES = ("chat.postMessage", "chat.update", "chat.startStream", "chat.appendStream")
SDK_RETRIES = 2  # bot.service: AsyncRateLimitErrorRetryHandler(max_retry_count=2)


async def slack_429s(w: World, refusals: int) -> None:
    """Every posting and editing method refused ``refusals`` times in a row (429,
    Retry-After 1 s) from the mention on."""
    w.model.policy = call_then_answer("check_host", {"host": "web-03"})
    serve = await w.start()
    for method in SLACK_WRITES:
        w.slack.fail_next(method, status=429, retry_after=1, times=refusals)
    event = mention("C1", "UREQUESTER", ASK)
    await serve.send(event)
    await assert_one_clear_ending(w, event, CHECKED)


async def _killed_showing_the_answer(w: World, *, lands: bool) -> dict[str, Any]:
    """The job ends (final in Redis) while its answer's post is held; the process is
    killed; the post then fails (never landed) or lands (Slack took it)."""
    w.model.policy = call_then_answer("check_host", {"host": "web-03"})
    a = await w.start()
    event = mention("C1", "UREQUESTER", ASK)
    seed(w.slack, event)
    assert (await a.send(event))[0] == 200
    await w.slack.wait_for_call("chat.postMessage", timeout=10)  # the status message
    posting = w.slack.hold("chat.postMessage")  # the next post is the answer
    await w.slack.wait_for_call("chat.postMessage", count=2, timeout=20)
    job_id = first_job("C1", event["ts"])

    async def final() -> bool:
        return JobStatus((await job_hash(w.redis.url, job_id))["status"]).final

    await wait_until(final, timeout=10, what=f"{job_id} final")
    assert (await job_hash(w.redis.url, job_id)).get("owed") == "0"  # owed to the thread
    await a.kill()
    if not lands:
        w.slack.fail_next("chat.postMessage", status=500)
    posting.set()
    return event


async def after_the_end_before_the_answer(w: World) -> None:
    event = await _killed_showing_the_answer(w, lands=False)
    await w.start()  # its scanner delivers the answer and the ending, the lease gone
    await w.slack.wait_for(lambda: bool(endings(w.slack, event["ts"])), timeout=TAKEOVER_S)
    await assert_one_clear_ending(w, event, CHECKED)
    job_id = first_job("C1", event["ts"])

    async def settled() -> bool:  # right after the ending is shown
        return "owed" not in await job_hash(w.redis.url, job_id)

    await wait_until(settled, timeout=5, what=f"{job_id}'s delivery settled")
    ending_lists_its_tools(w, event["ts"])


async def after_the_answer_before_the_ending(w: World) -> None:
    event = await _killed_showing_the_answer(w, lands=True)
    await w.start()  # the answer is in the thread: only the ending is shown
    await w.slack.wait_for(lambda: bool(endings(w.slack, event["ts"])), timeout=TAKEOVER_S)
    await assert_one_clear_ending(w, event, CHECKED)
    ending_lists_its_tools(w, event["ts"])


# ---- endings never doubled or stale (issue 36) ------------------------------------------

# A streamed answer (past ``Pacing.start_chars``: a message of its own as it streams) and
# one of two messages (past Slack's 12,000 characters of markdown per message).
STREAMED = "Result: " + " ".join(f"web-03 check {i} passed" for i in range(40))
TWO_PARTS = "Result: web-03 is fine.\n\n" + "\n\n".join(
    f"Paragraph {i}: " + " ".join(["every check of web-03 passed"] * 12) for i in range(60)
)
TOOL_LINE = "`check_host`"  # the per-tool line of the call every row's job ran


def call_then_say(answer: str) -> Callable[[ScriptedRequest], Reply]:
    """``check_host`` once, then ``answer``."""

    def policy(request: ScriptedRequest) -> Reply:
        if request.tool_results() == 0:
            return Reply(tool_calls=[ScriptedCall("check_host", {"host": "web-03"})])
        return Reply(content=answer)

    return policy


def ending_lists_its_tools(w: World, ts: str) -> None:
    """The thread's one ending lists the job's tool calls, each with its result."""
    status = status_of(w.slack, "C1", ts)
    assert status is not None
    shown = " ".join(str(b) for b in status.blocks or [])
    assert TOOL_LINE in shown and "web-03" in shown, status.blocks


def bot_texts(w: World, ts: str) -> list[str]:
    return [m.text for m in w.slack.messages("C1", ts) if m.user == BOT_USER_ID]


async def held_and_failed(w: World, method: str, before: int) -> None:
    """The calls of ``method`` held since the hold (``before`` calls earlier) never land:
    each is answered 500 once the gate opens."""
    held = len(w.slack.calls_of(method)) - before
    if held:
        w.slack.fail_next(method, status=500, times=held)


async def owed_when_final(w: World, ts: str) -> None:
    """The job has ended in Redis and its ending is still owed to the thread."""
    job_id = first_job("C1", ts)

    async def final() -> bool:
        return JobStatus((await job_hash(w.redis.url, job_id))["status"]).final

    await wait_until(final, timeout=20, what=f"{job_id} final")
    assert (await job_hash(w.redis.url, job_id)).get("owed") == "0"


async def streamed_answer_before_its_final_edit(w: World) -> None:
    """The answer streamed into a message of its own and the stream stopped; the process
    dies before the final edit turns that message into the answer (feedback buttons):
    the survivor completes that message in place instead of posting the answer again."""
    w.model.policy = call_then_say(STREAMED)
    a = await w.start()
    event = mention("C1", "UREQUESTER", ASK)
    seed(w.slack, event)
    stopping = w.slack.hold("chat.stopStream")
    assert (await a.send(event))[0] == 200
    await w.slack.wait_for_call("chat.stopStream", timeout=20)  # the answer's stream ends
    await owed_when_final(w, event["ts"])
    await a.kill()
    stopping.set()  # it lands: the stream shows the whole answer, with no final edit
    ts = event["ts"]
    await w.slack.wait_for(lambda: any(STREAMED in t for t in bot_texts(w, ts)), timeout=5)

    await w.start()
    await w.slack.wait_for(lambda: bool(endings(w.slack, ts)), timeout=TAKEOVER_S)
    await assert_one_clear_ending(w, event, STREAMED)
    streamed = [m for m in w.slack.messages("C1", ts) if STREAMED in m.text]
    assert len(streamed) == 1 and has_feedback_for(streamed[0].blocks or [], first_job("C1", ts))
    ending_lists_its_tools(w, ts)


async def answer_cut_between_its_parts(w: World) -> None:
    """The answer's first message landed, its second is held when the process dies: the
    survivor posts the second only."""
    w.model.policy = call_then_say(TWO_PARTS)
    parts = [m.text for m in answer_messages(TWO_PARTS)]
    assert len(parts) == 2
    a = await w.start()
    event = mention("C1", "UREQUESTER", ASK)
    seed(w.slack, event)
    assert (await a.send(event))[0] == 200
    await w.slack.wait_for_call("chat.postMessage", timeout=10)  # the status message
    posting = w.slack.hold("chat.postMessage")
    await w.slack.wait_for_call("chat.postMessage", count=2, timeout=20)  # the first part
    posting.set()  # it lands …
    w.slack.hold("chat.postMessage")  # … and the next post waits
    await w.slack.wait_for_call("chat.postMessage", count=3, timeout=20)  # the second part
    await owed_when_final(w, event["ts"])
    await a.kill()
    w.slack.fail_next("chat.postMessage", status=500)  # the second part never landed
    posting.set()

    ts = event["ts"]
    await w.start()
    await w.slack.wait_for(lambda: bool(endings(w.slack, ts)), timeout=TAKEOVER_S)
    await ended(w, ts)
    said = bot_texts(w, ts)
    assert [said.count(part) for part in parts] == [1, 1], said
    assert said.index(parts[0]) < said.index(parts[1])
    assert ended_once(w.slack, ts), texts(w.slack, "C1", ts)
    ending_lists_its_tools(w, ts)


async def ending_edit_queued_at_the_kill(w: World) -> None:
    """The answer landed; the status message's ending edit has not reached Slack (held)
    when the process dies: the job is still owed, and the survivor shows the ending."""
    w.model.policy = call_then_answer("check_host", {"host": "web-03"})
    a = await w.start()
    event = mention("C1", "UREQUESTER", ASK)
    seed(w.slack, event)
    ts = event["ts"]
    assert (await a.send(event))[0] == 200
    await w.slack.wait_for_call("chat.postMessage", timeout=10)  # the status message
    posting = w.slack.hold("chat.postMessage")
    await w.slack.wait_for_call("chat.postMessage", count=2, timeout=20)  # the answer
    before = len(w.slack.calls_of("chat.update"))
    w.slack.hold("chat.update")  # every edit from now on waits: the ending's too
    posting.set()
    await w.slack.wait_for(lambda: answers(w.slack, ts) == [CHECKED], timeout=10)
    await w.slack.wait_for_call("chat.update", lambda p: str(p.get("text")).startswith("Done"))
    await owed_when_final(w, ts)  # not counted as delivered: Slack has not taken it
    await a.kill()
    await held_and_failed(w, "chat.update", before)
    w.slack.hold("chat.update").set()

    await w.start()
    await w.slack.wait_for(lambda: bool(endings(w.slack, ts)), timeout=TAKEOVER_S)
    await assert_one_clear_ending(w, event, CHECKED)
    ending_lists_its_tools(w, ts)


async def slack_429_storm(w: World) -> None:
    await slack_429s(w, SDK_RETRIES)


async def slack_429_outlasts_retries(w: World) -> None:
    """Past slack-sdk's retries the status message never reaches the thread: the job's
    ending is then a message of its own (the one ending in the thread, after the
    answer)."""
    w.model.policy = call_then_answer("check_host", {"host": "web-03"})
    serve = await w.start()
    for method in SLACK_WRITES:
        w.slack.fail_next(method, status=429, retry_after=1, times=SDK_RETRIES + 2)
    event = mention("C1", "UREQUESTER", ASK)
    await serve.send(event)
    ts = event["ts"]
    await ended(w, ts)
    await w.slack.wait_for(lambda: bool(endings(w.slack, ts)), timeout=20)
    assert answers(w.slack, ts) == [CHECKED], texts(w.slack, "C1", ts)
    shown = endings(w.slack, ts)
    assert len(shown) == 1 and shown[0].startswith("Done"), texts(w.slack, "C1", ts)
    stored = await job_hash(w.redis.url, first_job("C1", ts))
    assert stored["status"] == "completed"


@dataclass(frozen=True)
class Row:
    name: str
    run: Callable[[World], Awaitable[None]]
    env: tuple[tuple[str, str], ...] = ()
    xfail: str | None = None  # a product bug this row shows (strict: it must fail)

    def param(self) -> Any:
        if self.xfail is None:
            return pytest.param(self, id=self.name)
        bug = pytest.mark.xfail(strict=True, raises=AssertionError, reason=self.xfail)
        return pytest.param(self, id=self.name, marks=[bug])


ORPHAN_STATUS = (
    "A process that dies between posting a job's status message and saving its ts leaves "
    "that message orphaned: bot.turns.run.JobRunner._take_and_run posts it "
    "(Notifier.open_progress -> JobProgress.start) and saves status_ts in the job's meta "
    "only with the RUNNING save after it, so the process taking the job over finds no "
    "status_ts and posts a second status message; the first stays 'Working: iteration "
    "0/20' with a live Stop button beside the job's 'Done' forever. Suggested fix: before "
    "posting a status message for a job that has none in its meta, look in the thread "
    "(conversations.replies) for the bot's own message whose Stop button value is the job "
    "id and adopt it (JobProgress.status_ts) instead of posting another."
)


ORPHAN_TOOL = (
    "A tool process outlives the bot process that ran it when that one is SIGKILLed: "
    "tools/command.py spawns every call with start_new_session=True and stops its group "
    "only from the parent (timeout, cancel, exit), so after a crash the call runs on, "
    "reparented, with no timeout enforced and its output read by nobody (here a read "
    "that the survivor runs a second time; a `-f`/watch tool would run forever; a "
    "mutating one completes after the thread was told its outcome is unknown). The "
    "docstring's 'a call's processes never outlive it' does not hold on a crash. "
    "Suggested fix (Linux): have the child set PR_SET_PDEATHSIG(SIGKILL) before exec "
    "(a preexec hook via ctypes prctl) or run each call under a tiny supervisor that "
    "kills the group when its stdin pipe from the bot closes; decide whether a "
    "mutating call should rather be let finish (then say so in the docstring)."
)


NO_STATUS_NO_ENDING = (
    "The job's status message could not be posted (chat.postMessage refused past "
    "slack-sdk's two retries): bot.slack.notifier.Notifier.open_progress logs 'no status "
    "message' and goes on with status_ts None, and bot.slack.progress.JobProgress's end "
    "(`if self.status_ts is not None: self._budget.submit(...)`) then drops the ending: "
    "the job is completed and answered once, but the thread never shows how it ended "
    "(and had no Stop button). Suggested fix: when status_ts is None at the end, post "
    "the ending as a new message through the paced budget (which waits out Retry-After), "
    "or post the missing status message lazily at the next paced update."
)


NO_STREAM = (("LLM_STREAM", "false"),)  # the answer is then a chat.postMessage of its own
NO_TASK_CARDS = (("OPSLOOP_TASK_DISPLAY", "off"),)  # the answer's is the one chat stream

ROWS = [
    Row("before-ack-unwritten", before_ack_unwritten),
    Row("before-ack-written", before_ack_written),
    Row("after-ack-before-start", after_ack_before_start),
    Row("after-ack-status-posted", after_ack_status_posted),
    Row("during-model-call", during_model_call),
    Row("during-read-with-a-reply", during_read_with_a_reply),
    Row("tool-dies-with-its-bot", tool_dies_with_its_bot),
    Row("paused-with-a-reply", paused_with_a_reply),
    Row("after-approve-before-execution", after_approve_before_execution),
    Row("inject-between-read-and-history", inject_between_read_and_history),
    Row(
        "during-condensing",
        during_condensing,
        (("LLM_CONTEXT_TOKENS", "100000"), ("OPSLOOP_CONDENSE_AT", "0.08")),
    ),
    Row("after-the-end-before-the-answer", after_the_end_before_the_answer, NO_STREAM),
    Row("after-the-answer-before-the-ending", after_the_answer_before_the_ending, NO_STREAM),
    Row(
        "streamed-answer-before-its-final-edit",
        streamed_answer_before_its_final_edit,
        NO_TASK_CARDS,
    ),
    Row("answer-cut-between-its-parts", answer_cut_between_its_parts, NO_STREAM),
    Row("ending-edit-queued-at-the-kill", ending_edit_queued_at_the_kill, NO_STREAM),
    Row("model-5xx-storm", model_5xx_storm),
    Row("model-5xx-outlasts-retries", model_5xx_outlasts_retries),
    Row("slack-429-storm", slack_429_storm),
    Row("slack-429-outlasts-retries", slack_429_outlasts_retries),
]


@pytest.mark.parametrize("row", [r.param() for r in ROWS])
async def test_crash_matrix(
    row: Row,
    gate: RedisGate,  # set up before ``bot``, so torn down after the bots stopped
    bot: StartBot,
    slack: FakeSlack,
    model: ScriptedModel,
    redis_server: ManagedRedis,
    tmp_path: Path,
) -> None:
    tools, log = tools_yml(tmp_path)
    world = World(bot, slack, model, redis_server, gate, tools, log, dict(row.env), tmp_path)
    await row.run(world)

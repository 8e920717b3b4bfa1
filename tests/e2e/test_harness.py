"""The end-to-end harness checked on its own: its requests against slack-sdk and bolt's
parsers, ``BotProcess`` and the ``bot`` fixture against a small stand-in server, and — once
``opsloop serve`` exists — a smoke test of the real thing.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import httpx
import pytest
from slack_bolt.request.internals import parse_body
from slack_sdk.signature import SignatureVerifier

from bot.emulator.redis_server import ManagedRedis
from bot.emulator.scripted import Fault, Reply, ScriptedRequest
from bot.emulator.slack import BOT_USER_ID, FakeSlack
from tests.e2e.conftest import StartBot
from tests.e2e.harness import (
    FORM,
    JSON,
    SIGNING_SECRET,
    BotProcess,
    BotStartError,
    ScriptedModel,
    block_actions_body,
    bot_env,
    click_body,
    event_body,
    mention,
    new_ts,
    reply,
    retried,
    seed,
    sign,
    steps,
    twin,
    url_verification_body,
)

BODY = event_body(mention("C1", "U1", "why is checkout slow?"))

# ---- signatures -------------------------------------------------------------------------


def test_signature_is_valid_for_slack_sdk() -> None:
    headers = sign(BODY, SIGNING_SECRET)
    verifier = SignatureVerifier(SIGNING_SECRET)
    assert verifier.is_valid_request(BODY, headers)
    expected = verifier.generate_signature(
        timestamp=headers["X-Slack-Request-Timestamp"], body=BODY
    )
    assert headers["X-Slack-Signature"] == expected


def test_stale_timestamp_fails() -> None:
    stale = int(time.time()) - 301
    assert not SignatureVerifier(SIGNING_SECRET).is_valid_request(
        BODY, sign(BODY, SIGNING_SECRET, timestamp=stale)
    )


def test_tampered_body_fails() -> None:
    headers = sign(BODY, SIGNING_SECRET)
    tampered = BODY.replace(b"checkout", b"checkin!")
    assert not SignatureVerifier(SIGNING_SECRET).is_valid_request(tampered, headers)


def test_other_secret_fails() -> None:
    headers = sign(BODY, "not-the-secret")
    assert not SignatureVerifier(SIGNING_SECRET).is_valid_request(BODY, headers)


def test_retry_headers_keep_the_signature() -> None:
    headers = retried(sign(BODY, SIGNING_SECRET), 2, "http_timeout")
    assert headers["X-Slack-Retry-Num"] == "2"
    assert SignatureVerifier(SIGNING_SECRET).is_valid_request(BODY, headers)


# ---- event bodies -----------------------------------------------------------------------


def test_event_body_is_an_event_callback_envelope() -> None:
    event = mention("C1", "U1", "hello")
    envelope = parse_body(event_body(event).decode(), JSON)
    assert envelope["type"] == "event_callback"
    assert envelope["team_id"] == "T1" and envelope["api_app_id"] == "A1"
    assert envelope["event"] == event
    assert envelope["event_id"].startswith("Ev")
    assert abs(envelope["event_time"] - time.time()) < 60


def test_event_ids_are_unique_unless_given() -> None:
    event = mention("C1", "U1", "hello")
    ids = {json.loads(event_body(event))["event_id"] for _ in range(100)}
    assert len(ids) == 100
    again = json.loads(event_body(event, event_id="EvSAME", team="T9", api_app_id="A9"))
    assert (again["event_id"], again["team_id"], again["api_app_id"]) == ("EvSAME", "T9", "A9")


def test_mention_shape() -> None:
    top = mention("C1", "U1", "check the db")
    assert top["type"] == "app_mention"
    assert top["text"] == f"<@{BOT_USER_ID}> check the db"
    assert top["ts"] == top["event_ts"] and "thread_ts" not in top
    inner = mention("C1", "U2", "and now?", thread_ts=top["ts"])
    assert inner["thread_ts"] == top["ts"] != inner["ts"]


def test_reply_and_twin_shapes() -> None:
    top = mention("C1", "U1", "check the db", ts="1700000000.000100")
    answer = reply("C1", "U2", "it is fine", thread_ts=top["ts"])
    assert answer["type"] == "message" and "subtype" not in answer
    assert answer["thread_ts"] == top["ts"] != answer["ts"]
    double = twin(top)
    assert double["type"] == "message"
    assert (double["channel"], double["ts"], double["text"]) == ("C1", top["ts"], top["text"])


def test_timestamps_increase() -> None:
    stamps = [new_ts() for _ in range(1_000)]
    assert all(float(a) < float(b) for a, b in zip(stamps, stamps[1:], strict=False))
    assert len(stamps[0].split(".")[1]) == 6


async def test_seed_puts_the_message_in_the_fake() -> None:
    top = mention("C1", "U1", "hello")
    async with FakeSlack() as slack:
        seed(slack, top)
        [held] = slack.messages("C1", top["ts"])
        assert (held.user, held.text) == ("U1", top["text"])


def test_url_verification_body() -> None:
    body = json.loads(url_verification_body("abc123"))
    assert body == {"token": body["token"], "challenge": "abc123", "type": "url_verification"}


# ---- interactivity ----------------------------------------------------------------------


def _payload(body: bytes) -> dict[str, Any]:
    [raw] = parse_qs(body.decode(), strict_parsing=True)["payload"]
    payload: dict[str, Any] = json.loads(raw)
    return payload


def test_block_actions_body_is_form_encoded_payload() -> None:
    body = block_actions_body(
        "U2", "approve", "job-1:call-1", "C1", "1700000000.000200", "http://hook/1"
    )
    assert body.startswith(b"payload=")
    payload = _payload(body)
    assert parse_body(body.decode(), FORM) == payload
    assert payload["type"] == "block_actions"
    assert payload["user"]["id"] == "U2"
    assert payload["container"]["message_ts"] == "1700000000.000200"
    assert payload["container"]["channel_id"] == "C1"
    assert payload["channel"]["id"] == "C1"
    assert payload["response_url"] == "http://hook/1"
    [action] = payload["actions"]
    assert (action["action_id"], action["value"], action["type"]) == (
        "approve",
        "job-1:call-1",
        "button",
    )


def _card() -> dict[str, Any]:
    def button(action_id: str, text: str, value: str) -> dict[str, Any]:
        plain = {"type": "plain_text", "text": text}
        return {"type": "button", "action_id": action_id, "text": plain, "value": value}

    return {
        "type": "message",
        "ts": "1700000000.000300",
        "thread_ts": "1700000000.000100",
        "text": "Approve restart?",
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": "restart api"}},
            {
                "type": "actions",
                "block_id": "decide",
                "elements": [
                    button("approval_approve", "Approve", "a1"),
                    button("approval_deny", "Deny", "a1"),
                ],
            },
            {
                "type": "section",
                "block_id": "more",
                "text": {"type": "mrkdwn", "text": "limit reached"},
                "accessory": button("job_continue", "Continue (+20 iterations)", "j1"),
            },
        ],
    }


def test_click_body_uses_the_buttons_own_fields() -> None:
    card = _card()
    payload = _payload(click_body(card, "C1", "U3", "http://hook/2", text="Deny"))
    [action] = payload["actions"]
    assert (action["action_id"], action["value"], action["block_id"]) == (
        "approval_deny",
        "a1",
        "decide",
    )
    assert payload["container"]["thread_ts"] == "1700000000.000100"
    assert payload["message"]["blocks"] == card["blocks"]
    cont = _payload(click_body(card, "C1", "U3", "http://h", text="Continue"))
    assert cont["actions"][0]["action_id"] == "job_continue"
    with pytest.raises(LookupError):
        click_body(card, "C1", "U3", "http://h", action_id="nope")


# ---- the scripted model's holder --------------------------------------------------------


async def test_model_policy_is_set_after_start(model: ScriptedModel) -> None:
    url = model.base_url + "/chat/completions"
    request = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    async with httpx.AsyncClient(trust_env=False) as http:
        unset = await http.post(url, json=request)
        assert unset.status_code == 500
        model.policy = steps(Reply(content="first"), Fault(status=429, retry_after="1"))
        first = await http.post(url, json=request)
        assert first.json()["choices"][0]["message"]["content"] == "first"
        assert (await http.post(url, json=request)).status_code == 429
        assert "unexpected" in (await http.post(url, json=request)).text
    await model.wait_for(lambda requests: len(requests) == 4)

    def last_is_user(requests: list[ScriptedRequest]) -> bool:
        return requests[-1].messages[-1]["role"] == "user"

    await model.wait_for(last_is_user)
    with pytest.raises(TimeoutError):
        await model.wait_for(lambda requests: len(requests) > 4, timeout=0.05)


# ---- BotProcess against a stand-in ------------------------------------------------------

STAND_IN = '''
"""A stand-in for `opsloop serve`: healthz, signed /slack/events, /env."""
import json, os, signal, sys
from aiohttp import web
from slack_sdk.signature import SignatureVerifier

if os.environ.get("STAND_IN_FAIL"):
    print(os.environ["STAND_IN_FAIL"], file=sys.stderr)
    sys.exit(3)
if os.environ.get("STAND_IN_IGNORE_TERM"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
verifier = SignatureVerifier(os.environ["SLACK_SIGNING_SECRET"])

async def healthz(request):
    return web.Response(text="ok")

async def env(request):
    return web.json_response(dict(os.environ))

async def events(request):
    body = await request.read()
    if not verifier.is_valid_request(body, dict(request.headers)):
        return web.Response(status=401, text="invalid signature")
    print("event", request.headers.get("Content-Type"), flush=True)
    return web.Response(text="")

app = web.Application()
app.router.add_get("/healthz", healthz)
app.router.add_get("/env", env)
app.router.add_post("/slack/events", events)
print("stand-in starting", file=sys.stderr, flush=True)
web.run_app(
    app,
    host=os.environ["HOST"],
    port=int(os.environ["PORT"]),
    print=None,
    handle_signals=not os.environ.get("STAND_IN_IGNORE_TERM"),
)
'''


@pytest.fixture
def stand_in(tmp_path: Path) -> tuple[str, ...]:
    script = tmp_path / "stand_in.py"
    script.write_text(STAND_IN)
    return (sys.executable, str(script))


@pytest.fixture
def env(slack: FakeSlack, redis_server: ManagedRedis, model: ScriptedModel) -> dict[str, str]:
    return bot_env(slack, redis_server, model, extra={"OPSLOOP_MAX_ITERATIONS": "3"})


async def test_process_serves_checks_signatures_and_stops(
    stand_in: tuple[str, ...],
    env: dict[str, str],
    slack: FakeSlack,
    redis_server: ManagedRedis,
    model: ScriptedModel,
    tmp_path: Path,
) -> None:
    proc = await BotProcess(env, tmp_path / "logs", argv=stand_in).start()
    try:
        assert (await proc.get("/healthz"))[0] == 200
        status, text = await proc.get("/env")
        child = json.loads(text)
        assert child["PORT"] == str(proc.port) and child["HOST"] == "127.0.0.1"
        assert child["SLACK_API_URL"] == slack.api_url
        assert child["REDIS_URL"] == redis_server.url
        assert child["LLM_BASE_URL"] == model.base_url
        assert child["OPSLOOP_MAX_ITERATIONS"] == "3"
        assert child["SLACK_BOT_TOKEN"].startswith("xoxb-")
        assert not any("PROXY" in k and k != "NO_PROXY" for k in child)

        assert (await proc.post_event(BODY))[0] == 200
        click = block_actions_body("U1", "a", "v", "C1", "1.000001", "http://h")
        assert (await proc.post_event(click))[0] == 200
        assert (await proc.post_event(BODY, sign(BODY, "wrong")))[0] == 401
        stale = sign(BODY, SIGNING_SECRET, timestamp=int(time.time()) - 600)
        assert (await proc.post_event(BODY, stale))[0] == 401
        assert (await proc.post_event(BODY, {}))[0] == 401
    finally:
        code = await proc.stop()
    assert code == 0 and not proc.running
    output = proc.output()
    assert "stand-in starting" in output
    assert f"event {JSON}" in output and f"event {FORM}" in output


async def test_start_failure_reports_the_output(
    stand_in: tuple[str, ...], env: dict[str, str], tmp_path: Path
) -> None:
    env["STAND_IN_FAIL"] = "SLACK_SIGNING_SECRET: Field required"
    proc = BotProcess(env, tmp_path / "logs", argv=stand_in)
    with pytest.raises(BotStartError, match="SLACK_SIGNING_SECRET: Field required"):
        await proc.start()
    assert proc.returncode == 3


async def test_stop_kills_a_process_ignoring_sigterm(
    stand_in: tuple[str, ...], env: dict[str, str], tmp_path: Path
) -> None:
    env["STAND_IN_IGNORE_TERM"] = "1"
    proc = await BotProcess(env, tmp_path / "logs", argv=stand_in).start()
    assert await proc.stop(timeout=0.2) == -9


class TestFactoryWithStandIn:
    """The ``bot`` fixture, pointed at the stand-in so it runs before ``serve`` exists."""

    @pytest.fixture
    def bot_argv(self, stand_in: tuple[str, ...]) -> tuple[str, ...]:
        return stand_in

    @pytest.fixture
    def serve_available(self) -> bool:
        return True

    async def test_two_processes_share_the_fakes(self, bot: StartBot) -> None:
        first = await bot()
        second = await bot(OPSLOOP_MAX_ITERATIONS="5", LLM_API_KEY=None)
        assert first.port != second.port
        child = json.loads((await second.get("/env"))[1])
        assert child["OPSLOOP_MAX_ITERATIONS"] == "5" and "LLM_API_KEY" not in child
        assert (await first.send(mention("C1", "U1", "hi")))[0] == 200
        await second.kill()
        assert not second.running and first.running

    async def test_spawn_without_waiting(self, bot: StartBot) -> None:
        proc = await bot(wait=False, STAND_IN_FAIL="LLM_MODEL: bad")
        assert await proc.wait_exit() == 3
        assert "LLM_MODEL: bad" in proc.output()


# ---- the real `opsloop serve` (skipped until it exists) ---------------------------------


async def test_serve_smoke(bot: StartBot) -> None:
    proc = await bot()
    assert (await proc.get("/healthz"))[0] == 200
    assert (await proc.post_event(BODY, sign(BODY, "wrong-secret")))[0] == 401
    assert (await proc.post_event(BODY, {}))[0] == 401
    status, text = await proc.post_event(url_verification_body("ch4llenge"))
    assert status == 200 and "ch4llenge" in text

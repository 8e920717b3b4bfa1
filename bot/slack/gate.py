"""The gate in front of bolt on ``POST /slack/events``: size, signature, then shape.

bolt parses a request's body while it builds the request object, before its own
signature check, and crashes (500 and a traceback) on bodies it cannot read. So every
request passes here first, in this order, and bolt only sees what got through:

1. **Size.** A ``Content-Length`` over ``MAX_BODY_BYTES`` (1 MiB) is refused at once,
   unread; a body without one is read only until it passes the limit (aiohttp's
   ``client_max_size``, which ``bot.slack.http.web_app`` sets to the same bound).       → 413
2. **Signature**, on the raw body, before anything is parsed: Slack's v0 signature
   (``slack_sdk.signature.SignatureVerifier``: HMAC-SHA256 of ``v0:{ts}:{body}``,
   compared in constant time). Both headers present, an integer timestamp within
   ``MAX_AGE_S`` (5 minutes) of now, the right digest. The verifier reads the body
   as UTF-8 (as every Slack body is), so one that is not counts as unsigned.     → 401
3. **Shape** (``bot.slack.inbound``), signed requests only. The split:

   * *Not a Slack request at all* — not JSON, a JSON that is not an
     object (or holds a lone surrogate, which no UTF-8 encoder takes), a form body
     without ``payload`` or whose ``payload`` is not JSON, no
     string ``type``, an ``event_callback`` without an ``event`` object, a click whose
     ``actions`` is not a list of objects, a ``url_verification`` without a
     ``challenge``, or any field bolt reads having the wrong kind. Slack never sends
     these and bolt would crash on them: a client error, answered with
     ``X-Slack-No-Retry: 1`` since the same bytes would fail again.              → 400
   * *A Slack request our listeners cannot act on* — an ``app_mention``/``message``
     whose ids or ``ts`` have the wrong shape, a click on one of our buttons whose
     value is not what we put there (Approve/Deny ``job_id|call_id``, Stop/Continue a
     job id) or whose clicker is missing. Acknowledged and ignored: a failure
     status would make Slack retry what can never succeed and count against the
     app's delivery record, and a forged button value deserves nothing more.       → 200
   * Everything else goes to bolt. A request no listener takes (an event type or
     action id we do not handle) comes back as bolt's 404 and is answered 200
     (``acknowledged``): Slack counts a 404 as a failed delivery and retries it.

``Gate.attach`` makes the bolt app answer as this module says: ``listener_failure``
becomes its error handler — a ``StoreError`` (Redis down, replicas not confirming) is the
one 503, nothing was acknowledged and Slack retries; anything else is our bug (or an
outage other than Redis) and is a 500, logged with its traceback — and bolt's own
multi-line "Unhandled request" warning gives way to our one line. A signed but malformed
payload never reaches a listener, so it never gets a 5xx.

Every refusal is one log line naming why and the peer address, never the body:
``INFO`` for a request with no signature at all (the internet's scanners), ``WARNING``
for the rest (a wrong signing secret or a skewed clock shows up here). Socket Mode has
no signatures: its envelopes' payloads pass ``judge`` (the shape checks), and whatever
the gate would answer itself, or bolt finds no listener for, is acknowledged with one
log line, so Slack does not redeliver what can never succeed.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

from aiohttp import web
from pydantic import ValidationError
from slack_bolt.async_app import AsyncApp
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse
from slack_sdk.signature import Clock, SignatureVerifier

from bot.errors import StoreError
from bot.llm.surrogates import ESCAPED_SURROGATE
from bot.slack.inbound import envelope, listener_problem, problems

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 1024 * 1024
MAX_AGE_S = 300  # Slack's own bound on a request timestamp's distance from now
TIMESTAMP_HEADER = "x-slack-request-timestamp"
SIGNATURE_HEADER = "x-slack-signature"
NO_RETRY = {"X-Slack-No-Retry": "1"}
JSON_TYPE = "application/json"
_TIMESTAMP = re.compile(r"[0-9]{1,20}")


@dataclass(frozen=True, slots=True)
class Admitted:
    """A signed, well-formed request, for bolt to dispatch."""

    request: AsyncBoltRequest
    peer: str


@dataclass(frozen=True, slots=True)
class Answer:
    """The gate answers the request itself; bolt never sees it."""

    status: int
    signed: bool  # the signature held: Slack's request (it counts as an ack)
    headers: Mapping[str, str] = field(default_factory=dict)

    def response(self) -> web.Response:
        return web.Response(status=self.status, headers=dict(self.headers))


class Gate:
    """``await gate.admit(request)`` → the request for bolt, or the gate's ``Answer``."""

    def __init__(
        self,
        signing_secret: str,
        *,
        clock: Clock | None = None,
        max_body_bytes: int = MAX_BODY_BYTES,
    ) -> None:
        self._verifier = SignatureVerifier(signing_secret, clock=clock or Clock())
        self._clock = self._verifier.clock
        self.max_body_bytes = max_body_bytes

    def attach(self, app: AsyncApp) -> None:
        """Make ``app``'s listener errors and unmatched requests answer as documented."""
        attach(app)

    async def admit(self, request: web.Request) -> Admitted | Answer:
        peer = request.remote or "an unknown peer"
        length = request.content_length
        if length is not None and length > self.max_body_bytes:
            return _refused(413, f"a body of {length} bytes (over {self.max_body_bytes})", peer)
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return _refused(413, f"a body over {self.max_body_bytes} bytes", peer)
        # One header dict for everything below and for bolt, normalised as bolt does
        # (lower-case names, the last of repeated headers), so we check what it reads.
        headers = {name.lower(): value for name, value in request.headers.items()}
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            return _refused(401, "bad signature (the body is not UTF-8)", peer)
        problem = self.signature_problem(
            text, headers.get(TIMESTAMP_HEADER), headers.get(SIGNATURE_HEADER)
        )
        if problem is not None:
            level = logging.INFO if problem.startswith("missing") else logging.WARNING
            return _refused(401, problem, peer, level=level)
        content_type = (headers.get("content-type") or "").split(";")[0] or None
        verdict = inspect(text, content_type)
        if verdict is not None:
            status, why = verdict
            return _refused(status, why, peer, signed=True)
        try:
            bolt = AsyncBoltRequest(body=text, query=request.query_string, headers={**headers})
        except RecursionError:  # parsed above, a few frames less deep
            return _refused(400, "not a Slack payload: nested too deeply", peer, signed=True)
        except Exception:  # the shapes in bot.slack.inbound missed something bolt reads
            log.exception("signed request from %s: bolt cannot read it (400)", peer)
            return Answer(400, signed=True, headers=NO_RETRY)
        return Admitted(bolt, peer)

    def signature_problem(
        self, body: str, timestamp: str | None, signature: str | None
    ) -> str | None:
        """Why ``body`` is not signed by Slack (``"missing …"``, ``"stale …"``, ``"bad …"``),
        or ``None`` when it is."""
        if not timestamp or not signature:
            given = ((TIMESTAMP_HEADER, timestamp), (SIGNATURE_HEADER, signature))
            return "missing signature (no " + " or ".join(h for h, v in given if not v) + ")"
        if not _TIMESTAMP.fullmatch(timestamp):
            return "bad signature (the timestamp is not a number of seconds)"
        age = self._clock.now() - int(timestamp)
        if abs(age) > MAX_AGE_S:
            return f"stale signature (timestamp {age:+.0f} s from now)"
        if not self._verifier.is_valid(body=body, timestamp=timestamp, signature=signature):
            return "bad signature"
        return None


def attach(app: AsyncApp) -> None:
    """``app``'s listener errors answered by ``listener_failure``, and bolt's multi-line
    "Unhandled request" warning left out (also for Socket Mode, which has no gate)."""
    app.error(listener_failure)
    app.logger.addFilter(_no_unhandled_warning)


def inspect(text: str, content_type: str | None) -> tuple[int, str] | None:
    """The gate's own answer to a signed body — ``(400, why)`` when it is no Slack
    request, ``(200, why)`` when our listeners cannot act on it — or ``None``: bolt's."""
    try:
        body = parse(text, content_type)
    except ValueError as exc:
        return 400, f"not a Slack payload: {exc}"
    return judge(body)


def judge(body: object) -> tuple[int, str] | None:
    """``inspect`` for a body already parsed (a Socket Mode envelope's ``payload``)."""
    try:
        found = envelope(body)
    except ValueError as exc:  # pydantic's ValidationError is one
        why = problems(exc) if isinstance(exc, ValidationError) else str(exc)
        return 400, f"not a Slack payload: {why}"
    assert isinstance(body, dict)  # envelope() checked it
    problem = listener_problem(body, found)
    if problem is not None:
        return 200, f"{describe(body)} ignored: {problem}"
    return None


def parse(text: str, content_type: str | None) -> object:
    """The body as bolt's ``parse_body`` will read it — the same rule: JSON when declared
    or when it starts with ``{``, otherwise a form whose ``payload`` field holds the JSON
    (what bolt makes of any other form is no Slack request) — or ``ValueError``."""
    if content_type == JSON_TYPE or text.startswith("{"):
        return _json(text, "the body")
    payload = dict(parse_qsl(text, keep_blank_values=True)).get("payload") if text else None
    if payload is None or "payload" not in text:
        raise ValueError("a form body without a payload field")
    return _json(payload, "the payload field")


def _json(text: str, what: str) -> object:
    try:
        found = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{what} is not JSON ({exc})") from None
    except RecursionError:
        raise ValueError(f"{what} is nested too deeply") from None
    # json.loads turns an escaped lone surrogate ("\ud800") into a str that cannot be
    # encoded (Redis, Slack and the logs all need UTF-8); Slack never sends one.
    if ESCAPED_SURROGATE.search(text):
        try:
            json.dumps(found, ensure_ascii=False).encode()
        except UnicodeEncodeError:
            raise ValueError(f"{what} holds a lone surrogate, not Unicode text") from None
        except RecursionError:
            raise ValueError(f"{what} is nested too deeply") from None
    return found


def describe(body: Mapping[str, Any]) -> str:
    """What a (well-formed) request is, for a log line: ``app_mention event``,
    ``click on opsloop_stop``, ``url_verification``."""
    kind = str(body.get("type"))
    event = body.get("event")
    if kind == "event_callback" and isinstance(event, Mapping):
        return f"{event.get('type')} event"
    actions = body.get("actions")
    if kind == "block_actions" and isinstance(actions, list) and actions:
        first = actions[0]
        return f"click on {first.get('action_id') if isinstance(first, Mapping) else '?'}"
    return kind


def acknowledged(response: BoltResponse, admitted: Admitted) -> BoltResponse:
    """bolt's answer as Slack gets it: no listener for a request (bolt's 404, which
    Slack counts as a failed delivery and retries) is acknowledged and ignored."""
    if response.status != 404:
        return response
    what = describe(admitted.request.body)
    log.info("signed request from %s: %s: no listener; acknowledged (200)", admitted.peer, what)
    return BoltResponse(status=200, body="")


async def listener_failure(error: Exception, body: dict[str, Any]) -> BoltResponse:
    """bolt's error handler: a listener's exception as the status Slack gets."""
    what = describe(body)
    if isinstance(error, StoreError):
        log.warning("%s not acknowledged, Slack retries (503): %s", what, error)
        return BoltResponse(status=503, body="")
    log.error("%s: a listener (or bolt) failed (500)", what, exc_info=error)
    return BoltResponse(status=500, body="")


def _refused(
    status: int, why: str, peer: str, *, signed: bool = False, level: int = logging.WARNING
) -> Answer:
    if signed:
        log.log(level, "signed request from %s: %s (%d)", peer, why, status)
    else:
        log.log(level, "refused a request from %s: %s (%d)", peer, why, status)
    return Answer(status, signed=signed, headers=NO_RETRY if status == 400 else {})


def _no_unhandled_warning(record: logging.LogRecord) -> bool:
    """Drop bolt's "Unhandled request" warning (a code suggestion for app authors over
    several lines): ``acknowledged`` logs the request in one line instead."""
    return not (isinstance(record.msg, str) and record.msg.startswith("Unhandled request"))

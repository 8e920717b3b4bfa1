"""The gate's signature check: Slack's v0 scheme on the raw body, with a reason for each
refusal (missing, stale, bad), before anything is parsed."""

from __future__ import annotations

import pytest

from bot.slack.gate import MAX_AGE_S, Gate
from tests.e2e.harness import sign

SECRET = "unit-signing-secret"
NOW = 1_700_000_000
BODY = '{"type": "event_callback", "event": {"type": "app_mention"}}'


class FixedClock:
    def now(self) -> float:
        return float(NOW)


@pytest.fixture
def gate() -> Gate:
    return Gate(SECRET, clock=FixedClock())


def check(gate: Gate, body: str, headers: dict[str, str]) -> str | None:
    return gate.signature_problem(
        body, headers.get("X-Slack-Request-Timestamp"), headers.get("X-Slack-Signature")
    )


def test_a_valid_signature_passes_up_to_five_minutes_either_way(gate: Gate) -> None:
    for skew in (0, MAX_AGE_S, -MAX_AGE_S):
        assert check(gate, BODY, sign(BODY.encode(), SECRET, timestamp=NOW + skew)) is None


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        ({}, "missing signature (no x-slack-request-timestamp or x-slack-signature)"),
        ({"X-Slack-Signature": "v0=00"}, "missing signature (no x-slack-request-timestamp)"),
        ({"X-Slack-Request-Timestamp": str(NOW)}, "missing signature (no x-slack-signature)"),
        ({"X-Slack-Request-Timestamp": "", "X-Slack-Signature": ""}, "missing signature"),
    ],
)
def test_a_missing_header_is_named(gate: Gate, headers: dict[str, str], reason: str) -> None:
    problem = check(gate, BODY, headers)
    assert problem is not None and problem.startswith(reason)


def test_stale_bad_and_foreign_signatures_are_refused_with_their_reason(gate: Gate) -> None:
    six_minutes_ago = sign(BODY.encode(), SECRET, timestamp=NOW - 360)
    assert check(gate, BODY, six_minutes_ago) == "stale signature (timestamp +360 s from now)"
    assert check(gate, BODY, sign(BODY.encode(), SECRET, timestamp=NOW + 301)) is not None
    assert check(gate, BODY, sign(BODY.encode(), "another-secret", timestamp=NOW)) == (
        "bad signature"
    )
    other_body = sign(b'{"type": "url_verification"}', SECRET, timestamp=NOW)
    assert check(gate, BODY, other_body) == "bad signature"
    for timestamp in ("soon", "1.7e9", " 1700000000", "-1", "١٧٠٠٠٠٠٠٠٠"):
        headers = {
            **sign(BODY.encode(), SECRET, timestamp=NOW),
            "X-Slack-Request-Timestamp": timestamp,
        }
        assert check(gate, BODY, headers) == (
            "bad signature (the timestamp is not a number of seconds)"
        ), timestamp
    truncated = sign(BODY.encode(), SECRET, timestamp=NOW)
    truncated["X-Slack-Signature"] = truncated["X-Slack-Signature"][:-1]
    assert check(gate, BODY, truncated) == "bad signature"

"""``OPSLOOP_APPROVAL_ESCALATE``: who a still pending card's reminder mentions (users, or
one user group), checked when the settings are read; App Home links each waiting card."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from bot.settings import BotSettings
from bot.slack.cards import reminder_message
from bot.slack.home import card_line
from bot.store.approvals import ApprovalRecord
from bot.turns.home import HomeCard


def record() -> ApprovalRecord:
    return ApprovalRecord(
        job_id="C1:1700000000.000100:j1",
        call_id="call_1",
        tool="restart_service",
        category="mutating",
        args_hash="h",
        arguments={"service": "nginx"},
        requester="UREQ",
        channel="C1",
        thread_ts="1700000000.000100",
        requested_at=1000.0,
        expires_at=4600.0,
    )


def test_the_reminder_mentions_whom_it_escalates_to() -> None:
    plain = reminder_message(record(), approvers=["UAPPROVER1"], now=1600.0)
    assert "Escalating" not in plain.text
    users = reminder_message(record(), approvers=[], now=1600.0, escalate=("UONCALL", "WBOSS"))
    assert "Escalating to <@UONCALL>, <@WBOSS>: please look at the card above." in users.text
    group = reminder_message(record(), approvers=[], now=1600.0, escalate=("SONCALL",))
    assert "Escalating to <!subteam^SONCALL>" in group.text
    assert users.blocks[0]["text"]["text"] == users.text


@pytest.mark.parametrize(
    ("value", "ids"),
    [("", ()), ("UONCALL", ("UONCALL",)), (" U1AB, W2CD ", ("U1AB", "W2CD")), ("SOPS", ("SOPS",))],
)
def test_escalate_takes_users_or_one_group(value: str, ids: tuple[str, ...]) -> None:
    settings = BotSettings(OPSLOOP_APPROVAL_ESCALATE=value)
    assert settings.escalate_ids == ids


@pytest.mark.parametrize("value", ["SOPS,UONE", "SA12,SB34", "#oncall", "@alice", "u123"])
def test_escalate_refuses_anything_else_with_a_clear_error(value: str) -> None:
    with pytest.raises(ValidationError) as raised:
        BotSettings(OPSLOOP_APPROVAL_ESCALATE=value)
    assert "OPSLOOP_APPROVAL_ESCALATE" in str(raised.value)
    assert "user group" in str(raised.value)


def home_card(**changes: object) -> HomeCard:
    fields: dict[str, object] = {
        "job_id": "C1:1700000000.000100:j1",
        "tool": "restart_service",
        "destructive": False,
        "channel": "C1",
        "thread_ts": "1700000000.000100",
        "card_ts": "1700000005.000200",
        "requester": "UREQ",
        "requested_at": 1000.0,
        "expires_at": 4600.0,
    }
    return HomeCard(**{**fields, **changes})  # type: ignore[arg-type]


def test_app_home_links_each_waiting_card() -> None:
    base = "https://acme.slack.com/"
    line = card_line(home_card(), base, [])
    link = "<https://acme.slack.com/archives/C1/p1700000005000200?thread_ts=1700000000.000100&cid=C1|card>"
    assert link in line
    assert "<https://acme.slack.com/archives/C1/p1700000000000100|thread>" in line
    # No card posted yet, no workspace address, or the thread is gone: no card link.
    assert "|card>" not in card_line(home_card(card_ts=None), base, [])
    assert "|card>" not in card_line(home_card(), None, [])
    gone = [("C1", "1700000000.000100")]
    assert "|card>" not in card_line(home_card(), base, [], gone=gone)

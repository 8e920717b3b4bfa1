"""What a job an alert started shows (``bot.slack.cards``, ``bot.slack.status_blocks``): a
destructive call's card says two approvers are needed, names the first while it waits for
the second (buttons kept), and names both once approved; the status message says
"requested by Alertmanager" (a person's job names no requester there)."""

from __future__ import annotations

from bot.alerts.text import REQUESTER as ALERTMANAGER
from bot.slack.blockkit import validate
from bot.slack.cards import (
    TWO_APPROVERS,
    approval_card,
    decided_card,
    reminder_message,
)
from bot.slack.status_blocks import ACTION_APPROVE, ACTION_DENY, status_message
from bot.store.approvals import ApprovalRecord

from .test_blocks import AT, EXPIRES, buttons, progress, record

FIRST = "Approved by <@U0FIRST1> · a second approver is needed: an alert started this job"


def alert_call(**kw: object) -> ApprovalRecord:
    return record(
        tool="delete_pod", category="destructive", requester=ALERTMANAGER, arguments={}, **kw
    )


def test_the_card_says_two_approvers_are_needed() -> None:
    card = approval_card(alert_call())
    validate(card)
    assert TWO_APPROVERS in str(card.blocks) and "Requested by Alertmanager" in str(card.blocks)
    assert "the requester may not approve it" not in str(card.blocks)
    assert "Approved by" not in str(card.blocks)


def test_a_first_approval_is_named_and_the_buttons_stay() -> None:
    card = approval_card(alert_call(first_approver="U0FIRST1"))
    validate(card)
    assert FIRST in str(card.blocks) and FIRST in card.text
    assert [b["action_id"] for b in buttons(card)] == [ACTION_APPROVE, ACTION_DENY]


def test_the_decided_card_names_both_approvers() -> None:
    decided = alert_call(first_approver="U0FIRST1", status="approved", decided_by="U0SECOND")
    card = decided_card(decided, "approved", "U0SECOND", AT)
    validate(card)
    assert card.text.startswith("Approved by <@U0FIRST1> and <@U0SECOND> at 13:58 UTC")
    assert buttons(card) == [] and FIRST not in str(card.blocks)

    denied = decided_card(decided, "denied", "U0SECOND", AT)
    assert denied.text.startswith(
        "Denied by <@U0SECOND> at 13:58 UTC · first approved by <@U0FIRST1>"
    )


def test_the_reminder_asks_for_two_approvers() -> None:
    waiting = reminder_message(alert_call(), approvers=(), now=EXPIRES - 600)
    assert TWO_APPROVERS in waiting.text and "two-person rule" not in waiting.text
    one_left = reminder_message(
        alert_call(first_approver="U0FIRST1"),
        approvers=(),
        now=EXPIRES - 600,
    )
    assert "<@U0FIRST1> approved" in one_left.text


def test_a_persons_destructive_call_keeps_the_two_person_rule() -> None:
    card = approval_card(record(category="destructive"))
    assert "the requester may not approve it" in str(card.blocks)
    assert TWO_APPROVERS not in str(card.blocks)


def test_the_status_says_an_alert_asked() -> None:
    alert_job = status_message(progress(requester=ALERTMANAGER))
    persons = status_message(progress(requester="U0ALICE"))
    validate(alert_job)
    assert "requested by Alertmanager" in str(alert_job.blocks)
    assert "requested by" not in str(persons.blocks)
    assert persons == status_message(progress())

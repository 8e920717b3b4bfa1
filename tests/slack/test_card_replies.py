"""What a pending card shows of the replies typed while it waits (``bot.slack.cards``)."""

from __future__ import annotations

from datetime import UTC, datetime

from bot.slack.blockkit import validate
from bot.slack.cards import (
    CARD_REPLIES_BLOCK,
    MAX_CARD_REPLIES,
    REPLY_CHARS,
    approval_card,
    decided_card,
)
from bot.store.approvals import ApprovalRecord
from bot.store.card_replies import CardReply

AT = datetime(2026, 12, 6, 16, 0, tzinfo=UTC).timestamp()


def record(**kw: object) -> ApprovalRecord:
    base: dict[str, object] = dict(
        job_id="C1:1.1:j1",
        call_id="c1",
        tool="restart_service",
        category="mutating",
        args_hash="h",
        arguments={"service": "web"},
        requester="U1",
        channel="C1",
        thread_ts="1.1",
        requested_at=AT,
        expires_at=AT + 900,
    )
    base.update(kw)
    return ApprovalRecord.model_validate(base)


def said(n: int, text: str = "don't restart") -> CardReply:
    return CardReply(
        ts=f"{AT + n:.6f}", author=f"U0PERSON{n}", text=f"{text} {n}", sent_at=AT + 60 * n
    )


def replies_text(blocks: list[dict[str, object]]) -> str:
    [block] = [b for b in blocks if b.get("block_id") == CARD_REPLIES_BLOCK]
    return str(block["text"]["text"])  # type: ignore[index]


def test_no_replies_no_block() -> None:
    card = approval_card(record())
    assert not [b for b in card.blocks if b.get("block_id") == CARD_REPLIES_BLOCK]


def test_who_when_and_what_newest_last_above_the_buttons() -> None:
    card = approval_card(record(), replies=[said(1), said(2)])
    validate(card)
    text = replies_text(card.blocks)
    assert "(2)" in text
    first = text.index("<@U0PERSON1> · 16:01 UTC: don't restart 1")
    assert first < text.index("<@U0PERSON2> · 16:02 UTC: don't restart 2")
    kinds = [b.get("block_id") or b["type"] for b in card.blocks]
    assert kinds.index(CARD_REPLIES_BLOCK) < kinds.index("opsloop_card_actions")
    assert "2 replies in the thread" in card.text


def test_at_most_five_shown_with_a_count_and_each_cut_to_150_chars() -> None:
    many = [said(n, "x" * 400) for n in range(1, 9)]
    text = replies_text(approval_card(record(), replies=many).blocks)
    assert "(8)" in text
    assert "3 replies before these" in text
    assert "<@U0PERSON1>" not in text and "<@U0PERSON3>" not in text
    assert all(f"<@U0PERSON{n}>" in text for n in range(4, 9))
    assert len(many) - MAX_CARD_REPLIES == 3
    longest = max(len(line.split(": ", 1)[1]) for line in text.splitlines()[2:])
    assert longest == REPLY_CHARS


def test_a_reply_can_never_form_a_mention_or_a_link() -> None:
    sneaky = CardReply(ts="1.2", author="U7", text="<!channel> approve <https://x|now>", sent_at=AT)
    text = replies_text(approval_card(record(), replies=[sneaky]).blocks)
    assert "<!channel>" not in text and "<https" not in text
    assert "&lt;!channel&gt;" in text


def test_the_decided_card_keeps_what_was_said() -> None:
    decided = record(status="approved", decided_by="UBOB", decided_at=AT + 200)
    card = decided_card(decided, "approved", "UBOB", AT + 200, replies=[said(1)])
    text = replies_text(card.blocks)
    assert "while this waited" in text
    assert "Approved by <@UBOB>" in card.text


def test_with_no_approver_policy_the_card_says_anyone_may_approve() -> None:
    card = approval_card(record())
    assert "anyone in the workspace may approve" in str(card.blocks)
    named = approval_card(record(), approvers=["UAPPROVER1"])
    assert "anyone" not in str(named.blocks) and "approvers: <@UAPPROVER1>" in str(named.blocks)

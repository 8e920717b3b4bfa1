"""An audit entry's text: the canonical JSON it is hashed as, what a writer stages, a
bounded result, and the one line an audit channel gets (mentions, scrubbed, bounded)."""

from __future__ import annotations

import hashlib
import json

import pytest

from bot.store.audit import (
    ACTOR_BOT,
    LINE_CHARS,
    AuditEntry,
    audit_line,
    bound_result,
    canonical,
    entry_hash,
    staged_json,
)

from .audit_kit import JOB, entry


def test_canonical_json_sorts_keys_drops_whitespace_and_keeps_non_ascii() -> None:
    assert canonical({"b": 1, "a": {"d": "é", "c": [1, 2]}}) == '{"a":{"c":[1,2],"d":"é"},"b":1}'
    with pytest.raises(ValueError):
        canonical({"at": float("nan")})


def test_the_hash_is_sha256_of_the_canonical_json_without_hash() -> None:
    body = {"seq": 1, "prev": "0" * 64, "id": "x", "hash": "ignored"}
    text = '{"id":"x","prev":"' + "0" * 64 + '","seq":1}'
    assert entry_hash(body) == hashlib.sha256(text.encode()).hexdigest()


def test_a_staged_entry_has_no_chain_fields_and_no_nones() -> None:
    chained = entry(1).model_copy(update={"seq": 4, "prev": "a" * 64, "hash": "b" * 64})
    staged = json.loads(staged_json(chained.model_copy(update={"outcome": None})))
    assert not {"seq", "prev", "hash", "outcome"} & set(staged)
    assert staged["v"] == 1 and staged["detail"]["result"] == "restarted nginx (1)"
    assert staged_json(chained) == canonical(json.loads(staged_json(chained)))


def test_a_long_result_is_cut_with_a_note_never_inside_a_character() -> None:
    assert bound_result("short") == "short"
    cut = bound_result("é" * 3_000)
    assert cut.startswith("é" * 2_000 + "\n… [cut: 3,000 chars in all, first 2,000 kept]")
    pair = "a" * 9 + "\ud83d\ude00" + "b" * 10  # a surrogate pair straddling the cut
    assert bound_result(pair, limit=10) == "a" * 9 + "\n… [cut: 21 chars in all, first 9 kept]"


def test_a_line_names_people_as_mentions_and_the_cli_user_as_is() -> None:
    decided = AuditEntry(
        id=f"approval_decided:{JOB}:call_1",
        kind="approval_decided",
        at=1_780_000_000.0,
        actor="U0APPROVER",
        job_id=JOB,
        tool="restart_service",
        outcome="approved",
    )
    assert audit_line(decided) == (
        f"*Approval* `restart_service` approved by <@U0APPROVER> · job `{JOB}`"
    )
    ran = entry(1, actor="cli:alice", kind="cli_run")
    assert "by `cli:alice`" in audit_line(ran)
    assert "restarted nginx (1)" in audit_line(ran)
    raised = AuditEntry(
        id="limit_raised:x",
        kind="limit_raised",
        at=1.0,
        actor="U1",
        detail={"limit": "tokens", "amount": 100000},
    )
    assert audit_line(raised) == "*Limit raised* by <@U1> · tokens +100000"
    started = AuditEntry(
        id="p",
        kind="process_started",
        at=1.0,
        actor=ACTOR_BOT,
        detail={"version": "0.9.0", "host": "bot-1", "tools": ["a", "b"]},
    )
    assert audit_line(started) == "*Process started* by `opsloop` · opsloop 0.9.0 on bot-1, 2 tools"
    capped = AuditEntry(
        id="c",
        kind="daily_cap_raised",
        at=1.0,
        actor="U2",
        detail={"day": "2026-05-28", "tokens": 2_000_000, "cost_usd": None},
    )
    assert audit_line(capped) == "*Daily cap raised* by <@U2> · 2026-05-28: 2000000 tokens"
    asked = entry(1, kind="approval_requested", outcome=None, detail={"dry_run_output": "would x"})
    assert audit_line(asked).endswith(" · would x")


def test_a_line_is_escaped_scrubbed_and_bounded() -> None:
    hostile = entry(
        1,
        outcome="<!channel> & co",
        detail={"result": "done password=hunter2 " + "x" * 1_000},
    )
    line = audit_line(hostile)
    assert "<!channel>" not in line and "&lt;!channel&gt; &amp; co" in line
    assert "hunter2" not in line and "password=[redacted]" in line
    assert len(line) <= LINE_CHARS and line.endswith("…")
    assert "\n" not in audit_line(entry(1, detail={"result": "line one\nline two"}))
    assert len(audit_line(entry(1, tool="t" * 400))) <= LINE_CHARS

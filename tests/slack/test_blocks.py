"""Block Kit builders: exact structures, stop reason codes, answer splitting, cards, limits."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.agent.state import StopReason
from bot.slack.answers import answer_messages
from bot.slack.blockkit import (
    MAX_BLOCKS,
    MAX_MARKDOWN,
    MAX_TEXT,
    Message,
    SlackLimitError,
    escape,
    unescape,
    validate,
)
from bot.slack.cards import ACTION_EDIT, approval_card, decided_card
from bot.slack.status_blocks import (
    ACTION_APPROVE,
    ACTION_CONTINUE,
    ACTION_DENY,
    ACTION_STOP,
    Progress,
    ToolLine,
    ending_message,
    status_message,
)
from bot.store.approvals import ApprovalRecord

EXPIRES = datetime(2025, 3, 1, 14, 5, tzinfo=UTC).timestamp()
AT = datetime(2025, 3, 1, 13, 58, tzinfo=UTC)


def progress(**kw: object) -> Progress:
    base: dict[str, object] = dict(
        job_id="J1",
        iteration=3,
        max_iterations=10,
        tokens_used=12_345,
        token_budget=200_000,
        active_s=65,
    )
    base.update(kw)
    return Progress(**base)  # type: ignore[arg-type]


def record(**kw: object) -> ApprovalRecord:
    base: dict[str, object] = dict(
        job_id="C1:1700000000.000100:abc",
        call_id="call_1",
        tool="restart_service",
        category="mutating",
        args_hash="h",
        arguments={"host": "web-03", "service": "nginx", "confirmed_by": "", "note": None},
        reason="nginx is returning 502s; restarting it should clear the stuck workers.",
        requester="U0REQ",
        channel="C1",
        thread_ts="1700000000.000100",
        requested_at=EXPIRES - 900,
        expires_at=EXPIRES,
    )
    base.update(kw)
    return ApprovalRecord.model_validate(base)


def buttons(message: Message) -> list[dict[str, object]]:
    return [e for b in message.blocks if b["type"] == "actions" for e in b["elements"]]


def fences_balanced(text: str) -> bool:
    open_marker: str | None = None
    for line in text.split("\n"):
        m = re.fullmatch(r" {0,3}(`{3,}|~{3,})(.*)", line)
        if not m:
            continue
        marker, info = m.groups()
        if open_marker is None:
            if not (marker[0] == "`" and "`" in info):
                open_marker = marker
        elif marker[0] == open_marker[0] and len(marker) >= len(open_marker) and not info.strip():
            open_marker = None
    return open_marker is None


# -- status ---------------------------------------------------------------------------------


def test_status_message_exact() -> None:
    msg = status_message(
        progress(
            model="claude",
            current_tool="get_logs",
            finished=[
                ToolLine("get_metrics", "cpu 93% <high>", True),
                ToolLine("ping", "x", False),
            ],
        )
    )
    assert msg == Message(
        text="Working: iteration 3/10 · 12,345/200,000 tokens · 1m 05s · running get_logs",
        blocks=[
            {
                "type": "context",
                "elements": [
                    {
                        "type": "mrkdwn",
                        "text": "*Working* · iteration 3/10 · 12,345/200,000 tokens · 1m 05s",
                    },
                    {"type": "mrkdwn", "text": "`claude`"},
                ],
            },
            {
                "type": "section",
                "text": {
                    "type": "mrkdwn",
                    "text": ":white_check_mark: `get_metrics` cpu 93% &lt;high&gt;\n"
                    ":x: `ping` x\n:hourglass_flowing_sand: `get_logs` running…",
                },
            },
            {
                "type": "actions",
                "block_id": "opsloop_status_actions",
                "elements": [
                    {
                        "type": "button",
                        "text": {"type": "plain_text", "text": "Stop"},
                        "action_id": ACTION_STOP,
                        "value": "J1",
                    }
                ],
            },
        ],
    )
    validate(msg)


def test_status_final_and_stopping_have_no_stop_button() -> None:
    final = status_message(progress(current_tool="x"), final=True)
    assert buttons(final) == []
    assert final.text.startswith("Finished") and "running" not in final.text
    stopping = status_message(progress(stopping=True))
    assert buttons(stopping) == [] and stopping.text.startswith("Stopping")


def test_an_ending_keeps_what_ran_and_names_the_job_for_opsloop_trace() -> None:
    job = "C1:1700000000.000100:j2"
    ending = ending_message(
        StopReason.COMPLETED,
        job_id=job,
        iterations=3,
        max_iterations=20,
        tokens=1_500,
        token_budget=200_000,
        tools_run=2,
        tools=[ToolLine("web_health", "HTTP 500 in 2598 ms …", True), ToolLine("x", "err", False)],
    )
    assert [b["type"] for b in ending.blocks] == ["section", "section", "context"]
    assert ending.blocks[1]["text"]["text"] == (
        ":white_check_mark: `web_health` HTTP 500 in 2598 ms …\n:x: `x` err"
    )
    assert ending.blocks[2]["elements"][0]["text"].endswith(f" · job `{job}`")
    assert job not in ending.text  # the notification text stays short


def test_status_caps_finished_tools_and_cuts_long_results() -> None:
    finished = [ToolLine(f"t{i}", "word " * 500, i % 2 == 0) for i in range(30)]
    msg = status_message(progress(finished=finished))
    section = msg.blocks[1]["text"]["text"]
    assert section.startswith("_22 earlier tool calls_")
    assert "`t29`" in section and "`t21`" not in section
    assert all(len(line) < 250 for line in section.split("\n"))
    validate(msg)


# -- endings --------------------------------------------------------------------------------

ENDINGS = [r for r in StopReason if r not in (StopReason.COMPLETED, StopReason.AWAITING_APPROVAL)]


def ending(reason: StopReason, **kw: object) -> Message:
    base: dict[str, object] = dict(
        job_id="J1",
        iterations=10,
        max_iterations=10,
        tokens=150_000,
        token_budget=200_000,
        tools_run=7,
    )
    base.update(kw)
    return ending_message(reason, **base)  # type: ignore[arg-type]


@pytest.mark.parametrize("reason", ENDINGS, ids=str)
def test_every_ending_names_its_code(reason: StopReason) -> None:
    msg = ending(reason, error="boom", by="U0STOP")
    assert f"`{reason.value}`" in msg.text
    assert "iterations 10/10" in msg.text and "7 tools run" in msg.text
    validate(msg)


def test_ending_texts() -> None:
    assert ending(StopReason.LIMIT_ITERATIONS).text.startswith(
        "Stopped: iteration limit reached (10/10) · `limit_iterations`"
    )
    assert ending(StopReason.LOOP).text.startswith(
        "Stopped: the same call kept returning the same result · `loop`"
    )
    assert ending(StopReason.STALLED).text.startswith(
        "Stopped: every tool call failed 5 times in a row · `stalled`"
    )
    assert ending(StopReason.FAILED, error="model <x> & y\nz").text.startswith(
        "Failed: model &lt;x&gt; &amp; y z · `failed`"
    )
    assert ending(StopReason.CANCELLED, by="U0STOP").text.startswith(
        "Cancelled by <@U0STOP> · `cancelled`"
    )
    assert ending(StopReason.CANCELLED, by="<!channel>").text.startswith(
        "Cancelled by &lt;!channel&gt;"
    )
    assert ending(StopReason.LIMIT_TOKENS, tokens=201_000).text.startswith(
        "Stopped: token budget reached (201,000/200,000 tokens) · `limit_tokens`"
    )
    deadline = ending(StopReason.LIMIT_DEADLINE, active_s=300, deadline_s=300)
    assert deadline.text.startswith("Stopped: time limit reached (5m 00s/5m 00s)")
    assert "`completed`" not in ending(StopReason.COMPLETED).text


def test_limit_ending_offers_continue() -> None:
    msg = ending(StopReason.LIMIT_ITERATIONS, continue_label="Continue (+20 iterations)")
    assert msg.blocks[-1] == {
        "type": "actions",
        "block_id": "opsloop_ending_actions",
        "elements": [
            {
                "type": "button",
                "text": {"type": "plain_text", "text": "Continue (+20 iterations)"},
                "action_id": ACTION_CONTINUE,
                "value": "J1|0",  # the job, and the raises it had: each button raises once
                "style": "primary",
            }
        ],
    }
    again = ending(
        StopReason.LIMIT_ITERATIONS, continue_label="Continue (+20 iterations)", continue_seq=2
    )
    assert buttons(again)[0]["value"] == "J1|2"  # type: ignore[index]
    long = ending(StopReason.LIMIT_TOKENS, continue_label="Continue " + "x" * 200)
    assert len(buttons(long)[0]["text"]["text"]) == 75  # type: ignore[index]
    validate(long)
    assert buttons(ending(StopReason.LOOP, continue_label="Continue")) == []
    assert buttons(ending(StopReason.LIMIT_ITERATIONS)) == []


# -- answers --------------------------------------------------------------------------------


def joined(messages: list[Message]) -> str:
    return "".join(unescape(m.text) for m in messages)


def test_short_answer_is_one_markdown_block() -> None:
    answer = "## Findings\n\n- nginx down & <!channel>\n\n| a | b |\n|---|---|\n| 1 | 2 |\n"
    assert answer_messages(answer) == [
        Message(text=escape(answer), blocks=[{"type": "markdown", "text": answer.rstrip("\n")}])
    ]


@pytest.mark.parametrize("answer", ["", "  \n", "\n\n\t \n"])
def test_blank_answer_is_one_message_saying_so(answer: str) -> None:
    [msg] = answer_messages(answer)
    validate(msg)
    # Slack refuses a message with no text: a blank answer is said in words, no block.
    assert msg == Message(text="(the model gave no answer text)")


def test_long_answer_splits_at_paragraphs() -> None:
    paragraphs = [f"Paragraph {i}: " + "lorem ipsum " * 80 for i in range(100)]
    answer = "\n\n".join(paragraphs)
    messages = answer_messages(answer)
    assert len(messages) > 1 and joined(messages) == answer
    for m in messages:
        validate(m)
        body = m.blocks[0]["text"]
        assert body.startswith("Paragraph") and body.endswith("lorem ipsum ")


def test_huge_answer_respects_text_and_block_limits() -> None:
    answer = ("a & b < c > d " * 30 + "\n") * 2000  # ~850k escaped chars
    messages = answer_messages(answer)
    assert joined(messages) == answer
    for m in messages:
        validate(m)
        assert len(m.text) <= MAX_TEXT and len(m.blocks) <= MAX_BLOCKS
        assert sum(len(b["text"]) for b in m.blocks) <= MAX_MARKDOWN


def test_one_giant_line_is_cut() -> None:
    answer = "x" * 50_000
    messages = answer_messages(answer)
    assert joined(messages) == answer and len(messages) == 5
    for m in messages:
        validate(m)


def test_long_fence_is_closed_and_reopened() -> None:
    code = "".join(f"line {i} = value {i}\n" for i in range(3000))
    answer = f"Intro.\n\n```python\n{code}```\n\nOutro.\n"
    messages = answer_messages(answer)
    assert len(messages) > 2 and joined(messages) == answer
    bodies = [m.blocks[0]["text"] for m in messages]
    assert all(fences_balanced(b) for b in bodies)
    assert bodies[1].startswith("```python\n")  # reopened with its language
    assert all(b.rstrip().endswith("```") for b in bodies[:-1])
    for m in messages:
        validate(m)


def test_split_prefers_outside_fences() -> None:
    block = "```\n" + "code line\n" * 400 + "```\n"  # ~4k chars per fenced block
    answer = "\n".join([block] * 8)
    bodies = [m.blocks[0]["text"] for m in answer_messages(answer)]
    assert len(bodies) > 1
    for body in bodies:
        assert fences_balanced(body)
        assert body.count("```") % 2 == 0 and body.count("```") >= 2  # whole blocks only


# Segments stay small in hypothesis' reprs; the test expands them to long texts.
segments = st.lists(
    st.one_of(
        st.text(alphabet=st.sampled_from("ab &<>*_`#|-\n"), max_size=300),
        st.tuples(
            st.sampled_from(["", "python", "sh"]),
            st.text(alphabet=st.sampled_from("xy <&\n"), max_size=200),
            st.integers(1, 60),
        ),
        st.tuples(st.integers(1, 20_000), st.sampled_from("z &\n")),
    ),
    max_size=12,
)


def expand(segment: str | tuple[str, str, int] | tuple[int, str]) -> str:
    if isinstance(segment, str):
        return segment
    if len(segment) == 3:
        lang, body, times = segment
        return f"\n```{lang}\n{body * times}\n```\n"
    count, char = segment
    return char * count


@settings(max_examples=150, deadline=None)
@given(segments)
def test_answer_messages_roundtrip(
    parts: list[str | tuple[str, str, int] | tuple[int, str]],
) -> None:
    """Unescaped texts concatenate exactly to the answer; blocks fit and keep fences balanced.

    Only the blocks drop the whitespace at split points (they are stripped of surrounding
    newlines); ``text`` keeps every character, so the invariant is exact equality.
    """
    answer = "".join(expand(p) for p in parts)
    messages = answer_messages(answer)
    if not answer.strip():
        assert len(messages) == 1
    elif max((len(run) for run in re.findall(r"\s+", answer)), default=0) < 10_000:
        assert joined(messages) == answer
    else:  # a whitespace run too long for Slack's text limit may be cut, nothing else
        assert re.sub(r"\s+", " ", joined(messages)) == re.sub(r"\s+", " ", answer)
    for m in messages:
        validate(m)
        for b in m.blocks:
            if fences_balanced(answer.replace("\r", "")):
                assert fences_balanced(b["text"])


# -- cards ----------------------------------------------------------------------------------


def test_approval_card_exact() -> None:
    msg = approval_card(record())
    value = "C1:1700000000.000100:abc|call_1"
    assert msg == Message(
        text="Approval needed: restart_service (host=web-03, service=nginx) · expires at 14:05 UTC",
        blocks=[
            {
                "type": "header",
                "block_id": "opsloop_card_title",
                "text": {"type": "plain_text", "text": "Approval needed: restart_service"},
            },
            {
                "type": "section",
                "text": {
                    "type": "mrkdwn",
                    "text": "*Reason*\nnginx is returning 502s; restarting it should clear"
                    " the stuck workers.",
                },
            },
            {
                "type": "section",
                "text": {
                    "type": "mrkdwn",
                    "text": "*Arguments*\n`host`: web-03\n`service`: nginx",
                },
            },
            {
                "type": "context",
                "elements": [
                    {
                        "type": "mrkdwn",
                        "text": "Requested by <@U0REQ> · mutating · expires at 14:05 UTC"
                        " · anyone in the workspace may approve",
                    }
                ],
            },
            {
                "type": "actions",
                "block_id": "opsloop_card_actions",
                "elements": [
                    {
                        "type": "button",
                        "text": {"type": "plain_text", "text": "Approve"},
                        "action_id": ACTION_APPROVE,
                        "value": value,
                        "style": "primary",
                    },
                    {
                        "type": "button",
                        "text": {"type": "plain_text", "text": "Edit"},
                        "action_id": ACTION_EDIT,
                        "value": value,
                    },
                    {
                        "type": "button",
                        "text": {"type": "plain_text", "text": "Deny"},
                        "action_id": ACTION_DENY,
                        "value": value,
                        "style": "danger",
                    },
                ],
            },
        ],
    )
    validate(msg)


def test_card_escapes_and_truncates_untrusted_text() -> None:
    msg = approval_card(
        record(
            category="destructive",
            reason="<!channel> please approve & hurry <@U0ADMIN>" + " x" * 3000,
            arguments={"path": "/tmp/<!here>", "blob": {"k": "v" * 1000}, "n": 3},
            dry_run_output="would delete:\n```\n" + "file & <x>\n" * 1000,
        )
    )
    validate(msg)
    everything = msg.text + repr(msg.blocks)
    for mention in ("<!channel>", "<!here>", "<@U0ADMIN>"):
        assert mention not in everything
    assert "&lt;!channel&gt; please approve &amp; hurry" in msg.blocks[1]["text"]["text"]
    args = msg.blocks[2]["text"]["text"]
    assert "`path`: /tmp/&lt;!here&gt;" in args and "`n`: 3" in args and "…" in args
    dry = msg.blocks[3]["text"]["text"]
    assert dry.startswith("*Dry run output*\n```\nwould delete:") and dry.endswith("…\n```")
    assert dry.count("```") == 2  # the output's own fence cannot close ours
    assert "destructive" in msg.blocks[4]["elements"][0]["text"]


def test_card_without_reason_or_arguments() -> None:
    msg = approval_card(record(reason=None, arguments={}))
    assert [b["type"] for b in msg.blocks] == ["header", "section", "context", "actions"]
    assert msg.blocks[1]["text"]["text"] == "*Arguments*\n_none_"
    assert msg.text.startswith("Approval needed: restart_service · expires")


@pytest.mark.parametrize(
    ("outcome", "by", "line"),
    [
        ("approved", "U0BOSS", "Approved by <@U0BOSS> at 13:58 UTC"),
        ("denied", "U0BOSS", "Denied by <@U0BOSS> at 13:58 UTC"),
        ("expired", None, "Expired at 13:58 UTC"),
        ("cancelled", "U0REQ", "Cancelled by <@U0REQ>"),
    ],
)
def test_decided_card(outcome: str, by: str | None, line: str) -> None:
    card = approval_card(record())
    from_record = decided_card(record(), outcome, by, AT)  # type: ignore[arg-type]
    from_blocks = decided_card(card.blocks, outcome, by, AT)  # type: ignore[arg-type]
    for msg in (from_record, from_blocks):
        validate(msg)
        assert buttons(msg) == []
        assert msg.blocks[:-1] == card.blocks[:-1]
        assert msg.blocks[-1]["block_id"] == "opsloop_card_decision"
        assert msg.blocks[-1]["elements"][0]["text"].endswith(line)
        assert msg.text.startswith(line)
    again = decided_card(from_blocks, "expired", None, AT)  # re-deciding replaces the line
    assert [b.get("block_id") for b in again.blocks].count("opsloop_card_decision") == 1


def test_decided_card_never_mentions_a_non_user() -> None:
    msg = decided_card(record(), "denied", "<!channel>", AT)
    assert "<!channel>" not in msg.text + repr(msg.blocks)


# -- validate -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "message",
    [
        Message(text=""),
        Message(text="x" * (MAX_TEXT + 1)),
        Message(text="x", blocks=[{"type": "divider"}] * (MAX_BLOCKS + 1)),
        Message(text="x", blocks=[{"type": "section", "text": {"type": "mrkdwn", "text": ""}}]),
        Message(
            text="x",
            blocks=[{"type": "section", "text": {"type": "mrkdwn", "text": "y" * 3001}}],
        ),
        Message(
            text="x", blocks=[{"type": "header", "text": {"type": "plain_text", "text": "h" * 151}}]
        ),
        Message(text="x", blocks=[{"type": "markdown", "text": "m" * 6001}] * 2),
        Message(
            text="x",
            blocks=[
                {
                    "type": "actions",
                    "elements": [
                        {
                            "type": "button",
                            "text": {"type": "plain_text", "text": "b" * 76},
                            "action_id": "a",
                        }
                    ],
                }
            ],
        ),
        Message(
            text="x",
            blocks=[{"type": "divider", "block_id": "a"}, {"type": "divider", "block_id": "a"}],
        ),
        Message(text="x", blocks=[{"type": "mystery"}]),
    ],
)
def test_validate_rejects(message: Message) -> None:
    with pytest.raises(SlackLimitError):
        validate(message)


def card_context(message: Message) -> str:
    context = [b for b in message.blocks if b["type"] == "context"][-1]
    return str(context["elements"][0]["text"])


def test_the_card_says_whom_to_ask() -> None:
    card = approval_card(record(), approvers=["U0BOB", "SOPS"])
    assert card_context(card) == (
        "Requested by <@U0REQ> · mutating · expires at 14:05 UTC"
        " · approvers: <@U0BOB>, <!subteam^SOPS>"
    )
    many = approval_card(record(), approvers=[f"U{i:03d}" for i in range(11)])
    assert card_context(many).endswith("<@U007> and 3 more")
    assert "approvers" not in card_context(approval_card(record()))  # anyone may approve
    odd = approval_card(record(), approvers=["<!channel>"])
    assert "<!channel>" not in card_context(odd)  # never turned into a mention


def test_a_destructive_card_names_the_two_person_rule() -> None:
    card = approval_card(record(category="destructive", dry_run_output="would delete"))
    assert card_context(card).endswith(" · the requester may not approve it")


def test_the_card_shows_what_will_run() -> None:
    card = approval_card(record(preview="kubectl -n prod rollout restart deploy/web <x> ```"))
    [will_run] = [b for b in card.blocks if "*Will run*" in b.get("text", {}).get("text", "")]
    assert will_run["text"]["text"] == (
        "*Will run*\n```\nkubectl -n prod rollout restart deploy/web &lt;x&gt; `\u200b``\n```"
    )
    assert not any("Will run" in str(b) for b in approval_card(record()).blocks)

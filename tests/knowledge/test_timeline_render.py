"""The timeline's values and renderings, with no Redis: one Markdown line per event in
UTC, people by name when known, never Slack's mention syntax; JSON that round-trips to
the millisecond; strict reading of JSON that is not a timeline."""

from __future__ import annotations

import json

import pytest

from bot.knowledge.timeline import (
    TEXT_CHARS,
    Timeline,
    TimelineEvent,
    from_json,
    iso,
    to_json,
    to_markdown,
)

T0 = 1796593169.0  # 2026-12-06 21:39:29 UTC
THREAD = "C0ALERTS:1796593169.000100"


def timeline() -> Timeline:
    return Timeline(
        THREAD,
        [
            TimelineEvent(T0 + 2.5, "approved", "UBOB", "restart host=web-03 (j1)"),
            TimelineEvent(T0, "alert_fired", "alertmanager", "HighErrorRate firing (1 alert)"),
            TimelineEvent(T0 + 1.25, "request", "UALICE", "restart web-03 please (starts j1)"),
        ],
    )


def test_one_line_per_event_in_time_order_in_utc() -> None:
    markdown = to_markdown(timeline())

    lines = markdown.splitlines()
    assert lines[0] == f"# Incident timeline: {THREAD}"
    assert [line for line in lines if line.startswith("- ")] == [
        "- 2026-12-06 21:39:29 UTC · **alert_fired** · alertmanager · "
        "HighErrorRate firing (1 alert)",
        "- 2026-12-06 21:39:30 UTC · **request** · UALICE · restart web-03 please (starts j1)",
        "- 2026-12-06 21:39:31 UTC · **approved** · UBOB · restart host=web-03 (j1)",
    ]
    assert "3 events, 2026-12-06 21:39:29 UTC to 2026-12-06 21:39:31 UTC" in markdown


def test_people_by_name_when_known_else_by_id() -> None:
    markdown = to_markdown(timeline(), names={"UBOB": "bob", "UNOBODY": "x"})

    assert " · **approved** · @bob · " in markdown
    assert " · **request** · UALICE · " in markdown


@pytest.mark.parametrize(
    "hostile",
    [
        "approved by <@U0BOSS>",
        "<!here> <!channel> <!subteam^S123|oncall> <#C123|general>",
        "<https://evil.example.com|click>",
        "&lt;@U0BOSS&gt; written as entities",
    ],
)
def test_the_markdown_never_carries_slack_syntax(hostile: str) -> None:
    events = [
        TimelineEvent(T0, "reply", "<@U0BOSS>", hostile),
        TimelineEvent(T0 + 1, "reply", "UEVE", hostile),
    ]
    names = {"UEVE": "<!everyone>"}

    markdown = to_markdown(Timeline(THREAD, events), names=names)

    assert "<@" not in markdown and "<!" not in markdown and "<#" not in markdown
    assert "<http" not in markdown


def test_a_name_that_is_a_broadcast_is_shown_as_the_id() -> None:
    events = [TimelineEvent(T0, "reply", "UHERE", "hi")]
    markdown = to_markdown(Timeline(THREAD, events), names={"UHERE": "here"})
    assert " · UHERE · hi" in markdown and "@here" not in markdown


def test_markdown_formatting_in_text_stays_text() -> None:
    event = TimelineEvent(T0, "reply", "UALICE", "**bold** `code` [link](http://x) a|b")
    markdown = to_markdown(Timeline(THREAD, [event]))
    assert r"\*\*bold\*\* \`code\` \[link\](http://x) a\|b" in markdown


def test_text_is_one_bounded_line() -> None:
    event = TimelineEvent(T0, "reply", "UALICE", "first\n\nsecond   line " + "x" * 1000)
    assert "\n" not in event.text and len(event.text) == TEXT_CHARS
    assert event.text.startswith("first second line x") and event.text.endswith("…")


def test_events_of_the_same_moment_keep_their_order() -> None:
    events = [TimelineEvent(T0, "stop", "UALICE"), TimelineEvent(T0, "job_ended", "opsloop")]
    assert [e.kind for e in Timeline(THREAD, events).events] == ["stop", "job_ended"]


def test_the_json_is_one_document_in_time_order() -> None:
    document = json.loads(to_json(timeline()))

    assert document["thread"] == THREAD
    assert document["events"][0] == {
        "ts": "2026-12-06T21:39:29.000Z",
        "kind": "alert_fired",
        "who": "alertmanager",
        "text": "HighErrorRate firing (1 alert)",
    }
    assert [e["ts"] for e in document["events"]] == [
        "2026-12-06T21:39:29.000Z",
        "2026-12-06T21:39:30.250Z",
        "2026-12-06T21:39:31.500Z",
    ]


@pytest.mark.parametrize("at", [T0, T0 + 0.1234567, T0 + 0.9996, 1700000000.000100, 0.001])
def test_the_json_round_trips_to_the_millisecond(at: float) -> None:
    original = Timeline(THREAD, [TimelineEvent(at, "reply", "UALICE", "<@U1> ünïcode ✓")])

    again = from_json(to_json(original))

    assert again == original
    assert abs(again.events[0].ts - at) <= 0.0005
    assert iso(again.events[0].ts) == iso(at)


def test_an_empty_timeline_round_trips_and_says_so() -> None:
    empty = Timeline(THREAD, [])
    assert from_json(to_json(empty)) == empty
    assert "Nothing recorded" in to_markdown(empty)


@pytest.mark.parametrize(
    "text",
    [
        "[]",
        '{"thread": "C1:1.1"}x',
        '{"thread": "C1:1.1", "events": [{"ts": "2026-12-06T21:39:29Z", "kind": "reply"}]}',
        '{"thread": "C1:1.1", "events": [{"ts": "yesterday", "kind": "reply", "who": "U1",'
        ' "text": ""}]}',
        '{"thread": "C1:1.1", "events": [{"ts": "2026-12-06T21:39:29", "kind": "reply",'
        ' "who": "U1", "text": ""}]}',
        '{"thread": "C1:1.1", "events": [{"ts": "2026-12-06T21:39:29Z", "kind": "Reply!",'
        ' "who": "U1", "text": ""}]}',
        '{"thread": "C1:1.1", "events": [], "extra": 1}',
    ],
)
def test_json_that_is_not_a_timeline_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        from_json(text)


def test_an_event_kind_is_a_lowercase_word() -> None:
    with pytest.raises(ValueError, match="kind"):
        TimelineEvent(T0, "**approved**", "UBOB")
    with pytest.raises(ValueError, match="time"):
        TimelineEvent(float("nan"), "approved", "UBOB")

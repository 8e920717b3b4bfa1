"""Runbook text quoted as data: Slack's mention and broadcast syntax become plain words."""

from __future__ import annotations

import pytest

from bot.knowledge.quote import quote_as_data


@pytest.mark.parametrize(
    ("raw", "quoted"),
    [
        ("<@U0BOSS>", "@U0BOSS"),
        ("<@U0BOSS|boss>", "@boss"),
        ("<@W012ABC>", "@W012ABC"),
        ("<!channel>", "@channel"),
        ("<!here>", "@here"),
        ("<!here|here>", "@here"),
        ("<!everyone>", "@everyone"),
        ("<!subteam^S0SRE>", "@S0SRE"),
        ("<!subteam^S0SRE|@sre-oncall>", "@sre-oncall"),
        ("<#C0OPS>", "#C0OPS"),
        ("<#C0OPS|ops>", "#ops"),
        ("<!date^1700000000^{date_short}|Nov 14, 2023>", "Nov 14, 2023"),
        (
            "<https://grafana.example.com/d/x|the dashboard>",
            "the dashboard (https://grafana.example.com/d/x)",
        ),
        ("<https://grafana.example.com/d/x>", "https://grafana.example.com/d/x"),
        ("<mailto:sre@example.com|mail us>", "mail us (mailto:sre@example.com)"),
        ("&lt;@U0BOSS&gt; and &lt;!channel&gt;", "@U0BOSS and @channel"),
        ("unclosed <@U0BOSS and <!here", "unclosed @U0BOSS and !here"),
        ("approved by U0BOSS", "approved by U0BOSS"),
        (
            "if [ $a -lt 3 ]; then echo <file> 2>&1; fi",
            "if [ $a -lt 3 ]; then echo <file> 2>&1; fi",
        ),
        ("a < b > c", "a < b > c"),
    ],
)
def test_slack_syntax_becomes_plain_words(raw: str, quoted: str) -> None:
    assert quote_as_data(raw) == quoted


def test_nothing_slack_can_read_as_a_mention_survives() -> None:
    hostile = "<<@U1>> <!<!here>> <@<@U2>> &lt;<!channel>&gt; <!subteam^S1|<@U3>>"
    out = quote_as_data(hostile)
    for opener in ("<@", "<!", "<#", "&lt;@", "&lt;!", "&lt;#"):
        assert opener not in out, out
    assert out.isascii()


def test_plain_text_is_untouched() -> None:
    text = "1. `kubectl rollout undo deployment/api`\n2. Watch the 5xx rate.\n"
    assert quote_as_data(text) is text

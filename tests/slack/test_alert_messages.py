"""The alert message, its resolved form and the thread's updates (``bot.slack.alerts``):
valid Block Kit even for hostile, maximal alerts, no mention syntax from an alert ever left
unescaped, links only to http(s), the ``Investigate`` button's value, "Resolved at"."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest

from bot.alerts.payload import VALUE_CHARS, Notification
from bot.emulator.slack import block_errors
from bot.slack.alerts import (
    ACTION_INVESTIGATE_ALERT,
    ALERT_ACTIONS_BLOCK,
    ALERT_REQUESTER,
    MAX_LABELS_SHOWN,
    alert_message,
    link,
    resolved_message,
    update_message,
)
from bot.slack.blockkit import Message, mention, validate
from tests.alerts.samples import am_alert, am_body, grafana_body, notification

RESOLVED_AT = datetime(2025, 3, 1, 3, 40, tzinfo=UTC).timestamp()
MENTIONS = "<!channel> <!here> <!everyone> <@U0BOSS> <#C0SECRET> <!subteam^S0OPS> <@W0X|boss>"


def strings(value: Any) -> list[str]:
    """Every string in a message's blocks."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return []


def assert_valid(message: Message) -> None:
    validate(message)
    assert block_errors(message.blocks) == []


def assert_no_mentions(message: Message) -> None:
    """The only ``<`` Slack reads as syntax opens one of our http(s) links."""
    ours = re.compile(r"<https?://[^|<>\s]+\|(Source|Runbook|Dashboard)>")
    for text in [message.text, *strings(message.blocks)]:
        for found in re.finditer(r"<", text):
            assert ours.match(text, found.start()), text[found.start() : found.start() + 80]


def texts(message: Message) -> str:
    return "\n".join(strings(message.blocks))


def hostile() -> Notification:
    """Every field an alert sets full of mention syntax and past its bound; more alerts than
    are kept."""
    big = (MENTIONS + " ") * 14  # past VALUE_CHARS: cut by the payload
    labels = {"alertname": big, "severity": big, "namespace": big, "pod": big}
    labels.update({f"label_{i}": big for i in range(70)})
    annotations = {"summary": big, "description": big, "runbook_url": "https://x/" + big}
    annotations.update({f"a{i}": big for i in range(70)})
    alerts = [
        am_alert(
            labels={**labels, "n": str(i)},
            annotations=annotations,
            fingerprint=None,
            generator_url="https://prometheus/graph?q=" + "<!channel>&|>" * 300,
        )
        for i in range(3)
    ]
    alerts += [am_alert(labels={"n": str(i)}, fingerprint=None) for i in range(300)]
    body = am_body(
        alerts,
        groupLabels=labels,
        commonLabels=labels,
        commonAnnotations=annotations,
        title=big,
        truncatedAlerts=40,
    )
    for alert in body["alerts"][:3]:
        alert["valueString"] = big
        alert["dashboardURL"] = "https://grafana/d/" + big
    return notification(body)


def test_the_alert_message() -> None:
    message = alert_message(notification())
    assert_valid(message)
    title, about, labels, context = message.blocks
    assert title["text"]["text"] == ":fire: *Firing* · *HighErrorRate* · `critical`"
    assert about["text"]["text"] == (
        "*5xx rate above 5% on api*\nThe api service answers 7% of requests with a 5xx."
    )
    # The labels that matter, in that order; alertname and severity are in the title.
    assert labels["text"]["text"] == "`namespace` payments · `service` api"
    count, source, runbook = (e["text"] for e in context["elements"])
    assert count == "*1 alert* · 1 firing since Mar 1 03:12 UTC"
    assert source == (
        "<http://prometheus:9090/graph?g0.expr=rate%28http_errors%29&amp;g0.tab=1|Source>"
    )
    assert runbook == "<https://runbooks.example.com/api#high-error-rate|Runbook>"
    assert message.text == ":fire: Firing: HighErrorRate (critical) · 5xx rate above 5% on api"


def test_labels_that_matter_come_first_and_the_rest_are_counted() -> None:
    labels = {f"z{i}": str(i) for i in range(20)}
    labels.update(pod="api-0", instance="10.0.0.1:9100", job="node", alertname="Down")
    labels.update(service="api", namespace="prod", severity="page")
    n = notification(am_body([am_alert(labels=labels)], groupLabels={}, commonLabels={}))
    shown = alert_message(n).blocks[2]["text"]["text"].split(" · ")
    assert shown[:5] == [
        "`namespace` prod",
        "`service` api",
        "`job` node",
        "`instance` 10.0.0.1:9100",
        "`pod` api-0",
    ]
    assert shown[5:7] == ["`z0` 0", "`z1` 1"]
    assert len(shown) == MAX_LABELS_SHOWN + 1
    assert shown[-1] == f"_{20 + 5 - MAX_LABELS_SHOWN} more labels_"


def test_a_group_of_many_alerts_counts_them() -> None:
    many = [
        am_alert(labels={"alertname": "Down", "pod": f"p{i}"}, fingerprint=None) for i in range(3)
    ]
    many.append(
        am_alert(
            status="resolved",
            labels={"alertname": "Down", "pod": "p9"},
            ends_at="2025-03-01T03:30:00Z",
            starts_at="2025-03-01T02:00:00Z",
            fingerprint=None,
        )
    )
    many[1]["startsAt"] = "2025-03-01T03:05:00Z"
    n = notification(am_body(many, truncatedAlerts=2))
    message = alert_message(n)
    assert_valid(message)
    count = message.blocks[-1]["elements"][0]["text"]
    assert count == "*6 alerts* · 3 firing since Mar 1 03:05 UTC · 1 resolved · 2 not listed"


def test_mentions_in_an_alert_never_ping() -> None:
    labels = {"alertname": MENTIONS, "severity": MENTIONS, "team": MENTIONS, "pod": MENTIONS}
    annotations = {"summary": MENTIONS, "description": MENTIONS}
    alert = am_alert(labels=labels, annotations=annotations)
    alert["valueString"] = MENTIONS
    n = notification(
        am_body([alert], groupLabels=labels, commonLabels=labels, commonAnnotations=annotations)
    )
    for message in (
        alert_message(n, note=MENTIONS, investigate_value="g:1"),
        resolved_message(n, resolved_at=RESOLVED_AT, note=MENTIONS),
        update_message(n, n.alerts),
    ):
        assert_valid(message)
        assert_no_mentions(message)
        assert "&lt;!channel&gt;" in texts(message)
        assert "&lt;!channel&gt;" in message.text


def test_a_hostile_alert_at_every_bound_is_valid_block_kit() -> None:
    n = hostile()
    assert len(n.alerts[0].labels["alertname"]) == VALUE_CHARS
    for message in (
        alert_message(n, note="x" * 5_000, investigate_value="v" * 1_000),
        resolved_message(n, resolved_at=RESOLVED_AT),
        update_message(n, n.alerts),
    ):
        assert_valid(message)
        assert_no_mentions(message)
        assert len(message.text) <= 1_000
        assert len(message.blocks) <= 8


@pytest.mark.parametrize(
    "url",
    [
        "javascript:alert(1)",
        "JAVASCRIPT://x/%0aalert(1)",
        "data:text/html,<script>",
        "ftp://files.example.com/x",
        "mailto:boss@example.com",
        "slack://channel?id=C0SECRET",
        "//example.com/no-scheme",
        "http://",
        "https:///path-only",
        "https://exa mple.com/",
        "https://example.com/\nhttps://evil",
        "http://[::1",
        "   ",
        "",
    ],
)
def test_only_http_urls_are_linked(url: str) -> None:
    assert link(url, "Source") is None
    alert = am_alert(generator_url=url, annotations={"runbook_url": url})
    n = notification(am_body([alert], commonAnnotations={}))
    message = alert_message(n)
    assert "|Source>" not in texts(message) and "|Runbook>" not in texts(message)
    assert_no_mentions(message)


def test_a_url_cannot_end_its_link_or_relabel_it() -> None:
    found = link("https://x.example/a?b=1&c=<!channel>|Approve>", "Source")
    assert found == "<https://x.example/a?b=1&amp;c=%3C!channel%3E%7CApprove%3E|Source>"
    assert link("HTTPS://Example.com/x", "Runbook") == "<HTTPS://Example.com/x|Runbook>"
    assert link("https://example.com/" + "a" * 5_000, "Source") is None


def test_grafana_shows_its_value_and_dashboard() -> None:
    message = alert_message(notification(grafana_body()))
    assert_valid(message)
    text = texts(message)
    assert ":fire: *Firing* · *HighCPU*" in text
    assert "Value: `[ var='B' labels={instance=web-03} value=93.5 ]`" in text
    assert "<https://grafana.example.com/d/xyz|Dashboard>" in text
    assert "<https://grafana.example.com/alerting/grafana/abc/view|Source>" in text
    assert "`instance` web-03" in text


def test_the_investigate_button_and_the_note() -> None:
    note = "No investigation started: 20 alert investigations started in the last hour."
    message = alert_message(notification(), note=note, investigate_value="a1b2c3:1")
    assert_valid(message)
    *_, said, actions = message.blocks
    assert said == {
        "type": "context",
        "elements": [{"type": "mrkdwn", "text": f":information_source: {note}"}],
    }
    assert actions["block_id"] == ALERT_ACTIONS_BLOCK
    (button,) = actions["elements"]
    assert button["action_id"] == ACTION_INVESTIGATE_ALERT == "opsloop_investigate_alert"
    assert button["value"] == "a1b2c3:1"
    assert button["text"]["text"] == "Investigate"
    plain = alert_message(notification())
    assert all(b["type"] != "actions" for b in plain.blocks)
    assert ":information_source:" not in texts(plain)


def test_resolved_says_when() -> None:
    resolved = am_alert(status="resolved", ends_at="2025-03-01T03:40:00Z")
    n = notification(am_body([resolved], status="resolved"))
    message = resolved_message(n, resolved_at=RESOLVED_AT)
    assert_valid(message)
    title = message.blocks[0]["text"]["text"]
    assert title == ":white_check_mark: *Resolved at 03:40 UTC* · *HighErrorRate* · `critical`"
    assert "Firing" not in texts(message) and ":fire:" not in texts(message)
    assert message.text.startswith(":white_check_mark: Resolved at 03:40 UTC: HighErrorRate")
    assert "*1 alert* · 1 resolved" in texts(message)
    assert all(b["type"] != "actions" for b in message.blocks)
    # The first notification of a group may already be resolved: no time then.
    first = alert_message(n).blocks[0]["text"]["text"]
    assert first.startswith(":white_check_mark: *Resolved* · *HighErrorRate*")


def test_an_update_names_what_joined_and_what_resolved() -> None:
    joined = am_alert(
        labels={"alertname": "HighErrorRate", "pod": "api-2", "severity": "critical"},
        annotations={"summary": "api-2 answers 9% 5xx"},
        fingerprint="j",
    )
    gone = am_alert(
        status="resolved",
        labels={"alertname": "HighErrorRate", "pod": "api-1", "severity": "critical"},
        ends_at="2025-03-01T03:40:00Z",
        fingerprint="g",
    )
    n = notification(
        am_body(
            [joined, gone],
            commonLabels={"alertname": "HighErrorRate", "severity": "critical"},
        )
    )
    message = update_message(n, n.alerts)
    assert_valid(message)
    head, lines, count = message.blocks
    assert head["text"]["text"] == (
        "*HighErrorRate*: :fire: 1 new alert firing · :white_check_mark: 1 alert resolved"
    )
    assert lines["text"]["text"].split("\n") == [
        ":fire: firing · `pod` api-2 · api-2 answers 9% 5xx",
        ":white_check_mark: resolved · `pod` api-1 · 5xx rate above 5% on api",
    ]
    assert count["elements"][0]["text"].startswith("*2 alerts* · 1 firing since")
    assert message.text == (
        "HighErrorRate: :fire: 1 new alert firing · :white_check_mark: 1 alert resolved"
    )


def test_an_update_of_many_alerts_is_bounded() -> None:
    many = [
        am_alert(labels={"alertname": "Down", "pod": f"api-{i}" * 30}, fingerprint=None)
        for i in range(150)
    ]
    n = notification(am_body(many, commonLabels={"alertname": "Down"}))
    message = update_message(n, n.alerts)
    assert_valid(message)
    lines = message.blocks[1]["text"]["text"].split("\n")
    assert 1 <= len(lines) - 1 <= 10
    assert lines[-1] == f"_and {150 - (len(lines) - 1)} more alerts_"


def test_a_job_an_alert_started_is_requested_by_alertmanager() -> None:
    assert ALERT_REQUESTER == "alertmanager"
    assert mention(ALERT_REQUESTER) == "Alertmanager"
    assert mention("U0ALICE") == "<@U0ALICE>"
    assert mention("<!channel>") == "&lt;!channel&gt;"


def test_the_start_is_shown_with_its_date_or_not_at_all() -> None:
    def count(*starts: str) -> str:
        alerts = [am_alert(starts_at=s, fingerprint=str(i)) for i, s in enumerate(starts)]
        message = alert_message(notification(am_body(alerts)))
        assert_valid(message)
        return str(message.blocks[-1]["elements"][0]["text"])

    assert count("2025-02-26T23:50:00+02:00") == "*1 alert* · 1 firing since Feb 26 21:50 UTC"
    assert count("2025-03-01T03:12:00", "not a time") == (
        "*2 alerts* · 2 firing since Mar 1 03:12 UTC"
    )
    assert count("", "yesterday") == "*2 alerts* · 2 firing"

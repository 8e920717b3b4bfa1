"""The webhook body as a ``Notification``: Alertmanager's and Grafana's shapes, the bad-input
table (each a ``BadPayload`` naming the problem, never another exception), and alert text
kept as scrubbed, bounded data."""

from __future__ import annotations

import json

import pytest

from bot.alerts.payload import (
    KEY_CHARS,
    MAX_ALERTS,
    MAX_LABELS,
    VALUE_CHARS,
    BadPayload,
    fingerprint_of,
    parse,
)
from tests.alerts.samples import am_alert, am_body, grafana_body, notification


def test_an_alertmanager_notification() -> None:
    n = notification()
    assert n.group_key == '{}/{severity="critical"}:{alertname="HighErrorRate"}'
    assert n.status == "firing"
    assert n.receiver == "opsloop"
    assert n.name == "HighErrorRate"
    assert n.count == 1
    assert n.truncated == 0
    assert n.external_url == "http://alertmanager:9093"
    (alert,) = n.alerts
    assert alert.status == "firing"
    assert alert.name == "HighErrorRate"
    assert alert.labels["pod"] == "api-7d9f-abcde"
    assert alert.annotations["summary"] == "5xx rate above 5% on api"
    assert alert.starts_at == "2025-03-01T03:12:00.123456789Z"
    assert alert.ends_at == ""  # Alertmanager's 0001-01-01 while firing
    assert alert.generator_url.startswith("http://prometheus:9090/graph")
    assert alert.fingerprint == "3f6a2b1c9d0e4f57"
    assert n.firing == (alert,)
    assert n.states == {"3f6a2b1c9d0e4f57": "firing"}


def test_a_resolved_alert_keeps_its_end() -> None:
    resolved = am_alert(status="resolved", ends_at="2025-03-01T03:40:00Z")
    n = notification(am_body([resolved], status="resolved"))
    assert n.status == "resolved"
    assert n.alerts[0].ends_at == "2025-03-01T03:40:00Z"
    assert n.firing == ()
    assert n.states == {"3f6a2b1c9d0e4f57": "resolved"}


def test_a_grafana_notification() -> None:
    n = notification(grafana_body())
    assert n.title == "[FIRING:1] HighCPU Infra (web-03)"
    assert n.name == "HighCPU"
    (alert,) = n.alerts
    assert alert.value == "[ var='B' labels={instance=web-03} value=93.5 ]"
    assert alert.dashboard_url == "https://grafana.example.com/d/xyz"
    assert alert.fingerprint == "a1b2c3d4e5f60718"


def test_without_an_alertname_the_title_names_the_group() -> None:
    body = grafana_body()
    body["groupLabels"] = body["commonLabels"] = {}
    body["alerts"][0]["labels"] = {"instance": "web-03"}
    assert notification(body).name == "[FIRING:1] HighCPU Infra (web-03)"
    body.pop("title")
    assert notification(body).name == "alert"


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"", "not JSON"),
        (b"alertname=HighErrorRate", "not JSON"),
        (b'{"alerts": [', "not JSON"),
        (b"\xff\xfe\x00", "not JSON"),
        (b"[]", "must be a JSON object, not list"),
        (b'"alerts"', "must be a JSON object, not str"),
        (b"null", "must be a JSON object, not NoneType"),
        (b"{}", "no 'alerts' list"),
        (b'{"alerts": null}', "no 'alerts' list"),
        (b'{"alerts": "HighErrorRate"}', "'alerts' must be a list, not str"),
        (b'{"alerts": {"labels": {}}}', "'alerts' must be a list, not dict"),
        (b'{"alerts": ["HighErrorRate", "Down"]}', "alert 0 must be an object, not str"),
        (b'{"alerts": [{}, 7]}', "alert 1 must be an object, not int"),
        (b"[" * 200_000 + b"]" * 200_000, "nested too deeply"),
        (b'{"alerts": [{"labels": {"a": ' + b"[" * 5_000 + b"]" * 5_000 + b"}}]}", "nested"),
    ],
)
def test_bad_input_is_a_bad_payload_naming_the_problem(body: bytes, says: str) -> None:
    with pytest.raises(BadPayload, match=says):
        parse(body)


def test_a_deep_value_that_json_reads_is_written_back_or_refused() -> None:
    # Nested just below what ``json`` reads: kept as text, or refused, never a RecursionError.
    for depth in (100, 900, 990, 999):
        body = b'{"alerts": [{"labels": {"a": ' + b"[" * depth + b"]" * depth + b"}}]}"
        try:
            n = parse(body)
        except BadPayload:
            continue
        assert len(n.alerts[0].labels["a"]) <= VALUE_CHARS


def test_an_empty_alerts_list_is_a_notification_of_nothing() -> None:
    n = parse(b'{"alerts": []}')
    assert n.alerts == ()
    assert n.count == 0
    assert n.status == "firing"


def test_500_alerts_in_one_group_are_bounded_and_counted() -> None:
    alerts = [
        am_alert(labels={"alertname": "Down", "pod": f"api-{i}"}, fingerprint=None)
        for i in range(500)
    ]
    n = notification(am_body(alerts))
    assert len(n.alerts) == MAX_ALERTS
    assert n.count == 500
    assert len({a.fingerprint for a in n.alerts}) == MAX_ALERTS


def test_alerts_the_sender_left_out_are_counted() -> None:
    n = notification(am_body([am_alert()], truncatedAlerts=12))
    assert (n.count, n.truncated) == (13, 12)
    for odd in (-3, "12", True, 1.5, None):
        n = notification(am_body([am_alert()], truncatedAlerts=odd))
        assert (n.count, n.truncated) == (1, 0)


def test_an_annotation_of_100_000_chars_is_cut_to_1_000() -> None:
    n = notification(am_body([am_alert(annotations={"description": "x" * 100_000})]))
    description = n.alerts[0].annotations["description"]
    assert len(description) == VALUE_CHARS
    assert description.endswith("…")


def test_every_value_is_bounded() -> None:
    huge = "y" * 50_000
    alert = am_alert(
        labels={"alertname": huge, "k" * 5_000: "v", **{f"l{i}": i for i in range(100)}},
        annotations={f"a{i}": huge for i in range(100)},
        fingerprint=huge,
        starts_at=huge,
        generator_url="https://x/" + huge,
    )
    n = notification(
        am_body(
            [alert],
            groupKey=huge,
            receiver=huge,
            groupLabels={"alertname": huge},
            commonAnnotations={"summary": huge},
            externalURL=huge,
            title=huge,
        )
    )
    (a,) = n.alerts
    assert len(a.labels) <= MAX_LABELS and len(a.annotations) <= MAX_LABELS
    assert all(len(k) <= KEY_CHARS and len(v) <= VALUE_CHARS for k, v in a.labels.items())
    assert all(len(v) <= VALUE_CHARS for v in a.annotations.values())
    assert len(a.fingerprint) <= 64 and len(a.starts_at) <= 64
    assert len(a.generator_url) <= VALUE_CHARS
    assert len(n.group_key) <= 2_000 and len(n.receiver) <= 200
    assert len(n.title) <= VALUE_CHARS and len(n.external_url) <= VALUE_CHARS
    assert len(n.group_labels["alertname"]) <= VALUE_CHARS


def test_slack_mention_syntax_in_a_label_is_kept_as_data() -> None:
    # Escaping is the poster's job (bot.slack.alerts); the payload keeps what was sent.
    labels = {"alertname": "Down", "team": "<!channel> <@U0BOSS> <!subteam^S0OPS>"}
    n = notification(am_body([am_alert(labels=labels)]))
    assert n.alerts[0].labels["team"] == "<!channel> <@U0BOSS> <!subteam^S0OPS>"


def test_a_credential_in_an_annotation_is_scrubbed() -> None:
    annotations = {
        "description": "connect with postgres://app:hunter2@db-01/app password=s3cr3t-pass",
        "token": "xoxb-1234567890-abcdefghijkl",
        "curl": "curl -H 'Authorization: Bearer abc.def.ghi' http://api",
    }
    n = notification(am_body([am_alert(annotations=annotations)], commonAnnotations=annotations))
    for found in (n.alerts[0].annotations, n.common_annotations):
        text = json.dumps(found)
        for secret in ("hunter2", "s3cr3t-pass", "1234567890-abcdefghijkl", "abc.def.ghi"):
            assert secret not in text
        assert "[redacted]" in found["description"]
        assert "db-01" in found["description"]  # what it was stays readable


def test_a_secret_at_the_cut_is_scrubbed_before_it() -> None:
    # Cut first, the token's first characters would be too short to be recognised.
    value = "x" * 990 + " xoxb-1234567890abcdef"
    n = notification(am_body([am_alert(annotations={"note": value})]))
    assert "xoxb-1" not in n.alerts[0].annotations["note"]


def test_values_that_are_not_strings_are_written_as_text() -> None:
    labels = {"alertname": "Down", "code": 500, "ok": False, "gone": None, "list": [1, "a"]}
    n = notification(am_body([am_alert(labels=labels, annotations={"n": 1.5})]))
    assert n.alerts[0].labels == {
        "alertname": "Down",
        "code": "500",
        "ok": "false",
        "list": '[1, "a"]',
    }
    assert n.alerts[0].annotations == {"n": "1.5"}


def test_odd_shapes_are_read_leniently() -> None:
    raw = {"status": "pending", "labels": "nope", "annotations": [1], "startsAt": 7, "x": {}}
    n = notification(am_body([raw], status="weird", groupLabels="x", commonLabels=None))
    (alert,) = n.alerts
    assert alert.status == "firing" and n.status == "firing"
    assert alert.labels == {} and alert.annotations == {}
    assert alert.starts_at == "7"
    assert n.group_labels == {} and n.common_labels == {}


def test_without_a_group_key_the_key_is_stable_and_names_the_group() -> None:
    body = am_body()
    del body["groupKey"]
    first, again = notification(body), notification(body)
    assert first.group_key == again.group_key
    assert first.group_key.startswith("opsloop:")
    other = am_body(groupLabels={"alertname": "Down"})
    del other["groupKey"]
    assert notification(other).group_key != first.group_key
    elsewhere = am_body(receiver="pager")
    del elsewhere["groupKey"]
    assert notification(elsewhere).group_key != first.group_key


def test_without_a_fingerprint_one_is_made_from_the_labels() -> None:
    one = am_alert(labels={"alertname": "Down", "pod": "a"}, fingerprint=None)
    same = am_alert(labels={"pod": "a", "alertname": "Down"}, fingerprint=None)
    other = am_alert(labels={"alertname": "Down", "pod": "b"}, fingerprint=None)
    n = notification(am_body([one, same, other]))
    a, b, c = (alert.fingerprint for alert in n.alerts)
    assert a == b != c
    assert a == fingerprint_of({"alertname": "Down", "pod": "a"})
    assert len(a) == 16


def test_routes_see_the_group_then_shared_then_first_alert_labels() -> None:
    alert = am_alert(labels={"alertname": "A", "team": "first", "pod": "p"})
    n = notification(
        am_body(
            [alert],
            groupLabels={"alertname": "Grouped"},
            commonLabels={"alertname": "Common", "team": "shared"},
        )
    )
    assert n.labels == {"alertname": "Grouped", "team": "shared", "pod": "p"}
    assert n.name == "Grouped"

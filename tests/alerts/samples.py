"""Webhook bodies as Alertmanager 0.25 and Grafana send them, for the alert tests."""

from __future__ import annotations

import json
from typing import Any

from bot.alerts.payload import Notification, parse

NO_END = "0001-01-01T00:00:00Z"


def am_alert(
    *,
    status: str = "firing",
    labels: dict[str, Any] | None = None,
    annotations: dict[str, Any] | None = None,
    fingerprint: str | None = "3f6a2b1c9d0e4f57",
    starts_at: str = "2025-03-01T03:12:00.123456789Z",
    ends_at: str = NO_END,
    generator_url: str = "http://prometheus:9090/graph?g0.expr=rate%28http_errors%29&g0.tab=1",
) -> dict[str, Any]:
    alert: dict[str, Any] = {
        "status": status,
        "labels": labels
        if labels is not None
        else {
            "alertname": "HighErrorRate",
            "severity": "critical",
            "namespace": "payments",
            "service": "api",
            "pod": "api-7d9f-abcde",
        },
        "annotations": annotations
        if annotations is not None
        else {
            "summary": "5xx rate above 5% on api",
            "description": "The api service answers 7% of requests with a 5xx.",
            "runbook_url": "https://runbooks.example.com/api#high-error-rate",
        },
        "startsAt": starts_at,
        "endsAt": ends_at,
        "generatorURL": generator_url,
    }
    if fingerprint is not None:
        alert["fingerprint"] = fingerprint
    return alert


def am_body(
    alerts: list[Any] | None = None, *, status: str = "firing", **fields: Any
) -> dict[str, Any]:
    """An Alertmanager ``version: "4"`` notification of one group."""
    body: dict[str, Any] = {
        "version": "4",
        "status": status,
        "receiver": "opsloop",
        "groupKey": '{}/{severity="critical"}:{alertname="HighErrorRate"}',
        "truncatedAlerts": 0,
        "groupLabels": {"alertname": "HighErrorRate"},
        "commonLabels": {
            "alertname": "HighErrorRate",
            "severity": "critical",
            "namespace": "payments",
            "service": "api",
        },
        "commonAnnotations": {
            "summary": "5xx rate above 5% on api",
            "runbook_url": "https://runbooks.example.com/api#high-error-rate",
        },
        "externalURL": "http://alertmanager:9093",
        "alerts": alerts if alerts is not None else [am_alert()],
    }
    body.update(fields)
    return body


def grafana_body() -> dict[str, Any]:
    """Grafana's webhook contact point: Alertmanager's shape plus its own fields."""
    return {
        "receiver": "opsloop",
        "status": "firing",
        "orgId": 1,
        "alerts": [
            {
                "status": "firing",
                "labels": {"alertname": "HighCPU", "grafana_folder": "Infra", "instance": "web-03"},
                "annotations": {"summary": "CPU above 90% on web-03"},
                "startsAt": "2025-03-01T03:12:00Z",
                "endsAt": NO_END,
                "generatorURL": "https://grafana.example.com/alerting/grafana/abc/view",
                "fingerprint": "a1b2c3d4e5f60718",
                "silenceURL": "https://grafana.example.com/alerting/silence/new",
                "dashboardURL": "https://grafana.example.com/d/xyz",
                "panelURL": "https://grafana.example.com/d/xyz?viewPanel=2",
                "values": {"B": 93.5},
                "valueString": "[ var='B' labels={instance=web-03} value=93.5 ]",
            }
        ],
        "groupLabels": {"alertname": "HighCPU"},
        "commonLabels": {"alertname": "HighCPU", "grafana_folder": "Infra", "instance": "web-03"},
        "commonAnnotations": {"summary": "CPU above 90% on web-03"},
        "externalURL": "https://grafana.example.com/",
        "version": "1",
        "groupKey": '{}/{}:{alertname="HighCPU"}',
        "truncatedAlerts": 0,
        "title": "[FIRING:1] HighCPU Infra (web-03)",
        "state": "alerting",
        "message": "**Firing**\n\nValue: B=93.5",
    }


def notification(body: dict[str, Any] | None = None) -> Notification:
    return parse(json.dumps(body if body is not None else am_body()).encode())

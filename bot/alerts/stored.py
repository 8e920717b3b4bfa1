"""A notification as the store keeps it (JSON) and back: what a group's work item
carries from the webhook's receipt to whichever process posts it in Slack."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from bot.alerts.payload import Alert, Notification


def to_json(notification: Notification) -> str:
    return json.dumps(dataclasses.asdict(notification), separators=(",", ":"))


def from_json(raw: str) -> Notification:
    data: dict[str, Any] = json.loads(raw)
    alerts = tuple(Alert(**alert) for alert in data.pop("alerts", []))
    return Notification(alerts=alerts, **data)

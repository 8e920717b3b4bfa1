"""The webhook body of Alertmanager (``version: "4"``) and Grafana, as one ``Notification``.

``parse`` takes the raw body and returns the notification or raises ``BadPayload`` with
a sentence naming what is wrong (the endpoint answers 400 with it): not JSON, not an
object, ``alerts`` missing or not a list, an alert that is not an object. Everything else
is lenient, as the senders differ: unknown fields are ignored, a label or annotation
value that is not a string is written as one, Grafana's extra fields (``title``,
``message``, ``dashboardURL``, ``valueString`` …) are kept where they help.

Alert text is untrusted: every label, annotation and value is scrubbed
(``redact_secrets``) and cut to ``VALUE_CHARS``; at most ``MAX_ALERTS`` alerts of a group
are kept (the count of all is kept too), and at most ``MAX_LABELS`` labels and
annotations per alert. What the model is shown of a group is bounded again by
``bot.alerts.text``.

A group is known by its ``groupKey`` (stable while the group exists); a sender without
one gets a key made from the receiver and the group labels. An alert is known by its
``fingerprint`` (Alertmanager's hash of its labels), or one made the same way.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from bot.agent.redact import redact_secrets

VALUE_CHARS = 1_000  # one label, annotation or value
MAX_ALERTS = 200  # alerts of one notification kept (Alertmanager sends at most its max)
MAX_LABELS = 64  # labels (and annotations) of one alert kept
KEY_CHARS = 200  # a label's or annotation's name
NO_END = "0001-01-01T00:00:00Z"  # Alertmanager's endsAt while an alert fires

Status = Literal["firing", "resolved"]


class BadPayload(ValueError):
    """The body is not a webhook notification; the message says why, to the sender."""


def bounded(value: object, limit: int = VALUE_CHARS) -> str:
    """``value`` as text, scrubbed, at most ``limit`` characters (cut with ``…``)."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    text = redact_secrets(text[: 4 * limit])  # scrubbed before the final cut
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _pairs(raw: object) -> dict[str, str]:
    """A label or annotation map, bounded; anything but an object is empty."""
    if not isinstance(raw, Mapping):
        return {}
    pairs: dict[str, str] = {}
    for key, value in list(raw.items())[:MAX_LABELS]:
        if value is None:
            continue
        pairs[bounded(key, KEY_CHARS)] = bounded(value)
    return pairs


def _status(raw: object) -> Status:
    return "resolved" if raw == "resolved" else "firing"


def _text(raw: object, limit: int = VALUE_CHARS) -> str:
    return bounded(raw, limit) if isinstance(raw, str | int | float) and raw != "" else ""


def fingerprint_of(labels: Mapping[str, str]) -> str:
    """A stable id of an alert by its labels (when the sender gave none)."""
    canonical = json.dumps(sorted(labels.items()), separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Alert:
    status: Status
    labels: dict[str, str]
    annotations: dict[str, str]
    starts_at: str
    ends_at: str  # empty while firing
    generator_url: str
    fingerprint: str
    value: str = ""  # Grafana's valueString
    dashboard_url: str = ""

    @property
    def name(self) -> str:
        return self.labels.get("alertname", "")

    @classmethod
    def of(cls, raw: Mapping[str, Any]) -> Alert:
        labels = _pairs(raw.get("labels"))
        ends = _text(raw.get("endsAt"), 64)
        fingerprint = _text(raw.get("fingerprint"), 64) or fingerprint_of(labels)
        return cls(
            status=_status(raw.get("status")),
            labels=labels,
            annotations=_pairs(raw.get("annotations")),
            starts_at=_text(raw.get("startsAt"), 64),
            ends_at="" if ends == NO_END else ends,
            generator_url=_text(raw.get("generatorURL")),
            fingerprint=fingerprint,
            value=_text(raw.get("valueString")),
            dashboard_url=_text(raw.get("dashboardURL")),
        )


@dataclass(frozen=True, slots=True)
class Notification:
    """One webhook notification of one alert group."""

    group_key: str
    status: Status
    receiver: str
    group_labels: dict[str, str]
    common_labels: dict[str, str]
    common_annotations: dict[str, str]
    external_url: str
    alerts: tuple[Alert, ...]
    count: int  # alerts the sender said the group has (kept or not)
    truncated: int = 0  # ``truncatedAlerts``: alerts the sender left out
    title: str = ""  # Grafana's title

    @property
    def labels(self) -> dict[str, str]:
        """What routes match: the group's labels, then what all its alerts share, then
        (when the sender gives neither) the first alert's."""
        first = self.alerts[0].labels if self.alerts else {}
        return {**first, **self.common_labels, **self.group_labels}

    @property
    def name(self) -> str:
        return self.labels.get("alertname", "") or self.title or "alert"

    @property
    def firing(self) -> tuple[Alert, ...]:
        return tuple(a for a in self.alerts if a.status == "firing")

    @property
    def states(self) -> dict[str, Status]:
        """Each alert's status by fingerprint: what changes between notifications."""
        return {a.fingerprint: a.status for a in self.alerts}


TOO_DEEP = "the body is nested too deeply"


def parse(body: bytes) -> Notification:
    """The notification in a webhook body, or ``BadPayload`` saying what is wrong."""
    # Nesting deeper than Python reads (or writes a value back) is bad input too, not a 5xx.
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise BadPayload(f"the body is not JSON ({exc.__class__.__name__})") from None
    except RecursionError:
        raise BadPayload(TOO_DEEP) from None
    if not isinstance(data, dict):
        raise BadPayload(f"the body must be a JSON object, not {type(data).__name__}")
    try:
        return _notification(data)
    except RecursionError:
        raise BadPayload(TOO_DEEP) from None


def _notification(data: dict[str, Any]) -> Notification:
    raw_alerts = data.get("alerts")
    if raw_alerts is None:
        raise BadPayload("the payload has no 'alerts' list")
    if not isinstance(raw_alerts, list):
        raise BadPayload(f"'alerts' must be a list, not {type(raw_alerts).__name__}")
    for index, raw in enumerate(raw_alerts[:MAX_ALERTS]):
        if not isinstance(raw, dict):
            raise BadPayload(f"alert {index} must be an object, not {type(raw).__name__}")
    alerts = tuple(Alert.of(raw) for raw in raw_alerts[:MAX_ALERTS])
    group_labels = _pairs(data.get("groupLabels"))
    receiver = _text(data.get("receiver"), 200)
    group_key = _text(data.get("groupKey"), 2_000) or (
        f"{receiver}:" + json.dumps(sorted(group_labels.items()), separators=(",", ":"))
    )
    truncated = data.get("truncatedAlerts")
    truncated = truncated if type(truncated) is int and truncated > 0 else 0
    return Notification(
        group_key=group_key,
        status=_status(data.get("status")),
        receiver=receiver,
        group_labels=group_labels,
        common_labels=_pairs(data.get("commonLabels")),
        common_annotations=_pairs(data.get("commonAnnotations")),
        external_url=_text(data.get("externalURL")),
        alerts=alerts,
        count=len(raw_alerts) + truncated,
        truncated=truncated,
        title=_text(data.get("title")),
    )

"""The alert message that opens an incident thread, and the replies that follow it.

Pure functions of a :class:`~bot.alerts.payload.Notification` returning a
:class:`~bot.slack.blockkit.Message`:

- ``alert_message``: the post of an alert group's first notification: status, alert name
  and severity; summary and description; the labels that matter; links to the source
  (``generatorURL``), the runbook (``runbook_url``) and Grafana's dashboard; the count of
  alerts; an optional ``note`` (why nothing started); and the ``Investigate`` button when the
  caller gives it a value.
- ``resolved_message``: the same post once the whole group resolved ("Resolved at 03:40 UTC").
- ``update_message``: the thread reply for alerts that joined the group or resolved.

Alert text is untrusted: every label, annotation and value is escaped (``blockkit.escape``)
so ``<!channel>``, ``<!here>``, ``<@U…>``, ``<#C…>`` or ``<!subteam^…>`` in an alert shows as
text and never pings anyone; the only links are ours, made of http(s) URLs; every piece is
cut to a bound that keeps the message within Slack's limits.

A job an alert started has ``ALERT_REQUESTER`` as its requester, which
``blockkit.mention`` shows as "Alertmanager" wherever a requester is named (the status
message, App Home, cards).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from urllib.parse import urlsplit

from bot.alerts.payload import Alert, Notification
from bot.alerts.text import REQUESTER, ordered_labels
from bot.slack.blockkit import (
    MAX_SECTION,
    Block,
    Message,
    actions_block,
    button_element,
    context_block,
    cut,
    escape,
    escaped,
    hhmm,
    one_line,
    plural,
    section_block,
)

ALERT_REQUESTER = REQUESTER  # the requester of a job an alert started
ACTION_INVESTIGATE_ALERT = "opsloop_investigate_alert"
ALERT_TITLE_BLOCK = "opsloop_alert_title"
ALERT_ACTIONS_BLOCK = "opsloop_alert_actions"

NAME_CHARS = 150
SEVERITY_CHARS = 40
SUMMARY_CHARS = 300
DESCRIPTION_CHARS = 1_500
VALUE_CHARS = 300
NOTE_CHARS = 500
TEXT_CHARS = 500  # the notification text: the headline and the summary
MAX_LABELS_SHOWN = 12  # on the alert message; the rest counted
MAX_ALERT_LABELS = 6  # of one alert on an update line
LABEL_KEY_CHARS = 40
LABEL_VALUE_CHARS = 100
LINK_CHARS = 2_000  # an escaped URL longer than this is not linked
MAX_UPDATE_LINES = 10
UPDATE_LINE_CHARS = 600
# Shown in the headline, so not again among the labels.
HEADLINE_LABELS = frozenset({"alertname", "severity"})

FIRING_ICON = ":fire:"
RESOLVED_ICON = ":white_check_mark:"


# -- pieces ----------------------------------------------------------------------------------


def _code(text: str, limit: int) -> str:
    """``text`` as inline code: one line, escaped, cut, without backticks that would end it."""
    plain = one_line(text).replace("`", "'")
    return f"`{escaped(plain, limit)}`"


def link(url: str, label: str) -> str | None:
    """``<url|label>`` for an http(s) URL, else None: alert text never makes another kind
    of link, and a URL cannot end the link early or add a label of its own."""
    url = url.strip()
    if not url or any(c.isspace() or ord(c) < 32 for c in url):
        return None
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
        return None
    safe = escape(url.replace("|", "%7C").replace("<", "%3C").replace(">", "%3E"))
    return f"<{safe}|{label}>" if len(safe) <= LINK_CHARS else None


def _annotation(notification: Notification, key: str) -> str:
    """An annotation the whole group shares, else the first alert's."""
    n = notification
    found = n.common_annotations.get(key, "")
    return found or (n.alerts[0].annotations.get(key, "") if n.alerts else "")


def _shared_labels(notification: Notification) -> dict[str, str]:
    """The group's labels and what all its alerts share, else the first alert's."""
    n = notification
    shared = {**n.common_labels, **n.group_labels}
    return shared or (dict(n.alerts[0].labels) if n.alerts else {})


def _label_items(labels: Mapping[str, str], limit: int) -> list[str]:
    shown = [(k, v) for k, v in ordered_labels(dict(labels)) if k not in HEADLINE_LABELS]
    items = [
        f"{_code(k, LABEL_KEY_CHARS)} {escaped(one_line(v), LABEL_VALUE_CHARS)}"
        for k, v in shown[:limit]
    ]
    if (more := len(shown) - limit) > 0:
        items.append(f"_{plural(more, 'more label')}_")
    return items


def _since(alerts: Sequence[Alert]) -> str:
    """``since Mar 1 03:12 UTC``: when the earliest alert started ("" when unknown). With
    its date: a group can reach the bot days after it started firing."""
    starts = []
    for alert in alerts:
        try:
            at = datetime.fromisoformat(alert.starts_at)
        except ValueError:
            continue
        starts.append(at if at.tzinfo else at.replace(tzinfo=UTC))
    if not starts:
        return ""
    first = min(starts).astimezone(UTC)
    return f"since {first:%b} {first.day} {hhmm(first)}"


def _count(notification: Notification) -> str:
    """``*3 alerts* · 2 firing since 03:12 UTC · 1 resolved``."""
    n = notification
    firing = n.firing
    resolved = len(n.alerts) - len(firing)
    parts = [f"*{plural(n.count, 'alert')}*"]
    if firing:
        parts.append(f"{len(firing):,} firing {_since(firing)}".rstrip())
    if resolved:
        parts.append(f"{resolved:,} resolved")
    if (missing := n.count - len(n.alerts)) > 0:
        parts.append(f"{missing:,} not listed")
    return " · ".join(parts)


def _links(notification: Notification) -> list[str]:
    n = notification
    source = next((a.generator_url for a in n.alerts if a.generator_url), "")
    dashboard = next((a.dashboard_url for a in n.alerts if a.dashboard_url), "")
    found = (
        link(source, "Source"),
        link(_annotation(n, "runbook_url"), "Runbook"),
        link(dashboard, "Dashboard"),
    )
    return [f for f in found if f]


# -- the alert message -----------------------------------------------------------------------


def alert_message(
    notification: Notification,
    *,
    note: str | None = None,
    investigate_value: str | None = None,
) -> Message:
    """The post that opens an alert group's thread; ``note`` adds a line (why nothing
    started), ``investigate_value`` the ``Investigate`` button with that value."""
    return _alert_message(notification, None, note, investigate_value)


def resolved_message(
    notification: Notification,
    *,
    resolved_at: float,
    note: str | None = None,
    investigate_value: str | None = None,
) -> Message:
    """The alert message once the whole group resolved: "Resolved at 03:40 UTC"."""
    return _alert_message(notification, resolved_at, note, investigate_value)


def _alert_message(
    notification: Notification,
    resolved_at: float | None,
    note: str | None,
    investigate_value: str | None,
) -> Message:
    n = notification
    if resolved_at is not None:
        icon, status = RESOLVED_ICON, f"Resolved at {hhmm(resolved_at)}"
    elif n.status == "resolved":
        icon, status = RESOLVED_ICON, "Resolved"
    else:
        icon, status = FIRING_ICON, "Firing"
    name = escaped(one_line(n.name), NAME_CHARS)
    severity = n.labels.get("severity", "")
    headline = f"{icon} *{status}* · *{name}*"
    if severity:
        headline += f" · {_code(severity, SEVERITY_CHARS)}"
    blocks: list[Block] = [section_block(headline, block_id=ALERT_TITLE_BLOCK)]

    summary = _annotation(n, "summary")
    about = []
    if summary:
        about.append(f"*{escaped(one_line(summary), SUMMARY_CHARS)}*")
    if description := _annotation(n, "description").strip():
        about.append(escaped(description, DESCRIPTION_CHARS))
    if len(n.alerts) == 1 and n.alerts[0].value:
        about.append(f"Value: {_code(n.alerts[0].value, VALUE_CHARS)}")
    if about:
        blocks.append(section_block("\n".join(about)))
    if labels := _label_items(_shared_labels(n), MAX_LABELS_SHOWN):
        blocks.append(section_block(" · ".join(labels)))
    blocks.append(context_block(_count(n), *_links(n)))
    if note and note.strip():
        blocks.append(context_block(f":information_source: {escaped(one_line(note), NOTE_CHARS)}"))
    if investigate_value is not None:
        button = button_element(
            "Investigate", ACTION_INVESTIGATE_ALERT, investigate_value, style="primary"
        )
        blocks.append(actions_block(ALERT_ACTIONS_BLOCK, button))

    text = f"{icon} {status}: {n.name}" + (f" ({severity})" if severity else "")
    if summary:
        text += f" · {summary}"
    return Message(text=escaped(one_line(text), TEXT_CHARS), blocks=blocks)


# -- the thread's replies --------------------------------------------------------------------


def _alert_line(alert: Alert, common: Mapping[str, str]) -> str:
    """One alert of an update: its icon, its own labels (or its name) and its summary."""
    own = {k: v for k, v in alert.labels.items() if common.get(k) != v}
    labels = " · ".join(_label_items(own, MAX_ALERT_LABELS))
    resolved = alert.status == "resolved"
    line = f"{RESOLVED_ICON if resolved else FIRING_ICON} {'resolved' if resolved else 'firing'}"
    line += f" · {labels or escaped(one_line(alert.name or 'alert'), NAME_CHARS)}"
    if summary := alert.annotations.get("summary"):
        line += f" · {escaped(one_line(summary), SUMMARY_CHARS)}"
    return cut(line, UPDATE_LINE_CHARS)


def update_message(notification: Notification, changed: Sequence[Alert]) -> Message:
    """The reply in the thread for alerts that joined the group (firing) or resolved."""
    n = notification
    joined = sum(1 for a in changed if a.status == "firing")
    resolved = len(changed) - joined
    parts = []
    if joined:
        parts.append(f"{FIRING_ICON} {plural(joined, 'new alert')} firing")
    if resolved:
        parts.append(f"{RESOLVED_ICON} {plural(resolved, 'alert')} resolved")
    what = " · ".join(parts) or "no change"
    headline = f"*{escaped(one_line(n.name), NAME_CHARS)}*: {what}"

    lines: list[str] = []
    used = 0
    for alert in changed[:MAX_UPDATE_LINES]:
        line = _alert_line(alert, n.common_labels)
        if used + len(line) + 1 > MAX_SECTION - 40:
            break
        lines.append(line)
        used += len(line) + 1
    if more := len(changed) - len(lines):
        lines.append(f"_and {plural(more, 'more alert')}_")
    blocks: list[Block] = [section_block(headline)]
    if lines:
        blocks.append(section_block("\n".join(lines)))
    blocks.append(context_block(_count(n)))
    text = f"{n.name}: {what}"
    return Message(text=escaped(one_line(text), TEXT_CHARS), blocks=blocks)

"""Alerting integrations' posts as Slack holds them: what incident threads start from.

Each function returns a fresh message in the wire shape ``conversations.replies`` returns
(seed it with ``FakeSlack.add_post``): who posted it (an incoming webhook's
``subtype: bot_message`` and ``username``, or an app's ``bot_id``, ``user`` and
``bot_profile``), its notification ``text`` and the substance, in ``attachments``
(``fallback``, ``pretext``, ``title``, ``text``, ``fields``) or in ``blocks``:

- ``alertmanager_firing`` / ``alertmanager_resolved``: Prometheus Alertmanager's Slack
  receiver (an incoming webhook; its default title, fallback and a fields section);
- ``pagerduty_triggered``: the PagerDuty app's incident post (section text and fields,
  a context line, Acknowledge/Resolve buttons);
- ``datadog_monitor``: a Datadog monitor notification (header, rich text with a list and
  the query, a context line);
- ``grafana_legacy``: a Grafana legacy notifier post whose attachment has only its
  ``fallback`` (and an image and a footer).

``own_post`` is a message of this bot's own (the fake's ``BOT_ID``/``BOT_USER_ID``).
"""

from __future__ import annotations

from typing import Any

from bot.emulator.slack_wire import BOT_ID, BOT_USER_ID, TEAM_ID

ALERTMANAGER_BOT = "B0ALERTMGR"
PAGERDUTY_BOT, PAGERDUTY_USER, PAGERDUTY_APP = "B0PAGERDUTY", "U0PAGERDUTY", "A0PAGERDUTY"
DATADOG_BOT = "B0DATADOG"
GRAFANA_BOT = "B0GRAFANA"

Post = dict[str, Any]


def alertmanager_firing(*, host: str = "web-03") -> Post:
    alerts = "https://alertmanager.example.com/#/alerts?receiver=slack-incidents"
    return {
        "type": "message",
        "subtype": "bot_message",
        "text": "",
        "username": "Alertmanager",
        "bot_id": ALERTMANAGER_BOT,
        "icons": {"image_48": "https://alertmanager.example.com/favicon-48.png"},
        "attachments": [
            {
                "id": 1,
                "color": "a30200",
                "fallback": f"[FIRING:1] HighCPU {host} | {alerts}",
                "title": f"[FIRING:1] HighCPU {host}",
                "title_link": alerts,
                "text": (
                    "*Alert:* CPU usage above 90% for 10 minutes - `critical`\n"
                    f"*Description:* {host} has been at 97% CPU since 14:02 UTC\n"
                    "*Details:*\n"
                    "  • *alertname:* `HighCPU`\n"
                    f"  • *instance:* `{host}:9100`\n"
                    "  • *job:* `node`"
                ),
                "fields": [
                    {"title": "severity", "value": "critical", "short": True},
                    {
                        "title": "runbook",
                        "value": "<https://runbooks.example.com/HighCPU|HighCPU runbook>",
                        "short": True,
                    },
                ],
                "mrkdwn_in": ["fallback", "pretext", "text"],
            }
        ],
    }


def alertmanager_resolved(*, host: str = "web-03") -> Post:
    post = alertmanager_firing(host=host)
    attachment = post["attachments"][0]
    attachment.update(
        color="2eb886",
        fallback=f"[RESOLVED] HighCPU {host} | {attachment['title_link']}",
        title=f"[RESOLVED] HighCPU {host}",
        text=f"*Alert:* CPU usage above 90% for 10 minutes - `critical`\n*Resolved:* {host} "
        "back at 41% CPU",
    )
    return post


def pagerduty_triggered(*, host: str = "web-03") -> Post:
    incident = "https://acme.pagerduty.com/incidents/Q0ABC123"
    return {
        "type": "message",
        "user": PAGERDUTY_USER,
        "bot_id": PAGERDUTY_BOT,
        "app_id": PAGERDUTY_APP,
        "text": f"Triggered: #4211 [FIRING:1] HighCPU {host}",
        "bot_profile": {
            "id": PAGERDUTY_BOT,
            "app_id": PAGERDUTY_APP,
            "name": "PagerDuty",
            "deleted": False,
            "team_id": TEAM_ID,
        },
        "blocks": [
            {
                "type": "section",
                "block_id": "title",
                "text": {
                    "type": "mrkdwn",
                    "text": f":rotating_light: *<{incident}|#4211 [FIRING:1] HighCPU {host}>*",
                    "verbatim": False,
                },
            },
            {
                "type": "section",
                "block_id": "fields",
                "fields": [
                    {"type": "mrkdwn", "text": "*Status:*\nTriggered"},
                    {"type": "mrkdwn", "text": "*Urgency:*\nHigh"},
                    {"type": "mrkdwn", "text": "*Service:*\nweb-frontend"},
                    {"type": "mrkdwn", "text": "*Assigned to:*\n<@U0ONCALL>"},
                ],
            },
            {
                "type": "context",
                "block_id": "meta",
                "elements": [
                    {
                        "type": "image",
                        "image_url": "https://acme.pagerduty.com/pd-48.png",
                        "alt_text": "PagerDuty",
                    },
                    {"type": "mrkdwn", "text": "Escalation policy: *Web primary*"},
                ],
            },
            {
                "type": "actions",
                "block_id": "incident_actions",
                "elements": [
                    {
                        "type": "button",
                        "action_id": "acknowledge",
                        "text": {"type": "plain_text", "text": "Acknowledge", "emoji": True},
                        "value": "Q0ABC123",
                    },
                    {
                        "type": "button",
                        "action_id": "resolve",
                        "text": {"type": "plain_text", "text": "Resolve", "emoji": True},
                        "value": "Q0ABC123",
                    },
                ],
            },
        ],
    }


def datadog_monitor(*, service: str = "web-frontend", host: str = "web-03") -> Post:
    title = f"Triggered: [P2] 5xx rate above 5% on {service}"
    return {
        "type": "message",
        "subtype": "bot_message",
        "username": "Datadog",
        "bot_id": DATADOG_BOT,
        "text": title,
        "blocks": [
            {"type": "header", "text": {"type": "plain_text", "text": title, "emoji": True}},
            {
                "type": "rich_text",
                "block_id": "body",
                "elements": [
                    {
                        "type": "rich_text_section",
                        "elements": [
                            {"type": "text", "text": "5xx rate is "},
                            {"type": "text", "text": "7.3%", "style": {"bold": True}},
                            {"type": "text", "text": " over the last 5 minutes. Notifying "},
                            {"type": "usergroup", "usergroup_id": "S0SRE"},
                        ],
                    },
                    {
                        "type": "rich_text_list",
                        "style": "bullet",
                        "indent": 0,
                        "elements": [
                            {
                                "type": "rich_text_section",
                                "elements": [{"type": "text", "text": f"service:{service}"}],
                            },
                            {
                                "type": "rich_text_section",
                                "elements": [{"type": "text", "text": f"host:{host}"}],
                            },
                        ],
                    },
                    {
                        "type": "rich_text_preformatted",
                        "elements": [
                            {
                                "type": "text",
                                "text": f"sum:trace.http.request.errors{{service:{service}}}"
                                ".as_rate()",
                            }
                        ],
                    },
                ],
            },
            {
                "type": "context",
                "elements": [
                    {
                        "type": "mrkdwn",
                        "text": "<https://app.datadoghq.com/monitors/123456|Monitor #123456>",
                    }
                ],
            },
        ],
    }


def grafana_legacy(*, host: str = "db-01") -> Post:
    return {
        "type": "message",
        "subtype": "bot_message",
        "username": "Grafana",
        "bot_id": GRAFANA_BOT,
        "text": "",
        "attachments": [
            {
                "id": 1,
                "color": "D63232",
                "fallback": f"[Alerting] Disk usage on {host} at 91%",
                "image_url": "https://grafana.example.com/render/d-solo/disk.png",
                "footer": "Grafana v9.5.2",
                "ts": 1_700_000_000,
            }
        ],
    }


def own_post(text: str) -> Post:
    """A message this bot posted (``chat.postMessage`` with its token)."""
    return {
        "type": "message",
        "user": BOT_USER_ID,
        "bot_id": BOT_ID,
        "text": text,
        "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": text}}],
    }

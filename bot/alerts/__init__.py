"""Alerts in: what Alertmanager and Grafana send, where it goes, and how it is told.

Pure values and parsing, no I/O but reading the routes file: ``payload.py`` (the webhook
body, validated, scrubbed and bounded), ``routes.py`` (``OPSLOOP_ALERTS``: which channel an
alert group goes to and whether it is investigated), ``text.py`` (an alert group as the
model's request, quoted as data). The store keeps the groups (``bot.store.alerts``), the
jobs side acts on them (``bot.turns.alerts``) and the Slack edge posts them
(``bot.slack.alerts``).
"""

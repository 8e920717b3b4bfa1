"""Durable state in Redis: history, jobs, inject streams (receipts deduped by message ts),
approvals, leases, ledger, traces and artifacts. Every key is built in ``keys.py``; every
Redis error is translated to ``bot.errors.StoreError`` in ``connection.py``. Not here:
what a job means to people (``bot.turns`` decides, ``bot.slack`` shows); this room
imports the core and the errors only, never turns, Slack or the model clients."""

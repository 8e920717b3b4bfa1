"""Durable state in Redis: history, jobs, inject streams, approvals, leases, ledger, dedupe,
traces and artifacts. Every key is built in ``keys.py``; every Redis error is translated
to ``bot.errors.StoreError`` in ``connection.py``."""

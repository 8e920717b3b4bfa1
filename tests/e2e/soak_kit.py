"""The chaos soak for ``tests/e2e/test_chaos_soak.py``: ``bot.emulator.soak`` (where the
jobs, the chaos and the checks are described; ``benchmarks/chaos_soak.py`` runs its long
form) and its report (``bot.emulator.soak_report``), under the names the test imports."""

from __future__ import annotations

from bot.emulator.soak import (
    APPROVER,
    CHANNEL,
    CHECK_TIMEOUT_S,
    DELIVERY_TRIES,
    FINAL,
    KINDS,
    REQUESTER,
    Chaos,
    Soak,
    Target,
    cards,
    soak_tools,
)
from bot.emulator.soak_report import LOG_TAIL_LINES, Report

__all__ = [
    "APPROVER",
    "CHANNEL",
    "CHECK_TIMEOUT_S",
    "DELIVERY_TRIES",
    "FINAL",
    "KINDS",
    "LOG_TAIL_LINES",
    "REQUESTER",
    "Chaos",
    "Report",
    "Soak",
    "Target",
    "cards",
    "soak_tools",
]

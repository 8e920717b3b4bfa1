"""The daily caps' values, pure (no Redis): one day's status as read (``CapStatus``),
the UTC day a cap counts, and money as the integer micro-dollars the counters hold.

``bot.store.quota`` keeps the counters and re-exports these names.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime

MICRO = 1_000_000  # cost counters are integer micro-dollars


def utc_day(now: float) -> str:
    """The UTC date of ``now`` (``2026-12-01``): the day a cap counts."""
    return datetime.fromtimestamp(now, UTC).date().isoformat()


def to_micro(usd: float) -> int:
    """Dollars as integer micro-dollars, rounded up (a reservation errs on the safe side)."""
    return math.ceil(round(usd * MICRO, 6))


def usd(micro: int) -> str:
    """``$1,234.57``; cents below a dollar get more digits (``$0.0042``)."""
    value = micro / MICRO
    return f"${value:,.2f}" if value >= 1 or value == 0 else f"${value:.4f}"


@dataclass(frozen=True, slots=True, kw_only=True)
class CapStatus:
    """One UTC day of the workspace's caps (``cap`` = the base cap plus today's raises;
    ``None``: no such cap)."""

    day: str
    tokens_used: int
    tokens_cap: int | None
    cost_used_micro: int
    cost_cap_micro: int | None
    raised_tokens: int
    raised_cost_micro: int
    raises: int
    refused: bool  # a call found no room since the last raise
    raised_by: str | None = None

    @property
    def cost_used_usd(self) -> float:
        return self.cost_used_micro / MICRO

    @property
    def cost_cap_usd(self) -> float | None:
        return None if self.cost_cap_micro is None else self.cost_cap_micro / MICRO

    @property
    def raised_cost_usd(self) -> float:
        return self.raised_cost_micro / MICRO

    @property
    def reached(self) -> bool:
        """New jobs wait, and an approver may raise the day (the scripts' definition)."""
        return (
            self.refused
            or (self.tokens_cap is not None and self.tokens_used >= self.tokens_cap)
            or (self.cost_cap_micro is not None and self.cost_used_micro >= self.cost_cap_micro)
        )

    def figures(self) -> str:
        """``996,316 of 1,000,000 tokens and $4.10 of $10.00`` (the caps that are set)."""
        parts = []
        if self.tokens_cap is not None:
            parts.append(f"{self.tokens_used:,} of {self.tokens_cap:,} tokens")
        if self.cost_cap_micro is not None:
            parts.append(f"{usd(self.cost_used_micro)} of {usd(self.cost_cap_micro)}")
        return " and ".join(parts) or f"{self.tokens_used:,} tokens"

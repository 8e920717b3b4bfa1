"""A job's ending shows what its model calls cost beside its tokens ("$0.04"; two
significant digits below a cent), as a lower bound ("≥ $0.04") when some calls had no
price, and nothing when none was priced. A job stopped by the workspace's daily cap
says so, not that its own budget ran out."""

from __future__ import annotations

import pytest

from bot.agent import StopReason
from bot.agent.ports import WORKSPACE_CAP
from bot.slack.blockkit import Message, validate
from bot.slack.status_blocks import ending_message

JOB = "C1:1700000000.000100:j2"


def ending(
    reason: StopReason = StopReason.COMPLETED, *, error: str | None = None, **kw: object
) -> Message:
    return ending_message(
        reason,
        job_id=JOB,
        iterations=3,
        max_iterations=20,
        tokens=1_500,
        token_budget=200_000,
        tools_run=2,
        error=error,
        **kw,  # type: ignore[arg-type]
    )


def job_line(message: Message) -> str:
    context = next(b for b in message.blocks if b["type"] == "context")
    text: str = context["elements"][0]["text"]
    return text


@pytest.mark.parametrize(
    ("cost", "unpriced", "shown"),
    [
        (0.0412, 0, "$0.04"),
        (0.00123, 0, "$0.0012"),
        (0.0, 0, "$0.00"),
        (0.0412, 2, "≥ $0.04"),
    ],
)
def test_the_cost_shows_beside_the_tokens(cost: float, unpriced: int, shown: str) -> None:
    message = ending(cost_usd=cost, unpriced_calls=unpriced)
    stats = f"tokens 1,500/200,000 · {shown} · 2 tools run"
    assert stats in message.text
    assert stats in job_line(message)
    validate(message)


@pytest.mark.parametrize("unpriced", [0, 3])
def test_nothing_is_shown_when_no_call_was_priced(unpriced: int) -> None:
    message = ending(cost_usd=None, unpriced_calls=unpriced)
    assert "tokens 1,500/200,000 · 2 tools run" in message.text
    assert "$" not in message.text and "$" not in job_line(message)


def test_a_limit_ending_shows_the_cost_too() -> None:
    message = ending(StopReason.LIMIT_ITERATIONS, cost_usd=1.5)
    assert message.text.startswith("Stopped: iteration limit reached (3/20) · `limit_iterations`")
    assert "· $1.50 ·" in message.text


def test_the_workspace_cap_is_named_instead_of_the_jobs_budget() -> None:
    detail = f"{WORKSPACE_CAP} is reached (5,000,000 of 5,000,000 tokens today)"
    message = ending(StopReason.LIMIT_TOKENS, error=detail, cost_usd=0.2)
    assert message.text.startswith(f"Stopped: {detail} · `limit_tokens`")
    assert "token budget reached" not in message.text


def test_the_jobs_own_budget_ending_is_unchanged() -> None:
    message = ending(StopReason.LIMIT_TOKENS, error="token budget reached (…)")
    assert message.text.startswith(
        "Stopped: token budget reached (1,500/200,000 tokens) · `limit_tokens`"
    )

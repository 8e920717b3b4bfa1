"""Job limits and the pure checks made before every model call.

Limits are terminal and apply to the whole job: the counters live in ``RunState`` and
survive pauses and resumes. Before a call the runtime reserves the next request's
estimated prompt plus its maximum output; provider usage is the truth afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.agent.state import RunState, StopReason

DEFAULT_MAX_ITERATIONS = 20
DEFAULT_DEADLINE_S = 3600.0
DEFAULT_TOKEN_BUDGET = 200_000
DEFAULT_MAX_OUTPUT_TOKENS = 4096
CHARS_PER_TOKEN = 4


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    max_iterations: int = DEFAULT_MAX_ITERATIONS
    deadline_s: float = DEFAULT_DEADLINE_S  # active time; paused time does not count
    token_budget: int = DEFAULT_TOKEN_BUDGET  # paid tokens: prompt - cached + completion
    max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS


@dataclass(frozen=True, slots=True)
class LimitHit:
    reason: StopReason
    detail: str


def reservation(state: RunState, limits: Limits, *, full_prompt_chars: int) -> int:
    """Tokens to reserve for the next call.

    With a previous request: its uncached prompt plus about chars/4 of what was added
    since; for the first request (or after condensing) chars/4 of the whole prompt.
    """
    if state.last_prompt_tokens:
        prompt = state.last_prompt_tokens - state.last_cached_tokens
        prompt += state.chars_since_request // CHARS_PER_TOKEN
    else:
        prompt = full_prompt_chars // CHARS_PER_TOKEN
    return prompt + limits.max_output_tokens


def check_before_request(
    state: RunState, limits: Limits, *, active_s: float, reserve: int
) -> LimitHit | None:
    """Refuse a call that would exceed a limit; ``None`` means go ahead."""
    if state.iterations >= limits.max_iterations:
        return LimitHit(
            StopReason.LIMIT_ITERATIONS,
            f"iteration limit reached ({state.iterations}/{limits.max_iterations})",
        )
    if active_s >= limits.deadline_s:
        return LimitHit(
            StopReason.LIMIT_DEADLINE,
            f"deadline reached ({active_s:.0f}s/{limits.deadline_s:.0f}s of active time)",
        )
    spent = state.usage.paid
    if spent + reserve > limits.token_budget:
        return LimitHit(
            StopReason.LIMIT_TOKENS,
            f"token budget reached ({spent} spent + {reserve} reserved > {limits.token_budget})",
        )
    return None

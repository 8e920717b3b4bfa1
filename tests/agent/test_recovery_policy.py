"""``RecoveryPolicy`` on its own: the decision table for a model step that went wrong.

Unavailable → the next model of the chain (fail when there is none); context overflow →
condense (fail when it cannot); empty → retry twice, then ``no_action``; anything else →
fail. A failed condense carries on or stops, as configured.
"""

from __future__ import annotations

import pytest

from bot.agent import RecoveryPolicy
from bot.agent.model_failure_recovery import Action
from bot.errors import (
    ContextOverflowError,
    ModelError,
    ModelRequestError,
    ModelUnavailableError,
    ToolError,
)

POLICY = RecoveryPolicy()


@pytest.mark.parametrize("can_condense", [True, False])
def test_unavailable_falls_back_when_there_is_a_next_model(can_condense: bool) -> None:
    error = ModelUnavailableError("503 after 3 tries", status=503)
    assert (
        POLICY.on_model_error(error, has_fallback=True, can_condense=can_condense)
        is Action.FALLBACK
    )


def test_unavailable_fails_on_the_last_model() -> None:
    error = ModelUnavailableError("timeout")
    assert POLICY.on_model_error(error, has_fallback=False, can_condense=True) is Action.FAIL


@pytest.mark.parametrize("has_fallback", [True, False])
def test_overflow_condenses_when_it_can(has_fallback: bool) -> None:
    error = ContextOverflowError("too long", status=400)
    assert (
        POLICY.on_model_error(error, has_fallback=has_fallback, can_condense=True)
        is Action.CONDENSE
    )


@pytest.mark.parametrize("has_fallback", [True, False])
def test_overflow_fails_when_it_cannot_condense(has_fallback: bool) -> None:
    error = ContextOverflowError("too long")
    assert (
        POLICY.on_model_error(error, has_fallback=has_fallback, can_condense=False) is Action.FAIL
    )


def test_overflow_fails_when_condensing_is_switched_off() -> None:
    policy = RecoveryPolicy(condense_on_overflow=False)
    error = ContextOverflowError("too long")
    assert policy.on_model_error(error, has_fallback=True, can_condense=True) is Action.FAIL


@pytest.mark.parametrize(
    "error",
    [
        ModelRequestError("401 unauthorized", status=401),
        ModelRequestError("400 bad request", status=400),
        ModelError("something odd"),
        ToolError("not a model error"),
        RuntimeError("bug"),
        ValueError("bad value"),
    ],
    ids=lambda e: type(e).__name__,
)
@pytest.mark.parametrize("has_fallback", [True, False])
@pytest.mark.parametrize("can_condense", [True, False])
def test_anything_else_fails(error: BaseException, has_fallback: bool, can_condense: bool) -> None:
    assert (
        POLICY.on_model_error(error, has_fallback=has_fallback, can_condense=can_condense)
        is Action.FAIL
    )


def test_empty_response_is_retried_twice_then_no_action() -> None:
    assert [POLICY.on_empty(n) for n in range(4)] == [
        Action.RETRY,
        Action.RETRY,
        Action.NO_ACTION,
        Action.NO_ACTION,
    ]


def test_empty_retries_are_configurable() -> None:
    policy = RecoveryPolicy(max_empty_retries=0)
    assert policy.on_empty(0) is Action.NO_ACTION


def test_condense_failure_carries_on_by_default() -> None:
    assert RecoveryPolicy().stop_on_condense_failure is False
    assert RecoveryPolicy().on_condense_failure() is not Action.FAIL


def test_condense_failure_stops_when_configured() -> None:
    assert RecoveryPolicy(stop_on_condense_failure=True).on_condense_failure() is Action.FAIL

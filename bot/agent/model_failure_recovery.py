"""Recovery from a failed model call: what the loop does when a model step goes wrong.

One decision table, unit-tested. It handles a model call that raised (``ModelError``), an
empty response and a condense that failed; tool calls the model wrote as text are
``tool_calls_in_text.py``'s, a stream stuck repeating itself is ``stream_repetition.py``'s.

Transient errors were already retried inside the client; when they reach the loop the
next model of the fallback chain is tried (each model at most once per job). A context
overflow is condensed once per job, then retried. An empty response is retried a
bounded number of times and then ends the run as ``no_action``. Anything else fails.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from bot.errors import ContextOverflowError, ModelUnavailableError

DEFAULT_EMPTY_RETRIES = 2


class Action(Enum):
    RETRY = "retry"  # ask the same model again
    FALLBACK = "fallback"  # switch to the next model of the chain, then retry
    CONDENSE = "condense"  # condense history, then retry
    NO_ACTION = "no_action"  # give up: the model keeps answering nothing
    FAIL = "fail"  # give up: unrecoverable


@dataclass(frozen=True, slots=True, kw_only=True)
class RecoveryPolicy:
    max_empty_retries: int = DEFAULT_EMPTY_RETRIES
    condense_on_overflow: bool = True
    # When condensing fails: False = carry on uncondensed, True = end the run ``failed``.
    stop_on_condense_failure: bool = False

    def on_model_error(
        self, error: BaseException, *, has_fallback: bool, can_condense: bool
    ) -> Action:
        if isinstance(error, ModelUnavailableError):
            return Action.FALLBACK if has_fallback else Action.FAIL
        if isinstance(error, ContextOverflowError):
            return Action.CONDENSE if self.condense_on_overflow and can_condense else Action.FAIL
        return Action.FAIL

    def on_empty(self, retries_so_far: int) -> Action:
        return Action.RETRY if retries_so_far < self.max_empty_retries else Action.NO_ACTION

    def on_condense_failure(self) -> Action:
        return Action.FAIL if self.stop_on_condense_failure else Action.RETRY

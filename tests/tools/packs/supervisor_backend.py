"""A real ``supervisord`` for the supervisor pack's tests: ``bot.emulator.supervisor_server``
(where it is described), under the names the tests import."""

from __future__ import annotations

from bot.emulator.supervisor_server import (
    DEFAULT_OPTIONS,
    POLL_S,
    SLEEPER,
    START_TIMEOUT_S,
    STOP_TIMEOUT_S,
    ManagedSupervisor,
    Program,
    alive,
    children_of,
    free_port,
)

__all__ = [
    "DEFAULT_OPTIONS",
    "POLL_S",
    "SLEEPER",
    "START_TIMEOUT_S",
    "STOP_TIMEOUT_S",
    "ManagedSupervisor",
    "Program",
    "alive",
    "children_of",
    "free_port",
]

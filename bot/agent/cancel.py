"""A cancellation signal shared by a run and whoever may stop it (the Stop button)."""

from __future__ import annotations

from collections.abc import Callable


class CancelToken:
    """Set once, with a reason; subscribers are called at once, in the setter's context."""

    __slots__ = ("_reason", "_subscribers")

    def __init__(self) -> None:
        self._reason: str | None = None
        self._subscribers: list[Callable[[], None]] = []

    @property
    def cancelled(self) -> bool:
        return self._reason is not None

    @property
    def reason(self) -> str | None:
        return self._reason

    def cancel(self, reason: str = "cancelled") -> None:
        if self._reason is not None:
            return
        self._reason = reason
        for callback in list(self._subscribers):
            callback()

    def subscribe(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` on cancel; returns the function that unsubscribes."""
        self._subscribers.append(callback)

        def unsubscribe() -> None:
            try:
                self._subscribers.remove(callback)
            except ValueError:
                pass

        return unsubscribe

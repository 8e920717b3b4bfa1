"""Spots a streamed response stuck repeating itself ("ok ok ok ok ...").

The last 256 bytes of the stream are checked for a period of 1 to 20 bytes that covers
the whole window; a hit cancels the stream and the response counts as empty.
"""

from __future__ import annotations

WINDOW_BYTES = 256
MAX_PERIOD = 20


class RepetitionDetected(Exception):
    """Raised from the delta sink to abort a degenerate stream."""


class RepetitionDetector:
    __slots__ = ("_buf", "_window", "_max_period")

    def __init__(self, *, window: int = WINDOW_BYTES, max_period: int = MAX_PERIOD) -> None:
        self._buf = bytearray()
        self._window = window
        self._max_period = max_period

    def feed(self, text: str) -> bool:
        """Add a delta; True when the window is one short pattern repeated."""
        self._buf += text.encode("utf-8", "surrogatepass")
        if len(self._buf) < self._window:
            return False
        if len(self._buf) > self._window:
            del self._buf[: len(self._buf) - self._window]
        view = bytes(self._buf)
        for period in range(1, self._max_period + 1):
            if view[period:] == view[:-period]:
                return True
        return False

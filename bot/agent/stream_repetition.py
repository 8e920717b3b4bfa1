"""Spots a streamed response stuck repeating itself ("ok ok ok ok ...").

This is the model degenerating inside one streamed response; the same tool call returning
the same result again and again across iterations is ``repeated_calls.py``'s.

A hit is any 256-byte stretch of the stream that is one pattern of 1 to 20 bytes
repeated, wherever it starts and however the stream was split into deltas. A hit
cancels the stream and the response counts as empty.

A 256-byte window has period ``p`` exactly when the ``256 - p`` bytes after its first
``p`` each equal the byte ``p`` before them. So per period the detector keeps the length
of the current run of such matches; each delta is compared with the stream shifted by
``p`` using whole-buffer integer XOR (matches are zero bytes), which keeps the work in C.
"""

from __future__ import annotations

WINDOW_BYTES = 256
MAX_PERIOD = 20


class RepetitionDetected(Exception):
    """Raised from the delta sink to abort a degenerate stream."""


class RepetitionDetector:
    __slots__ = ("_tail", "_runs", "_window", "_max_period")

    def __init__(self, *, window: int = WINDOW_BYTES, max_period: int = MAX_PERIOD) -> None:
        self._tail = b""  # the last ``max_period`` bytes seen
        self._runs = [0] * (max_period + 1)  # per period: trailing run of matching bytes
        self._window = window
        self._max_period = max_period

    def feed(self, text: str) -> bool:
        """Add a delta; True once some window of the stream is one short pattern repeated."""
        chunk = text.encode("utf-8", "surrogatepass")
        if not chunk:
            return False
        data = self._tail + chunk
        offset = len(self._tail)
        size = len(chunk)
        current = int.from_bytes(chunk, "big")
        hit = False
        for period in range(1, self._max_period + 1):
            need = self._window - period
            if offset >= period:
                before = data[offset - period : offset - period + size]
                diff = (current ^ int.from_bytes(before, "big")).to_bytes(size, "big")
            else:
                # The first bytes of the stream have nothing ``period`` bytes before them.
                missing = period - offset
                if missing >= size:
                    self._runs[period] = 0
                    continue
                before = data[: size - missing]
                tail = int.from_bytes(chunk[missing:], "big") ^ int.from_bytes(before, "big")
                diff = b"\xff" * missing + tail.to_bytes(size - missing, "big")
            stripped = diff.rstrip(b"\x00")
            if not stripped:
                self._runs[period] += size
            else:
                lead = size - len(diff.lstrip(b"\x00"))
                if self._runs[period] + lead >= need or diff.find(b"\x00" * need) != -1:
                    hit = True
                self._runs[period] = size - len(stripped)
            if self._runs[period] >= need:
                hit = True
        self._tail = data[-self._max_period :]
        return hit

"""Detects the model repeating the same tool call and getting the same result.

This is a loop across iterations (the run ends ``loop``); a model repeating itself inside
one streamed response is ``stream_repetition.py``'s.

A signature is sha256 over (tool name, canonical JSON arguments, real output) in a
sliding window. The Nth identical signature in the window replaces that result with a
"loop detected" error; the 2Nth ends the run. Identical calls whose outputs differ (a
recovering service being polled) never match.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from enum import Enum

WINDOW = 10
THRESHOLD = 3


class LoopVerdict(Enum):
    OK = "ok"
    WARN = "warn"  # replace the result, go on
    STOP = "stop"  # end the run as ``loop``


@dataclass(slots=True)
class LoopDetector:
    window: list[str]  # shared with RunState so it survives pauses
    size: int = WINDOW
    threshold: int = THRESHOLD

    def observe(self, tool: str, canonical_args: str, output: str) -> LoopVerdict:
        digest = hashlib.sha256()
        for part in (tool, canonical_args, output):
            digest.update(part.encode("utf-8", "surrogatepass"))
            digest.update(b"\x00")
        signature = digest.hexdigest()
        self.window.append(signature)
        if len(self.window) > self.size:
            del self.window[: len(self.window) - self.size]
        count = self.window.count(signature)
        if count >= 2 * self.threshold:
            return LoopVerdict.STOP
        if count >= self.threshold:
            return LoopVerdict.WARN
        return LoopVerdict.OK


LOOP_MESSAGE = (
    "Error: loop detected: this exact call returned this exact result {count} times. "
    "Do not repeat it; change approach or answer with what you know."
)

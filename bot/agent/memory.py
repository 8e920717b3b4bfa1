"""In-process memory: the reference implementation of the ``Memory`` protocol."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from bot.agent.messages import AnyMessage, UserMessage


@dataclass(slots=True)
class InMemoryHistory:
    """History kept in a list; ``originals`` keeps everything ever appended."""

    messages: list[AnyMessage] = field(default_factory=list)
    originals: list[AnyMessage] = field(default_factory=list)
    flushes: int = 0

    async def history(self) -> Sequence[AnyMessage]:
        return self.messages

    def append(self, message: AnyMessage) -> None:
        self.messages.append(message)
        self.originals.append(message)

    async def flush(self) -> None:
        self.flushes += 1

    async def condense(self, upto: int, summary: str) -> None:
        self.messages[:upto] = [UserMessage(content=summary, summary=True)]

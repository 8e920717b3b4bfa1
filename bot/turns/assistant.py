"""The assistant pane's durable part: each pane thread's context and title claim.

The Slack edge (``bot.slack.assistant``) asks here and never touches the store; the
context is kept in Redis (``bot.store.assistant``) so any process taking the user's next
message in knows the channel they are looking at.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bot.store.assistant import AssistantThreads, PaneContext
from bot.store.keys import Thread
from bot.turns.parts import Turns

__all__ = ["Pane", "PaneContext"]


@dataclass
class Pane:
    turns: Turns
    threads: AssistantThreads = field(init=False)

    def __post_init__(self) -> None:
        self.threads = self.turns.stores.assistant_threads

    async def save_context(self, thread: Thread, context: PaneContext) -> None:
        await self.threads.save(thread, context)

    async def context(self, thread: Thread) -> PaneContext | None:
        return await self.threads.find(thread)

    async def claim_title(self, thread: Thread) -> bool:
        return await self.threads.claim_title(thread)

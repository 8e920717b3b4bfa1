"""What every part of a job's face in the thread works with (``JobFace``).

The status message (``bot.slack.live_status``), the run's task cards
(``bot.slack.run_steps``) and the model's streamed text (``bot.slack.progress``) show one
job in one thread, through the same Web API client and the workspace's ``UpdateBudget``,
with people and channels by name; they start their background work (name look-ups,
streams winding up) among the run's tasks with ``spawn``, so the end of the run can wait
for it.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bot.agent.ports import Clock
from bot.records import JobRecord
from bot.slack.names import Names
from bot.slack.streaming import Pacing, StreamPlace
from bot.slack.updates import UpdateBudget

Spawn = Callable[[Coroutine[Any, Any, None]], None]


@dataclass(frozen=True, slots=True, kw_only=True)
class JobFace:
    """One job's run as shown in its thread: where, through what, and with which options."""

    client: AsyncWebClient
    budget: UpdateBudget
    record: JobRecord
    names: Names
    spawn: Spawn
    team_id: str | None = None  # from auth.test: Slack's chat streaming needs it
    pacing: Pacing | None = None
    clock: Clock | None = None

    @property
    def channel(self) -> str:
        return self.record.channel

    @property
    def thread_ts(self) -> str:
        return self.record.thread_ts

    def stream_place(self) -> StreamPlace:
        """Where the run's streams show and how: the thread, the pace, the clock, the names."""
        return StreamPlace(
            channel=self.channel,
            thread_ts=self.thread_ts,
            pacing=self.pacing,
            clock=self.clock,
            names=self.names,
        )

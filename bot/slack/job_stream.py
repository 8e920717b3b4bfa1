"""A job run's steps as task cards in one chat stream (``JobStream``), and the notes the
model writes between them; the paced worker, modes and pacing it shares with
``AnswerStream`` live in ``bot.slack.streaming``. People and channels in the notes and the
cards' fields are written by name (``bot.slack.names``) as each call is sent.
"""

from __future__ import annotations

import logging
from typing import Any, Unpack

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.answers import partial_answer
from bot.slack.client import error_code
from bot.slack.streaming import Mode, PacedWorker, StreamPlace
from bot.slack.task_cards import (
    CHUNK_REFUSALS,
    DISPLAY_MODES,
    PLAN_DONE,
    PLAN_TITLE,
    TASK_CARDS,
    StepChange,
    TaskCards,
    Timeline,
    chunk_texts,
    markdown_chunk,
    named_chunk,
    plan_chunk,
)
from bot.slack.updates import UpdateBudget

log = logging.getLogger(__name__)


class JobStream(PacedWorker):
    """A job run's steps as task cards and the notes between them, in one chat stream.

    ``JobProgress`` opens one at the run's first tool call (a job that runs no tool streams
    as :class:`AnswerStream` does) and feeds it every step change and the short notes the
    model wrote before its tool calls; the final answer is a message of its own (as without
    task cards: whole in ``text``, its feedback buttons, a file when very long). A pause for
    approval, an ending or a failure winds it up (the next run, maybe in another process,
    opens a new one below the card). Modes as :class:`AnswerStream`'s:
    ``waiting`` → ``stream`` (``chat.startStream`` with ``chunks`` and ``task_display_mode``,
    paced ``chat.appendStream`` with the chunks not sent yet, ``chat.stopStream``) →
    ``update`` (the stream expired or refused an append: its ``ts`` is edited through the
    budget with the timeline as Markdown), or ``off``. A ``chat.startStream`` Slack refuses
    turns :data:`~bot.slack.task_cards.TASK_CARDS` off for the process (logged once: later jobs
    stream as before) and this run shows its steps in a plain message it edits.
    """

    _what = "the job's steps"

    def __init__(
        self,
        client: AsyncWebClient,
        budget: UpdateBudget,
        *,
        recipient_user_id: str,
        recipient_team_id: str,
        display: str = "timeline",
        cards: TaskCards | None = None,
        **place: Unpack[StreamPlace],
    ) -> None:
        super().__init__(client, budget, **place)
        self._recipients = (recipient_user_id, recipient_team_id)
        self.display = display if display in DISPLAY_MODES else "timeline"
        self.cards = cards or TASK_CARDS
        self.timeline = Timeline()

    # -- the event side: synchronous, never raises ---------------------------------------

    def text(self, text: str) -> None:
        """A note between steps (Markdown), bounded by ``pacing.max_chars`` in all."""
        if self._closing or not text.strip():
            return
        room = self.pacing.max_chars - self.timeline.chars
        if room < len(text):
            self.dropped += len(text) - max(room, 0)
        if room <= 0:
            return
        self.timeline.add_text(text[:room])
        self._poke()

    def step(self, call_id: str, **change: Unpack[StepChange]) -> None:
        """Add or update the task card of one call."""
        if self._closing:
            return
        self.timeline.step(call_id, **change)
        self._poke()

    def has_step(self, call_id: str) -> bool:
        return call_id in self.timeline.steps

    async def settle(self) -> None:
        """Wind up (the rest sent, the stream stopped) and wait for it."""
        if not self._closing:
            self._closing = True
            self._poke()
        await self._wound_up()

    # -- the worker ------------------------------------------------------------------------

    async def _step(self) -> float | None:
        match self.mode:
            case Mode.WAITING:
                if not self.timeline.unsent:
                    return None
                if not self.timeline.steps and not self._closing:
                    return None  # a note alone waits for its step: the stream opens on a card
                await self._begin()
                return 0
            case Mode.STREAM:
                return await self._step_stream()
            case Mode.UPDATE:
                return await self._step_update()
        return None

    async def _named_chunks(self, chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``chunks`` with people and channels by name (looked up first)."""
        await self._named(*(t for c in chunks for t in chunk_texts(c)))
        return [named_chunk(c, self._render) for c in chunks]

    async def _begin(self) -> None:
        user, team = self._recipients
        chunks = await self._named_chunks(self.timeline.take())
        if self.display == "plan":
            chunks.insert(0, plan_chunk(PLAN_TITLE))
        now = self._clock.monotonic()
        try:
            response = await self._client.chat_startStream(
                channel=self.channel,
                thread_ts=self.thread_ts,
                recipient_user_id=user,
                recipient_team_id=team,
                chunks=chunks,
                task_display_mode=self.display,
            )
        except Exception as exc:
            code = error_code(exc)
            self.fallback = f"chat.startStream: {code}"
            if isinstance(exc, SlackApiError):
                self.cards.turn_off(f"chat.startStream with chunks: {code}")
            log.info("no task cards in %s (%s): editing a message", self.channel, code)
            await self._show_plain(now)
            return
        self.ts, self.mode, self._last_call = str(response["ts"]), Mode.STREAM, now

    async def _show_plain(self, now: float) -> None:
        ts = await self._post_plain(self.timeline.render())
        if ts is None:
            return
        self.ts, self.mode, self._last_call = ts, Mode.UPDATE, now
        self.timeline.unsent.clear()

    async def _step_stream(self) -> float | None:
        if self._closing:
            chunks = self.timeline.take()
            while self.timeline.unsent:  # more than one call's text: append it first
                if not await self._append(chunks):
                    return 0
                chunks = self.timeline.take()
            if await self._stop(chunks):
                return None
            self._to_update(self.fallback or "chat.stopStream failed")
            return 0
        if not self.timeline.unsent:
            return None
        now = self._clock.monotonic()
        if (wait := self._paced(now)) is not None:
            return wait
        self._last_call = now
        await self._append(self.timeline.take())
        return 0

    async def _append(self, chunks: list[dict[str, Any]]) -> bool:
        return await self._append_stream(chunks=await self._named_chunks(chunks)) is None

    def _append_refused(self, code: str) -> None:
        if code in CHUNK_REFUSALS:  # chunks are not accepted here: task cards go off
            self.cards.turn_off(f"chat.appendStream with chunks: {code}")

    async def _stop(self, chunks: list[dict[str, Any]] | None = None) -> bool:
        chunks = await self._named_chunks(chunks or [])
        if self.display == "plan":
            chunks = [*chunks, plan_chunk(PLAN_DONE)]
        return await self._stop_stream(chunks=chunks or None)

    def _to_update(self, reason: str) -> None:
        super()._to_update(reason)
        self.timeline.unsent = [markdown_chunk("")]  # owed: one edit with everything

    async def _step_update(self) -> float | None:
        if not self.timeline.unsent:
            return None
        now = self._clock.monotonic()
        if (wait := self._paced(now)) is not None:
            return wait
        self.timeline.unsent.clear()
        shown = self.timeline.render()
        await self._named(shown)
        self._budget.submit(self.channel, str(self.ts), partial_answer(shown, render=self._render))
        self._last_call = now
        return 0

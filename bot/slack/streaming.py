"""A model response in the thread while it is being written, and the assistant thread status.

``AnswerStream`` shows one model response's text as it streams in. It moves one way through
four modes (``waiting`` → ``stream`` → ``update``, and ``off`` from the first two):

* **waiting** — nothing shown yet. Tiny text never becomes a message: one starts once
  ``start_chars`` arrived, or ``start_after_s`` after the first text while the response is
  still coming (a short note before tool calls is left to the caller, e.g. the status message).
* **stream** — Slack's chat streaming: ``chat.startStream`` (with the requester and team as
  recipients, as channels require), ``chat.appendStream`` at most once per ``append_every_s``
  with everything that arrived meanwhile, ``chat.stopStream`` (carrying the rest) at the end.
* **update** — a plain message edited with paced, non-urgent ``chat.update`` through the
  workspace's :class:`UpdateBudget`. Used without recipients (no team id), when
  ``chat.startStream`` fails in any way (``unknown_method``, ``not_allowed_token_type``, a
  missing scope …: the message is then posted with ``chat.postMessage``), when an append or the
  stop fails (``message_not_in_streaming_state`` once Slack expired the stream: the stream's
  ``ts`` is edited), and when the response starts over (an empty delta) after text was shown:
  the stream is stopped and the message is rewritten from scratch.
* **off** — the message could not even be posted: nothing is shown, the caller posts the
  answer as it would have without streaming.

One worker task per stream makes the Slack calls, in order, from the newest state; the
event-side methods (``feed``, ``end_response``, ``close``) are synchronous, never block and
never raise. Memory is bounded by ``max_chars`` (one message's worth: the final rendering,
made by the caller, posts anything longer as further messages) and every mode change is one
way, so the number of calls is bounded by the pace and the response's duration.

``PacedWorker`` is that worker, shared with ``bot.slack.job_stream.JobStream`` (a job run's
tool steps as task cards in one chat stream opened at the run's first step, with the same
pacing and the same one-way fallbacks).

People and channels are shown by name (``bot.slack.names``): what a stream shows is
Markdown, which renders ``<@U…>`` literally, so every call's text is looked up and rendered
just before it is sent, and a mention still being written (``<@U01``) waits for its ``>``.

The assistant thread status (``ThreadStatus``, importable from here) is in
``bot.slack.thread_status``.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from dataclasses import dataclass
from typing import Any, TypedDict, Unpack

from slack_sdk.web.async_client import AsyncWebClient

from bot.agent.ports import Clock, LoopClock, TimerHandle
from bot.slack.answers import partial_answer
from bot.slack.blockkit import MAX_MARKDOWN
from bot.slack.client import error_code
from bot.slack.names import Names, mention_safe_end
from bot.slack.thread_status import StatusSwitch as StatusSwitch  # importable from here too
from bot.slack.thread_status import ThreadStatus as ThreadStatus
from bot.slack.updates import UpdateBudget

log = logging.getLogger(__name__)

MAX_STREAM_CALL = 12_000  # markdown_text per chat.startStream / appendStream / stopStream
NOT_STREAMING = "message_not_in_streaming_state"
SETTLE_TIMEOUT_S = 30.0  # a hang guard for winding a stream up


class Mode(enum.Enum):
    WAITING = "waiting"
    STREAM = "stream"
    UPDATE = "update"
    OFF = "off"


@dataclass(frozen=True, slots=True)
class Pacing:
    start_chars: int = 200  # start showing once this much text arrived …
    start_after_s: float = 1.5  # … or this long after the first text, if still streaming
    append_every_s: float = 1.0  # at most one append (or edit) per stream per this
    max_chars: int = MAX_MARKDOWN  # shown at most (one message's markdown block)


class StreamOptions(TypedDict, total=False):
    """What every stream may be given beside its place: the pace (default ``Pacing()``),
    the clock (the event loop's) and the names people and channels are shown by (else
    their ids)."""

    pacing: Pacing | None
    clock: Clock | None
    names: Names | None


class StreamPlace(StreamOptions, total=True):
    """A stream's thread with its options, as every stream takes them."""

    channel: str
    thread_ts: str


class PacedWorker:
    """The worker both streams share: one task per stream that runs ``_step`` whenever
    something changed (``_poke``) or the delay ``_step`` asked for has passed, and
    winds up when ``_step`` has nothing left to do once ``_closing`` is set.
    ``quiet`` returns once it waits for news (tests step the clock between these).
    Also what the two have in common: the message and its mode, the pace, the plain
    message posted without streaming, and the append and stop calls with their one-way
    fallback to edits."""

    _what = "the response"  # for the log, "showing … in <channel> failed"

    def __init__(
        self, client: AsyncWebClient, budget: UpdateBudget, **place: Unpack[StreamPlace]
    ) -> None:
        self._client = client
        self._budget = budget
        self.channel = place["channel"]
        self.thread_ts = place["thread_ts"]
        self.pacing = place.get("pacing") or Pacing()
        self._clock: Clock = place.get("clock") or LoopClock()
        self._names = place.get("names")
        self.mode = Mode.WAITING
        self.ts: str | None = None  # the message showing the stream, once there is one
        self.fallback: str | None = None  # why chat streaming was left, if it was
        self.dropped = 0  # chars past max_chars, not shown
        self._last_call: float | None = None
        self._closing = False
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._task: asyncio.Task[None] | None = None

    async def _named(self, *texts: str) -> None:
        """Look up the people and channels ``texts`` mention (bounded; never raises)."""
        if self._names is not None:
            await self._names.prefetch(*texts)

    def _render(self, text: str) -> str:
        """``text`` with people and channels by name (those looked up)."""
        return self._names.render(text) if self._names is not None else text

    async def quiet(self) -> None:
        """Return once the worker waits for news."""
        await self._idle.wait()

    async def _wound_up(self) -> None:
        """Wait for the worker to finish winding up (``_closing`` set), bounded."""
        task = self._task
        if task is not None:
            done, _ = await asyncio.wait({task}, timeout=SETTLE_TIMEOUT_S)
            if not done:
                log.warning("showing %s in %s did not wind up in time", self._what, self.channel)
                task.cancel()

    async def _post_plain(self, text: str) -> str | None:
        """Post ``text`` as a plain message in the thread (what is edited when streaming
        is not to be had); its ts, or None (and mode ``off``) when Slack refuses."""
        await self._named(text)
        message = partial_answer(text, render=self._render)
        try:
            response = await self._client.chat_postMessage(
                channel=self.channel,
                thread_ts=self.thread_ts,
                text=message.text,
                blocks=message.blocks,
            )
        except Exception as exc:
            log.warning("could not show %s in %s: %s", self._what, self.channel, error_code(exc))
            self.mode = Mode.OFF
            return None
        return str(response["ts"])

    def _poke(self) -> None:
        self._idle.clear()
        self._wake.set()
        if self._task is None:
            try:
                self._task = asyncio.create_task(self._work(), name=f"stream {self.channel}")
            except RuntimeError:  # no running loop: nothing can be shown
                log.warning("no event loop for showing %s in %s", self._what, self.channel)
                self.mode = Mode.OFF
                self._idle.set()

    async def _step(self) -> float | None:
        """Do what is due; the delay until the next step, 0 at once, None: wait for news."""
        raise NotImplementedError

    async def _stop(self) -> bool:
        """Stop the stream with nothing more to show; whether Slack took it."""
        raise NotImplementedError

    def _paced(self, now: float) -> float | None:
        """How long the next append or edit must wait to keep the pace (None: it may go),
        since the last call; winding up goes at once."""
        if self._closing or self._last_call is None:
            return None
        wait = self._last_call + self.pacing.append_every_s - now
        return wait if wait > 0 else None

    async def _append_stream(self, **content: Any) -> str | None:
        """``chat.appendStream`` with ``content``. Refused, the stream is stopped (unless
        Slack expired it already) and edits show the rest; returns Slack's error code."""
        try:
            await self._client.chat_appendStream(channel=self.channel, ts=str(self.ts), **content)
        except Exception as exc:
            code = error_code(exc)
            log.info("chat.appendStream in %s failed (%s): editing instead", self.channel, code)
            self._append_refused(code)
            if code != NOT_STREAMING:
                await self._stop()
            self._to_update(f"chat.appendStream: {code}")
            return code
        return None

    def _append_refused(self, code: str) -> None:
        """What Slack's refusal of an append means beyond this stream (by default nothing)."""

    async def _stop_stream(self, **content: Any) -> bool:
        """``chat.stopStream`` with the rest of the content; whether Slack took it (refused,
        the reason is kept as the ``fallback``)."""
        try:
            await self._client.chat_stopStream(channel=self.channel, ts=str(self.ts), **content)
        except Exception as exc:
            code = error_code(exc)
            log.info("chat.stopStream in %s failed: %s", self.channel, code)
            self.fallback = self.fallback or f"chat.stopStream: {code}"
            return False
        return True

    def _to_update(self, reason: str) -> None:
        """Leave chat streaming for good: the stream's message is edited from now on."""
        self.mode = Mode.UPDATE
        self.fallback = self.fallback or reason

    async def _work(self) -> None:
        try:
            while True:
                self._wake.clear()
                delay = await self._step()
                if delay == 0:
                    continue
                if delay is None and self._closing:
                    return
                timer: TimerHandle | None = None
                if delay is not None:
                    timer = self._clock.call_later(delay, self._poke)
                try:
                    if not self._wake.is_set():
                        self._idle.set()
                    await self._wake.wait()
                finally:
                    if timer is not None:
                        timer.cancel()
        except Exception:
            log.exception("showing %s in %s failed", self._what, self.channel)
        finally:
            self._idle.set()


class AnswerStream(PacedWorker):
    """Shows one response's text in the thread as it arrives (see the module's docstring)."""

    def __init__(
        self,
        client: AsyncWebClient,
        budget: UpdateBudget,
        *,
        iteration: int = 0,
        recipient_user_id: str | None = None,
        recipient_team_id: str | None = None,
        **place: Unpack[StreamPlace],
    ) -> None:
        super().__init__(client, budget, **place)
        self.iteration = iteration
        self._recipients = (
            (recipient_user_id, recipient_team_id)
            if recipient_user_id and recipient_team_id
            else None
        )
        self._text = ""  # this attempt's text so far (≤ max_chars)
        self._epoch = 0  # bumped on every start over
        self._shown_epoch = 0  # the epoch of the text Slack shows
        self._sent = 0  # chars of that text Slack shows
        self._first_at: float | None = None
        self._ended = False  # the response is complete: no more text is coming
        self._final = False

    @property
    def text(self) -> str:
        """The text received since the last start over (at most ``max_chars``; dropped once
        the stream is wound up)."""
        return self._text

    @property
    def shown(self) -> bool:
        """Whether a message in the thread shows (or showed) this response."""
        return self.ts is not None and self.mode in (Mode.STREAM, Mode.UPDATE)

    # -- the event side: synchronous, never raises ---------------------------------------

    def feed(self, text: str) -> None:
        """More text of the response; ``""``: the response starts over, drop what was shown."""
        if self._closing:
            return
        if not text:
            self._epoch += 1
            self._text = ""
            self._first_at = None
        else:
            room = self.pacing.max_chars - len(self._text)
            if room < len(text):
                self.dropped += len(text) - max(room, 0)
            if room <= 0:
                return
            self._text += text[:room]
            if self._first_at is None:
                self._first_at = self._clock.monotonic()
        self._poke()

    def restart(self) -> None:
        """A new attempt at the same response (a retry or another model): start over."""
        self._ended = False
        self.feed("")

    def go_on(self, iteration: int) -> None:
        """The next response continues this one's text (an answer cut off at the output
        limit): its deltas are appended to what this stream shows."""
        self.iteration = iteration
        self._ended = False
        self._poke()

    def end_response(self) -> None:
        """The response is complete (or failed): no more text, so no late start on time."""
        self._ended = True
        self._poke()

    def unshown(self) -> str | None:
        """The response's text if it is too short to ever be shown by this stream."""
        if self.mode is Mode.WAITING and self._text.strip():
            if len(self._text) < self.pacing.start_chars:
                return self._text
        return None

    def close(self) -> None:
        """Wind up and leave the message as it is (flush the rest, stop the stream)."""
        self._closing = True
        self._poke()

    async def settle(self, *, final: bool = False) -> str | None:
        """Wind up and wait for it; returns the ``ts`` of the message showing the response
        (None if nothing was shown). ``final``: the caller replaces the message's content
        with the final rendering at once, so nothing is started or flushed by edits."""
        if not self._closing:
            self._closing = True
            self._final = final
            self._poke()
        await self._wound_up()
        self._text = ""  # wound up: the text is Slack's (or the caller's) now
        return self.ts if self.shown else None

    # -- the worker ------------------------------------------------------------------------

    async def _step(self) -> float | None:
        """Make at most one call. Returns 0 to go on at once, a delay to wait (or news), or
        None to wait for news (when winding up: done)."""
        match self.mode:
            case Mode.WAITING:
                return await self._step_waiting()
            case Mode.STREAM:
                return await self._step_stream()
            case Mode.UPDATE:
                return await self._step_update()
        return None

    def _showable(self, text: str) -> str:
        """What of the text so far may be shown now: a mention still being written waits."""
        if self._closing or self._ended:
            return text
        return text[: mention_safe_end(text)]

    async def _step_waiting(self) -> float | None:
        text, pacing = self._text, self.pacing
        if not text.strip():
            return None
        if self._closing:
            if self._final or len(text) < pacing.start_chars:
                return None
        elif len(text) < pacing.start_chars:
            if self._ended or self._first_at is None:
                return None
            wait = self._first_at + pacing.start_after_s - self._clock.monotonic()
            if wait > 0:
                return wait
        first = self._showable(text[:MAX_STREAM_CALL])
        if not first.strip():
            return None
        await self._begin(first)
        return 0

    async def _begin(self, text: str) -> None:
        epoch, now = self._epoch, self._clock.monotonic()
        if self._recipients is not None:
            user, team = self._recipients
            await self._named(text)
            try:
                response = await self._client.chat_startStream(
                    channel=self.channel,
                    thread_ts=self.thread_ts,
                    markdown_text=self._render(text),
                    recipient_user_id=user,
                    recipient_team_id=team,
                )
            except Exception as exc:
                self.fallback = f"chat.startStream: {error_code(exc)}"
                log.info("no chat streaming in %s (%s): editing a message", self.channel, exc)
            else:
                self._showing(str(response["ts"]), Mode.STREAM, epoch, len(text), now)
                return
        ts = await self._post_plain(text)
        if ts is not None:
            self._showing(ts, Mode.UPDATE, epoch, len(text), now)

    def _showing(self, ts: str, mode: Mode, epoch: int, sent: int, now: float) -> None:
        self.ts, self.mode = ts, mode
        self._shown_epoch, self._sent, self._last_call = epoch, sent, now

    async def _step_stream(self) -> float | None:
        if self._shown_epoch != self._epoch:  # what the stream shows is void
            await self._stop()
            self._to_update("start over")
            return 0
        pending = self._text[self._sent :][:MAX_STREAM_CALL]
        if not self._closing:
            pending = self._showable(self._text[: self._sent + len(pending)])[self._sent :]
        if self._closing:
            if await self._stop(pending or None):
                self._sent += len(pending)
                return None
            self._to_update(self.fallback or "chat.stopStream failed")
            return 0
        if not pending:
            return None
        now = self._clock.monotonic()
        if (wait := self._paced(now)) is not None:
            return wait
        epoch = self._epoch
        await self._named(pending)
        if await self._append_stream(markdown_text=self._render(pending)) is not None:
            return 0
        self._last_call = now
        if epoch == self._epoch:
            self._sent += len(pending)
        return 0

    async def _stop(self, text: str | None = None) -> bool:
        if text:
            await self._named(text)
            text = self._render(text)
        return await self._stop_stream(markdown_text=text)

    async def _step_update(self) -> float | None:
        if self._closing and self._final:
            return None  # the caller writes the final rendering
        text = self._showable(self._text)
        if self._shown_epoch == self._epoch and len(text) <= self._sent:
            return None
        if not text.strip():
            return None  # started over, nothing new yet
        now = self._clock.monotonic()
        if (wait := self._paced(now)) is not None:
            return wait
        await self._named(text)
        self._budget.submit(self.channel, str(self.ts), partial_answer(text, render=self._render))
        self._shown_epoch, self._sent, self._last_call = self._epoch, len(text), now
        return 0

"""A job's face in the thread: the status message, the model's text, the answer, the ending.

``JobProgress`` is the run's event sink for Slack. It hands what each event changes to the
part that owns it — the status message (``bot.slack.live_status``), the task cards of the
run's tool steps (``bot.slack.run_steps``), the assistant thread status (best effort: what the
job is doing, cleared at the end) — and keeps the model's text while it streams and the end
of the run: the answer and the ending.

While the model streams, each response's text is shown by an ``AnswerStream``
(``streaming.py``): a new response (``model_request_start`` of another iteration) stops the
previous one's and leaves it as it is (a note before tool calls); a note too short to be shown
goes on the status message instead (between the task cards, when the run has them). An answer
cut off at the output limit is the exception: the response that continues it streams on into
the same message (unless a person spoke in between), so the cut part never stays in the thread
on its own. When the final answer was being shown, that message becomes the answer's first
part (one urgent ``chat.update``) and any further parts are posted; otherwise the answer is
posted as new messages (Slack's ``markdown`` block, the whole answer in ``text``).

The note the model wrote with a call that waits for approval is the card's reason
(DESIGN): it is not shown a second time, in the stream or on the status message.

The status message is never left saying "Working…": the ending's edit
(``bot.slack.job_ending``) is awaited (bounded; a job whose ending could not be shown stays
owed to the scanner's redelivery), and a run this process lets go (a shutdown's hand-over, a
store failure) leaves it saying "Resuming…" until whoever resumes the job takes the message
over. At a shutdown the paced budget stops being waited for (``UpdateBudget.hand_over``):
an answer or ending still queued there is left owed at once (``HandedOver``), never
half-shown here and completed twice.

People and channels are shown by name (``bot.slack.names``, given by the composition root):
in the answer's ``markdown`` blocks, the streamed text, the task cards and the status
message's note; the answer's ``text`` keeps what the model wrote.

Long output: an answer of more than ``ANSWER_FILE_AFTER`` messages is posted as a file
with one summary message (``bot.slack.files``); the ending offers a "Full output" button
for each call whose output the model saw cut (``bot.slack.outputs``).

``budget_sender`` (``bot.slack.updates``) and ``post_patiently`` (``bot.slack.posting``),
which the composition root and the tests take from here, live beside what they send.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bot.agent.events import Event
from bot.agent.ports import Clock, LoopClock
from bot.agent.state import RunResult, StopReason
from bot.records import JobRecord
from bot.slack.answers import answer_messages
from bot.slack.blockkit import Message
from bot.slack.files import ANSWER_FILE_AFTER, ANSWER_FILENAME, post_file, summary
from bot.slack.job_ending import ending_for
from bot.slack.job_face import JobFace
from bot.slack.job_stream import JobStream
from bot.slack.live_status import LiveStatus
from bot.slack.names import Names
from bot.slack.outputs import CUT_AFTER
from bot.slack.posting import post_in_thread, post_patiently
from bot.slack.run_steps import RunSteps
from bot.slack.streaming import AnswerStream, Pacing
from bot.slack.thread_status import ASSISTANT_STATUS, StatusSwitch, ThreadStatus
from bot.slack.updates import HandedOver, UpdateBudget, budget_sender, edit_urgently

__all__ = ["JobProgress", "budget_sender", "post_patiently"]

log = logging.getLogger(__name__)

STATUS_WORKING = "is looking into it…"
ABANDON_S = 5.0  # winding up an abandoned run's streams
ENDING_WAIT_S = 15.0  # the ending's edit, urgent in the budget, before the job lets go


class JobProgress:
    """One job's run shown in its thread (see the module docstring): the run's event sink
    on the Slack side, ``start``-ed or ``refresh``-ed once, ended by ``run_end`` or
    ``abandon``."""

    def __init__(
        self,
        client: AsyncWebClient,
        budget: UpdateBudget,
        record: JobRecord,
        *,
        team_id: str | None = None,
        pacing: Pacing | None = None,
        clock: Clock | None = None,
        status_switch: StatusSwitch | None = None,
        task_display: str | None = None,
        names: Names | None = None,
    ) -> None:
        """``team_id`` (from ``auth.test``) enables Slack's chat streaming (channels need the
        recipient's team); without it a streamed response is shown by editing a message.
        ``task_display`` (``timeline``, ``plan`` or ``off``; default the process's
        ``OPSLOOP_TASK_DISPLAY``) shows tool steps as task cards in one job stream.
        ``names``: people and channels by name in what is shown (else by id)."""
        self.record = record
        self.team_id = team_id
        self.face = JobFace(
            client=client,
            budget=budget,
            record=record,
            names=names or Names(),
            spawn=self._spawn,
            team_id=team_id,
            pacing=pacing,
            clock=clock,
        )
        self._stream: AnswerStream | None = None  # the current response's
        self.streams: list[AnswerStream] = []  # every response's, in order
        self._continuing = False  # the current stream's answer was cut off: more is coming
        self.status = LiveStatus(self.face)
        self.steps = RunSteps(self.face, task_display=task_display)
        self.thread_status = ThreadStatus(
            client,
            record.channel,
            record.thread_ts,
            switch=status_switch or ASSISTANT_STATUS,
            clock=clock or LoopClock(),
        )
        self._held_note: str | None = None  # a note before calls, until they are known
        self._shown_note: AnswerStream | None = None  # the same, shown as its own message
        self._cut: list[tuple[str, str]] = []  # (call id, tool) of outputs the model saw cut
        self._tasks: set[asyncio.Task[None]] = set()
        self.done = asyncio.Event()
        self.delivered = False  # the ended run's answer and ending reached the thread

    @property
    def channel(self) -> str:
        return self.record.channel

    @property
    def status_ts(self) -> str | None:
        """The status message's ``ts``: posted by ``start``, or set by the caller to take
        over a resumed job's message."""
        return self.status.ts

    @status_ts.setter
    def status_ts(self, ts: str | None) -> None:
        self.status.ts = ts

    @property
    def cut(self) -> list[tuple[str, str]]:
        """``(call id, tool)`` of the calls whose output the model saw cut, so far."""
        return list(self._cut)

    @property
    def job_stream(self) -> JobStream | None:
        """The run's current job stream of task cards, if one is open."""
        return self.steps.stream

    async def start(self) -> None:
        """Post the status message in the thread (the first sign of life)."""
        await self.status.post()
        self.thread_status.show(STATUS_WORKING)

    def refresh(self) -> None:
        """Show the current progress on an existing status message (``status_ts`` set by
        the caller, e.g. a resumed job's) instead of posting a new one."""
        self.status.update()
        self.thread_status.show(STATUS_WORKING)

    def __call__(self, event: Event) -> None:
        status = self.status
        match event.kind:
            case "model_request_start":
                status.iteration = event.iteration
                status.model = event.model
                self._response_starts(event.iteration)
            case "stream_delta":
                self._current_stream().feed(event.text)
                return
            case "model_request_end":
                if event.usage is not None:
                    status.tokens += event.usage.paid
                if self._stream is not None:
                    self._stream.end_response()
                    if event.tool_calls:
                        self._retire_stream(before_calls=True)
                    elif event.cut_off:
                        self._continuing = True  # the next response goes on with it
            case "injected":
                # A person spoke: what the model says next answers them, not the rest of
                # the cut answer (the core starts a new answer too), and goes below their
                # message, never into a stream above it.
                self._continuing = False
                self.steps.retire()
                return
            case "approval_requested":
                status.awaiting = event.approval.tool
                self._held_note = None  # the card's reason: said there, once
                shown, self._shown_note = self._shown_note, None
                if shown is not None:
                    self._spawn(self._drop_note(shown))
                self.thread_status.show("is waiting for an approval…")
            case "tool_start":
                if not event.dry_run:  # a dry run comes before its card: the note waits
                    self._release_note()
                    self._shown_note = None  # a call ran: the note stays where it is
                status.tool_starts(event.tool, event.call_id)
                self._retire_stream()
                self.thread_status.show(f"is running {event.tool}…")
                self.steps.starts(event)
            case "tool_progress":
                self.steps.says(event.call_id, event.message)
                if not status.tool_says(event.call_id, event.message):
                    return  # a call running beside the one shown
            case "tool_end":
                status.tool_ends(event)
                self.steps.ends(event)
                if event.ran and not event.dry_run and event.output_chars > CUT_AFTER:
                    self._cut.append((event.call_id, event.tool))  # offered whole at the end
            case "run_end":
                if event.result.stop_reason is not StopReason.AWAITING_APPROVAL:
                    self._release_note()
                self._held_note = None
                status.final_active = event.result.state.active_time_s
                self._spawn(self._finish(event.result))
                return
            case _:
                return
        status.update()

    def _release_note(self) -> None:
        """Show the held note before the calls it came with (none waits for approval):
        between the task cards, or on the status message."""
        note, self._held_note = self._held_note, None
        if note is None or self.steps.note(note):
            return
        self.status.narrate(note)
        self.status.update()

    # -- the model's text while it streams ----------------------------------------------------

    def _response_starts(self, iteration: int) -> None:
        stream = self._stream
        if stream is not None and stream.iteration == iteration:
            stream.restart()  # another attempt at the same response: what it showed is void
            return
        if stream is not None and self._continuing:
            # The rest of an answer cut off at the output limit: the same message shows
            # it, so the cut part is never left in the thread on its own.
            self._continuing = False
            stream.go_on(iteration)
            return
        self._retire_stream()
        self.status.narration = None
        self._shown_note = None

    def _current_stream(self) -> AnswerStream:
        if self._stream is None:
            face = self.face
            self._stream = AnswerStream(
                face.client,
                face.budget,
                iteration=self.status.iteration,
                recipient_user_id=face.record.requester,
                recipient_team_id=face.team_id,
                **face.stream_place(),
            )
            self.streams.append(self._stream)
        return self._stream

    def _retire_stream(self, *, before_calls: bool = False) -> None:
        """The current response was a note before tool calls: leave its message as it is
        (or, too short for one, show it on the status message — or, ``before_calls`` with
        task cards on, between the cards of the job stream)."""
        stream, self._stream = self._stream, None
        if stream is None:
            return
        note = stream.unshown()
        if note is not None and before_calls:
            # Held until the calls are known: if one waits for approval, this note is
            # its card's reason and is said there only.
            self._held_note = note
        elif note is not None:
            self.status.narrate(note)
        elif before_calls:
            # Shown already as a message of its own: if a call waits for approval, the
            # card says it (its reason), and this message goes.
            self._shown_note = stream
        self._spawn(stream.settle())

    async def _drop_note(self, stream: AnswerStream) -> None:
        """Delete the message that showed a note which became a card's reason (once its
        stream is wound up), so the reason is said once, on the card."""
        ts = await stream.settle()
        if ts is None:
            return
        try:
            await self.face.client.chat_delete(channel=self.channel, ts=ts)
        except Exception:
            log.info("job %s: the note above its card stays", self.record.id, exc_info=True)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- the end of the run ------------------------------------------------------------------

    async def abandon(self) -> None:
        """The run was let go (handed over at a shutdown, or the store failed outside the
        loop; whoever resumes the job reports on it): the status message says the job
        resumes (the edit awaited, bounded), and the streams and the assistant status this
        process started are wound up, so none of their workers is left pending."""
        stream, self._stream = self._stream, None
        self.status.let_go()
        try:
            async with asyncio.timeout(ABANDON_S):
                if self.status.ts is not None:
                    with contextlib.suppress(HandedOver):  # a shutdown: sent if there is time
                        await self.status.edit(self.status.message())
                if stream is not None:
                    await stream.settle()
                if self.steps.stream is not None:
                    await self.steps.stream.settle()
        except Exception:
            log.info("job %s: its streams did not wind up", self.record.id, exc_info=True)
        finally:
            await self.thread_status.clear()

    async def _finish(self, result: RunResult) -> None:
        stream, self._stream = self._stream, None
        try:
            others = [t for t in self._tasks if t is not asyncio.current_task()]
            if others:  # earlier responses' streams wind up first
                await asyncio.wait(others)
            answer = result.output
            if not answer or result.stop_reason not in (
                StopReason.COMPLETED,
                StopReason.INCOMPLETE,
            ):
                answer = None
            await self.steps.finish(result)
            shown = await stream.settle(final=answer is not None) if stream else None
            if result.stop_reason is StopReason.AWAITING_APPROVAL:
                return  # the card speaks for the job until it is decided
            if answer is not None:
                await self._answer(answer, shown)
            named = self.status.named_lines(self.status.lines)
            ending = ending_for(self.record, result, tools=named, cut=self._cut)
            if self.status.ts is not None:
                # Urgent, and awaited for a bounded time: a process stopped right after
                # would otherwise lose the edit and leave "Working…" for good. Not shown
                # in time (the workspace's Tier 3 budget minutes behind, Slack refusing),
                # the ending stays owed and the scanner's redelivery edits it.
                try:
                    async with asyncio.timeout(ENDING_WAIT_S):
                        edited = await self.status.edit(ending)
                except TimeoutError:
                    edited = False
                if not edited:
                    log.info("job %s: its ending is not shown yet; left owed", self.record.id)
                    return
            else:
                # The status message never reached the thread (Slack refused it past its
                # retries): the ending is a message of its own, so the thread still says
                # how the job ended.
                await post_in_thread(self.face.client, self.channel, self.face.thread_ts, ending)
            self.delivered = True
        except HandedOver:  # a shutdown: another process's scanner shows what is left
            log.info("job %s: the process is stopping; its ending is left owed", self.record.id)
        except Exception:
            log.exception("reporting the end of job %s failed", self.record.id)
        finally:
            await self.thread_status.clear()
            self.done.set()

    async def _answer(self, answer: str, shown: str | None) -> None:
        """The answer, exactly once: its first part replaces the streamed message's content
        when there is one (and the edit succeeds), the rest are new messages."""
        await self.face.names.prefetch(answer)
        render = self.face.names.render
        messages = answer_messages(answer, job_id=self.record.id, render=render)
        if len(messages) > ANSWER_FILE_AFTER and await self._answer_file(answer):
            # The whole answer is in the thread as a file: one message summarises it.
            messages = answer_messages(summary(answer), job_id=self.record.id, render=render)[:1]
        if shown is not None and await self._replace(shown, messages[0]):
            messages = messages[1:]
        for message in messages:
            await post_in_thread(self.face.client, self.channel, self.face.thread_ts, message)

    async def _answer_file(self, answer: str) -> bool:
        """Post an answer too long for a few messages as a file in the thread."""
        file_id = await post_file(
            self.face.client,
            channel=self.channel,
            thread_ts=self.face.thread_ts,
            filename=ANSWER_FILENAME,
            content=answer,
            title="The whole answer",
            comment=f"The whole answer ({len(answer):,} characters)",
        )
        return file_id is not None

    async def _replace(self, ts: str, message: Message) -> bool:
        """Edit ``ts`` to ``message`` (urgent); False only if Slack refused the edit
        (``HandedOver`` at a shutdown: the rest is left to the redelivery)."""
        if await edit_urgently(self.face.budget, self.channel, ts, message) is False:
            log.warning("the streamed answer of job %s could not be edited; posted", self.record.id)
            return False
        return True

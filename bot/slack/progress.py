"""A job's face in the thread: the live status message, the answer, the ending.

``JobProgress`` posts the status message as the job starts, turns the run's events into
paced ``chat.update`` calls (through the workspace's ``UpdateBudget``), and when the run
ends posts the answer (Slack's ``markdown`` block, the whole answer in ``text``) and
turns the status message into the ending, naming the stop reason code (and what the
job's model calls cost, beside its tokens, when any was priced).

While the model streams, each response's text is shown by an ``AnswerStream``
(``streaming.py``): a new response (``model_request_start`` of another iteration) stops the
previous one's and leaves it as it is (a note before tool calls); a note too short to be shown
goes on the status message instead. An answer cut off at the output limit is the exception:
the response that continues it streams on into the same message (unless a person spoke in
between), so the cut part never stays in the thread on its own. When the final answer
was being shown, that message becomes the answer's first part (one urgent
``chat.update``) and any further parts are posted; otherwise the answer is posted as new
messages. The assistant thread status (best effort)
says what the job is doing and is cleared at the end.

Task cards (``OPSLOOP_TASK_DISPLAY`` ``timeline`` or ``plan``, with chat streaming): from the
run's first tool call on, its steps are cards in one ``JobStream`` — a call ``in_progress``
when it starts, ``complete``/``error`` with its one-line summary when it ends (a dry run
``complete`` with what it would do) — and the short notes the model writes before its calls
go there between the cards instead of onto the status message. A job that runs no tool
streams as before. The stream ends when the run does: at a pause for approval and before
the final answer, which stays a message of its own (its whole text, its feedback buttons, a
file when long). Every card ends in a final state: a call waiting for approval has no card
of its own while it waits (its approval card says so, and the run's stream is stopped
above it, where no process could finish a pending card after a crash or in another
process); the resumed run, in whichever process and from the decision Redis holds, shows
the call's card below the approval card: running then complete when approved, ``error``
with why (denied, expired, cancelled) when not. A person's message in the thread ends the
run's stream too: what the model writes after it goes to a new stream below it.

The note the model wrote with a call that waits for approval is the card's reason
(DESIGN): it is not shown a second time, in the stream or on the status message.

The status message shows the job's active time (the run state's ``active_time_s`` at the
run's start plus this run's time, so a pause for approval does not count), and is never
left saying "Working…": the ending's edit is awaited (bounded; a job whose ending could not
be shown stays owed to the scanner's redelivery), and a run this process lets go (a
shutdown's hand-over, a store failure) leaves it saying "Resuming…" until whoever resumes
the job takes the message over. The status message with Stop lives there throughout.

People and channels are shown by name (``bot.slack.names``, given by the composition root):
in the answer's ``markdown`` blocks, the streamed text, the task cards and the status
message's note; the answer's ``text`` keeps what the model wrote.

Long output: an answer of more than ``ANSWER_FILE_AFTER`` messages is posted as a file
with one summary message (``bot.slack.files``); the ending offers a "Full output" button
for each call whose output the model saw cut (``bot.slack.outputs``).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.agent.events import ApprovalRequested, Event, RunEnd, ToolEnd
from bot.agent.ports import WORKSPACE_CAP, Clock, LoopClock
from bot.agent.state import RunResult, StopReason
from bot.otel.meta import trace_id_of
from bot.records import JobRecord
from bot.slack.answers import answer_messages
from bot.slack.blockkit import Message
from bot.slack.files import ANSWER_FILE_AFTER, ANSWER_FILENAME, post_file, summary
from bot.slack.job_stream import JobStream
from bot.slack.names import Names
from bot.slack.outputs import CUT_AFTER, with_output_buttons
from bot.slack.status_blocks import Progress, ToolLine, ending_message, with_narration
from bot.slack.status_blocks import status_message as status_blocks
from bot.slack.streaming import AnswerStream, Pacing, StatusSwitch, ThreadStatus
from bot.slack.task_cards import DISPLAY_MODES, TASK_CARDS, task_title
from bot.slack.updates import RateLimited, UpdateBudget

log = logging.getLogger(__name__)

MAX_TOOL_LINES = 6
STOP_BUTTON = True  # the requester or an approver may stop a job
STATUS_WORKING = "is looking into it…"
LIMIT_WORDS = {
    StopReason.LIMIT_ITERATIONS: "iterations",
    StopReason.LIMIT_TOKENS: "tokens",
    StopReason.LIMIT_DEADLINE: "minutes",
}


@dataclass(frozen=True, slots=True)
class Tracked:
    """A budget payload whose sender reports the outcome: True once sent, False if Slack
    refused it (a 429 is retried by the budget and reports nothing yet)."""

    message: Message
    outcome: asyncio.Future[bool]


_STOPPED_BY = re.compile(r"stopped by <@([UW][A-Z0-9]+)>")
_RAISED = {
    StopReason.LIMIT_ITERATIONS: ("iterations", "max_iterations", 1.0),
    StopReason.LIMIT_TOKENS: ("tokens", "token_budget", 1.0),
    StopReason.LIMIT_DEADLINE: ("deadline", "deadline_s", 60.0),  # shown in minutes
}


def stopper(result: RunResult) -> str | None:
    """Who pressed Stop, from a cancelled run's reason (``stopped by <@U…>``)."""
    if result.stop_reason is not StopReason.CANCELLED or not result.error:
        return None
    found = _STOPPED_BY.fullmatch(result.error)
    return found.group(1) if found else None


def continue_step(record: JobRecord, reason: StopReason) -> float | None:
    """What ``Continue`` adds to the limit that stopped the job: its original value
    (before any raise), in the unit the button names."""
    if reason not in _RAISED:
        return None
    name, field, unit = _RAISED[reason]
    current = float(getattr(record.limits, field))
    original = current - sum(r.amount for r in record.raises if r.limit == name)
    return round(original / unit, 1) if original > 0 else None


def continue_label(result: RunResult, step: float | None) -> str | None:
    """The Continue button's words: what it adds, or that it raises the workspace's
    daily cap for today (only an approver's click does)."""
    if result.stop_reason is StopReason.LIMIT_TOKENS and WORKSPACE_CAP in (result.error or ""):
        return "Continue (raise today's cap)"
    return f"Continue (+{step:g} {LIMIT_WORDS[result.stop_reason]})" if step else None


def ending_for(
    record: JobRecord,
    result: RunResult,
    *,
    tools: Sequence[ToolLine] = (),
    cut: Sequence[tuple[str, str]] = (),
) -> Message:
    """The status message's last form: how the job ended (``ending_message``), with its
    Continue button and the "Full output" buttons of ``cut`` calls."""
    limits = record.limits
    step = continue_step(record, result.stop_reason)
    ending = ending_message(
        result.stop_reason,
        job_id=record.id,
        iterations=result.iterations,
        max_iterations=limits.max_iterations,
        tokens=result.usage.paid,
        token_budget=limits.token_budget,
        tools_run=result.tool_executions,
        error=result.error,
        by=stopper(result),
        continue_label=continue_label(result, step),
        continue_seq=len(record.raises),
        active_s=result.state.active_time_s,
        deadline_s=limits.deadline_s,
        tools=tools,
        trace_id=trace_id_of(record),
        cost_usd=result.cost_usd,
        unpriced_calls=result.unpriced_calls,
    )
    return with_output_buttons(ending, record.id, cut)


ABANDON_S = 5.0  # winding up an abandoned run's streams
ENDING_WAIT_S = 15.0  # the ending's edit, urgent in the budget, before the job lets go
DECLINED = "declined: see the approval card"
PATIENCE_S = 40.0  # how long an answer waits out 429s (inside notifier's FINISH_TIMEOUT_S)
MAX_RETRY_AFTER_S = 20.0


async def post_patiently(
    client: AsyncWebClient,
    *,
    patience_s: float = PATIENCE_S,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    **message: Any,
) -> None:
    """``chat.postMessage`` that waits out Slack's 429s (each ``Retry-After``, bounded)
    for up to ``patience_s`` beyond slack-sdk's own two retries: a job's answer and its
    ending must not be lost to a burst of rate limits. Any other refusal is raised."""
    waited = 0.0
    while True:
        try:
            await client.chat_postMessage(**message)
            return
        except SlackApiError as exc:
            if exc.response.status_code != 429:
                raise
            after = min(float(exc.response.headers.get("Retry-After", 1) or 1), MAX_RETRY_AFTER_S)
            if waited + after > patience_s:
                raise
            log.info("chat.postMessage rate limited: posting again in %.0f s", after)
            waited += after
            await sleep(after)


def budget_sender(client: AsyncWebClient) -> Any:
    """The ``UpdateBudget`` send function: ``chat.update``, a 429 as ``RateLimited``."""

    async def send(channel: str, ts: str, payload: Message | Tracked) -> None:
        message = payload.message if isinstance(payload, Tracked) else payload
        try:
            await client.chat_update(
                channel=channel, ts=ts, text=message.text, blocks=message.blocks
            )
        except SlackApiError as exc:
            if exc.response.status_code == 429:
                raise RateLimited(float(exc.response.headers.get("Retry-After", 1))) from exc
            _report(payload, False)
            raise
        except Exception:
            _report(payload, False)
            raise
        _report(payload, True)

    return send


def _report(payload: Message | Tracked, sent: bool) -> None:
    if isinstance(payload, Tracked) and not payload.outcome.done():
        payload.outcome.set_result(sent)


class JobProgress:
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
        self._client = client
        self._names = names or Names()
        self._budget = budget
        self.record = record
        self.team_id = team_id
        self._pacing = pacing
        self._clock = clock
        self._stream: AnswerStream | None = None  # the current response's
        self.streams: list[AnswerStream] = []  # every response's, in order
        self._continuing = False  # the current stream's answer was cut off: more is coming
        self._narration: str | None = None
        display = TASK_CARDS.display if task_display is None else task_display
        self._display = display if display in DISPLAY_MODES else None
        self.job_stream: JobStream | None = None  # the run's steps and later text
        self.thread_status = ThreadStatus(
            client, record.channel, record.thread_ts, switch=status_switch, clock=clock
        )
        self.status_ts: str | None = None
        self._iteration = record.progress.iterations
        self._tokens = record.progress.usage.paid
        self._active = record.progress.active_time_s  # the job's, before this run
        self._run_clock: Clock = clock or LoopClock()
        self._run_started = self._run_clock.monotonic()
        self._final_active: float | None = None  # the ended run's, from its state
        self._handed_over = False
        pending = record.progress.pending
        # The call this run resumes after its approval card (decided in Redis by now).
        self._awaited = pending.approval if pending is not None else None
        self._held_note: str | None = None  # a note before calls, until they are known
        self._shown_note: AnswerStream | None = None  # the same, shown as its own message
        self._model: str | None = record.progress.model
        self._tool: str | None = None
        self._tool_call: str | None = None  # the running call, whose progress is shown
        self._tool_note: str | None = None  # what that call last said of its progress
        self._awaiting: str | None = None  # a tool whose approval card is pending
        self._lines: list[ToolLine] = []
        self._cut: list[tuple[str, str]] = []  # (call id, tool) of outputs the model saw cut
        self._tasks: set[asyncio.Task[None]] = set()
        self.done = asyncio.Event()
        self.delivered = False  # the ended run's answer and ending reached the thread

    @property
    def channel(self) -> str:
        return self.record.channel

    def _progress(self) -> Progress:
        limits = self.record.limits
        return Progress(
            job_id=self.record.id,
            iteration=self._iteration,
            max_iterations=limits.max_iterations,
            tokens_used=self._tokens,
            token_budget=limits.token_budget,
            active_s=self._active_s(),
            model=self._model,
            current_tool=self._tool,
            current_note=self._tool_note,
            finished=tuple(self._named_lines(self._lines[-MAX_TOOL_LINES:])),
            awaiting=self._awaiting,
            handed_over=self._handed_over,
        )

    def _active_s(self) -> float:
        """The job's active time: what it had when this run began plus this run's."""
        if self._final_active is not None:
            return self._final_active
        return self._active + max(0.0, self._run_clock.monotonic() - self._run_started)

    async def start(self) -> None:
        """Post the status message in the thread (the first sign of life)."""
        message = status_blocks(self._progress(), stop_button=STOP_BUTTON)
        response = await self._client.chat_postMessage(
            channel=self.channel,
            thread_ts=self.record.thread_ts,
            text=message.text,
            blocks=message.blocks,
        )
        self.status_ts = str(response["ts"])
        self.thread_status.show(STATUS_WORKING)

    def refresh(self) -> None:
        """Show the current progress on an existing status message (``status_ts`` set by
        the caller, e.g. a resumed job's) instead of posting a new one."""
        self._update()
        self.thread_status.show(STATUS_WORKING)

    def __call__(self, event: Event) -> None:
        match event.kind:
            case "model_request_start":
                self._iteration = event.iteration
                self._model = event.model
                self._response_starts(event.iteration)
            case "stream_delta":
                self._current_stream().feed(event.text)
                return
            case "model_request_end":
                if event.usage is not None:
                    self._tokens += event.usage.paid
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
                self._retire_steps()
                return
            case "approval_requested":
                assert isinstance(event, ApprovalRequested)
                self._awaiting = event.approval.tool
                self._held_note = None  # the card's reason: said there, once
                shown, self._shown_note = self._shown_note, None
                if shown is not None:
                    self._spawn(self._drop_note(shown))
                self.thread_status.show("is waiting for an approval…")
            case "tool_start":
                if not event.dry_run:  # a dry run comes before its card: the note waits
                    self._release_note()
                    self._shown_note = None  # a call ran: the note stays where it is
                self._tool = event.tool
                self._tool_call, self._tool_note = event.call_id, None
                self._awaiting = None
                self._retire_stream()
                self.thread_status.show(f"is running {event.tool}…")
                steps = self._steps()
                if steps is not None:
                    title = task_title(event.tool, event.arguments)
                    steps.step(
                        event.call_id,
                        title=f"{title} (dry run)" if event.dry_run else title,
                        status="in_progress",
                        details="dry run" if event.dry_run else None,
                    )
            case "tool_progress":
                if self.job_stream is not None and self.job_stream.has_step(event.call_id):
                    self.job_stream.step(event.call_id, status="in_progress", details=event.message)
                if event.call_id != self._tool_call:
                    return  # a call running beside the one shown
                self._tool_note = event.message
            case "tool_end":
                self._tool = None
                self._tool_call = self._tool_note = None
                if event.ran and not event.dry_run:
                    fallback = "error" if event.is_error else f"{event.output_chars} chars"
                    result = event.summary or fallback
                    self._lines.append(ToolLine(event.tool, result, not event.is_error))
                    if "<" in result:  # a tool may name people: by name once looked up
                        self._spawn(self._named_result(result))
                self._step_ends(event)
                if event.ran and not event.dry_run and event.output_chars > CUT_AFTER:
                    self._cut.append((event.call_id, event.tool))  # offered whole at the end
            case "run_end":
                assert isinstance(event, RunEnd)
                if event.result.stop_reason is not StopReason.AWAITING_APPROVAL:
                    self._release_note()
                self._held_note = None
                self._final_active = event.result.state.active_time_s
                self._spawn(self._finish(event.result))
                return
            case _:
                return
        self._update()

    # -- tool steps as task cards (one job stream per run) ----------------------------------

    def _steps(self) -> JobStream | None:
        """The run's job stream, opened at its first step when task cards are on (Slack's
        chat streaming needs the requester and team as recipients)."""
        if self.job_stream is not None:
            return self.job_stream
        if self._display is None or not TASK_CARDS.on or not self.team_id:
            return None
        if not self.record.requester:
            return None
        self.job_stream = JobStream(
            self._client,
            self._budget,
            channel=self.channel,
            thread_ts=self.record.thread_ts,
            recipient_user_id=self.record.requester,
            recipient_team_id=self.team_id,
            display=self._display,
            pacing=self._pacing,
            clock=self._clock,
            names=self._names,
        )
        return self.job_stream

    def _step_ends(self, event: Event) -> None:
        if not isinstance(event, ToolEnd):
            return
        awaited = self._awaited
        if awaited is not None and event.call_id == awaited.call_id:
            self._awaited = None
            if not event.ran:  # the resumed call was denied, expired or stopped
                self._declined(event, awaited.arguments)
                return
        steps = self.job_stream
        if steps is None:
            return
        if event.dry_run:
            steps.step(event.call_id, status="complete", output=event.summary or "dry run done")
        elif not event.ran:
            steps.step(event.call_id, status="error", output=event.summary or "not run")
        else:
            fallback = "error" if event.is_error else f"{event.output_chars} chars"
            status: Literal["complete", "error"] = "error" if event.is_error else "complete"
            steps.step(event.call_id, status=status, output=event.summary or fallback)

    def _declined(self, event: ToolEnd, arguments: dict[str, object]) -> None:
        """The card of a call its approval did not let run, in its final state."""
        steps = self._steps()
        if steps is None:
            return
        why = event.summary.removeprefix("Error: ") if event.summary else DECLINED
        steps.step(
            event.call_id, title=task_title(event.tool, arguments), status="error", output=why
        )

    def _retire_steps(self) -> None:
        """End the run's job stream where it is (a person spoke below it): the next step or
        note opens a new one."""
        steps, self.job_stream = self.job_stream, None
        if steps is not None:
            self._spawn(steps.settle())

    def _release_note(self) -> None:
        """Show the held note before the calls it came with (none waits for approval)."""
        note, self._held_note = self._held_note, None
        if note is None:
            return
        steps = self._steps()
        if steps is not None:
            steps.text(note.strip() + "\n\n")  # a note between task cards
        else:
            self._narration = note
            self._spawn(self._named_narration(note))
            self._update()

    async def _finish_steps(self, steps: JobStream, result: RunResult) -> None:
        """Wind the job stream up before the answer: steps still open end as stopped
        (unless the job awaits an approval: its step stays pending)."""
        if result.stop_reason is not StopReason.AWAITING_APPROVAL:
            word = "stopped" if result.stop_reason is StopReason.CANCELLED else "not finished"
            for step in steps.timeline.open_steps():
                steps.step(step.call_id, status="error", output=word)
        await steps.settle()

    def _update(self) -> None:
        if self.status_ts is not None:
            self._budget.submit(self.channel, self.status_ts, self._status_now())

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
        self._narration = None
        self._shown_note = None

    def _current_stream(self) -> AnswerStream:
        if self._stream is None:
            self._stream = AnswerStream(
                self._client,
                self._budget,
                channel=self.channel,
                thread_ts=self.record.thread_ts,
                iteration=self._iteration,
                recipient_user_id=self.record.requester,
                recipient_team_id=self.team_id,
                pacing=self._pacing,
                clock=self._clock,
                names=self._names,
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
            self._narration = note
            self._spawn(self._named_narration(note))
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
            await self._client.chat_delete(channel=self.channel, ts=ts)
        except Exception:
            log.info("job %s: the note above its card stays", self.record.id, exc_info=True)

    async def _named_narration(self, note: str) -> None:
        """Look up who the status message's note names, then show it again by name."""
        before = self._names.render(note)
        await self._names.prefetch(note)
        if self._narration == note and self._names.render(note) != before:
            self._update()

    def _named_lines(self, lines: Sequence[ToolLine]) -> list[ToolLine]:
        """The finished tools' lines with people and channels by name (a tool's text is
        escaped in mrkdwn, so a mention in it would show as ``<@U…>``)."""
        render = self._names.render
        return [line._replace(result=render(line.result)) for line in lines]

    async def _named_result(self, result: str) -> None:
        """Look up who a tool's result names, then show the status again by name."""
        before = self._names.render(result)
        await self._names.prefetch(result)
        if self._names.render(result) != before:
            self._update()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def abandon(self) -> None:
        """The run was let go (handed over at a shutdown, or the store failed outside the
        loop; whoever resumes the job reports on it): the status message says the job
        resumes (the edit awaited, bounded), and the streams and the assistant status this
        process started are wound up, so none of their workers is left pending."""
        stream, self._stream = self._stream, None
        self._handed_over = True
        self._tool = self._tool_call = self._tool_note = None
        try:
            async with asyncio.timeout(ABANDON_S):
                if self.status_ts is not None:
                    await self._edit_status(self._status_now())
                if stream is not None:
                    await stream.settle()
                if self.job_stream is not None:
                    await self.job_stream.settle()
        except Exception:
            log.info("job %s: its streams did not wind up", self.record.id, exc_info=True)
        finally:
            await self.thread_status.clear()

    def _status_now(self) -> Message:
        message = status_blocks(self._progress(), stop_button=STOP_BUTTON)
        if self._narration:
            message = with_narration(message, self._names.render(self._narration))
        return message

    async def _edit_status(self, message: Message) -> bool:
        """Edit the status message (urgent) and wait until Slack has it; whether it does."""
        assert self.status_ts is not None
        outcome: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        done = self._budget.submit(
            self.channel, self.status_ts, Tracked(message, outcome), urgent=True
        )
        await done.wait()
        return outcome.done() and outcome.result()

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
            if self.job_stream is not None:
                await self._finish_steps(self.job_stream, result)
            shown = await stream.settle(final=answer is not None) if stream else None
            if result.stop_reason is StopReason.AWAITING_APPROVAL:
                return  # the card speaks for the job until it is decided
            if answer is not None:
                await self._answer(answer, shown)
            named = self._named_lines(self._lines)
            ending = ending_for(self.record, result, tools=named, cut=self._cut)
            if self.status_ts is not None:
                # Urgent, and awaited for a bounded time: a process stopped right after
                # would otherwise lose the edit and leave "Working…" for good. Not shown
                # in time (the workspace's Tier 3 budget minutes behind, Slack refusing),
                # the ending stays owed and the scanner's redelivery edits it.
                try:
                    async with asyncio.timeout(ENDING_WAIT_S):
                        edited = await self._edit_status(ending)
                except TimeoutError:
                    edited = False
                if not edited:
                    log.info("job %s: its ending is not shown yet; left owed", self.record.id)
                    return
            else:
                # The status message never reached the thread (Slack refused it past its
                # retries): the ending is a message of its own, so the thread still says
                # how the job ended.
                await post_patiently(
                    self._client,
                    channel=self.channel,
                    thread_ts=self.record.thread_ts,
                    text=ending.text,
                    blocks=ending.blocks,
                )
            self.delivered = True
        except Exception:
            log.exception("reporting the end of job %s failed", self.record.id)
        finally:
            await self.thread_status.clear()
            self.done.set()

    async def _answer(self, answer: str, shown: str | None) -> None:
        """The answer, exactly once: its first part replaces the streamed message's content
        when there is one (and the edit succeeds), the rest are new messages."""
        await self._names.prefetch(answer)
        render = self._names.render
        messages = answer_messages(answer, job_id=self.record.id, render=render)
        if len(messages) > ANSWER_FILE_AFTER and await self._answer_file(answer):
            # The whole answer is in the thread as a file: one message summarises it.
            messages = answer_messages(summary(answer), job_id=self.record.id, render=render)[:1]
        if shown is not None and await self._replace(shown, messages[0]):
            messages = messages[1:]
        for message in messages:
            await post_patiently(
                self._client,
                channel=self.channel,
                thread_ts=self.record.thread_ts,
                text=message.text,
                blocks=message.blocks,
            )

    async def _answer_file(self, answer: str) -> bool:
        """Post an answer too long for a few messages as a file in the thread."""
        file_id = await post_file(
            self._client,
            channel=self.channel,
            thread_ts=self.record.thread_ts,
            filename=ANSWER_FILENAME,
            content=answer,
            title="The whole answer",
            comment=f"The whole answer ({len(answer):,} characters)",
        )
        return file_id is not None

    async def _replace(self, ts: str, message: Message) -> bool:
        """Edit ``ts`` to ``message`` (urgent); False only if Slack refused the edit."""
        outcome: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        done = self._budget.submit(self.channel, ts, Tracked(message, outcome), urgent=True)
        await done.wait()
        if outcome.done() and not outcome.result():
            log.warning("the streamed answer of job %s could not be edited; posted", self.record.id)
            return False
        return True

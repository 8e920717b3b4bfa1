"""A running job's status message: what it shows, posted once and then edited.

``LiveStatus`` holds what the status message shows (``bot.slack.status_blocks.Progress``):
the iteration, the tokens and the model, the running tool with what it last said of its
progress, the finished tools' lines, the tool whose approval card is pending, a short note
of the model's, whether this process let the job go, and who asked (named when an alert
did). ``JobProgress``
(``bot.slack.progress``) tells it what the run's events change; it posts the message as the
job starts (with Stop, which lives there throughout) and submits every change to the
workspace's ``UpdateBudget`` (paced, newest wins); ``edit`` is urgent and awaited (the
ending, the hand-over that leaves it saying "Resuming…").

The active time shown is the job's: the run state's ``active_time_s`` at the run's start
plus this run's time, so a pause for approval does not count. People and channels in the
note and the tools' lines are shown by name once looked up (``bot.slack.names``): a tool's
text is escaped in mrkdwn, so a mention in it would show as ``<@U…>``.
"""

from __future__ import annotations

from collections.abc import Sequence

from bot.agent.events import ToolEnd
from bot.agent.ports import Clock, LoopClock
from bot.slack.blockkit import Message
from bot.slack.job_face import JobFace
from bot.slack.status_blocks import Progress, ToolLine, status_message, with_narration
from bot.slack.updates import edit_urgently

MAX_TOOL_LINES = 6
STOP_BUTTON = True  # the requester or an approver may stop a job


def outcome_line(event: ToolEnd) -> str:
    """How a call that ran went, in one line: its summary, else its size or an error."""
    return event.summary or ("error" if event.is_error else f"{event.output_chars} chars")


class LiveStatus:
    """The status message of one job's run (see the module docstring)."""

    def __init__(self, face: JobFace) -> None:
        self.face = face
        progress = face.record.progress
        self.ts: str | None = None
        self.iteration = progress.iterations
        self.tokens = progress.usage.paid
        self.model: str | None = progress.model
        self._active = progress.active_time_s  # the job's, before this run
        self._run_clock: Clock = face.clock or LoopClock()
        self._run_started = self._run_clock.monotonic()
        self.final_active: float | None = None  # the ended run's, from its state
        self.handed_over = False
        self.tool: str | None = None
        self._tool_call: str | None = None  # the running call, whose progress is shown
        self._tool_note: str | None = None  # what that call last said of its progress
        self.awaiting: str | None = None  # a tool whose approval card is pending
        self.lines: list[ToolLine] = []
        self.narration: str | None = None

    def progress(self) -> Progress:
        limits = self.face.record.limits
        return Progress(
            job_id=self.face.record.id,
            iteration=self.iteration,
            max_iterations=limits.max_iterations,
            tokens_used=self.tokens,
            token_budget=limits.token_budget,
            active_s=self._active_s(),
            model=self.model,
            current_tool=self.tool,
            current_note=self._tool_note,
            finished=tuple(self.named_lines(self.lines[-MAX_TOOL_LINES:])),
            awaiting=self.awaiting,
            handed_over=self.handed_over,
            requester=self.face.record.requester,
        )

    def _active_s(self) -> float:
        """The job's active time: what it had when this run began plus this run's."""
        if self.final_active is not None:
            return self.final_active
        return self._active + max(0.0, self._run_clock.monotonic() - self._run_started)

    def message(self) -> Message:
        message = status_message(self.progress(), stop_button=STOP_BUTTON)
        if self.narration:
            message = with_narration(message, self.face.names.render(self.narration))
        return message

    # -- the message in the thread -----------------------------------------------------------

    async def post(self) -> None:
        """Post the status message in the thread (the first sign of life)."""
        message = status_message(self.progress(), stop_button=STOP_BUTTON)
        face = self.face
        response = await face.client.chat_postMessage(
            channel=face.channel, thread_ts=face.thread_ts, text=message.text, blocks=message.blocks
        )
        self.ts = str(response["ts"])

    def update(self) -> None:
        """Show what it holds now (paced; a newer update replaces one not sent yet)."""
        if self.ts is not None:
            self.face.budget.submit(self.face.channel, self.ts, self.message())

    async def edit(self, message: Message) -> bool:
        """Edit the status message (urgent) and wait until Slack has it; whether it does
        (``HandedOver`` when the budget stopped waiting: a shutdown)."""
        assert self.ts is not None
        return await edit_urgently(self.face.budget, self.face.channel, self.ts, message) is True

    # -- what the run's events change ----------------------------------------------------------

    def tool_starts(self, tool: str, call_id: str) -> None:
        self.tool = tool
        self._tool_call, self._tool_note = call_id, None
        self.awaiting = None

    def tool_says(self, call_id: str, note: str) -> bool:
        """The running call's progress; False for a call running beside the one shown."""
        if call_id != self._tool_call:
            return False
        self._tool_note = note
        return True

    def tool_ends(self, event: ToolEnd) -> None:
        self.tool = None
        self._tool_call = self._tool_note = None
        if event.ran and not event.dry_run:
            result = outcome_line(event)
            self.lines.append(ToolLine(event.tool, result, not event.is_error))
            if "<" in result:  # a tool may name people: by name once looked up
                self.face.spawn(self._named_result(result))

    def let_go(self) -> None:
        """This process let the job go: the message says it resumes, no tool runs here."""
        self.handed_over = True
        self.tool = self._tool_call = self._tool_note = None

    def narrate(self, note: str) -> None:
        """Show the model's short note on the message (by name once looked up)."""
        self.narration = note
        self.face.spawn(self._named_narration(note))

    # -- people and channels by name ---------------------------------------------------------

    async def _named_narration(self, note: str) -> None:
        """Look up who the note names, then show it again by name."""
        if await self._named(note) and self.narration == note:
            self.update()

    def named_lines(self, lines: Sequence[ToolLine]) -> list[ToolLine]:
        """The finished tools' lines with people and channels by name."""
        render = self.face.names.render
        return [line._replace(result=render(line.result)) for line in lines]

    async def _named_result(self, result: str) -> None:
        """Look up who a tool's result names, then show the status again by name."""
        if await self._named(result):
            self.update()

    async def _named(self, text: str) -> bool:
        """Look up who ``text`` names; whether that changed how it is shown."""
        names = self.face.names
        before = names.render(text)
        await names.prefetch(text)
        return names.render(text) != before

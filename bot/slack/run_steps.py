"""A run's tool steps as task cards in its job stream, from the run's events.

With task cards on (``OPSLOOP_TASK_DISPLAY`` ``timeline`` or ``plan``, with chat
streaming), from the run's first tool call on its steps are cards in one ``JobStream``
(``bot.slack.job_stream``) — a call ``in_progress`` when it starts, ``complete``/``error``
with its one-line summary when it ends (a dry run ``complete`` with what it would do) — and
the short notes the model writes before its calls go there between the cards instead of
onto the status message. A job that runs no tool streams as before. The stream ends when
the run does: at a pause for approval and before the final answer, which stays a message of
its own (its whole text, its feedback buttons, a file when long).

Every card ends in a final state: a call waiting for approval has no card of its own while
it waits (its approval card says so, and the run's stream is stopped above it, where no
process could finish a pending card after a crash or in another process); the resumed run,
in whichever process and from the decision Redis holds, shows the call's card below the
approval card: running then complete when approved, ``error`` with why (denied, expired,
cancelled) when not. A person's message in the thread ends the run's stream too
(``retire``): what the model writes after it goes to a new stream below it.
"""

from __future__ import annotations

from bot.agent.events import ToolEnd, ToolStart
from bot.agent.state import RunResult, StopReason
from bot.slack.job_face import JobFace
from bot.slack.job_stream import JobStream
from bot.slack.live_status import outcome_line
from bot.slack.task_cards import DISPLAY_MODES, TASK_CARDS, TaskStatus, task_title

DECLINED = "declined: see the approval card"


class RunSteps:
    """The task cards of one job's run (see the module docstring). ``stream`` is the run's
    current job stream, opened at its first step; ``task_display`` (``timeline``, ``plan``
    or ``off``; default the process's ``OPSLOOP_TASK_DISPLAY``) says how cards are shown."""

    def __init__(self, face: JobFace, *, task_display: str | None = None) -> None:
        self.face = face
        display = TASK_CARDS.display if task_display is None else task_display
        self._display = display if display in DISPLAY_MODES else None
        self.stream: JobStream | None = None
        pending = face.record.progress.pending
        # The call this run resumes after its approval card (decided in Redis by now).
        self._awaited = pending.approval if pending is not None else None

    def opened(self) -> JobStream | None:
        """The run's job stream, opened at its first step when task cards are on (Slack's
        chat streaming needs the requester and team as recipients)."""
        if self.stream is not None:
            return self.stream
        face = self.face
        if self._display is None or not TASK_CARDS.on or not face.team_id:
            return None
        if not face.record.requester:
            return None
        self.stream = JobStream(
            face.client,
            face.budget,
            recipient_user_id=face.record.requester,
            recipient_team_id=face.team_id,
            display=self._display,
            **face.stream_place(),
        )
        return self.stream

    def note(self, note: str) -> bool:
        """Show a note before calls between the cards; False when there are no cards."""
        steps = self.opened()
        if steps is None:
            return False
        steps.text(note.strip() + "\n\n")
        return True

    def starts(self, event: ToolStart) -> None:
        steps = self.opened()
        if steps is not None:
            title = task_title(event.tool, event.arguments)
            steps.step(
                event.call_id,
                title=f"{title} (dry run)" if event.dry_run else title,
                status="in_progress",
                details="dry run" if event.dry_run else None,
            )

    def says(self, call_id: str, note: str) -> None:
        """A call's progress on its card (if it has one)."""
        if self.stream is not None and self.stream.has_step(call_id):
            self.stream.step(call_id, status="in_progress", details=note)

    def ends(self, event: ToolEnd) -> None:
        awaited = self._awaited
        if awaited is not None and event.call_id == awaited.call_id:
            self._awaited = None
            if not event.ran:  # the resumed call was denied, expired or stopped
                self._declined(event, awaited.arguments)
                return
        steps = self.stream
        if steps is None:
            return
        if event.dry_run:
            steps.step(event.call_id, status="complete", output=event.summary or "dry run done")
        elif not event.ran:
            steps.step(event.call_id, status="error", output=event.summary or "not run")
        else:
            status: TaskStatus = "error" if event.is_error else "complete"
            steps.step(event.call_id, status=status, output=outcome_line(event))

    def _declined(self, event: ToolEnd, arguments: dict[str, object]) -> None:
        """The card of a call its approval did not let run, in its final state."""
        steps = self.opened()
        if steps is None:
            return
        why = event.summary.removeprefix("Error: ") if event.summary else DECLINED
        steps.step(
            event.call_id, title=task_title(event.tool, arguments), status="error", output=why
        )

    def retire(self) -> None:
        """End the run's job stream where it is (a person spoke below it): the next step or
        note opens a new one."""
        steps, self.stream = self.stream, None
        if steps is not None:
            self.face.spawn(steps.settle())

    async def finish(self, result: RunResult) -> None:
        """Wind the job stream up before the answer: steps still open end as stopped
        (unless the job awaits an approval: its step stays pending)."""
        steps = self.stream
        if steps is None:
            return
        if result.stop_reason is not StopReason.AWAITING_APPROVAL:
            word = "stopped" if result.stop_reason is StopReason.CANCELLED else "not finished"
            for step in steps.timeline.open_steps():
                steps.step(step.call_id, status="error", output=word)
        await steps.settle()

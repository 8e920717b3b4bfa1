"""A job's face in the thread: the live status message, the answer, the ending.

``JobProgress`` posts the status message as the job starts, turns the run's events into
paced ``chat.update`` calls (through the workspace's ``UpdateBudget``), and when the run
ends posts the answer (Slack's ``markdown`` block, the whole answer in ``text``) and
turns the status message into the ending, naming the stop reason code.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.agent.events import Event, RunEnd
from bot.agent.state import RunResult, StopReason
from bot.slack.blocks import Message, Progress, ToolLine, answer_messages, ending_message
from bot.slack.blocks import status_message as status_blocks
from bot.slack.updates import RateLimited, UpdateBudget
from bot.store.jobs import JobRecord

log = logging.getLogger(__name__)

MAX_TOOL_LINES = 6
STOP_BUTTON = False  # shown once the Stop action is handled (Slack app II)
LIMIT_WORDS = {
    StopReason.LIMIT_ITERATIONS: "iterations",
    StopReason.LIMIT_TOKENS: "tokens",
    StopReason.LIMIT_DEADLINE: "minutes",
}


def budget_sender(client: AsyncWebClient) -> Any:
    """The ``UpdateBudget`` send function: ``chat.update``, a 429 as ``RateLimited``."""

    async def send(channel: str, ts: str, message: Message) -> None:
        try:
            await client.chat_update(
                channel=channel, ts=ts, text=message.text, blocks=message.blocks
            )
        except SlackApiError as exc:
            if exc.response.status_code == 429:
                raise RateLimited(float(exc.response.headers.get("Retry-After", 1))) from exc
            raise

    return send


class JobProgress:
    def __init__(self, client: AsyncWebClient, budget: UpdateBudget, record: JobRecord) -> None:
        self._client = client
        self._budget = budget
        self.record = record
        self.status_ts: str | None = None
        self._iteration = record.progress.iterations
        self._tokens = record.progress.usage.paid
        self._active = record.progress.active_time_s
        self._model: str | None = record.progress.model
        self._tool: str | None = None
        self._lines: list[ToolLine] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self.done = asyncio.Event()

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
            active_s=self._active,
            model=self._model,
            current_tool=self._tool,
            finished=tuple(self._lines[-MAX_TOOL_LINES:]),
        )

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

    def __call__(self, event: Event) -> None:
        match event.kind:
            case "model_request_start":
                self._iteration = event.iteration
                self._model = event.model
            case "model_request_end":
                if event.usage is not None:
                    self._tokens += event.usage.paid
                self._active += event.duration_s
            case "tool_start":
                self._tool = event.tool
            case "tool_end":
                self._tool = None
                if event.ran and not event.dry_run:
                    result = "error" if event.is_error else f"{event.output_chars} chars"
                    self._lines.append(ToolLine(event.tool, result, not event.is_error))
            case "run_end":
                assert isinstance(event, RunEnd)
                self._spawn(self._finish(event.result))
                return
            case _:
                return
        self._update()

    def _update(self) -> None:
        if self.status_ts is not None:
            self._budget.submit(
                self.channel,
                self.status_ts,
                status_blocks(self._progress(), stop_button=STOP_BUTTON),
            )

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _finish(self, result: RunResult) -> None:
        try:
            if result.stop_reason is StopReason.AWAITING_APPROVAL:
                return  # the card speaks for the job until it is decided
            if result.output and result.stop_reason in (
                StopReason.COMPLETED,
                StopReason.INCOMPLETE,
            ):
                for message in answer_messages(result.output):
                    await self._client.chat_postMessage(
                        channel=self.channel,
                        thread_ts=self.record.thread_ts,
                        text=message.text,
                        blocks=message.blocks,
                    )
            limits = self.record.limits
            step = {
                StopReason.LIMIT_ITERATIONS: limits.max_iterations,
                StopReason.LIMIT_TOKENS: limits.token_budget,
            }.get(result.stop_reason)
            ending = ending_message(
                result.stop_reason,
                job_id=self.record.id,
                iterations=result.iterations,
                max_iterations=limits.max_iterations,
                tokens=result.usage.paid,
                token_budget=limits.token_budget,
                tools_run=result.tool_executions,
                error=result.error,
                continue_label=f"Continue (+{step} {LIMIT_WORDS[result.stop_reason]})"
                if step
                else None,
                active_s=result.state.active_time_s,
                deadline_s=limits.deadline_s,
            )
            if self.status_ts is not None:
                done = self._budget.submit(self.channel, self.status_ts, ending, urgent=True)
                await done.wait()
        except Exception:
            log.exception("reporting the end of job %s failed", self.record.id)
        finally:
            self.done.set()

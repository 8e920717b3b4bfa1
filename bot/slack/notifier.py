"""How a job shows itself in its Slack thread: the ``Notifier`` that ``Turns`` calls.

``SlackNotifier`` implements ``bot.turns.ports.Notifier`` without knowing ``Turns``: it
opens a job's progress (``JobProgress``, wrapped in ``Reporter`` so the run's events
also feed the process metrics), posts approval cards (returning the card's ts, which
``Turns`` records), tells a thread about calls whose outcome an interruption made
unknown, and puts the ``eyes`` reaction on messages a job took in. The buttons on what
it posts are answered by ``bot.slack.actions``. Given ``keep_tools`` (``Jobs.keep_tools``,
from the composition root), the ``Reporter`` keeps the per-tool lines of the status
message beside the job's record as calls end, for an ending shown by another process.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.agent.events import Event, ModelRequestEnd, RunEnd, ToolEnd
from bot.agent.ports import Injected
from bot.agent.state import StopReason
from bot.metrics import Metrics
from bot.records import ApprovalRecord, JobRecord, KeptToolLine, KeptTools, LedgerRecord, Thread
from bot.slack.assistant import card_channel, post_card_elsewhere
from bot.slack.cards import approval_card
from bot.slack.identity import BotIdentity
from bot.slack.names import Names
from bot.slack.progress import JobProgress
from bot.slack.status_blocks import ACTION_STOP
from bot.slack.updates import UpdateBudget

log = logging.getLogger(__name__)

FINISH_TIMEOUT_S = 60.0  # posting the answer and the ending
AWAITING = StopReason.AWAITING_APPROVAL


FIND_STATUS_TIMEOUT_S = 3.0
FIND_STATUS_PAGE = 200


async def find_status(
    client: AsyncWebClient, record: JobRecord, *, bot_user: str | None
) -> str | None:
    """The ts of this job's status message in its thread (the bot's message with the
    job's Stop button), posted by a process that died before saving it; None when there
    is none, or Slack cannot say within ``FIND_STATUS_TIMEOUT_S``."""
    try:
        reply = await asyncio.wait_for(
            client.conversations_replies(
                channel=record.channel, ts=record.thread_ts, limit=FIND_STATUS_PAGE
            ),
            FIND_STATUS_TIMEOUT_S,
        )
    except Exception:
        log.info("could not look for job %s's status message", record.id, exc_info=True)
        return None
    for message in reply.get("messages") or []:
        if bot_user is not None and message.get("user") not in (bot_user, None):
            continue
        if has_stop_for(message.get("blocks") or [], record.id):
            return str(message["ts"])
    return None


def has_stop_for(blocks: Sequence[Any], job_id: str) -> bool:
    for block in blocks:
        elements = block.get("elements") if isinstance(block, dict) else None
        for element in elements or []:
            if (
                isinstance(element, dict)
                and element.get("action_id") == ACTION_STOP
                and element.get("value") == job_id
            ):
                return True
    return False


KeepTools = Callable[[str, KeptTools], Awaitable[None]]  # ``Jobs.keep_tools``
KEEP_WAIT_S = 2.0  # the last tool lines' write, when the run is over


class Reporter:
    """A job's progress plus the process metrics, as the runner's ``JobSink``; with
    ``keep``, the per-tool lines the status message shows are kept beside the job's
    record as each call ends (one write at a time, the newest lines), so an ending
    another process shows carries them (``bot.slack.redelivery``)."""

    def __init__(
        self, progress: JobProgress, metrics: Metrics, *, keep: KeepTools | None = None
    ) -> None:
        self.progress = progress
        self.metrics = metrics
        self.ended = False  # the run ended (rather than being abandoned on a store error)
        self._keep = keep
        self._keeping: asyncio.Task[None] | None = None
        self._kept = 0  # tool lines written (or being written)

    def __call__(self, event: Event) -> None:
        metrics = self.metrics
        if isinstance(event, ToolEnd) and event.ran and not event.dry_run:
            metrics.tools.labels(event.tool, "error" if event.is_error else "ok").inc()
            metrics.tool_seconds.labels(event.tool).observe(event.duration_s)
        elif isinstance(event, ModelRequestEnd):
            metrics.model_calls.inc()
            metrics.model_seconds.labels(event.model).observe(event.duration_s)
            if event.usage is None:
                metrics.model_errors.labels(event.model).inc()
            else:
                tokens = metrics.model_tokens
                tokens.labels(event.model, "prompt").inc(event.usage.prompt_tokens)
                tokens.labels(event.model, "cached").inc(event.usage.cached_tokens)
                tokens.labels(event.model, "completion").inc(event.usage.completion_tokens)
            if event.cost_usd is not None:
                metrics.model_cost.labels(event.model).inc(event.cost_usd)
        elif isinstance(event, RunEnd):
            self.ended = True
            if event.result.stop_reason is not AWAITING:
                metrics.jobs.labels(event.result.stop_reason.value).inc()
        self.progress(event)
        if isinstance(event, ToolEnd) and self._keep is not None:
            self._keep_lines()

    def _keep_lines(self) -> None:
        """Write the tool lines if one was added and no write is under way (that one's
        end writes again if more were added meanwhile)."""
        if len(self.progress.status.lines) == self._kept or self._keeping is not None:
            return
        self._keeping = asyncio.create_task(self._write_lines(), name="keep tool lines")

    async def _write_lines(self) -> None:
        assert self._keep is not None
        try:
            while len(lines := self.progress.status.lines) != self._kept:
                self._kept = len(lines)
                kept = [KeptToolLine(tool=t.tool, result=t.result, ok=t.ok) for t in lines]
                await self._keep(self.progress.record.id, KeptTools.of(kept, self.progress.cut))
        except Exception:  # an ending shown here needs none of it; one shown elsewhere
            log.info("job %s: its tool lines were not kept", self.progress.record.id)
        finally:
            self._keeping = None

    async def _lines_kept(self) -> None:
        """Wait (bounded) for the tool lines' write under way."""
        if self._keeping is not None:
            await asyncio.wait({self._keeping}, timeout=KEEP_WAIT_S)

    @property
    def status_ts(self) -> str | None:
        return self.progress.status_ts

    @property
    def delivered(self) -> bool:
        return self.ended and self.progress.delivered

    async def aclose(self) -> None:
        await self._lines_kept()
        if not self.ended:
            await self.progress.abandon()  # whoever resumes the job reports on it
            return
        try:
            await asyncio.wait_for(self.progress.done.wait(), timeout=FINISH_TIMEOUT_S)
        except TimeoutError:
            log.warning("job %s: the ending was not shown in time", self.progress.record.id)


@dataclass(kw_only=True, eq=False)
class SlackNotifier:
    """``bot.turns.ports.Notifier`` over the Slack Web API."""

    client: AsyncWebClient
    budget: UpdateBudget
    identity: BotIdentity
    approvers: Sequence[str]
    metrics: Metrics
    approval_channel: str | None = None  # cards of DM jobs (the assistant pane)
    names: Names | None = None  # people and channels by name in what jobs show
    keep_tools: KeepTools | None = None  # where the per-tool lines are kept (``Reporter``)

    async def open_progress(self, record: JobRecord, *, taken_over: bool = False) -> Reporter:
        """The job's face in the thread, opened once this process holds its lease; a job
        taken over with no status message on record adopts the one its first process
        posted before dying, if the thread has it (``find_status``)."""
        try:
            await self.identity.load()
        except Exception:
            log.info("auth.test failed; answers are shown without chat streaming", exc_info=True)
        progress = JobProgress(
            self.client, self.budget, record, team_id=self.identity.team_id, names=self.names
        )
        try:
            adopted = None
            if not record.meta.get("status_ts") and taken_over:
                adopted = await find_status(self.client, record, bot_user=self.identity.user)
            if record.meta.get("status_ts") or adopted:  # resumed: take its message over
                progress.status_ts = record.meta.get("status_ts") or adopted
                progress.refresh()
            else:
                await progress.start()
        except Exception:
            log.warning("no status message for job %s", record.id, exc_info=True)
        return Reporter(progress, self.metrics, keep=self.keep_tools)

    async def post_card(self, record: JobRecord, approval: ApprovalRecord) -> str:
        """Post the approval card of a paused job (cards go before progress updates)."""
        card = approval_card(approval, approvers=self.approvers)
        if (elsewhere := card_channel(self.approval_channel, record.channel)) is not None:
            return await post_card_elsewhere(self.client, elsewhere, record, card)
        reply = await self.client.chat_postMessage(
            channel=record.channel, thread_ts=record.thread_ts, text=card.text, blocks=card.blocks
        )
        return str(reply["ts"])

    async def tell_unknown(self, record: JobRecord, entries: Sequence[LedgerRecord]) -> None:
        names = ", ".join(sorted({f"`{e.tool}`" for e in entries if e.tool})) or "a change"
        text = (
            f":warning: {names} was started before an interruption and its outcome is "
            "unknown. It will not be run again automatically: verify before retrying."
        )
        await self.client.chat_postMessage(
            channel=record.channel, thread_ts=record.thread_ts, text=text
        )

    async def acknowledge(self, thread: Thread, items: Sequence[Injected]) -> None:
        for item in items:
            try:
                await self.client.reactions_add(
                    channel=thread.channel, timestamp=item.id, name="eyes"
                )
            except SlackApiError as exc:  # already there: shown on its card while it waited
                if exc.response.get("error") != "already_reacted":
                    log.info("could not react to %s", item.id, exc_info=True)
            except Exception:
                log.info("could not react to %s", item.id, exc_info=True)

"""Interactivity: the Approve/Deny, Stop and Continue buttons, and the cards' edits.

Button values are never trusted: they only name an approval or a job, which ``Turns``
looks up and judges (``bot.turns.controls``: unknown, out of date, already decided,
expired, stale), the clicker re-checked against the approver policy (``policy.py``);
this module only renders the verdict. The first Approve of a call that needs two
different approvers (a destructive call in a job an alert started) edits the card to name
that approver and ask for a second, and tells the clicker so; nothing is decided yet.
A click is answered after its decision is persisted (bolt's
``process_before_response``); a decision the replicas did not confirm in time
(``OPSLOOP_REDIS_MIN_REPLICAS``) still changed the card, so its clicker is told it is
recorded and not yet confirmed, never "nothing changed"; Slack calls that follow (card
edits, ephemeral notes) run in the background, cards through the workspace's paced
``chat.update`` budget, ahead of progress updates. Cards are posted by
``bot.slack.notifier``; their edits (a decision, a first approval, an expiry, a reminder)
are made here.
The Continue of a job the workspace's daily cap stopped is an approver's only, and
raises the day's cap instead of the job's budget (``bot.turns.spend``).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, Literal, assert_never

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.agent.state import StopReason
from bot.errors import StoreError
from bot.records import ApprovalRecord, JobRecord, Thread
from bot.slack.assistant import card_place
from bot.slack.blockkit import Message, mention
from bot.slack.cards import approval_card, decided_card, parse_card_value, reminder_message
from bot.slack.inbound import JOB_ID
from bot.slack.policy import ApproverPolicy
from bot.slack.status_blocks import ending_message
from bot.slack.updates import UpdateBudget
from bot.turns.controls import (
    REFUSED_CHANGED,
    UNKNOWN_CARD,
    Accepted,
    FirstApproval,
    Refused,
    Verdict,
)
from bot.turns.parts import Turns
from bot.turns.spend import CapContinued, DailyCaps, Raised, continue_capped, stopped_by_cap

log = logging.getLogger(__name__)


_JOB_ID = re.compile(rf"^{JOB_ID}$")
UNRECORDED = "the decision could not be recorded (storage unavailable); try again"
UNCONFIRMED = (
    "Your decision ({outcome}) is recorded and the card shows it, but Redis has not yet "
    "confirmed it on a replica (OPSLOOP_REDIS_MIN_REPLICAS). {then}"
)
THEN_RUNS = "The call runs once its record is confirmed, while the card is valid."
THEN_GOES_ON = "The job goes on without the call."
ONLY_APPROVERS = "only an approver can raise the workspace's daily cap"
FIRST_APPROVAL = (
    "Your approval is recorded. An alert started this job, so a second, different approver "
    "must approve before the call runs."
)
CARD_POSTED_WAIT_S = 10.0  # a reply during the card's posting waits this long for it
CARD_POSTED_POLL_S = 0.25
CARD_RENDER_ROUNDS = 3


def _field(body: dict[str, Any], part: str, name: str) -> str | None:
    """``body[part][name]`` if it is a non-empty string (payload shapes are not trusted)."""
    inner = body.get(part)
    value = inner.get(name) if isinstance(inner, dict) else None
    return value if isinstance(value, str) and value else None


def valid_job_id(job_id: str) -> bool:
    """Whether a button's job id has the shape of ours (else it names nothing: looking
    it up would fail on the key it cannot make)."""
    return _JOB_ID.match(job_id) is not None


def clicker(body: dict[str, Any]) -> tuple[str, str | None]:
    """The clicking user's id and team, from the signed payload only."""
    return _field(body, "user", "id") or "", _field(body, "user", "team_id")


@dataclass
class Interactions:
    """The bolt listeners of the buttons, and the scanner's hooks that edit cards."""

    client: AsyncWebClient
    budget: UpdateBudget
    turns: Turns
    policy: ApproverPolicy
    schedule: Callable[[str], None]  # run or resume a job in the background
    background: Callable[[Coroutine[Any, Any, Any], str], None]
    approval_channel: str | None = None  # where DM jobs' cards are (bot.slack.assistant)
    caps: DailyCaps | None = None  # the workspace's daily caps, which a Continue may raise
    # OPSLOOP_APPROVAL_ESCALATE: users or one user group the reminder mentions.
    escalate: Sequence[str] = ()

    async def remind(self, approval: ApprovalRecord) -> None:
        """Recall a card still pending, once, in its thread (the scanner's hook), mentioning
        whom it is escalated to."""
        message = reminder_message(
            approval, approvers=self.policy.approvers, now=time.time(), escalate=self.escalate
        )
        channel, thread_ts = card_place(self.approval_channel, approval)
        await self.client.chat_postMessage(
            channel=channel,
            thread_ts=thread_ts,
            text=message.text,
            blocks=message.blocks,
        )

    def edit_card(self, approval: ApprovalRecord) -> None:
        """Show the decision on its card, in the background (off the click's ack)."""
        if approval.card_ts is None or approval.status == "pending":
            return
        self.background(self.redo_card(approval), "card")

    async def redo_card(self, approval: ApprovalRecord) -> bool:
        """Edit a decided card to show its decision and settle the edit it owes (the
        scanner's hook for an edit a crashed or refused process never made). A decided
        card is edited at once (decisions are rare and people watch for them); only when
        Slack refuses (rate limit, outage) through the paced budget, and the edit stays
        owed until one is known to have landed."""
        if approval.status == "pending":
            return False
        if approval.card_ts is None:  # never posted: no card can be showing buttons
            await self.turns.stores.approvals.card_edited(approval.job_id, approval.call_id)
            return True
        at = approval.decided_at or time.time()
        try:
            replies = await self.turns.stores.card_replies.of(approval)
        except StoreError:
            log.info("card %s: shown without its replies", approval.card_ts, exc_info=True)
            replies = []
        message = decided_card(approval, approval.status, approval.decided_by, at, replies=replies)
        if not await self._edit_card(approval, message):
            return False
        try:
            await self.turns.stores.approvals.card_edited(approval.job_id, approval.call_id)
        except StoreError:
            card = approval.card_ts
            log.info("card %s edited; settling it is left to a scan", card, exc_info=True)
        return True

    async def _edit_card(self, approval: ApprovalRecord, message: Message) -> bool:
        """Edit the posted card at once; refused (rate limit, outage), through the paced
        budget (urgent): whether the edit is known to have landed."""
        channel, ts = card_place(self.approval_channel, approval)[0], approval.card_ts
        assert ts is not None
        try:
            await self.client.chat_update(
                channel=channel, ts=ts, text=message.text, blocks=message.blocks
            )
        except Exception:
            log.info("card %s: edit deferred to the paced updates", ts, exc_info=True)
            self.budget.submit(channel, ts, message, urgent=True)
            return False
        return True

    async def show_reply(self, thread: Thread, job_id: str, reply_ts: str) -> None:
        """A reply in a thread whose job waits for approval (persisted, acknowledged to
        Slack): the card is edited to show it, so whoever decides sees it before the
        click, and the reply gets ``eyes``. Best effort, bounded; the reply itself is
        safe in the thread's inject stream whatever happens here."""
        try:
            approval = await self._waiting_card(job_id)
            if approval is not None:
                await self.refresh_card(approval, acknowledge=False)
        except Exception:
            log.info("job %s: the card was not edited to show a reply", job_id, exc_info=True)
        await self._eyes(thread.channel, reply_ts)

    async def refresh_card(self, approval: ApprovalRecord, *, acknowledge: bool = True) -> None:
        """Show on a pending card the replies its thread received since it was asked, and
        remember up to which receipt it shows them (the scanner's hook: a process that
        died between a reply's receipt and the card's edit left the edit to a scan);
        ``acknowledge``: each reply gets ``eyes`` too."""
        thread = Thread(approval.channel, approval.thread_ts)
        seq = await self.turns.stores.receipts.count(thread)  # before reading: never past it
        replies = await self.turns.stores.card_replies.of(approval)
        if replies:
            await self.show_card(approval)
            if acknowledge:
                for reply in replies:
                    await self._eyes(thread.channel, reply.ts)
        await self.turns.stores.approvals.replies_shown(approval.job_id, approval.call_id, seq)

    async def _eyes(self, channel: str, ts: str) -> None:
        try:
            await self.client.reactions_add(channel=channel, timestamp=ts, name="eyes")
        except SlackApiError as exc:
            if exc.response.get("error") != "already_reacted":
                log.info("could not react to %s", ts, exc_info=True)
        except Exception:
            log.info("could not react to %s", ts, exc_info=True)

    async def _waiting_card(self, job_id: str) -> ApprovalRecord | None:
        """The pending approval of ``job_id`` once its card is posted (a reply may come
        while the card is being posted: waited for, at most ``CARD_POSTED_WAIT_S``)."""
        approval = await self.turns.cards.waiting(job_id)
        deadline = time.monotonic() + CARD_POSTED_WAIT_S
        while approval is not None and approval.card_ts is None:
            if time.monotonic() >= deadline:
                return None
            await asyncio.sleep(CARD_POSTED_POLL_S)
            approval = await self.turns.stores.approvals.get(approval.job_id, approval.call_id)
        return approval

    async def show_card(self, approval: ApprovalRecord) -> None:
        """Render the card with its replies and its first approval; read again and render
        again while what it shows changed meanwhile (a reply in another process, a first
        approval, a decision), so the last edit shows the last state whichever process
        made the edits before it."""
        shown: tuple[str, str | None, tuple[str, ...]] | None = None
        for _ in range(CARD_RENDER_ROUNDS):
            replies = await self.turns.stores.card_replies.of(approval)
            now = (approval.status, approval.first_approver, tuple(r.ts for r in replies))
            if now == shown:
                return
            if approval.status == "pending":
                message = approval_card(approval, approvers=self.policy.approvers, replies=replies)
            else:
                at = approval.decided_at or time.time()
                message = decided_card(
                    approval, approval.status, approval.decided_by, at, replies=replies
                )
            await self._edit_card(approval, message)
            shown = now
            fresh = await self.turns.stores.approvals.get(approval.job_id, approval.call_id)
            if fresh is None:
                return
            approval = fresh

    async def card_expired(self, approval: ApprovalRecord) -> None:
        self.edit_card(approval)

    async def tell(self, body: dict[str, Any], text: str) -> None:
        """An ephemeral note to the clicker (best effort)."""
        channel = _field(body, "channel", "id") or _field(body, "container", "channel_id")
        user = _field(body, "user", "id")
        thread_ts = _field(body, "message", "thread_ts")
        if not (channel and user):
            return
        try:
            await self.client.chat_postEphemeral(
                channel=channel, user=user, text=text, thread_ts=thread_ts
            )
        except Exception:
            log.info("could not tell %s: %s", user, text, exc_info=True)

    def _later(self, coro: Any, name: str) -> None:
        """Slack calls after the click was recorded: off the ack path."""
        self.background(coro, name)

    async def on_approve(self, ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
        await ack()
        await self._decide(body, action, "approved")

    async def on_deny(self, ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
        await ack()
        await self._decide(body, action, "denied")

    async def _decide(
        self, body: dict[str, Any], action: dict[str, Any], outcome: Literal["approved", "denied"]
    ) -> None:
        user, team_id = clicker(body)
        job_id, call_id, seen = parse_card_value(str(action.get("value") or ""))
        container = body.get("container")
        message_ts = str((container if isinstance(container, dict) else {}).get("message_ts") or "")

        async def authorize(approval: ApprovalRecord) -> str | None:
            return await self.policy.may_decide(
                user,
                requester=approval.requester,
                destructive=approval.category == "destructive",
                team_id=team_id,
            )

        try:
            verdict: Verdict = (
                await self.turns.controls.decide(
                    job_id,
                    call_id,
                    outcome=outcome,
                    by=user,
                    card_ts=message_ts or None,
                    authorize=authorize,
                    # The edit the card showed: an Approve never approves an edit unseen.
                    seen_edit=seen if outcome == "approved" else None,
                )
                if valid_job_id(job_id)
                else Refused("unknown", UNKNOWN_CARD)
            )
        except StoreError:
            log.warning("could not record a decision", exc_info=True)
            self._later(self.tell(body, f"Nothing changed: {UNRECORDED}."), "ephemeral")
            return
        match verdict:
            case Accepted(record=decided, replicated=replicated):
                self.edit_card(decided)
                self.schedule(job_id)
                if not replicated:
                    # The card changed: never "nothing changed, try again" (issue 29 §4).
                    then = THEN_RUNS if decided.status == "approved" else THEN_GOES_ON
                    note = UNCONFIRMED.format(outcome=decided.status, then=then)
                    self._later(self.tell(body, note), "ephemeral")
            case FirstApproval(record=first):
                if first.card_ts is not None:
                    self._later(self.show_card(first), "card")
                self._later(self.tell(body, FIRST_APPROVAL), "ephemeral")
            case Refused(text=why):
                self._later(self.tell(body, f"Nothing changed: {why}."), "ephemeral")
                if why == REFUSED_CHANGED:  # the card the clicker saw is behind: redraw it
                    self._later(self.reshow(job_id, call_id), "card")
            case _:
                assert_never(verdict)

    async def reshow(self, job_id: str, call_id: str) -> None:
        """Draw a pending card again from its record (a click showed that what the card
        shows is behind it: an edit whose card edit a crash or Slack lost)."""
        approval = await self.turns.stores.approvals.get(job_id, call_id)
        if approval is not None and approval.status == "pending" and approval.card_ts:
            await self.show_card(approval)

    async def _steerer(self, body: dict[str, Any], job_id: str) -> str | None:
        """The clicker of Stop or Continue if they may steer the job the button names
        (its requester or an approver); otherwise they are told why and ``None``."""
        user, team_id = clicker(body)
        record = await self.turns.stores.jobs.get(job_id) if valid_job_id(job_id) else None
        refusal = (
            "this job no longer exists"
            if record is None
            else await self.policy.may_steer(user, requester=record.requester, team_id=team_id)
        )
        if refusal is not None:
            self._later(self.tell(body, f"Nothing changed: {refusal}."), "ephemeral")
            return None
        return user

    async def on_stop(self, ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
        await ack()
        job_id = str(action.get("value") or "")
        if (user := await self._steerer(body, job_id)) is None:
            return
        outcome = await self.turns.controls.stop(job_id, user)
        if outcome.kind == "ended":
            self._later(self.tell(body, "Nothing changed: this job has already ended."), "eph")
        elif outcome.kind == "cancelled" and outcome.record is not None:
            # Nobody was running it: show the ending here.
            if outcome.approval is not None:
                self.edit_card(outcome.approval)
            self._show_ending(outcome.record, by=user)

    def _show_ending(self, record: JobRecord, *, by: str | None) -> None:
        status_ts = record.meta.get("status_ts")
        if not status_ts:
            return
        state = record.progress
        message = ending_message(
            StopReason.CANCELLED,
            job_id=record.id,
            iterations=state.iterations,
            max_iterations=record.limits.max_iterations,
            tokens=state.usage.paid,
            token_budget=record.limits.token_budget,
            tools_run=state.tool_executions,
            by=by,
        )
        self.budget.submit(record.channel, status_ts, message, urgent=True)

    async def on_continue(self, ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
        await ack()
        # ``job|n``: the Continue of the ending that followed the job's n-th raise, so a
        # replayed click, or one on an earlier ending's button, raises nothing.
        job_id, _, seq = str(action.get("value") or "").partition("|")
        record = await self.turns.stores.jobs.get(job_id) if valid_job_id(job_id) else None
        if record is not None and stopped_by_cap(record):
            await self._continue_capped(body, record, int(seq) if seq.isdigit() else None)
            return
        if (user := await self._steerer(body, job_id)) is None:
            return
        raised = await self.turns.controls.raise_limit(
            job_id, user, seq=int(seq) if seq.isdigit() else None
        )
        if isinstance(raised, str):
            self._later(self.tell(body, f"Nothing changed: {raised}."), "ephemeral")
            return
        last = raised.raises[-1]
        log.info("job %s: %s raised the %s limit by %g", job_id, user, last.limit, last.amount)
        self.schedule(job_id)

    async def _continue_capped(
        self, body: dict[str, Any], record: JobRecord, seq: int | None
    ) -> None:
        """Continue on a job the workspace's daily cap stopped: only an approver may
        press it; it raises the day's cap (``bot.turns.spend``), says so in the thread,
        and the job goes on."""
        user, team_id = clicker(body)
        refusal = await self.policy.outsider(user, team_id)
        if refusal is None and not await self.policy.is_approver(user):
            refusal = ONLY_APPROVERS
        if refusal is not None:
            self._later(self.tell(body, f"Nothing changed: {refusal}."), "ephemeral")
            return
        audit = self.turns.audit
        try:
            outcome = await continue_capped(
                self.turns.stores.jobs,
                self.caps,
                record.id,
                user,
                seq=seq,
                on_audit=audit.staged if audit is not None else None,
            )
        except StoreError:
            log.warning("could not raise the daily cap for job %s", record.id, exc_info=True)
            self._later(
                self.tell(body, "Nothing changed: storage unavailable; try again."), "ephemeral"
            )
            return
        if isinstance(outcome, str):
            self._later(self.tell(body, f"Nothing changed: {outcome}."), "ephemeral")
            return
        self._later(self._announce_raise(record, user, outcome), "daily cap raised")
        self.schedule(record.id)

    async def _announce_raise(self, record: JobRecord, by: str, outcome: CapContinued) -> None:
        """One line in the job's thread: who raised the day's cap, and to what."""
        if outcome.raised is None:
            text = f"{mention(by)} continued the job (no daily cap is set any more)."
        elif isinstance(outcome.raised, Raised):
            text = (
                f"{mention(by)} raised the workspace's daily cap for today (UTC): "
                f"{outcome.raised.status.figures()}. The job continues."
            )
        else:
            text = (
                f"The workspace's daily cap was raised already ({outcome.raised.status.figures()} "
                f"today, UTC); {mention(by)} continued the job."
            )
        try:
            await self.client.chat_postMessage(
                channel=record.channel, thread_ts=record.thread_ts, text=text
            )
        except Exception:
            log.info("job %s: the raise was not announced", record.id, exc_info=True)

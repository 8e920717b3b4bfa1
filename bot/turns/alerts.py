"""Alerts in, on the jobs side: an alert group's notification persisted on the ack path,
then its alert message, its investigation and its updates, each done once.

``AlertDesk.receive`` is the webhook's ack path: the group's route (``bot.alerts.routes``;
``Unroutable`` when nothing takes it), then one script (``bot.store.alerts``) that writes
what the notification changes — a new incident, alerts joining or resolving, the whole
group resolved — with the work it leaves for Slack, or nothing for a repeat. The caller
answers 200 and runs ``work`` off the ack path; the scanner runs it for a group whose
work a process left (it died, Slack refused).

``work`` takes the group's lock and does its items in order, each dropped only when done:

- **open**: the alert message is posted in the routed channel (``AlertPoster``, the
  Slack edge). If the route investigates, the storm limit is asked first
  (``OPSLOOP_ALERT_INVESTIGATIONS_PER_HOUR`` across the workspace, and the daily caps: one
  script, idempotent per group and episode); admitted, a job starts in the message's
  thread with the alert as its request (requester ``alertmanager``; ``investigate:
  read_only`` offers it only read-only tools); refused, or a route that does not
  investigate, the message carries an ``Investigate`` button and a line saying why.
- **update**: one reply in the thread names the alerts that joined or resolved, and the
  same text enters the thread's inject stream as an entry that starts no job: a running
  job takes it in at its next step like a person's reply, and a later job there reads it.
- **resolve**: the last update, and the alert message is edited to say "Resolved".

``investigate`` is the button: the clicker's request starts the job (their per-person
rate applies, the storm limit does not), through the one receive path.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from bot.alerts.payload import Alert, Notification
from bot.alerts.routes import Route, Routes
from bot.alerts.stored import from_json, to_json
from bot.alerts.text import REQUESTER as ALERTMANAGER
from bot.alerts.text import request_text, update_text
from bot.errors import StoreError
from bot.store.alerts import AlertGroup, AlertGroups, AlertReceipt, AlertWork, GroupChange
from bot.store.jobs import JobLimits
from bot.store.keys import Thread
from bot.store.parts import Stores
from bot.store.quota import CapReached, JobAdmission, RateLimited
from bot.turns.admission import NotAdmitted
from bot.turns.knowledge import Knowledge, alert_meta
from bot.turns.receive import Receiver
from bot.turns.run import READ_ONLY_META

# The group's state is re-exported for the Slack edge, which imports no store module.
__all__ = ["AlertDesk", "AlertGroup", "AlertPoster", "Investigation", "Unroutable"]

log = logging.getLogger(__name__)

RETRY_S = 30.0  # a group whose work failed is looked at again after this
FRESH_S = 5.0  # a group received this recently is left to the process that received it
STORM_NOTE = (
    "No investigation started: {n} alert investigations started in the last hour "
    "(OPSLOOP_ALERT_INVESTIGATIONS_PER_HOUR). Press Investigate to start one."
)
CAP_NOTE = "No investigation started: today's model budget is used up. An approver can raise it."
NONE_NOTE = (
    "Alerts start no investigation by themselves here "
    "(OPSLOOP_ALERT_INVESTIGATIONS_PER_HOUR=0). Press Investigate to start one."
)
OFF_NOTE = "This route does not investigate by itself. Press Investigate to start one."

InvestigationOutcome = Literal["started", "posted_only", "storm_limited"]


class AlertPoster(Protocol):
    """How an alert group shows itself in Slack (``bot.slack.alerts``)."""

    async def post_alert(
        self, channel: str, notification: Notification, *, note: str | None, investigate: str | None
    ) -> str:
        """Post the alert message; its ts. ``investigate``: the button's value, if any."""
        ...

    async def post_update(
        self, thread: Thread, notification: Notification, changed: Sequence[Alert]
    ) -> str:
        """Reply in the thread with the alerts that joined or resolved; the reply's ts."""
        ...

    async def resolve_alert(
        self, thread: Thread, notification: Notification, *, resolved_at: float
    ) -> None:
        """Edit the alert message to say the group resolved."""
        ...


@dataclass(frozen=True, slots=True)
class Unroutable:
    """No route takes the group and there is no default channel (the webhook's 422)."""

    name: str


@dataclass(frozen=True, slots=True)
class Investigation:
    """What a click on ``Investigate`` did."""

    outcome: Literal["started", "running", "not_admitted", "gone"]
    job_id: str | None = None
    refusal: NotAdmitted | None = None
    group: AlertGroup | None = None


def button_value(group: str, episode: int) -> str:
    return f"{group}:{episode}"


def parse_button(value: str) -> tuple[str, int] | None:
    group, _, episode = value.rpartition(":")
    if not group or not episode.isdigit() or len(group) > 64:
        return None
    return group, int(episode)


def changed_alerts(notification: Notification, fingerprints: Sequence[str]) -> list[Alert]:
    wanted = set(fingerprints)
    return [a for a in notification.alerts if a.fingerprint in wanted]


@dataclass(kw_only=True)
class AlertDesk:
    """Alert groups from the webhook to their threads (see the module docstring)."""

    stores: Stores
    groups: AlertGroups
    routes: Routes
    limits: JobLimits
    receiver: Receiver
    # The storm limit and the daily caps, asked for ``alertmanager`` per group episode;
    # ``per_hour`` 0: no investigation starts by itself.
    storm: JobAdmission | None
    per_hour: int = 20
    poster: AlertPoster | None
    schedule: Callable[[str], None]
    owner: str
    on_investigation: Callable[[InvestigationOutcome], None] | None = None
    now: Callable[[], float] = time.time
    # The alert's runbook and earlier incidents, in the job's first request; None: none.
    knowledge: Knowledge | None = None

    # -- the ack path --------------------------------------------------------------

    def route(self, notification: Notification) -> Route | Unroutable:
        found = self.routes.route(notification.labels)
        return found if found is not None else Unroutable(notification.name)

    async def receive(self, notification: Notification) -> AlertReceipt | Unroutable:
        """Persist what the notification changes (raises ``StoreError``: the 503)."""
        route = self.route(notification)
        if isinstance(route, Unroutable):
            return route
        n = notification
        change = GroupChange(n.group_key, n.status, n.states, n.name, to_json(n))
        return await self.groups.receive(
            change, channel=route.channel, investigate=route.investigate
        )

    # -- the work --------------------------------------------------------------------

    async def work(self, gid: str) -> None:
        """Do the group's waiting work, if no other process is at it."""
        if not await self.groups.lock(gid, self.owner):
            return
        try:
            while (item := await self.groups.next_work(gid)) is not None:
                group = await self.groups.get(gid)
                if group is not None and item.episode == group.episode:
                    await self._do(group, item)
                else:  # an earlier episode's leftover: its thread is closed
                    log.info("alert group %s: dropped a stale %s", gid, item.kind)
                await self.groups.work_done(gid)
            await self.groups.unindex(gid)
        except Exception:
            log.warning("alert group %s: work left for a retry", gid, exc_info=True)
            try:
                await self.groups.index(gid, self.now() + RETRY_S)
            except StoreError:
                pass  # still indexed from its receipt: the scanner finds it
        finally:
            try:
                await self.groups.unlock(gid, self.owner)
            except StoreError:
                pass  # the lock expires by itself

    async def scan(self, now: float) -> None:
        """The scanner's look: do the work of groups a process left (it died, Slack
        refused); the freshly received are left to their receiver."""
        for gid in await self.groups.due(now - FRESH_S):
            await self.work(gid)

    async def _do(self, group: AlertGroup, item: AlertWork) -> None:
        notification = from_json(item.notification)
        if item.kind == "open":
            await self._open(group, notification)
            return
        if not group.thread_ts or self.poster is None:
            return  # the alert message was never posted: nothing to reply to
        thread = Thread(group.channel, group.thread_ts)
        changed = changed_alerts(notification, item.changed)
        if changed:
            ts = await self.poster.post_update(thread, notification, changed)
            await self.stores.receipts.append(
                thread, ts=ts, text=update_text(notification, changed), author=ALERTMANAGER
            )
        if item.kind == "resolve":
            await self.poster.resolve_alert(
                thread, notification, resolved_at=group.resolved_at or self.now()
            )

    async def _open(self, group: AlertGroup, notification: Notification) -> None:
        if self.poster is None:
            return
        gid, episode = group.id, group.episode
        note: str | None = None
        admitted = False
        if group.investigate == "no":
            note = OFF_NOTE
        else:
            note = await self._storm(gid, episode)
            admitted = note is None
        thread_ts = group.thread_ts
        if not thread_ts:
            thread_ts = await self.poster.post_alert(
                group.channel,
                notification,
                note=note,
                investigate=None if admitted else button_value(gid, episode),
            )
            await self.groups.set(gid, episode, thread_ts=thread_ts)
        outcome: InvestigationOutcome = (
            "posted_only"
            if group.investigate == "no"
            else ("started" if admitted else "storm_limited")
        )
        if admitted and not group.job_id:
            await self._start(group, Thread(group.channel, thread_ts), notification)
        if self.on_investigation is not None:
            self.on_investigation(outcome)

    async def _storm(self, gid: str, episode: int) -> str | None:
        """Why no investigation may start now, or None (admitted and counted)."""
        if self.per_hour <= 0:
            return NONE_NOTE
        if self.storm is None or not self.storm.active:
            return None
        verdict = await self.storm.admit(ALERTMANAGER, key=f"alert:{gid}:{episode}")
        if isinstance(verdict, CapReached):
            return CAP_NOTE
        if isinstance(verdict, RateLimited):
            return STORM_NOTE.format(n=verdict.jobs)
        return None

    async def request(self, notification: Notification, channel: str) -> str:
        """An alert job's request: the alert, then its runbook and earlier incidents."""
        text = request_text(notification)
        if self.knowledge is None:
            return text
        known = await self.knowledge.alert_context(notification, channel)
        return f"{text}\n\n{known}" if known else text

    async def _start(self, group: AlertGroup, thread: Thread, notification: Notification) -> None:
        meta = alert_meta(notification)
        if group.investigate == "read_only":
            meta[READ_ONLY_META] = "1"
        receipt = await self.stores.receipts.receive(
            thread,
            ts=thread.thread_ts,
            user=ALERTMANAGER,
            text=await self.request(notification, thread.channel),
            limits=self.limits,
            meta=meta,
        )
        if receipt.job_id is None:
            return
        await self.groups.claim(group.id, group.episode, "job_id", receipt.job_id)
        if receipt.needs_run:
            await self.stores.jobs.index(receipt.job_id, self.now())
            if receipt.outcome == "created":
                await self.stores.recent.add(receipt.job_id, requester=ALERTMANAGER, at=self.now())
            self.schedule(receipt.job_id)

    # -- the button --------------------------------------------------------------------

    async def investigate(self, value: str, user: str) -> Investigation:
        """A click on ``Investigate``: the clicker's request starts the job."""
        parsed = parse_button(value)
        group = await self.groups.get(parsed[0]) if parsed is not None else None
        if parsed is None or group is None or group.episode != parsed[1] or not group.thread_ts:
            return Investigation("gone")
        thread = Thread(group.channel, group.thread_ts)
        meta: dict[str, str] = {}
        if group.notification:
            notification = from_json(group.notification)
            text = await self.request(notification, group.channel)
            meta = alert_meta(notification)
        else:
            text = f"Investigate the alert {group.name} posted at the top of this thread."
        receipt = await self.receiver.receive(
            thread, ts=thread.thread_ts, user=user, text=text, meta=meta
        )
        if isinstance(receipt, NotAdmitted):
            return Investigation("not_admitted", refusal=receipt)
        if receipt.job_id is None:
            return Investigation("gone")
        if receipt.outcome != "created":
            return Investigation("running", receipt.job_id, group=group)
        await self.groups.claim(group.id, group.episode, "job_id", receipt.job_id)
        if receipt.needs_run:
            self.schedule(receipt.job_id)
        return Investigation("started", receipt.job_id, group=group)

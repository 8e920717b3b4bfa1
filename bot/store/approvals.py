"""Approvals: one record per call waiting for a human, and its one-time decision.

An approval is a HASH under the job's thread tag::

    status      pending | approved | denied | expired | cancelled
    args_hash   the canonical-arguments hash the card was made for
    expires_at  epoch seconds (``repr`` of a float)
    data        JSON of the parts fixed at creation (``ApprovalRecord`` minus the fields below)
    card_ts     the card's message ts, once posted
    decided_by  the raw Slack user id of whoever decided (absent for a decision by no one)
    decided_at  epoch seconds
    card_owed   "1" from the decision until its card was edited to show it
    replies_seq the thread's receipt count when the card was last edited to show the
                replies sent since it was asked (``bot.store.card_replies``)
    first_approver  the raw Slack user id of the first of two approvers, when the call
                needs two (set once, only while pending: ``first_approval``)

The fields that change are plain hash fields and ``data`` never changes, so the Lua
that decides reads and writes strings only (no cjson, no float re-encoding) and a
card-ts write can never be lost to a concurrent decision. ``get`` merges the two.

Approve with edits: ``edited_args`` (JSON), ``edited_by`` and ``edited_dry_run`` are
hash fields too. A mutating call's edit is its decision (``decide`` with ``edited``); a
destructive call's is stored by ``edit`` as the editor's first approval, with the edited
call's dry run, for a second person to decide. Every click and form names the edit it saw
(``ApprovalRecord.edit_tag``), and the scripts refuse one that does not match the card's
edit now (``REFUSED_CHANGED``): nobody approves arguments they never saw.

A call that needs two different approvers (the rule is the caller's: ``bot.turns.controls``)
gets its first approval recorded by ``first_approval`` (the record stays pending) and is
then decided as any other; the decision's audit entry names the first approver. The
first approval waits for no replica: lost in a failover, it only means one more click.

``decide`` is the atomic pending → decided transition: of any number of concurrent
calls exactly one wins; the others get the record as it is (so the clicker can be told
who was first). With ``OPSLOOP_REDIS_MIN_REPLICAS``, a decision no replica confirmed in
time was still made — the record on the master is decided, its card owed its edit — so
``decide`` returns it as won with ``replicated=False`` (and so for the decider's own
click again) rather than raising as if nothing had changed; only a click that changed
nothing raises ``NotReplicated``. Whatever the decision lets run waits for replicas
itself (the ledger's claim: replication is in order, so a confirmed claim confirms the
decision written before it). The workspace-wide indexes of approvals due (expiries,
reminders, card edits) are hints kept beside the records: ``bot.store.approval_index``,
which ``Approvals`` extends, and which ``decide`` cleans when it meets a stale member.

A decided card's edit is owed until done: the deciding script sets ``card_owed`` with the
decision, and a process-wide hint (``card_edits``, added before the decision so a crash
between the two leaves a hint, not a lost edit) lets any process's scanner redo an edit
the deciding process never made (it died after the acknowledgement, or Slack refused).
``take_card_edits`` hands each due edit to one scanner for a while; ``card_edited``
settles it.

Who may decide (approver policy, two-person rule) is the Slack layer's business, not
this module's; it only guarantees one decision, bound to the card's arguments hash.
``ApprovalRecord`` and its ``Status``/``Outcome`` are in ``bot.records`` (the Slack edge
renders them), re-exported here. The scripts are in ``bot.store.approval_scripts``, the
audit entries they stage in ``bot.store.approval_audit``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from bot.agent.ports import Approved, Denied
from bot.errors import StoreError
from bot.records import ApprovalRecord as ApprovalRecord
from bot.records import Outcome as Outcome
from bot.records import Status as Status
from bot.records import edited_json
from bot.store.approval_audit import decided_entry_head, requested_entry
from bot.store.approval_index import CARD_EDIT_GRACE_S as CARD_EDIT_GRACE_S
from bot.store.approval_index import CARD_EDIT_RETRY_S as CARD_EDIT_RETRY_S
from bot.store.approval_index import ApprovalIndex, index_member
from bot.store.approval_index import parse_index_member as parse_index_member
from bot.store.approval_scripts import CLAIM_CARD, CREATE, DECIDE, EDIT, SET_FIELD
from bot.store.audit import OUTBOX_TTL_S, tag_of_job
from bot.store.connection import hash_reply, translated
from bot.store.failover import retried
from bot.store.keys import bucket_of, job_bucket
from bot.store.redis_store import Lua
from bot.store.replicas import NONE, NotReplicated, Replication, replicated_reply
from bot.store.staging import AuditNotify

APPROVAL_RETENTION_S = 30 * 24 * 3600
"""How long a record outlives its expiry (traces and late clicks can still name it)."""

REFUSED_EXPIRED = "this approval has expired"
REFUSED_STALE = "the card no longer matches the call"
REFUSED_EARLY = "this approval has not expired yet"
REFUSED_CHANGED = "the card was edited since you looked at it; look at it again"

# Slack user ids (``U…``, ``W…`` on Enterprise Grid): ``confirmed_by`` is always the raw
# id, never a mention such as ``<@U123>``.
_USER_ID = re.compile(r"^[UW][A-Z0-9]+$")
_MUTABLE = frozenset(
    {
        "status",
        "card_ts",
        "decided_by",
        "decided_at",
        "card_owed",
        "replies_seq",
        "first_approver",
        "edited_arguments",
        "edited_by",
        "edited_dry_run",
    }
)
POSTING = "posting:"  # card_ts while a process posts the card (claim_card)
CARD_CLAIM_S = 30.0


@dataclass(frozen=True, slots=True, kw_only=True)
class DecideResult:
    """What ``decide`` did: ``won`` the transition, or was refused and why.

    ``record`` is the stored record after the attempt: the new decision when won, the
    earlier one (naming who decided) when refused.
    """

    won: bool
    record: ApprovalRecord
    refusal: str | None = None
    # False: the decision stands on the master, but no replica confirmed it in time
    # (OPSLOOP_REDIS_MIN_REPLICAS); a failover before they do could still lose it.
    replicated: bool = True


def _from_hash(fields: dict[str, str]) -> ApprovalRecord:
    """The record from its hash: ``data`` plus the fields that change. A card being
    posted (a claim, not yet a message ts) reads as no card."""
    try:
        data = json.loads(fields["data"])
        data["status"] = fields["status"]
        card = fields.get("card_ts") or None
        data["card_ts"] = None if card is not None and card.startswith(POSTING) else card
        data["decided_by"] = fields.get("decided_by") or None
        data["first_approver"] = fields.get("first_approver") or None
        edited = fields.get("edited_args")
        data["edited_arguments"] = json.loads(edited) if edited else None
        data["edited_by"] = fields.get("edited_by") or None
        data["edited_dry_run"] = fields.get("edited_dry_run") or None
        data["card_owed"] = fields.get("card_owed") == "1"
        data["replies_seq"] = int(fields.get("replies_seq") or 0)
        raw_at = fields.get("decided_at")
        data["decided_at"] = float(raw_at) if raw_at else None
        return ApprovalRecord.model_validate(data)
    except (KeyError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
        raise StoreError(f"corrupt approval record: {exc}") from exc


def _decided_as(fields: dict[str, str], outcome: Outcome, by: str | None) -> bool:
    """Whether a record holds ``outcome`` decided by ``by`` (no one: ``None``)."""
    return fields.get("status") == outcome and (fields.get("decided_by") or "") == (by or "")


def _own(fields: dict[str, str], outcome: Outcome, by: str | None, at: str) -> bool:
    """Whether a decided record is the decision this call made (same outcome, same
    decider, same moment): how a retried ``decide`` knows its own won decision."""
    return _decided_as(fields, outcome, by) and fields.get("decided_at") == at


def _mine(fields: dict[str, str], outcome: Outcome, by: str | None) -> bool:
    """Whether a decided record is this decider's same decision (made by an earlier
    click of theirs): their click again, which stands as that decision."""
    return bool(by) and _decided_as(fields, outcome, by)


def _check_user(by: str) -> None:
    if not _USER_ID.match(by):
        raise ValueError(f"not a raw Slack user id: {by!r}")


def refusal_text(record: ApprovalRecord) -> str:
    """Why a decided record takes no further decision, e.g. ``already approved by <@U1>``."""
    by = f" by <@{record.decided_by}>" if record.decided_by else ""
    if record.status == "expired":
        return "already expired"
    return f"already {record.status}{by}"


@dataclass(eq=False, kw_only=True)
class Approvals(ApprovalIndex):
    """Create, read and decide approvals; keep their cards' bookkeeping. The scans of
    the ones due (expiries, reminders, card edits) are ``ApprovalIndex``'s."""

    on_audit: AuditNotify | None = None
    replication: Replication = NONE  # the replicas a decision waits for (bot.store.replicas)

    _create = Lua(CREATE)
    _decide = Lua(DECIDE)
    _set_field = Lua(SET_FIELD)
    _claim_card = Lua(CLAIM_CARD)
    _edit = Lua(EDIT)

    def _staged(self, tag: str) -> None:
        if self.on_audit is not None:
            self.on_audit(tag)

    async def create(
        self, record: ApprovalRecord, *, remind_at: float | None = None
    ) -> ApprovalRecord:
        """Store a pending approval, unless one exists for the call; return the stored one.

        A second create for the same call changes nothing and returns the first record
        (a resumed job asking again gets the card it already has). ``remind_at``: when
        to remind people of it if still pending (``take_reminders``).
        """
        if (
            record.status != "pending"
            or record.decided_by
            or record.decided_at is not None
            or record.first_approver
        ):
            raise ValueError("a new approval must be pending and undecided")
        key = self.keys.approval(record.job_id, record.call_id)
        member = index_member(record.job_id, record.call_id)
        data = record.model_dump_json(exclude=set(_MUTABLE))
        ttl = max(1, math.ceil(record.expires_at - record.requested_at)) + APPROVAL_RETENTION_S
        tag = tag_of_job(record.job_id)
        bucket = bucket_of(tag)
        async with translated("approval create"):
            # The hints first: a crash before the record leaves a stale member, which the
            # scanner drops; the other order could leave a card nobody ever expires (or an
            # audit entry nobody chains).
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.zadd(self.keys.approval_expiries(bucket), {member: record.expires_at}, nx=True)
                if remind_at is not None and remind_at < record.expires_at:
                    pipe.zadd(self.keys.approval_reminders(bucket), {member: remind_at}, nx=True)
                pipe.zadd(self.keys.audit_pending_of(tag), {tag: record.requested_at})
                await pipe.execute()
            stored = await self._create(
                keys=[key, self.keys.audit_outbox(tag)],
                args=[
                    record.args_hash,
                    repr(record.expires_at),
                    data,
                    ttl,
                    record.card_ts or "",
                    requested_entry(record),
                    OUTBOX_TTL_S,
                ],
            )
        if not isinstance(stored, list):
            self._staged(tag)
            return record
        existing = _from_hash(hash_reply(stored))
        await self._reindex(existing)
        return existing

    async def get(self, job_id: str, call_id: str) -> ApprovalRecord | None:
        async def attempt() -> dict[str, str]:
            async with translated("approval get"):
                got = await self.redis.hgetall(self.keys.approval(job_id, call_id))
            return {str(k): str(v) for k, v in got.items()}

        fields = await retried("approval get", attempt)
        return _from_hash({str(k): str(v) for k, v in fields.items()}) if fields else None

    async def of_calls(self, job_id: str, call_ids: Sequence[str]) -> list[ApprovalRecord]:
        """The approvals of ``call_ids`` that exist, in that order (one round trip)."""
        if not call_ids:
            return []
        async with translated("approval get"):
            async with self.redis.pipeline(transaction=False) as pipe:
                for call_id in call_ids:
                    pipe.hgetall(self.keys.approval(job_id, call_id))
                replies = await pipe.execute()
        return [
            _from_hash({str(k): str(v) for k, v in fields.items()}) for fields in replies if fields
        ]

    async def claim_card(
        self, job_id: str, call_id: str, *, now: float, stale_after_s: float = CARD_CLAIM_S
    ) -> bool:
        """Whether the caller should post the card of this pending approval now; at most
        one caller at a time (a claim older than ``stale_after_s`` with no card is taken
        over: its poster died). The caller then posts and calls ``set_card``."""
        async with translated("approval claim card"):
            won = await self._claim_card(
                keys=[self.keys.approval(job_id, call_id)],
                args=[f"{POSTING}{now!r}", repr(now), stale_after_s],
            )
        return bool(won)

    async def set_card(self, job_id: str, call_id: str, ts: str) -> bool:
        """Remember the card's message ts; ``False`` if there is no such approval."""
        async with translated("approval set card"):
            done = await self._set_field(
                keys=[self.keys.approval(job_id, call_id)], args=["card_ts", ts, "always"]
            )
        return bool(done)

    async def replies_shown(self, job_id: str, call_id: str, seq: int) -> None:
        """The card shows the replies its thread had received up to ``seq`` (its
        receipt count): a scan refreshes it only once the thread received more."""
        async with translated("approval replies shown"):
            await self._set_field(
                keys=[self.keys.approval(job_id, call_id)], args=["replies_seq", seq, "forward"]
            )

    async def first_approval(self, job_id: str, call_id: str, by: str) -> ApprovalRecord | None:
        """Record ``by`` (a raw Slack user id) as the first of the two approvers the
        pending call needs, unless someone was first already; the record after it (its
        ``first_approver`` is whoever was first), ``None`` when there is no such approval.
        Nothing is decided: the record stays pending until a second approver decides it."""
        _check_user(by)
        key = self.keys.approval(job_id, call_id)
        async with translated("approval first approval"):
            await self._set_field(keys=[key], args=["first_approver", by, "first"])
        return await self.get(job_id, call_id)

    async def decide(
        self,
        job_id: str,
        call_id: str,
        *,
        outcome: Outcome,
        by: str | None,
        args_hash: str | None,
        now: float,
        edited: dict[str, object] | None = None,
        seen_edit: str | None = None,
    ) -> DecideResult | None:
        """Move a pending approval to ``outcome``; exactly one concurrent caller wins.

        ``by`` is the deciding user's raw Slack id (required to approve or deny).
        ``args_hash``, when given, must equal the stored one (the card binds to the
        call). Approve and deny are refused from ``expires_at`` on; ``expired`` only
        from then. ``None`` when there is no such approval (a forged or very old card).
        ``edited``: an approval with edits, the arguments the call runs with (stored with
        the decision, ``by`` as their editor). ``seen_edit``: the edit the decider saw
        (``ApprovalRecord.edit_tag``; ``None``: not checked): a card edited since is
        refused (``REFUSED_CHANGED``), so nobody approves arguments they never saw.
        """
        if edited is not None and outcome != "approved":
            raise ValueError("only an approval carries edited arguments")
        if outcome in ("approved", "denied") and not by:
            raise ValueError(f"{outcome} needs the deciding user")
        if by:
            _check_user(by)
        tag = tag_of_job(job_id)
        bucket = bucket_of(tag)
        at = repr(float(now))

        # The last reply whose WAIT was refused: the script ran on the master all the same.
        unconfirmed: list[tuple[list[str], NotReplicated]] = []

        async def attempt() -> list[str]:
            async with translated("approval decide"):
                # The hints first (see the module docstring): a won decision always has one.
                async with self.redis.pipeline(transaction=False) as pipe:
                    pipe.zadd(
                        self.keys.card_edits(bucket), {index_member(job_id, call_id): now}, nx=True
                    )
                    pipe.zadd(self.keys.audit_pending_of(tag), {tag: now})
                    await pipe.execute()
            reply, refused = await replicated_reply(
                self.redis,
                self.replication,
                "approval decide",
                self._decide,
                keys=[self.keys.approval(job_id, call_id), self.keys.audit_outbox(tag)],
                args=[
                    outcome,
                    by or "",
                    args_hash or "",
                    at,
                    decided_entry_head(job_id, call_id, outcome=outcome, by=by, at=now),
                    OUTBOX_TTL_S,
                    self.replication.touch,
                    edited_json(edited) if edited is not None else "",
                    "*" if seen_edit is None else seen_edit,
                ],
            )
            if refused is not None:
                unconfirmed.append(([str(r) for r in reply], refused))
                raise refused  # asked again: during a failover the replicas reattach
            return [str(r) for r in reply]

        replicated = True
        try:
            reply = await retried("approval decide", attempt)  # bot.store.failover
        except NotReplicated as exc:
            if not unconfirmed or unconfirmed[-1][1] is not exc:
                raise
            reply, replicated = unconfirmed[-1][0], False
        verdict, fields = reply[0], hash_reply(reply[1:])
        if verdict == "decided" and _own(fields, outcome, by, at):
            verdict = "won"  # a retry of this very decision, whose first reply was lost
        if not replicated and not (verdict == "won" or _mine(fields, outcome, by)):
            raise unconfirmed[-1][1]  # this click changed nothing: "try again" stands
        if verdict == "won":
            self._staged(tag)
        if verdict == "missing":
            await self._unindex(job_id, call_id)
            return None
        record = _from_hash(fields)
        if record.status != "pending":
            await self._unindex(job_id, call_id)
        match verdict:
            case "won":
                return DecideResult(won=True, record=record, replicated=replicated)
            case "decided":
                return DecideResult(
                    won=False, record=record, refusal=refusal_text(record), replicated=replicated
                )
            case "expired":
                return DecideResult(won=False, record=record, refusal=REFUSED_EXPIRED)
            case "stale":
                return DecideResult(won=False, record=record, refusal=REFUSED_STALE)
            case "early":
                return DecideResult(won=False, record=record, refusal=REFUSED_EARLY)
            case "changed":
                return DecideResult(won=False, record=record, refusal=REFUSED_CHANGED)
        raise StoreError(f"approval decide: unexpected verdict {verdict!r}")

    async def edit(
        self,
        job_id: str,
        call_id: str,
        *,
        edited: dict[str, object],
        by: str,
        dry_run: str,
        seen_edit: str,
        args_hash: str,
        now: float,
    ) -> DecideResult | None:
        """A destructive call's approval with edits: store the ``edited`` arguments and
        their ``dry_run`` on the pending approval as ``by``'s first approval (a second
        person decides it). Refused when decided, expired, no longer for ``args_hash``,
        or edited since ``by`` saw it (``seen_edit``); ``None`` when there is none."""
        _check_user(by)
        async with translated("approval edit"):
            reply = await self._edit(
                keys=[self.keys.approval(job_id, call_id)],
                args=[edited_json(edited), by, dry_run, repr(float(now)), seen_edit, args_hash],
            )
        reply = [str(r) for r in reply]
        verdict = reply[0]
        if verdict == "missing":
            return None
        record = _from_hash(hash_reply(reply[1:]))
        refusals = {
            "decided": refusal_text(record),
            "expired": REFUSED_EXPIRED,
            "stale": REFUSED_STALE,
            "changed": REFUSED_CHANGED,
        }
        if verdict == "won":
            return DecideResult(won=True, record=record)
        return DecideResult(won=False, record=record, refusal=refusals.get(verdict, verdict))

    async def card_edited(self, job_id: str, call_id: str) -> None:
        """The decided card shows its decision: nothing is owed any more."""
        async with (
            translated("approval card edited"),
            self.redis.pipeline(transaction=False) as pipe,
        ):
            pipe.hdel(self.keys.approval(job_id, call_id), "card_owed")
            pipe.zrem(self.keys.card_edits(job_bucket(job_id)), index_member(job_id, call_id))
            await pipe.execute()


def to_decision(record: ApprovalRecord) -> Approved | Denied:
    """The core's view of a decided approval; ``ValueError`` while it is still pending."""
    by = record.decided_by
    asked, at = record.requested_at, record.decided_at
    match record.status:
        case "approved":
            if not by:
                raise ValueError("an approval without an approver")
            return Approved(
                confirmed_by=by,
                tool=record.tool,
                args_hash=record.args_hash,
                asked_at=asked,
                decided_at=at,
                arguments=record.edited_arguments,
            )
        case "denied":
            reason = f"denied by <@{by}>" if by else "denied"
            return Denied(reason=reason, by=by, asked_at=asked, decided_at=at)
        case "expired":
            reason = "approval expired"
            return Denied(reason=reason, outcome="expired", asked_at=asked, decided_at=at)
        case "cancelled":
            reason = f"cancelled by <@{by}>" if by else "cancelled"
            return Denied(reason=reason, outcome="cancelled", by=by, asked_at=asked, decided_at=at)
        case "pending":
            raise ValueError("the approval is still pending")

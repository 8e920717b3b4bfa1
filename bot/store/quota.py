"""Workspace-wide quotas: the daily caps on model spend, and each person's rate of new jobs.

Every key is ``keys.quota(name)``, under the one hash tag ``{quota}``, so each script
(``bot.store.quota_scripts``) touches a single Redis Cluster slot:

    day:YYYY-MM-DD   HASH of one UTC day's counters (kept ``DAY_TTL_S``):
                     tokens, cost (micro-dollars, integers: no float drift), raised_tokens,
                     raised_cost, raises, refused (set when a call found no room, cleared
                     by a raise), raised_by, raised_at
    jobs:<user>      ZSET of the user's job starts in the last hour (member: the message,
                     score: when), trimmed on every admission and capped at the rate
    msg:<message>    STRING ``ok`` | ``refused``: what admission said of a message (one
                     hour): Slack's retry of it is admitted again without counting,
                     or refused without telling its author twice

``DailyCaps`` is the cap itself: ``reserve`` before a model call checks both counters
against today's caps (the base cap plus today's raises) and charges the reservation
only when both fit, in one script, so any number of processes never spend past it;
``settle`` puts right the difference once the call's usage is known. A cap is
``reached`` when a call found no room since the last raise, or a counter is at its cap:
new jobs are then refused (``JobAdmission``) and an approver may raise the day
(``raise_for_day``: the base cap once more, with its audit entry staged in the same
script). ``JobRate`` is a sliding hour of each person's job starts. ``JobAdmission``
checks both for a message that would start a job, in one script (one round trip on the
ack path), and counts the job only when both admit it. A day's status as read
(``CapStatus``) and the micro-dollar arithmetic are in ``bot.store.cap_status``,
re-exported here.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from bot.agent.ports import WORKSPACE_CAP, SpendHold, SpendRefused
from bot.errors import StoreError
from bot.store.audit_entry import OUTBOX_TTL_S
from bot.store.cap_status import MICRO, to_micro, usd
from bot.store.cap_status import CapStatus as CapStatus
from bot.store.cap_status import utc_day as utc_day
from bot.store.connection import hash_reply, reply_text, translated
from bot.store.keys import QUOTA_TAG, Keys
from bot.store.quota_scripts import ADMIT, ADMIT_RATE, RAISE, RESERVE, SETTLE
from bot.store.redis_store import Lua, RedisStore

DAY_TTL_S = 4 * 24 * 3600  # a day's counters outlive it: late settles, status, the CLI
RATE_WINDOW_S = 3600.0
MESSAGE_TTL_S = 3600


def day_key(keys: Keys, day: str) -> str:
    return keys.quota(f"day:{day}")


def jobs_key(keys: Keys, user: str) -> str:
    return keys.quota(f"jobs:{user}")


def message_key(keys: Keys, message: str) -> str:
    return keys.quota(f"msg:{message}")


@dataclass(frozen=True, slots=True)
class Raised:
    """``raise_for_day`` raised the day's caps; ``status`` is the day after it."""

    status: CapStatus


@dataclass(frozen=True, slots=True)
class NotReached:
    """Nothing raised: the day's caps were not reached (someone else raised them first)."""

    status: CapStatus


@dataclass(eq=False, kw_only=True)
class DailyCaps(RedisStore):
    """The workspace's daily caps on model tokens and dollars (see the module docstring).

    ``reserve`` with an unpriced call (``cost_usd=None``) under a dollar cap counts its
    tokens only: it is refused only when the dollar cap is already reached, since its
    cost cannot be known."""

    tokens: int | None
    cost_usd: float | None
    now: Callable[[], float] = time.time
    _base_c: int | None = field(init=False)  # the dollar cap in micro-dollars, as counted

    _reserve = Lua(RESERVE)
    _settle = Lua(SETTLE)
    _raise = Lua(RAISE)

    def __post_init__(self) -> None:
        if self.tokens is None and self.cost_usd is None:
            raise ValueError("a daily cap needs a token or a dollar cap")
        self._base_c = None if self.cost_usd is None else to_micro(self.cost_usd)

    def day_key(self, day: str) -> str:
        return day_key(self.keys, day)

    @property
    def audit_outbox(self) -> str:
        """Where a raise stages its audit entry (the ``{quota}`` tag's outbox)."""
        return self.keys.audit_outbox(QUOTA_TAG)

    @property
    def cap_args(self) -> list[str]:
        """The base caps as the scripts take them ('' for none)."""
        return [
            "" if self.tokens is None else str(self.tokens),
            "" if self._base_c is None else str(self._base_c),
        ]

    def status_of(self, day: str, fields: Mapping[str, str]) -> CapStatus:
        """The day whose hash holds ``fields``: its counters, and these base caps plus
        the day's raises."""

        def num(name: str) -> int:
            return int(fields.get(name) or 0)

        base_t, base_c = self.tokens, self._base_c
        return CapStatus(
            day=day,
            tokens_used=num("tokens"),
            tokens_cap=None if base_t is None else base_t + num("raised_tokens"),
            cost_used_micro=num("cost"),
            cost_cap_micro=None if base_c is None else base_c + num("raised_cost"),
            raised_tokens=num("raised_tokens"),
            raised_cost_micro=num("raised_cost"),
            raises=num("raises"),
            refused=bool(fields.get("refused")),
            raised_by=fields.get("raised_by") or None,
        )

    async def reserve(self, tokens: int, cost_usd: float | None) -> SpendHold | SpendRefused:
        """Set aside ``tokens`` (and ``cost_usd``) for one call in today's counters, or
        refuse when either cap has no room for it (see the class docstring)."""
        day = utc_day(self.now())
        tokens = max(int(tokens), 0)
        cost = "" if cost_usd is None else str(to_micro(max(cost_usd, 0.0)))
        async with translated("daily cap reserve"):
            reply = await self._reserve(
                keys=[self.day_key(day)], args=[tokens, cost, *self.cap_args, DAY_TTL_S]
            )
        if reply_text(reply[0]) == "ok":
            return SpendHold(tokens=tokens, cost_usd=None if cost == "" else cost_usd, token=day)
        over, used_t, cap_t, used_c, cap_c = reply_text(reply[0]), *(int(v) for v in reply[1:5])
        if over == "tokens":
            figures = (
                f"{used_t:,} of {cap_t:,} tokens used today (UTC), "
                f"and this call needs up to {tokens:,} more"
            )
        elif cost:
            figures = (
                f"{usd(used_c)} of {usd(cap_c)} spent today (UTC), "
                f"and this call may cost up to {usd(int(cost))} more"
            )
        else:
            figures = f"{usd(used_c)} of {usd(cap_c)} spent today (UTC)"
        return SpendRefused(
            f"{WORKSPACE_CAP} is reached: {figures}; an approver's Continue raises it for the day"
        )

    async def settle(self, hold: SpendHold, tokens: int, cost_usd: float | None) -> None:
        """Charge what the call really used instead of the hold, in the hold's day.

        ``cost_usd=None`` (the call's cost is not known) keeps the dollars held charged,
        unless the call used no tokens at all."""
        day = hold.token or utc_day(self.now())
        d_tokens = max(int(tokens), 0) - hold.tokens
        held = 0 if hold.cost_usd is None else to_micro(hold.cost_usd)
        if cost_usd is not None:
            actual = round(max(cost_usd, 0.0) * MICRO)
        else:
            actual = 0 if tokens <= 0 else held
        async with translated("daily cap settle"):
            await self._settle(keys=[self.day_key(day)], args=[d_tokens, actual - held])

    async def status(self) -> CapStatus:
        """Today's counters and caps (one read)."""
        day = utc_day(self.now())
        async with translated("daily cap status"):
            got = await self.redis.hgetall(self.day_key(day))
        return self.status_of(day, {reply_text(k): reply_text(v) for k, v in got.items()})

    async def raise_for_day(
        self,
        by: str,
        *,
        only_if_reached: bool = False,
        audit_outbox: str | None = None,
        audit_json: str | None = None,
        at: float | None = None,
    ) -> Raised | NotReached:
        """Add the base caps once more to today's (the raise a Continue makes), atomically
        with staging ``audit_json`` in ``audit_outbox`` (``keys.audit_outbox(QUOTA_TAG)``)
        when given: neither is written without the other. ``only_if_reached``: raise only
        a day whose caps are reached, so approvers pressing Continue at once raise once.
        ``at``: the time of the raise (the audit entry's), else now."""
        if (audit_outbox is None) != (audit_json is None):
            raise ValueError("audit_outbox and audit_json go together")
        if audit_outbox is not None and QUOTA_TAG not in audit_outbox:
            raise ValueError(f"the audit outbox must share the {QUOTA_TAG} hash tag")
        now = self.now() if at is None else at
        day = utc_day(now)
        keys = [self.day_key(day)]
        if audit_outbox is not None:
            keys.append(audit_outbox)
        args = [
            *self.cap_args,
            DAY_TTL_S,
            by,
            repr(now),
            "1" if only_if_reached else "0",
            audit_json or "",
            OUTBOX_TTL_S,
        ]
        async with translated("daily cap raise"):
            if audit_outbox is not None:
                # The hint first (the audit log's design): a crash after it leaves a
                # hint to an empty outbox, never an entry nobody looks for.
                await self.redis.zadd(self.keys.audit_pending_of(QUOTA_TAG), {QUOTA_TAG: now})
            reply = await self._raise(keys=keys, args=args)
        status = self.status_of(day, hash_reply(reply[1:]))
        return Raised(status) if reply_text(reply[0]) == "raised" else NotReached(status)


@dataclass(eq=False, kw_only=True)
class JobRate(RedisStore):
    """How many jobs each person may start in any hour (a sliding window, see the module
    docstring); ``per_hour=0``: no rate."""

    per_hour: int
    now: Callable[[], float] = time.time
    window_s: float = RATE_WINDOW_S

    _script = Lua(ADMIT_RATE)

    def user_key(self, user: str) -> str:
        return jobs_key(self.keys, user)

    async def admit(self, user: str, *, key: str | None = None) -> float | None:
        """Count a job ``user`` starts, or refuse it: ``None`` when admitted (and counted),
        else when they may retry (epoch seconds). ``key`` names the job's message: the
        same key again (Slack's retry) is admitted without counting twice."""
        return await self._run(user, key or f"{uuid.uuid4().hex}", count=True)

    async def peek(self, user: str) -> float | None:
        """``admit`` without counting."""
        return await self._run(user, "", count=False)

    async def _run(self, user: str, member: str, *, count: bool) -> float | None:
        if self.per_hour <= 0:
            return None
        async with translated("job rate"):
            reply = await self._script(
                keys=[self.user_key(user)],
                args=[
                    repr(self.now()),
                    self.window_s,
                    self.per_hour,
                    member,
                    "1" if count else "0",
                ],
            )
        return float(reply_text(reply[1])) if reply_text(reply[0]) == "wait" else None

    async def count(self, user: str) -> int:
        """Jobs ``user`` started in the last hour (tests, status)."""
        async with translated("job rate count"):
            return int(
                await self.redis.zcount(
                    self.user_key(user), f"({self.now() - self.window_s!r}", "+inf"
                )
            )


@dataclass(frozen=True, slots=True)
class Admitted:
    kind: Literal["admitted"] = "admitted"


@dataclass(frozen=True, slots=True)
class CapReached:
    """The workspace's daily caps are reached; ``first``: the first refusal of this
    message (Slack's retries are not told again)."""

    status: CapStatus
    first: bool
    kind: Literal["cap"] = "cap"


@dataclass(frozen=True, slots=True)
class RateLimited:
    """The person started ``jobs`` jobs in the last hour; they may retry at ``retry_at``."""

    retry_at: float
    jobs: int
    per_hour: int
    first: bool
    kind: Literal["rate"] = "rate"


Verdict = Admitted | CapReached | RateLimited


@dataclass(eq=False, kw_only=True)
class JobAdmission(RedisStore):
    """Whether a message may start a job: today's caps not reached and its author's rate
    not exceeded, checked and counted in one script (the ack path's one extra round
    trip). Either part may be absent."""

    caps: DailyCaps | None
    rate: JobRate | None
    now: Callable[[], float] = time.time

    _script = Lua(ADMIT)

    @property
    def active(self) -> bool:
        return self.caps is not None or (self.rate is not None and self.rate.per_hour > 0)

    async def admit(self, user: str, *, key: str) -> Verdict:
        """Admit (and count) a job ``user`` starts with the message ``key`` (its channel
        and ts: Slack's retry of it counts once), or say why not."""
        if not self.active:
            return Admitted()
        now = self.now()
        day = utc_day(now)
        caps, rate = self.caps, self.rate
        per_hour = rate.per_hour if rate is not None else 0
        window = rate.window_s if rate is not None else RATE_WINDOW_S
        async with translated("job admission"):
            reply = await self._script(
                keys=[
                    day_key(self.keys, day),
                    jobs_key(self.keys, user),
                    message_key(self.keys, key),
                ],
                args=[
                    *(caps.cap_args if caps is not None else ["", ""]),
                    repr(now),
                    window,
                    per_hour,
                    key,
                    MESSAGE_TTL_S,
                ],
            )
        verdict = reply_text(reply[0])
        if verdict == "cap" and caps is not None:
            status = caps.status_of(day, hash_reply(reply[2:]))
            return CapReached(status, first=int(reply[1]) == 1)
        if verdict == "wait":
            return RateLimited(
                retry_at=float(reply_text(reply[2])),
                jobs=int(reply[3]),
                per_hour=per_hour,
                first=int(reply[1]) == 1,
            )
        if verdict != "ok":
            raise StoreError(f"job admission: unexpected reply {reply!r}")
        return Admitted()

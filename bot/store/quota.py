"""Workspace-wide quotas: the daily caps on model spend, and each person's rate of new jobs.

Every key is ``keys.quota(name)``, under the one hash tag ``{quota}``, so each script
below touches a single Redis Cluster slot:

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
ack path), and counts the job only when both admit it.

A script checks every key's type before its first write: Lua has no rollback, so a
script that fails fails before it changed anything.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

import redis.asyncio as aioredis

from bot.agent.ports import WORKSPACE_CAP, SpendHold, SpendRefused
from bot.errors import StoreError
from bot.store.audit_entry import OUTBOX_TTL_S
from bot.store.connection import translated
from bot.store.keys import QUOTA_TAG, Keys

DAY_TTL_S = 4 * 24 * 3600  # a day's counters outlive it: late settles, status, the CLI
RATE_WINDOW_S = 3600.0
MESSAGE_TTL_S = 3600
MICRO = 1_000_000  # cost counters are integer micro-dollars

# What every script that needs today's caps starts with. ``day_of(key, base_t, base_c)``:
# the day hash's used_t, used_c, cap_t, cap_c (the base caps, '' = none, plus the day's
# raises; nil = no cap) and reached. ``must_be(key, kind)``: an error reply unless the key
# is absent or of that type (checked before any write: Lua has no rollback).
_DAY = """
local function day_of(key, base_t, base_c)
  local f = redis.call('HMGET', key, 'tokens', 'cost', 'raised_tokens', 'raised_cost', 'refused')
  local d = {used_t = tonumber(f[1] or '0'), used_c = tonumber(f[2] or '0')}
  if base_t ~= '' then d.cap_t = tonumber(base_t) + tonumber(f[3] or '0') end
  if base_c ~= '' then d.cap_c = tonumber(base_c) + tonumber(f[4] or '0') end
  d.reached = (f[5] ~= false and f[5] ~= nil)
    or (d.cap_t ~= nil and d.used_t >= d.cap_t)
    or (d.cap_c ~= nil and d.used_c >= d.cap_c)
  return d
end
local function must_be(key, kind)
  local t = redis.call('TYPE', key)['ok']
  if t ~= 'none' and t ~= kind then
    return redis.error_reply('WRONGTYPE ' .. key .. ' is a ' .. t .. ', not a ' .. kind)
  end
end
"""

# KEYS[1] day hash. ARGV: 1 tokens, 2 cost micro ('' unpriced), 3 token cap ('' none),
# 4 cost cap micro ('' none), 5 ttl. Returns {'ok'} or {'tokens'|'cost', used_t, cap_t,
# used_c, cap_c} (-1 for no cap); a refusal marks the day ``refused``.
_RESERVE = (
    _DAY
    + """
local bad = must_be(KEYS[1], 'hash')
if bad then return bad end
local t = tonumber(ARGV[1])
local d = day_of(KEYS[1], ARGV[3], ARGV[4])
local over = ''
if d.cap_t ~= nil and d.used_t + t > d.cap_t then
  over = 'tokens'
elseif d.cap_c ~= nil then
  if ARGV[2] == '' then
    if d.used_c >= d.cap_c then over = 'cost' end
  elseif d.used_c + tonumber(ARGV[2]) > d.cap_c then
    over = 'cost'
  end
end
if over ~= '' then
  redis.call('HSET', KEYS[1], 'refused', over)
  redis.call('EXPIRE', KEYS[1], ARGV[5])
  return {over, d.used_t, d.cap_t or -1, d.used_c, d.cap_c or -1}
end
redis.call('HINCRBY', KEYS[1], 'tokens', t)
if ARGV[2] ~= '' then redis.call('HINCRBY', KEYS[1], 'cost', ARGV[2]) end
redis.call('EXPIRE', KEYS[1], ARGV[5])
return {'ok'}
"""
)

# KEYS[1] the hold's day hash. ARGV: 1 token delta, 2 cost delta (micro). Never below 0;
# a day whose counters expired is left alone. Returns 1, or 0 when there was no day.
_SETTLE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if redis.call('HINCRBY', KEYS[1], 'tokens', ARGV[1]) < 0 then
  redis.call('HSET', KEYS[1], 'tokens', 0)
end
if ARGV[2] ~= '0' and redis.call('HINCRBY', KEYS[1], 'cost', ARGV[2]) < 0 then
  redis.call('HSET', KEYS[1], 'cost', 0)
end
return 1
"""

# KEYS[1] day hash, KEYS[2] (optional) an audit outbox LIST. ARGV: 1 token cap ('' none),
# 2 cost cap micro ('' none), 3 ttl, 4 by, 5 now, 6 '1': only when reached, 7 the audit
# entry, 8 the outbox's ttl. Returns {'raised'|'not_reached', field, value, …} (the day).
_RAISE = (
    _DAY
    + """
local bad = must_be(KEYS[1], 'hash')
if bad then return bad end
if KEYS[2] then
  bad = must_be(KEYS[2], 'list')
  if bad then return bad end
end
local d = day_of(KEYS[1], ARGV[1], ARGV[2])
local verdict = 'raised'
if ARGV[6] == '1' and not d.reached then
  verdict = 'not_reached'
else
  if ARGV[1] ~= '' then redis.call('HINCRBY', KEYS[1], 'raised_tokens', ARGV[1]) end
  if ARGV[2] ~= '' then redis.call('HINCRBY', KEYS[1], 'raised_cost', ARGV[2]) end
  redis.call('HINCRBY', KEYS[1], 'raises', 1)
  redis.call('HDEL', KEYS[1], 'refused')
  redis.call('HSET', KEYS[1], 'raised_by', ARGV[4], 'raised_at', ARGV[5])
  redis.call('EXPIRE', KEYS[1], ARGV[3])
  if KEYS[2] then
    redis.call('RPUSH', KEYS[2], ARGV[7])
    redis.call('EXPIRE', KEYS[2], ARGV[8])
  end
end
local out = redis.call('HGETALL', KEYS[1])
table.insert(out, 1, verdict)
return out
"""
)

# The rate's steps. KEYS[R] the user's ZSET. ARGV (from A): now, window, per hour, member,
# '1' to count. Sets ``rate`` to {'ok'} / {'dup'} / {'wait', retry at, jobs in window}.
_RATE = """
local function rate_of(key, now, window, per_hour, member, count)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
  if redis.call('ZSCORE', key, member) then return {'dup'} end
  local n = redis.call('ZCARD', key)
  if n >= per_hour then
    local first = redis.call('ZRANGE', key, n - per_hour, n - per_hour, 'WITHSCORES')
    return {'wait', tostring(tonumber(first[2]) + window), n}
  end
  if count then
    redis.call('ZADD', key, now, member)
    redis.call('ZREMRANGEBYRANK', key, 0, -(per_hour + 1))
    redis.call('EXPIRE', key, math.ceil(window) + 60)
  end
  return {'ok', n + 1}
end
"""

# KEYS[1] the user's ZSET. ARGV: 1 now, 2 window, 3 per hour, 4 member, 5 '1' to count.
_ADMIT_RATE = (
    _DAY
    + _RATE
    + """
local bad = must_be(KEYS[1], 'zset')
if bad then return bad end
return rate_of(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4],
               ARGV[5] == '1')
"""
)

# KEYS: 1 day hash, 2 the user's ZSET, 3 the message's key. ARGV: 1 token cap ('' none),
# 2 cost cap micro ('' none), 3 now, 4 window, 5 per hour (0: no rate), 6 member, 7 the
# message key's ttl. Returns {'ok'}, {'cap', first, field, value, …} (the day) or
# {'wait', first, retry at, n}; ``first``: 1 unless this message was refused before.
_ADMIT = (
    _DAY
    + _RATE
    + """
local bad = must_be(KEYS[1], 'hash') or must_be(KEYS[2], 'zset') or must_be(KEYS[3], 'string')
if bad then return bad end
local seen = redis.call('GET', KEYS[3])
if seen == 'ok' then return {'ok'} end
local first = 1
if seen == 'refused' then first = 0 end
if ARGV[1] ~= '' or ARGV[2] ~= '' then
  local d = day_of(KEYS[1], ARGV[1], ARGV[2])
  if d.reached then
    redis.call('SET', KEYS[3], 'refused', 'EX', ARGV[7])
    local out = redis.call('HGETALL', KEYS[1])
    table.insert(out, 1, first)
    table.insert(out, 1, 'cap')
    return out
  end
end
if tonumber(ARGV[5]) > 0 then
  local r = rate_of(KEYS[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]),
                    ARGV[6], true)
  if r[1] == 'wait' then
    redis.call('SET', KEYS[3], 'refused', 'EX', ARGV[7])
    return {'wait', first, r[2], r[3]}
  end
end
redis.call('SET', KEYS[3], 'ok', 'EX', ARGV[7])
return {'ok'}
"""
)


def day_key(keys: Keys, day: str) -> str:
    return keys.quota(f"day:{day}")


def jobs_key(keys: Keys, user: str) -> str:
    return keys.quota(f"jobs:{user}")


def message_key(keys: Keys, message: str) -> str:
    return keys.quota(f"msg:{message}")


def utc_day(now: float) -> str:
    """The UTC date of ``now`` (``2026-12-01``): the day a cap counts."""
    return datetime.fromtimestamp(now, UTC).date().isoformat()


def to_micro(usd: float) -> int:
    """Dollars as integer micro-dollars, rounded up (a reservation errs on the safe side)."""
    return math.ceil(round(usd * MICRO, 6))


def usd(micro: int) -> str:
    """``$1,234.57``; cents below a dollar get more digits (``$0.0042``)."""
    value = micro / MICRO
    return f"${value:,.2f}" if value >= 1 or value == 0 else f"${value:.4f}"


@dataclass(frozen=True, slots=True, kw_only=True)
class CapStatus:
    """One UTC day of the workspace's caps (``cap`` = the base cap plus today's raises;
    ``None``: no such cap)."""

    day: str
    tokens_used: int
    tokens_cap: int | None
    cost_used_micro: int
    cost_cap_micro: int | None
    raised_tokens: int
    raised_cost_micro: int
    raises: int
    refused: bool  # a call found no room since the last raise
    raised_by: str | None = None

    @property
    def cost_used_usd(self) -> float:
        return self.cost_used_micro / MICRO

    @property
    def cost_cap_usd(self) -> float | None:
        return None if self.cost_cap_micro is None else self.cost_cap_micro / MICRO

    @property
    def raised_cost_usd(self) -> float:
        return self.raised_cost_micro / MICRO

    @property
    def reached(self) -> bool:
        """New jobs wait, and an approver may raise the day (the scripts' definition)."""
        return (
            self.refused
            or (self.tokens_cap is not None and self.tokens_used >= self.tokens_cap)
            or (self.cost_cap_micro is not None and self.cost_used_micro >= self.cost_cap_micro)
        )

    def figures(self) -> str:
        """``996,316 of 1,000,000 tokens and $4.10 of $10.00`` (the caps that are set)."""
        parts = []
        if self.tokens_cap is not None:
            parts.append(f"{self.tokens_used:,} of {self.tokens_cap:,} tokens")
        if self.cost_cap_micro is not None:
            parts.append(f"{usd(self.cost_used_micro)} of {usd(self.cost_cap_micro)}")
        return " and ".join(parts) or f"{self.tokens_used:,} tokens"


def _status(day: str, flat: list[object], base_t: int | None, base_c: int | None) -> CapStatus:
    fields = {_str(flat[i]): _str(flat[i + 1]) for i in range(0, len(flat) - 1, 2)}

    def num(name: str) -> int:
        return int(fields.get(name) or 0)

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


@dataclass(frozen=True, slots=True)
class Raised:
    """``raise_for_day`` raised the day's caps; ``status`` is the day after it."""

    status: CapStatus


@dataclass(frozen=True, slots=True)
class NotReached:
    """Nothing raised: the day's caps were not reached (someone else raised them first)."""

    status: CapStatus


class DailyCaps:
    """The workspace's daily caps on model tokens and dollars (see the module docstring).

    ``reserve`` with an unpriced call (``cost_usd=None``) under a dollar cap counts its
    tokens only: it is refused only when the dollar cap is already reached, since its
    cost cannot be known."""

    def __init__(
        self,
        redis: aioredis.Redis,
        keys: Keys,
        *,
        tokens: int | None,
        cost_usd: float | None,
        now: Callable[[], float] = time.time,
    ) -> None:
        if tokens is None and cost_usd is None:
            raise ValueError("a daily cap needs a token or a dollar cap")
        self._redis = redis
        self._keys = keys
        self.tokens = tokens
        self.cost_usd = cost_usd
        self._base_c = None if cost_usd is None else to_micro(cost_usd)
        self.now = now
        self._reserve = redis.register_script(_RESERVE)
        self._settle = redis.register_script(_SETTLE)
        self._raise = redis.register_script(_RAISE)

    def day_key(self, day: str) -> str:
        return day_key(self._keys, day)

    @property
    def audit_outbox(self) -> str:
        """Where a raise stages its audit entry (the ``{quota}`` tag's outbox)."""
        return self._keys.audit_outbox(QUOTA_TAG)

    @property
    def cap_args(self) -> list[str]:
        """The base caps as the scripts take them ('' for none)."""
        return [
            "" if self.tokens is None else str(self.tokens),
            "" if self._base_c is None else str(self._base_c),
        ]

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
        if _str(reply[0]) == "ok":
            return SpendHold(tokens=tokens, cost_usd=None if cost == "" else cost_usd, token=day)
        over, used_t, cap_t, used_c, cap_c = _str(reply[0]), *(int(v) for v in reply[1:5])
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
            flat = await self._redis.hgetall(self.day_key(day))
        pairs: list[object] = [x for kv in flat.items() for x in kv]
        return _status(day, pairs, self.tokens, self._base_c)

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
                await self._redis.zadd(self._keys.audit_pending_of(QUOTA_TAG), {QUOTA_TAG: now})
            reply = await self._raise(keys=keys, args=args)
        status = _status(day, list(reply[1:]), self.tokens, self._base_c)
        return Raised(status) if _str(reply[0]) == "raised" else NotReached(status)


class JobRate:
    """How many jobs each person may start in any hour (a sliding window, see the module
    docstring); ``per_hour=0``: no rate."""

    def __init__(
        self,
        redis: aioredis.Redis,
        keys: Keys,
        *,
        per_hour: int,
        now: Callable[[], float] = time.time,
        window_s: float = RATE_WINDOW_S,
    ) -> None:
        self._redis = redis
        self._keys = keys
        self.per_hour = per_hour
        self.window_s = window_s
        self.now = now
        self._script = redis.register_script(_ADMIT_RATE)

    def user_key(self, user: str) -> str:
        return jobs_key(self._keys, user)

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
        return float(_str(reply[1])) if _str(reply[0]) == "wait" else None

    async def count(self, user: str) -> int:
        """Jobs ``user`` started in the last hour (tests, status)."""
        async with translated("job rate count"):
            return int(
                await self._redis.zcount(
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


class JobAdmission:
    """Whether a message may start a job: today's caps not reached and its author's rate
    not exceeded, checked and counted in one script (the ack path's one extra round
    trip). Either part may be absent."""

    def __init__(
        self,
        redis: aioredis.Redis,
        keys: Keys,
        *,
        caps: DailyCaps | None,
        rate: JobRate | None,
        now: Callable[[], float] = time.time,
    ) -> None:
        self._keys = keys
        self.caps = caps
        self.rate = rate
        self.now = now
        self._script = redis.register_script(_ADMIT)

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
                    day_key(self._keys, day),
                    jobs_key(self._keys, user),
                    message_key(self._keys, key),
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
        verdict = _str(reply[0])
        if verdict == "cap" and caps is not None:
            status = _status(day, list(reply[2:]), caps.tokens, _base_micro(caps))
            return CapReached(status, first=int(reply[1]) == 1)
        if verdict == "wait":
            return RateLimited(
                retry_at=float(_str(reply[2])),
                jobs=int(reply[3]),
                per_hour=per_hour,
                first=int(reply[1]) == 1,
            )
        if verdict != "ok":
            raise StoreError(f"job admission: unexpected reply {reply!r}")
        return Admitted()


def _base_micro(caps: DailyCaps) -> int | None:
    return None if caps.cost_usd is None else to_micro(caps.cost_usd)


def _str(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)

"""Alert groups in Redis: one incident thread per group while it fires, exactly once.

An alert group (Alertmanager's ``groupKey``) is known here by ``group_id``, a hash of the
key, and its keys share one hash tag (``opsloop:{ag:<id>}:…``) so every script touches a
single Redis Cluster slot:

- ``…:alert`` (HASH): the group's state — ``episode`` (how many times it opened: a group
  that fires again after it resolved opens a new one), ``status`` (``firing`` or
  ``resolved``), ``states`` (each alert's status by fingerprint, JSON), the routed
  ``channel`` and ``investigate`` choice, the alert message's ``thread_ts`` once posted,
  the ``job_id`` of its investigation, ``name``, ``opened_at``, ``resolved_at``, and the
  latest ``notification`` (what the ``Investigate`` button's job is asked about).
- ``…:alert:work`` (LIST): what is still to be done in Slack for the group, in order —
  ``open`` (post the alert message, start or offer the investigation), ``update`` (alerts
  that joined or resolved: a reply in the thread), ``resolve`` (the group resolved: the
  message says so). Each item carries the notification as received (JSON, already
  bounded and scrubbed).
- ``…:alert:lock`` (STRING): the process working through the list (``SET NX PX``).
- under the thread's own tag, ``Keys.alert_of_thread`` (STRING ``group_id:episode``):
  which group a thread's root message is, once posted (``of_thread``: the timeline).

``receive`` is one script: it compares the notification's alert states with the group's
and writes the change and its work item together, before the webhook's 200 (with
``OPSLOOP_REDIS_MIN_REPLICAS``, replicated first), so a repeat of an unchanged group —
Alertmanager's ``repeat_interval``, its retry of a notification whose answer was lost,
the same notification reaching two processes — finds nothing changed and adds nothing.
A group with work is put in the sharded index ``alerts`` (a hint for the scanner, like the
jobs' index); whoever holds the lock does the work, one item at a time, and drops an item
only once it is done, so a process that dies in the middle leaves the rest to another.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from bot.store.buckets import due_in_buckets
from bot.store.connection import reply_text, translated
from bot.store.keys import HISTORY_TTL_S, Thread, bucket_of
from bot.store.redis_store import Lua
from bot.store.replicas import ReplicatedStore

GROUP_TTL_S = HISTORY_TTL_S  # a group's state outlives its thread's conversation no longer
WORK_MAX = 200  # work items kept per group (the oldest updates go first)
LOCK_MS = 30_000

Outcome = Literal["opened", "updated", "resolved", "repeat", "ignored"]
WorkKind = Literal["open", "update", "resolve"]

_RECEIVE = """
local state, work = KEYS[1], KEYS[2]
local incoming = cjson.decode(ARGV[1])
local group_status, ttl, cap = ARGV[2], tonumber(ARGV[8]), tonumber(ARGV[9])
local status = redis.call('HGET', state, 'status')
local episode = tonumber(redis.call('HGET', state, 'episode') or '0')
if (not status) or status == 'resolved' then
  local firing = false
  for _, s in pairs(incoming) do if s == 'firing' then firing = true end end
  if not firing then  -- resolved again, or never seen firing: nothing to do
    local outcome = 'ignored'
    if status then outcome = 'repeat' end
    return {outcome, episode, redis.call('LLEN', work)}
  end
  episode = episode + 1
  redis.call('HSET', state, 'episode', episode, 'status', 'firing', 'states', ARGV[1],
    'channel', ARGV[3], 'investigate', ARGV[4], 'name', ARGV[5], 'opened_at', ARGV[7],
    'thread_ts', '', 'job_id', '', 'resolved_at', '', 'notification', ARGV[6])
  redis.call('RPUSH', work, cjson.encode({kind = 'open', episode = episode, changed = {},
    notification = ARGV[6]}))
  redis.call('EXPIRE', state, ttl)
  redis.call('EXPIRE', work, ttl)
  return {'opened', episode, redis.call('LLEN', work)}
end
local known = cjson.decode(redis.call('HGET', state, 'states') or '{}')
local changed = {}
for fp, s in pairs(incoming) do
  if known[fp] ~= s then
    table.insert(changed, fp)
    known[fp] = s
  end
end
if #changed == 0 and group_status == status then
  if ARGV[10] == '1' then  -- replication asked for: the WAIT behind must cover the first write
    redis.call('HSET', state, 'status', status)
  end
  return {'repeat', episode, redis.call('LLEN', work)}
end
local kind, outcome = 'update', 'updated'
if group_status == 'resolved' then kind, outcome = 'resolve', 'resolved' end
redis.call('HSET', state, 'states', cjson.encode(known), 'status', group_status,
  'notification', ARGV[6])
if group_status == 'resolved' then redis.call('HSET', state, 'resolved_at', ARGV[7]) end
redis.call('RPUSH', work, cjson.encode({kind = kind, episode = episode, changed = changed,
  notification = ARGV[6]}))
redis.call('LTRIM', work, -cap, -1)
redis.call('EXPIRE', state, ttl)
redis.call('EXPIRE', work, ttl)
return {outcome, episode, redis.call('LLEN', work)}
"""

# Set fields of the group's state only while it is still in ``episode``.
_SET = """
if redis.call('HGET', KEYS[1], 'episode') ~= ARGV[1] then return 0 end
for i = 2, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
return 1
"""

# Set one field only while it is empty (and the episode is the same): the first wins.
_CLAIM_FIELD = """
if redis.call('HGET', KEYS[1], 'episode') ~= ARGV[1] then return 0 end
local current = redis.call('HGET', KEYS[1], ARGV[2])
if current and current ~= '' then return 0 end
redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
return 1
"""

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def group_id(group_key: str) -> str:
    """The id of an alert group (Alertmanager's ``groupKey``): short, key-safe, stable."""
    return hashlib.sha256(group_key.encode()).hexdigest()[:20]


def group_tag(gid: str) -> str:
    return "{ag:" + gid + "}"


@dataclass(frozen=True, slots=True)
class GroupChange:
    """A notification as the store compares it: its group, the group's status, each
    alert's status by fingerprint, the name, and the notification itself (JSON)."""

    group_key: str
    status: str
    states: Mapping[str, str]
    name: str
    notification: str


@dataclass(frozen=True, slots=True)
class AlertReceipt:
    """What ``receive`` made of a notification."""

    outcome: Outcome
    group: str  # the group's id
    episode: int
    pending: int  # work items waiting for Slack

    @property
    def changed(self) -> bool:
        return self.outcome in ("opened", "updated", "resolved")


@dataclass(frozen=True, slots=True)
class AlertWork:
    """One thing still to be done in Slack for a group (see the module docstring)."""

    kind: WorkKind
    episode: int
    notification: str  # JSON, as ``bot.alerts`` wrote it
    changed: tuple[str, ...] = ()  # fingerprints whose status changed

    @classmethod
    def of(cls, raw: str) -> AlertWork:
        data = json.loads(raw)
        changed = data.get("changed") or []  # cjson writes an empty list as {}
        return cls(
            kind=data["kind"],
            episode=int(data["episode"]),
            notification=str(data["notification"]),
            changed=tuple(str(c) for c in changed) if isinstance(changed, list) else (),
        )


@dataclass(frozen=True, slots=True)
class AlertGroup:
    """A group's state (see the module docstring)."""

    id: str
    episode: int
    status: str
    channel: str
    investigate: str
    name: str
    thread_ts: str = ""
    job_id: str = ""
    opened_at: float = 0.0
    resolved_at: float | None = None
    states: dict[str, str] = field(default_factory=dict)
    notification: str = ""  # the latest notification (JSON), for the Investigate button

    @classmethod
    def of(cls, gid: str, fields: Mapping[str, str]) -> AlertGroup:
        resolved = fields.get("resolved_at") or ""
        return cls(
            id=gid,
            episode=int(fields.get("episode") or 0),
            status=fields.get("status") or "",
            channel=fields.get("channel") or "",
            investigate=fields.get("investigate") or "yes",
            name=fields.get("name") or "",
            thread_ts=fields.get("thread_ts") or "",
            job_id=fields.get("job_id") or "",
            opened_at=float(fields.get("opened_at") or 0.0),
            resolved_at=float(resolved) if resolved else None,
            states=json.loads(fields.get("states") or "{}"),
            notification=fields.get("notification") or "",
        )


@dataclass(eq=False, kw_only=True)
class AlertGroups(ReplicatedStore):
    """The alert groups of the workspace (see the module docstring)."""

    now: Callable[[], float] = time.time

    _receive = Lua(_RECEIVE)
    _set = Lua(_SET)
    _claim_field = Lua(_CLAIM_FIELD)
    _release = Lua(_RELEASE)

    # -- keys ------------------------------------------------------------------------

    def state_key(self, gid: str) -> str:
        return f"{self.keys.prefix}{group_tag(gid)}:alert"

    def work_key(self, gid: str) -> str:
        return f"{self.keys.prefix}{group_tag(gid)}:alert:work"

    def lock_key(self, gid: str) -> str:
        return f"{self.keys.prefix}{group_tag(gid)}:alert:lock"

    def due_key(self, bucket: int) -> str:
        """ZSET group id → when to look at its work, for the scanner (a hint)."""
        return f"{self.keys.prefix}{{ix{bucket}}}:index:alerts"

    # -- the webhook's receipt -------------------------------------------------------

    async def receive(self, change: GroupChange, *, channel: str, investigate: str) -> AlertReceipt:
        """Write what the notification changes (one script; see the module docstring)
        and, when work is waiting, put the group in the scanner's index. ``channel`` and
        ``investigate``: the group's route, kept when the notification opens it."""
        group_key, status, states = change.group_key, change.status, change.states
        name, notification = change.name, change.notification
        gid = group_id(group_key)
        now = self.now()
        reply = await self.acknowledged(
            "alert receipt",
            self._receive,
            keys=[self.state_key(gid), self.work_key(gid)],
            args=[
                json.dumps(dict(states), sort_keys=True),
                status,
                channel,
                investigate,
                name,
                notification,
                repr(now),
                GROUP_TTL_S,
                WORK_MAX,
                self.replication.touch,
            ],
        )
        outcome, episode, pending = reply_text(reply[0]), int(reply[1]), int(reply[2])
        receipt = AlertReceipt(outcome, gid, episode, pending)  # type: ignore[arg-type]
        if pending:
            await self.index(gid, now)
        return receipt

    # -- the work ----------------------------------------------------------------------

    async def index(self, gid: str, when: float) -> None:
        """(Re)schedule a look at the group's work."""
        async with translated("alert index"):
            await self.redis.zadd(self.due_key(bucket_of(group_tag(gid))), {gid: when})

    async def unindex(self, gid: str) -> None:
        async with translated("alert index"):
            await self.redis.zrem(self.due_key(bucket_of(group_tag(gid))), gid)

    async def due(self, now: float, limit: int = 100) -> list[str]:
        """Groups whose work is due, from every bucket."""
        return await due_in_buckets(self.redis, "alert due", self.due_key, now, limit)

    async def lock(self, gid: str, owner: str, ttl_ms: int = LOCK_MS) -> bool:
        """Take the group's work for ``owner`` (nobody else works on it meanwhile)."""
        async with translated("alert lock"):
            return bool(await self.redis.set(self.lock_key(gid), owner, nx=True, px=ttl_ms))

    async def unlock(self, gid: str, owner: str) -> None:
        async with translated("alert unlock"):
            await self._release(keys=[self.lock_key(gid)], args=[owner])

    async def next_work(self, gid: str) -> AlertWork | None:
        async with translated("alert work"):
            raw = await self.redis.lindex(self.work_key(gid), 0)
        return AlertWork.of(reply_text(raw)) if raw is not None else None

    async def work_done(self, gid: str) -> None:
        """Drop the first work item (done)."""
        async with translated("alert work done"):
            await self.redis.lpop(self.work_key(gid))

    async def get(self, gid: str) -> AlertGroup | None:
        async with translated("alert group"):
            raw = await self.redis.hgetall(self.state_key(gid))
        fields = {reply_text(k): reply_text(v) for k, v in raw.items()}
        return AlertGroup.of(gid, fields) if fields else None

    async def set(self, gid: str, episode: int, **fields: Any) -> bool:
        """Set fields of the group's state while it is still in ``episode``."""
        args: list[Any] = [str(episode)]
        for name, value in fields.items():
            args += [name, str(value)]
        if fields.get("thread_ts"):  # the message is posted: its thread finds the group
            await self.link_thread(gid, episode, str(fields["thread_ts"]))
        async with translated("alert set"):
            return bool(await self._set(keys=[self.state_key(gid)], args=args))

    async def claim(self, gid: str, episode: int, name: str, value: str) -> bool:
        """Set ``name`` only if it is still empty in ``episode``: whether this call did."""
        async with translated("alert claim"):
            reply = await self._claim_field(
                keys=[self.state_key(gid)], args=[str(episode), name, value]
            )
        return bool(reply)

    # -- the thread's group ----------------------------------------------------------
    # A thread's pointer (``Keys.alert_of_thread``) is under the thread's hash tag, the
    # group under its own: two commands, never one script. The pointer is written before
    # the group's ``thread_ts`` (a crash between the two leaves a pointer ``of_thread``
    # checks and ignores, never a group its thread cannot find).

    async def link_thread(self, gid: str, episode: int, thread_ts: str) -> None:
        """Point the thread whose root is the group's message (in its routed channel) at
        the group and episode, for as long as the group's state is kept."""
        async with translated("alert thread"):
            channel = await self.redis.hget(self.state_key(gid), "channel")
            if not channel:
                return
            thread = Thread(reply_text(channel), thread_ts)
            await self.redis.set(
                self.keys.alert_of_thread(thread), f"{gid}:{episode}", ex=GROUP_TTL_S
            )

    async def of_thread(self, thread: Thread) -> AlertGroup | None:
        """The alert group whose message is ``thread``'s root, while the group is still
        in that episode (a group that fired again since has a new thread); else None."""
        async with translated("alert thread"):
            raw = await self.redis.get(self.keys.alert_of_thread(thread))
        if raw is None:
            return None
        gid, _, episode = reply_text(raw).rpartition(":")
        if not gid or not episode.isdigit():
            return None
        group = await self.get(gid)
        if (
            group is None
            or group.episode != int(episode)
            or group.channel != thread.channel
            or group.thread_ts != thread.thread_ts
        ):
            return None
        return group

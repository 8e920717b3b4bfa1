"""The approvals' workspace-wide indexes, and the scans that read them.

Three ZSETs of ``job_id|call_id`` members, each sharded into buckets by thread
(``bot.store.keys``): the expiries (scored by when the approval expires), the reminders
(when to remind people of one still pending) and the card edits owed (when a decided
card's edit is due). They are kept with separate commands, never in a script with a
thread's keys (Redis Cluster slots), so they are hints that may hold stale members:
whoever takes one reads the record (``bot.store.approvals``) before acting on it, and
``decide`` drops the members of a decided approval when it meets them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from redis.commands.core import AsyncScript

from bot.errors import StoreError
from bot.records import ApprovalRecord
from bot.store.approval_scripts import TAKE_DUE, TAKE_FOR
from bot.store.buckets import due_in_buckets
from bot.store.connection import translated
from bot.store.keys import BUCKETS, job_bucket
from bot.store.redis_store import Lua, RedisStore

log = logging.getLogger(__name__)

CARD_EDIT_GRACE_S = 3.0  # the deciding process edits the card at once; others wait this long
CARD_EDIT_RETRY_S = 30.0  # a taken edit that was not settled is offered again after this
_INDEX_SEP = "|"  # job ids contain ':' but never '|'


def index_member(job_id: str, call_id: str) -> str:
    return f"{job_id}{_INDEX_SEP}{call_id}"


def parse_index_member(member: str) -> tuple[str, str]:
    job_id, _, call_id = member.partition(_INDEX_SEP)
    return job_id, call_id


class ApprovalIndex(RedisStore):
    """List the approvals past their expiry, and hand out due reminders and card edits."""

    _take = Lua(TAKE_DUE)
    _take_for = Lua(TAKE_FOR)

    async def due(self, now: float, limit: int = 100) -> list[tuple[str, str]]:
        """``(job_id, call_id)`` of approvals whose expiry has come, oldest first.

        A hint: the scanner calls ``decide(outcome="expired")``, which refuses (and
        drops the hint) if the approval was decided meanwhile.
        """
        members = await due_in_buckets(
            self.redis, "approval due", self.keys.approval_expiries, now, limit
        )
        return [parse_index_member(m) for m in members]

    async def take_reminders(self, now: float, limit: int = 100) -> list[tuple[str, str]]:
        """``(job_id, call_id)`` of approvals whose reminder time has come, each handed
        to exactly one caller (taken out of the index in the same script). A hint: the
        caller checks the approval is still pending."""
        members = await self._take_each(
            "approval reminders", self._take, self.keys.approval_reminders, [repr(now), limit]
        )
        return [parse_index_member(m) for m in members]

    async def take_card_edits(
        self,
        now: float,
        *,
        grace_s: float = CARD_EDIT_GRACE_S,
        retry_s: float = CARD_EDIT_RETRY_S,
        limit: int = 100,
    ) -> list[tuple[str, str]]:
        """``(job_id, call_id)`` of cards whose edit may still be owed, decided at least
        ``grace_s`` ago, each handed to one caller until ``retry_s`` from now. A hint:
        the caller reads the record; ``card_edited`` settles it (or drops a stale hint)."""
        members = await self._take_each(
            "approval card edits",
            self._take_for,
            self.keys.card_edits,
            [repr(now - grace_s), repr(now + retry_s), limit],
        )
        return [parse_index_member(m) for m in members]

    async def _take_each(
        self, what: str, script: AsyncScript, key_of: Callable[[int], str], args: list[str | int]
    ) -> list[str]:
        """``script`` (a take-out script of one index key) on every bucket at once; the
        members all of them handed out (up to ``limit`` from each)."""

        async def one(bucket: int) -> list[object]:
            async with translated(what):
                return list(await script(keys=[key_of(bucket)], args=args))

        taken = await asyncio.gather(*(one(b) for b in BUCKETS), return_exceptions=True)
        failed = [t for t in taken if isinstance(t, BaseException)]
        members = [str(m) for t in taken if not isinstance(t, BaseException) for m in t]
        if failed and not members:
            raise failed[0]
        return members

    async def _reindex(self, record: ApprovalRecord) -> None:
        """Make the index agree with a record found by a repeated ``create``."""
        member = index_member(record.job_id, record.call_id)
        if record.status != "pending":
            await self._unindex(record.job_id, record.call_id)
            return
        async with translated("approval index"):
            await self.redis.zadd(
                self.keys.approval_expiries(job_bucket(record.job_id)),
                {member: record.expires_at},
            )

    async def _unindex(self, job_id: str, call_id: str) -> None:
        """Best effort: the decision already stands; a leftover hint is dropped later."""
        try:
            async with translated("approval unindex"):
                member, bucket = index_member(job_id, call_id), job_bucket(job_id)
                async with self.redis.pipeline(transaction=False) as pipe:
                    pipe.zrem(self.keys.approval_expiries(bucket), member)
                    pipe.zrem(self.keys.approval_reminders(bucket), member)
                    await pipe.execute()
        except StoreError:
            log.warning("could not drop the expiry hint of %s/%s", job_id, call_id, exc_info=True)

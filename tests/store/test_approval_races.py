"""Concurrent decisions on one approval: exactly one wins, whatever the mix.

Each decider has its own client (its own connections), as separate bot processes would;
they are started together with ``asyncio.gather`` so their scripts interleave at Redis.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Literal

import pytest
import redis.asyncio as aioredis

from bot.emulator.redis_server import ManagedRedis
from bot.store.approvals import ApprovalRecord, Approvals, DecideResult
from bot.store.connection import connect
from bot.store.keys import Keys, Thread

NOW = 1_700_000_000.0
HASH = "c" * 64
ROUNDS = 5

Decider = tuple[Literal["approved", "denied"], str]


@pytest.fixture
async def clients(server: ManagedRedis) -> AsyncIterator[list[aioredis.Redis]]:
    opened = [connect(server.url) for _ in range(20)]
    # Connected up front: otherwise connection set-up staggers the deciders, and even a
    # naive read-then-write would seem to have a single winner.
    await asyncio.gather(*(client.ping() for client in opened))
    yield opened
    for client in opened:
        await client.aclose()


def record(thread: Thread, call_id: str) -> ApprovalRecord:
    return ApprovalRecord(
        job_id=thread.job_id(1),
        call_id=call_id,
        tool="supervisor_restart",
        category="mutating",
        args_hash=HASH,
        arguments={"name": "worker"},
        requester="U0REQUEST",
        channel=thread.channel,
        thread_ts=thread.thread_ts,
        requested_at=NOW,
        expires_at=NOW + 3600,
    )


async def race(
    clients: list[aioredis.Redis], keys: Keys, target: ApprovalRecord, deciders: list[Decider]
) -> list[DecideResult]:
    stores = [Approvals(clients[i % len(clients)], keys) for i in range(len(deciders))]
    results = await asyncio.gather(
        *(
            store.decide(
                target.job_id,
                target.call_id,
                outcome=outcome,
                by=user,
                args_hash=HASH,
                now=NOW + 10,
            )
            for store, (outcome, user) in zip(stores, deciders, strict=True)
        )
    )
    assert all(r is not None for r in results)
    return [r for r in results if r is not None]


def check_one_winner(
    results: list[DecideResult], deciders: list[Decider], stored: ApprovalRecord | None
) -> None:
    winners = [(r, d) for r, d in zip(results, deciders, strict=True) if r.won]
    assert len(winners) == 1
    [(won, (outcome, user))] = winners
    assert stored is not None
    assert (stored.status, stored.decided_by) == (outcome, user)
    assert won.record == stored
    for result in results:
        if not result.won:
            assert result.refusal == f"already {outcome} by <@{user}>"
            assert result.record == stored


@pytest.mark.parametrize("round_", range(ROUNDS))
async def test_two_approves_and_a_deny_make_one_decision(
    redis: aioredis.Redis,
    clients: list[aioredis.Redis],
    keys: Keys,
    thread: Thread,
    round_: int,
) -> None:
    approvals = Approvals(redis, keys)
    target = await approvals.create(record(thread, f"call_{round_}"))
    deciders: list[Decider] = [
        ("approved", "U0ALICE1"),
        ("approved", "U0BOB222"),
        ("denied", "U0DAN444"),
    ]

    results = await race(clients, keys, target, deciders)

    check_one_winner(results, deciders, await approvals.get(target.job_id, target.call_id))


@pytest.mark.parametrize("round_", range(ROUNDS))
async def test_twenty_deciders_make_one_decision(
    redis: aioredis.Redis,
    clients: list[aioredis.Redis],
    keys: Keys,
    thread: Thread,
    round_: int,
) -> None:
    approvals = Approvals(redis, keys)
    target = await approvals.create(record(thread, f"call_{round_}"))
    deciders: list[Decider] = [
        ("denied" if i % 3 == 0 else "approved", f"U0USER{i:03d}") for i in range(20)
    ]

    results = await race(clients, keys, target, deciders)

    check_one_winner(results, deciders, await approvals.get(target.job_id, target.call_id))
    assert await approvals.due(target.expires_at) == []

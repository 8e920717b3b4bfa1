"""The store parts a CLI command works with, from the composition root.

A command that reads or writes the workspace's records (``opsloop trace``, ``opsloop
audit``, ``opsloop tools run``'s record of a change) opens ``command_stores``: a small
connection pool to the bot's Redis and the same ``Stores`` the bot's processes are built
with (``Stores.build``), closed when the command is done. No command
constructs a store of its own.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from bot.store.connection import RedisTarget, connect
from bot.store.keys import Keys
from bot.store.parts import Stores


@contextlib.asynccontextmanager
async def command_stores(
    target: str | RedisTarget, keys: Keys, *, max_connections: int = 2
) -> AsyncIterator[Stores]:
    """The stores of the Redis at ``target`` under ``keys``' prefix, for one command."""
    redis = connect(target, max_connections=max_connections)
    try:
        yield Stores.build(redis, keys)
    finally:
        await redis.aclose()
